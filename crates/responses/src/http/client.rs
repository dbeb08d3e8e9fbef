//! `Client`: one pooled reqwest client behind a cheap handle.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::config::{ApiKey, ClientConfig};
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
        super::config::check_base_url(&config.base_url)?;
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
        Ok(EventStream::new(
            response,
            self.config.stream_idle_timeout,
            self.config.api_key.clone(),
        ))
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
        let path = format!("responses/{response_id}");
        let url = self.url(&path);
        let request = format!("GET /{path}");
        let mut retries_taken = 0;
        loop {
            let attempt = self
                .http
                .get(&url)
                .headers(self.headers(retries_taken)?)
                .send()
                .await;
            match self.settle(&request, attempt, retries_taken).await? {
                Settled::Done(mut response) => {
                    let body = read_capped(&mut response, MAX_JSON_BODY)
                        .await
                        .map_err(|e| ClientError::from_reqwest(&e))?;
                    return decode(&json_body(body)?);
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
            match self
                .settle(&format!("POST /{path}"), attempt, retries_taken)
                .await?
            {
                // The API took the request (2xx): sending it again could create (and bill)
                // a second response, so a body that cannot be read is the caller's to judge.
                Settled::Done(mut response) => {
                    let body = read_capped(&mut response, MAX_JSON_BODY)
                        .await
                        .map_err(|err| ClientError::BodyLost(crate::error::error_chain(&err)))?;
                    return decode(&json_body(body)?);
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
            match self
                .settle(&format!("POST /{path}"), attempt, retries_taken)
                .await?
            {
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

    /// Applies the retry policy to one attempt of `request` (`POST /responses`, for the
    /// log): success, a wait-then-retry (logged at warn level), or the final error, which
    /// keeps the server's `retry-after` and the retries taken.
    async fn settle(
        &self,
        request: &str,
        attempt: Result<reqwest::Response, reqwest::Error>,
        retries_taken: u32,
    ) -> Result<Settled, ClientError> {
        let mut response = match attempt {
            Ok(response) => response,
            Err(err) => {
                let err = ClientError::from_reqwest(&err);
                self.backoff_or_fail(request, err, retries_taken).await?;
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
        let retry_after = retry::server_delay(&headers);
        if retries_taken < self.config.retry.max_retries && retry::should_retry(status, &headers) {
            let delay = retry::delay_from(
                &self.config.retry,
                retries_taken,
                retry_after,
                retry::jitter_unit(),
            );
            let reason = match response.status().canonical_reason() {
                Some(reason) => format!("the API answered {status} {reason}"),
                None => format!("the API answered {status}"),
            };
            self.log_retry(request, retries_taken, &reason, delay);
            // Drain a small body so the connection can be reused (errors here do not
            // matter); a larger one is left unread, and dropping it closes the connection.
            let _ = read_capped(&mut response, MAX_ERROR_BODY).await;
            drop(response);
            tokio::time::sleep(delay).await;
            return Ok(Settled::Retry);
        }
        // At most `MAX_ERROR_BODY` of it: an error message is short, and a server that
        // sends more (or never stops) gets its connection closed instead of read.
        let body = read_capped(&mut response, MAX_ERROR_BODY)
            .await
            .map(|body| body.bytes)
            .unwrap_or_default();
        drop(response);
        let mut api = ApiError::from_body(status, &body, request_id);
        // A server that quotes the request's headers back must not put the key in an error.
        api.message = self.config.api_key.mask(&api.message);
        api.retry_after = retry_after;
        api.retries_taken = retries_taken;
        api.should_retry = retry::should_retry_header(&headers);
        Err(ClientError::Api(Box::new(api)))
    }

    /// Waits the backoff before retrying `request` after a failed connection; the final
    /// error once the retries are used up.
    async fn backoff_or_fail(
        &self,
        request: &str,
        err: ClientError,
        retries_taken: u32,
    ) -> Result<(), ClientError> {
        if err.is_retryable_transport() && retries_taken < self.config.retry.max_retries {
            let delay = self.config.retry.delay(retries_taken, None);
            self.log_retry(request, retries_taken, &err.to_string(), delay);
            tokio::time::sleep(delay).await;
            Ok(())
        } else {
            Err(err)
        }
    }

    /// One warn line per retry the client makes on its own (the key masked).
    fn log_retry(&self, request: &str, retries_taken: u32, reason: &str, delay: Duration) {
        let line = retry_line(
            &self.config.api_key,
            request,
            retries_taken,
            self.config.retry.max_retries,
            reason,
            delay,
        );
        tracing::warn!("{line}");
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

/// `POST /responses: the API answered 503 Service Unavailable; retrying (attempt 2 of 3)
/// in 1.0 s`, with `key` masked wherever `reason` (a server's text, an error) quotes it.
fn retry_line(
    key: &ApiKey,
    request: &str,
    retries_taken: u32,
    max_retries: u32,
    reason: &str,
    delay: Duration,
) -> String {
    let wait = if delay < Duration::from_secs(1) {
        format!("{} ms", delay.as_millis())
    } else {
        format!("{:.1} s", delay.as_secs_f64())
    };
    let line = format!(
        "{request}: {reason}; retrying (attempt {} of {}) in {wait}",
        retries_taken.saturating_add(2),
        max_retries.saturating_add(1),
    );
    key.mask(&line)
}

enum Settled {
    Done(reqwest::Response),
    Retry,
}

/// Most bytes of a 2xx JSON answer ([`Client::create`], [`Client::compact`],
/// [`Client::retrieve`]) the client reads: 32 MiB, twice the largest event-stream frame
/// ([`DEFAULT_MAX_FRAME`](crate::sse::DEFAULT_MAX_FRAME)), which carries the same
/// response in its `response.completed` event. A larger answer is
/// [`ClientError::BodyTooLarge`] and the rest of it is not read.
pub const MAX_JSON_BODY: usize = 32 * 1024 * 1024;

/// Most bytes of an error answer (a non-2xx status) the client reads: 64 KiB, far more
/// than the API's `{"error": {...}}`. The error is built from what was read; the rest is
/// not read (the connection is closed instead of drained).
pub const MAX_ERROR_BODY: usize = 64 * 1024;

/// At most `limit` bytes of a body, and whether there was more.
struct Capped {
    bytes: Vec<u8>,
    over: bool,
}

/// Reads `response`'s body up to `limit` bytes: a body announced (`content-length`) or
/// found larger stops there, its rest unread.
async fn read_capped(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<Capped, reqwest::Error> {
    if response
        .content_length()
        .is_some_and(|n| usize::try_from(n).map_or(true, |n| n > limit))
    {
        return Ok(Capped {
            bytes: Vec::new(),
            over: true,
        });
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(Capped { bytes, over: true });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Capped { bytes, over: false })
}

/// A whole JSON body, or [`ClientError::BodyTooLarge`].
fn json_body(body: Capped) -> Result<Vec<u8>, ClientError> {
    if body.over {
        Err(ClientError::BodyTooLarge {
            limit: MAX_JSON_BODY,
        })
    } else {
        Ok(body.bytes)
    }
}

fn encode<B: Serialize>(body: &B) -> Result<Bytes, ClientError> {
    serde_json::to_vec(body)
        .map(Bytes::from)
        .map_err(|e| ClientError::Decode(e.to_string()))
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(bytes).map_err(|e| ClientError::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{ApiKey, retry_line};

    #[test]
    fn a_retry_line_names_attempt_reason_and_wait_and_masks_the_key() {
        let key = ApiKey::new("sk-test-SECRET-42").unwrap();
        let line = retry_line(
            &key,
            "POST /responses",
            0,
            2,
            "the API answered 503 Service Unavailable",
            Duration::from_secs(3),
        );
        assert_eq!(
            line,
            "POST /responses: the API answered 503 Service Unavailable; retrying (attempt 2 of 3) in 3.0 s"
        );
        let line = retry_line(
            &key,
            "POST /responses",
            1,
            2,
            "transport error: proxy said Bearer sk-test-SECRET-42",
            Duration::from_millis(412),
        );
        assert!(!line.contains("SECRET"), "{line}");
        assert!(
            line.ends_with("Bearer ***; retrying (attempt 3 of 3) in 412 ms"),
            "{line}"
        );
    }
}
