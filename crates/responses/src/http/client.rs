//! `Client`: one pooled reqwest client behind a cheap handle.

use std::sync::Arc;

use bytes::Bytes;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::config::ClientConfig;
use super::stream::EventStream;
use crate::error::{ApiError, ClientError};
use crate::retry;
use crate::types::{CompactRequest, CompactedResponse, CreateResponse, Response};

/// A Responses API client. Cloning is cheap and shares the connection pool.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Builds a client; fails on a malformed base URL.
    pub fn new(config: ClientConfig) -> Result<Self, ClientError> {
        let parsed = reqwest::Url::parse(&config.base_url)
            .map_err(|_| ClientError::InvalidBaseUrl(config.base_url.clone()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ClientError::InvalidBaseUrl(config.base_url.clone()));
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.read_timeout)
            .pool_max_idle_per_host(config.max_idle_connections)
            .user_agent(config.user_agent.clone());
        if config.http2_prior_knowledge {
            builder = builder.http2_prior_knowledge();
        }
        let http = builder.build().map_err(|e| ClientError::from_reqwest(&e))?;
        Ok(Self {
            http,
            config: Arc::new(config),
        })
    }

    /// The configuration in use (the key inside prints as `<redacted>`).
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// `POST {base}/responses` without streaming.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future abandons the attempt in progress and any retries,
    /// but an attempt may already have reached the server, so a response may have been
    /// created (and billed) whose result is lost. Nothing is cancelled on the server.
    pub async fn create(&self, request: &CreateResponse) -> Result<Response, ClientError> {
        if request.is_stream() {
            return Err(ClientError::StreamFlagMismatch);
        }
        self.post_json("responses", request).await
    }

    /// `POST {base}/responses` with `stream: true`; events arrive through [`EventStream`].
    ///
    /// # Cancel safety
    ///
    /// As for [`create`](Self::create): an attempt may already have started a response on
    /// the server, which dropping the future neither cancels nor retries; its events are
    /// lost with the connection.
    pub async fn create_stream(
        &self,
        request: &CreateResponse,
    ) -> Result<EventStream, ClientError> {
        let body = if request.stream == Some(Some(true)) {
            encode(request)?
        } else {
            let mut request = request.clone();
            request.stream = Some(Some(true));
            encode(&request)?
        };
        self.create_stream_encoded(body).await
    }

    /// As [`create_stream`](Self::create_stream), for a request the caller has already
    /// encoded (JSON with `"stream": true`): these exact bytes are sent, on every attempt,
    /// so a caller that records a hash of its request records a hash of what was sent.
    ///
    /// # Cancel safety
    ///
    /// As for [`create_stream`](Self::create_stream).
    pub async fn create_stream_encoded(
        &self,
        body: impl Into<Bytes>,
    ) -> Result<EventStream, ClientError> {
        let response = self.send("responses", body.into()).await?;
        Ok(EventStream::new(response, self.config.stream_idle_timeout))
    }

    /// `POST {base}/responses/compact`.
    ///
    /// # Cancel safety
    ///
    /// As for [`create`](Self::create): an attempt may already have reached the server (the
    /// compaction run and billed) and its result is lost; nothing is retried.
    pub async fn compact(
        &self,
        request: &CompactRequest,
    ) -> Result<CompactedResponse, ClientError> {
        self.post_json("responses/compact", request).await
    }

    /// `GET {base}/responses/{id}`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. Dropping the future abandons the request in progress and
    /// any retries; nothing changes on the server.
    pub async fn retrieve(&self, response_id: &str) -> Result<Response, ClientError> {
        let url = self.url(&format!("responses/{response_id}"));
        let mut retries_taken = 0;
        loop {
            let attempt = self
                .http
                .get(&url)
                .headers(self.headers(retries_taken)?)
                .send()
                .await;
            match self.settle(attempt, retries_taken).await? {
                Settled::Done(response) => {
                    let bytes = response
                        .bytes()
                        .await
                        .map_err(|e| ClientError::from_reqwest(&e))?;
                    return decode(&bytes);
                }
                Settled::Retry => retries_taken += 1,
            }
        }
    }

    async fn post_json<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let body = encode(body)?;
        let mut retries_taken = 0;
        loop {
            let attempt = self.attempt(path, body.clone(), retries_taken).await;
            match self.settle(attempt, retries_taken).await? {
                // The API took the request (2xx): sending it again could create (and bill)
                // a second response, so a body that cannot be read is the caller's to judge.
                Settled::Done(response) => {
                    let bytes = response
                        .bytes()
                        .await
                        .map_err(|err| ClientError::BodyLost(crate::error::error_chain(&err)))?;
                    return decode(&bytes);
                }
                Settled::Retry => retries_taken += 1,
            }
        }
    }

    /// Sends with retries and returns the first successful response (body unread).
    async fn send(&self, path: &str, body: Bytes) -> Result<reqwest::Response, ClientError> {
        let mut retries_taken = 0;
        loop {
            let attempt = self.attempt(path, body.clone(), retries_taken).await;
            match self.settle(attempt, retries_taken).await? {
                Settled::Done(response) => return Ok(response),
                Settled::Retry => retries_taken += 1,
            }
        }
    }

    async fn attempt(
        &self,
        path: &str,
        body: Bytes,
        retries_taken: u32,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let headers = match self.headers(retries_taken) {
            Ok(h) => h,
            Err(_) => HeaderMap::new(),
        };
        self.http
            .post(self.url(path))
            .headers(headers)
            .body(body)
            .send()
            .await
    }

    /// Applies the retry policy to one attempt: success, a wait-then-retry, or the final error.
    async fn settle(
        &self,
        attempt: Result<reqwest::Response, reqwest::Error>,
        retries_taken: u32,
    ) -> Result<Settled, ClientError> {
        let response = match attempt {
            Ok(response) => response,
            Err(err) => {
                let err = ClientError::from_reqwest(&err);
                self.backoff_or_fail(err, retries_taken, None).await?;
                return Ok(Settled::Retry);
            }
        };
        let status = response.status().as_u16();
        if response.status().is_success() {
            return Ok(Settled::Done(response));
        }
        let headers = response.headers().clone();
        let request_id = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if retries_taken < self.config.retry.max_retries && retry::should_retry(status, &headers) {
            let delay = retry::retry_delay(
                &self.config.retry,
                retries_taken,
                Some(&headers),
                retry::jitter_unit(),
            );
            tracing::debug!(status, ?delay, retries_taken, "retrying request");
            // Drain so the connection can be reused; errors here do not matter.
            let _ = response.bytes().await;
            tokio::time::sleep(delay).await;
            return Ok(Settled::Retry);
        }
        let body = response.bytes().await.unwrap_or_default();
        Err(ClientError::Api(Box::new(ApiError::from_body(
            status, &body, request_id,
        ))))
    }

    async fn backoff_or_fail(
        &self,
        err: ClientError,
        retries_taken: u32,
        headers: Option<&HeaderMap>,
    ) -> Result<(), ClientError> {
        if err.is_retryable_transport() && retries_taken < self.config.retry.max_retries {
            let delay = retry::retry_delay(
                &self.config.retry,
                retries_taken,
                headers,
                retry::jitter_unit(),
            );
            tracing::debug!(error = %err, ?delay, retries_taken, "retrying after transport error");
            tokio::time::sleep(delay).await;
            Ok(())
        } else {
            Err(err)
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.config.base_url, path)
    }

    fn headers(&self, retries_taken: u32) -> Result<HeaderMap, ClientError> {
        let mut headers = HeaderMap::new();
        let mut auth = HeaderValue::from_str(&self.config.api_key.bearer()).map_err(|_| {
            ClientError::Transport("the API key contains characters not allowed in a header".into())
        })?;
        auth.set_sensitive(true);
        headers.insert(AUTHORIZATION, auth);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        headers.insert("x-stainless-retry-count", HeaderValue::from(retries_taken));
        headers.insert(
            "x-stainless-read-timeout",
            HeaderValue::from(self.config.read_timeout.as_secs()),
        );
        Ok(headers)
    }
}

enum Settled {
    Done(reqwest::Response),
    Retry,
}

fn encode<B: Serialize>(body: &B) -> Result<Bytes, ClientError> {
    serde_json::to_vec(body)
        .map(Bytes::from)
        .map_err(|e| ClientError::Decode(e.to_string()))
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(bytes).map_err(|e| ClientError::Decode(e.to_string()))
}
