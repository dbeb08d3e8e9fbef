//! Client errors. No variant ever carries the API key: request headers are never formatted.

use std::time::Duration;

use crate::sse::SseError;

/// An error returned by the API (HTTP status >= 400, or an `error` stream event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status; `None` for an `error` event inside a stream.
    pub status: Option<u16>,
    /// `error.type`, e.g. `invalid_request_error`.
    pub kind: Option<String>,
    /// `error.code`, a machine-readable reason when the API gives one.
    pub code: Option<String>,
    /// `error.param`, the request parameter at fault.
    pub param: Option<String>,
    /// `error.message`, for people.
    pub message: String,
    /// The `x-request-id` response header.
    pub request_id: Option<String>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(status) => write!(f, "Error code: {status} - {}", self.message)?,
            None => write!(f, "stream error: {}", self.message)?,
        }
        if let Some(kind) = &self.kind {
            write!(f, " (type {kind}")?;
            if let Some(code) = &self.code {
                write!(f, ", code {code}")?;
            }
            if let Some(param) = &self.param {
                write!(f, ", param {param}")?;
            }
            f.write_str(")")?;
        }
        if let Some(id) = &self.request_id {
            write!(f, " [request {id}]")?;
        }
        Ok(())
    }
}

impl ApiError {
    /// Builds the error from a status and an error body (`{"error": {...}}`), as the SDK does.
    pub fn from_body(status: u16, body: &[u8], request_id: Option<String>) -> Self {
        let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let error = parsed.as_ref().map(|v| v.get("error").unwrap_or(v));
        let text = |key: &str| {
            error
                .and_then(|e| e.get(key))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let message = text("message").unwrap_or_else(|| {
            let raw = String::from_utf8_lossy(body);
            let raw: String = raw.chars().take(500).collect();
            if raw.trim().is_empty() {
                format!("HTTP {status}")
            } else {
                raw
            }
        });
        Self {
            status: Some(status),
            kind: text("type"),
            code: text("code"),
            param: text("param"),
            message,
            request_id,
        }
    }
}

/// Everything that can go wrong talking to the Responses API.
/// Why a request through [`Client`](crate::Client) failed. Messages never contain the key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("OPENAI_API_KEY is not set")]
    /// No key in the environment (or an empty one).
    MissingApiKey,
    #[error("invalid base URL `{0}`")]
    /// The base URL is not an `http(s)://` URL.
    InvalidBaseUrl(String),
    #[error("{0}")]
    /// The API answered with an error status (after the retries the policy allows).
    Api(Box<ApiError>),
    #[error("cannot connect to the API: {0}")]
    /// No connection to the API (retried first).
    Connect(String),
    #[error("request timed out: {0}")]
    /// The request took longer than the configured timeout (retried first).
    Timeout(String),
    #[error("HTTP transport error: {0}")]
    /// The connection failed mid-request.
    Transport(String),
    #[error("cannot decode the API's JSON: {0}")]
    /// The API's JSON body does not match the wire types.
    Decode(String),
    #[error("malformed event stream: {0}")]
    /// The event stream broke the SSE framing rules.
    Sse(#[from] SseError),
    #[error("no stream event for {0:?} (idle timeout)")]
    /// No event arrived for this long; the stream is given up.
    StreamIdleTimeout(Duration),
    #[error(
        "the event stream ended before a terminal event (response.completed/failed/incomplete)"
    )]
    /// The stream closed before its terminal event: the response's outcome is unknown.
    StreamEndedEarly,
    #[error("{0}")]
    /// The stream carried an `error` event.
    StreamError(Box<ApiError>),
    #[error("a streamed request must go through create_stream, a plain one through create")]
    /// The request's `stream` flag does not match the method it was given to.
    StreamFlagMismatch,
}

impl ClientError {
    /// The API error, when this is one.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            ClientError::Api(e) | ClientError::StreamError(e) => Some(e.as_ref()),
            ClientError::MissingApiKey
            | ClientError::InvalidBaseUrl(_)
            | ClientError::Connect(_)
            | ClientError::Timeout(_)
            | ClientError::Transport(_)
            | ClientError::Decode(_)
            | ClientError::Sse(_)
            | ClientError::StreamIdleTimeout(_)
            | ClientError::StreamEndedEarly
            | ClientError::StreamFlagMismatch => None,
        }
    }

    pub(crate) fn from_reqwest(err: &reqwest::Error) -> Self {
        // reqwest's Display names the URL but never headers, so the key cannot leak here.
        let text = error_chain(err);
        if err.is_timeout() {
            ClientError::Timeout(text)
        } else if err.is_connect() {
            ClientError::Connect(text)
        } else {
            ClientError::Transport(text)
        }
    }

    /// Whether the SDK would retry this failure without a response (connection/timeouts).
    pub(crate) fn is_retryable_transport(&self) -> bool {
        matches!(
            self,
            ClientError::Connect(_) | ClientError::Timeout(_) | ClientError::Transport(_)
        )
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
