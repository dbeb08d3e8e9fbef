//! Client errors. No variant ever carries the API key: request headers are never formatted.

use std::time::Duration;

use crate::retry::Retry;
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
    /// Whether the same request may succeed later: statuses 408, 409, 429 and 5xx
    /// ([`Retry::Backoff`]) as in the SDK's policy; every other status (400, 401, 403, 404,
    /// 422, ...) is [`Retry::Never`]. An `error` event inside a stream has no status: it is
    /// retryable unless its type says the request is invalid (`invalid_request_error`).
    pub fn retry(&self) -> Retry {
        match self.status {
            Some(408 | 409 | 429) => Retry::Backoff,
            Some(status) if status >= 500 => Retry::Backoff,
            Some(_) => Retry::Never,
            None if self.kind.as_deref() == Some("invalid_request_error") => Retry::Never,
            None => Retry::Backoff,
        }
    }

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
    #[error(
        "the API accepted the request but its answer was lost while reading it: {0} (the response may exist and be billed)"
    )]
    /// The API answered 2xx and the connection failed while its body was read. The request
    /// reached the API, so it is not sent again by the client: a retry is a new request,
    /// which the caller may choose to make ([`Retry::Backoff`], as for a cut stream).
    BodyLost(String),
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
            | ClientError::StreamFlagMismatch
            | ClientError::BodyLost(_) => None,
        }
    }

    /// Whether the same request may succeed if sent again (the SDK's classification, made
    /// available to callers that retry whole calls, such as a step that re-requests after
    /// a cut stream):
    /// - [`Retry::Never`]: the API's 400, 401, 403, 404, 422 and other non-retryable
    ///   statuses (the API's message is in [`api`](Self::api)), an `error` stream event of
    ///   type `invalid_request_error`, a missing key, a bad base URL, an answer that does not
    ///   decode, a stream flag on the wrong method;
    /// - [`Retry::Backoff`]: 408, 409, 429, 5xx, other `error` stream events, a failed or
    ///   timed-out connection, a cut stream (ended early, idle, malformed), a lost body.
    ///
    /// Wait [`RetryPolicy::delay`](crate::retry::RetryPolicy::delay) before each retry, or
    /// use [`RetryPolicy::backoff`](crate::retry::RetryPolicy::backoff), which does both.
    pub fn retry(&self) -> Retry {
        match self {
            ClientError::Api(e) | ClientError::StreamError(e) => e.retry(),
            ClientError::Connect(_)
            | ClientError::Timeout(_)
            | ClientError::Transport(_)
            | ClientError::Sse(_)
            | ClientError::StreamIdleTimeout(_)
            | ClientError::StreamEndedEarly
            | ClientError::BodyLost(_) => Retry::Backoff,
            ClientError::MissingApiKey
            | ClientError::InvalidBaseUrl(_)
            | ClientError::Decode(_)
            | ClientError::StreamFlagMismatch => Retry::Never,
        }
    }

    /// `self.retry() == Retry::Backoff`.
    pub fn is_retryable(&self) -> bool {
        self.retry() == Retry::Backoff
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

pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: Option<u16>, kind: Option<&str>) -> ApiError {
        ApiError {
            status,
            kind: kind.map(str::to_owned),
            code: None,
            param: None,
            message: "m".into(),
            request_id: None,
        }
    }

    /// An `error` event inside a stream has no status: its type decides.
    #[test]
    fn a_stream_error_event_is_retryable_unless_the_request_is_invalid() {
        assert_eq!(api(None, Some("server_error")).retry(), Retry::Backoff);
        assert_eq!(api(None, None).retry(), Retry::Backoff);
        assert_eq!(
            api(None, Some("invalid_request_error")).retry(),
            Retry::Never
        );
        // A status, when the event carries one (WebSocket mode), decides first.
        assert_eq!(
            api(Some(429), Some("invalid_request_error")).retry(),
            Retry::Backoff
        );
        assert_eq!(api(Some(400), Some("server_error")).retry(), Retry::Never);
        let stream = ClientError::StreamError(Box::new(api(None, Some("server_error"))));
        assert!(stream.is_retryable());
        assert!(ClientError::BodyLost("eof".into()).is_retryable());
    }
}
