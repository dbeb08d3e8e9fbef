//! Client errors. No variant ever carries the API key: request headers are never formatted.

use std::time::Duration;

use crate::retry::{MAX_RETRY_AFTER, Retry};
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
    /// The wait the server asked for before a retry (`retry-after-ms`, else `retry-after` in
    /// seconds or as an HTTP date), on the answer this error reports; `None` when it sent
    /// none (and for an `error` stream event). Above [`MAX_RETRY_AFTER`] the error is not
    /// worth retrying ([`ApiError::retry`]).
    pub retry_after: Option<Duration>,
    /// How many times the client had already sent this request again before this answer
    /// (its `x-stainless-retry-count`): 0 when it was sent once.
    pub retries_taken: u32,
    /// The server's `x-should-retry` header on the answer this error reports: `Some(false)`
    /// when it asked not to be sent the request again, `Some(true)` when it asked to be,
    /// `None` when it said neither (and for an `error` stream event). It decides
    /// [`ApiError::retry`] over the status, as it decides the client's own retries.
    pub should_retry: Option<bool>,
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
        if let Some(wait) = self.retry_after.filter(|d| *d > MAX_RETRY_AFTER) {
            write!(
                f,
                " (the server asked to retry in {}, later than the {} s this client waits: not retried)",
                human_wait(wait),
                MAX_RETRY_AFTER.as_secs()
            )?;
        } else if self.should_retry == Some(false) {
            f.write_str(" (the server asked not to retry it: x-should-retry: false)")?;
        } else if self.retries_taken > 0 {
            let s = if self.retries_taken == 1 { "y" } else { "ies" };
            write!(f, " (after {} retr{s})", self.retries_taken)?;
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
    /// Whatever the status, a [`retry_after`](Self::retry_after) above [`MAX_RETRY_AFTER`]
    /// (the server will not take the request for longer than a client waits) is
    /// [`Retry::Never`]. Then the server's [`should_retry`](Self::should_retry)
    /// (`x-should-retry: true|false`) decides, before the status: the SDK's order, which
    /// the client follows for its own retries, so a caller that retries whole calls does
    /// not send again what the server asked not to be sent again.
    pub fn retry(&self) -> Retry {
        if self.retry_after.is_some_and(|d| d > MAX_RETRY_AFTER) {
            return Retry::Never;
        }
        match self.should_retry {
            Some(true) => return Retry::Backoff,
            Some(false) => return Retry::Never,
            None => {}
        }
        match self.status {
            Some(408 | 409 | 429) => Retry::Backoff,
            Some(status) if status >= 500 => Retry::Backoff,
            Some(_) => Retry::Never,
            None if self.kind.as_deref() == Some("invalid_request_error") => Retry::Never,
            None => Retry::Backoff,
        }
    }

    /// Builds the error from a status and an error body (`{"error": {...}}`), as the SDK does
    /// (with no `retry_after`, no retries taken and no `should_retry`: the client sets those).
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
            retry_after: None,
            retries_taken: 0,
            should_retry: None,
        }
    }
}

/// `bytes` for people: `32 MiB (33554432 bytes)`, or the bytes alone below a KiB.
fn human_bytes(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB ({bytes} bytes)", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB ({bytes} bytes)", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// `wait` for people: seconds, hours or days, rounded down.
fn human_wait(wait: Duration) -> String {
    let secs = wait.as_secs();
    match secs {
        0..7_200 => format!("{secs} s"),
        7_200..172_800 => format!("{} hours", secs / 3_600),
        _ => format!("{} days", secs / 86_400),
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
    #[error("transport error: {0}")]
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
    #[error(
        "the API's answer is larger than the {} this client reads; the rest was not read (the response may exist and be billed)",
        human_bytes(*.limit)
    )]
    /// A 2xx JSON answer was larger than the client reads
    /// ([`MAX_JSON_BODY`](crate::http::MAX_JSON_BODY)), given in `limit`, in bytes. Not
    /// sent again by the client (the request reached the API); the same request is
    /// likely to get the same answer ([`Retry::Never`]).
    BodyTooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
    #[error(
        "the server answered {status} with {}, not an event stream (text/event-stream); its body begins: {excerpt}",
        describe_content(.content_type.as_deref(), .content_encoding.as_deref())
    )]
    /// A streamed request was answered 2xx with a body that is not an event stream: a
    /// proxy's login page, a plain JSON response, compressed bytes this client does not
    /// decode. Sending it again gets the same answer ([`Retry::Never`]). Told apart from a
    /// cut stream by the body's first line (an event stream opens with `data:`, `event:`,
    /// `id:`, `retry:` or a `:` comment), so an event stream under a missing or generic
    /// content type is still read as one.
    NotEventStream {
        /// The HTTP status (2xx).
        status: u16,
        /// The `content-type` header as sent (the key masked, at most 100 characters).
        content_type: Option<String>,
        /// The `content-encoding` header, when the body came encoded (the client decodes none).
        content_encoding: Option<String>,
        /// The start of the body, as text: the key masked, control characters escaped,
        /// at most 200 characters.
        excerpt: String,
    },
}

/// `content-type X[ and content-encoding Y]`, or `no content-type`.
fn describe_content(content_type: Option<&str>, content_encoding: Option<&str>) -> String {
    let mut text = match content_type {
        Some(ct) => format!("content-type {ct}"),
        None => "no content-type".to_owned(),
    };
    if let Some(encoding) = content_encoding {
        text.push_str(" and content-encoding ");
        text.push_str(encoding);
    }
    text
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
            | ClientError::BodyLost(_)
            | ClientError::BodyTooLarge { .. }
            | ClientError::NotEventStream { .. } => None,
        }
    }

    /// The wait the server asked for before a retry, on the answer this error reports
    /// ([`ApiError::retry_after`]): a caller that retries the call itself waits at least
    /// this long ([`RetryPolicy::backoff`](crate::retry::RetryPolicy::backoff) does). Above
    /// [`MAX_RETRY_AFTER`] the error is [`Retry::Never`].
    pub fn retry_after(&self) -> Option<Duration> {
        self.api().and_then(|api| api.retry_after)
    }

    /// How many times the client already sent this request again before giving up, so a
    /// caller that retries whole calls can count them against one budget:
    /// - `Some(n)` for an API error status ([`ApiError::retries_taken`]: `n` is the
    ///   policy's `max_retries` when the status was retryable, else 0);
    /// - `Some(0)` for failures the client never sends again: a stream cut, idle, malformed
    ///   or carrying an `error` event, a lost or too large 2xx body, a 2xx that is not an
    ///   event stream,
    ///   and the errors raised before any request;
    /// - `None` for [`Connect`](Self::Connect), [`Timeout`](Self::Timeout) and
    ///   [`Transport`](Self::Transport), which do not record it: the HTTP
    ///   [`Client`](crate::Client) returns them only once its policy's `max_retries` are used
    ///   up, a caller that makes them (a WebSocket session) may have made none.
    pub fn retries_taken(&self) -> Option<u32> {
        match self {
            ClientError::Api(e) | ClientError::StreamError(e) => Some(e.retries_taken),
            ClientError::Connect(_) | ClientError::Timeout(_) | ClientError::Transport(_) => None,
            ClientError::MissingApiKey
            | ClientError::InvalidBaseUrl(_)
            | ClientError::Decode(_)
            | ClientError::Sse(_)
            | ClientError::StreamIdleTimeout(_)
            | ClientError::StreamEndedEarly
            | ClientError::StreamFlagMismatch
            | ClientError::BodyLost(_)
            | ClientError::BodyTooLarge { .. }
            | ClientError::NotEventStream { .. } => Some(0),
        }
    }

    /// Whether the same request may succeed if sent again (the SDK's classification, made
    /// available to callers that retry whole calls, such as a step that re-requests after
    /// a cut stream):
    /// - [`Retry::Never`]: the API's 400, 401, 403, 404, 422 and other non-retryable
    ///   statuses (the API's message is in [`api`](Self::api)), an `error` stream event of
    ///   type `invalid_request_error`, a missing key, a bad base URL, an answer that does not
    ///   decode or is larger than [`MAX_JSON_BODY`](crate::http::MAX_JSON_BODY), a stream
    ///   flag on the wrong method, a 2xx that is not an event stream, and
    ///   any API error whose `retry-after` is above [`MAX_RETRY_AFTER`];
    /// - [`Retry::Backoff`]: 408, 409, 429, 5xx, other `error` stream events, a failed or
    ///   timed-out connection, a cut stream (ended early, idle, malformed), a lost body.
    ///
    /// Wait [`RetryPolicy::delay`](crate::retry::RetryPolicy::delay) (given
    /// [`retry_after`](Self::retry_after)) before each retry, or use
    /// [`RetryPolicy::backoff`](crate::retry::RetryPolicy::backoff), which does all of it.
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
            | ClientError::StreamFlagMismatch
            | ClientError::BodyTooLarge { .. }
            | ClientError::NotEventStream { .. } => Retry::Never,
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
            retry_after: None,
            retries_taken: 0,
            should_retry: None,
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

    /// `x-should-retry` decides before the status, as for the client's own retries; a wait
    /// over the cap still forbids a retry.
    #[test]
    fn the_servers_should_retry_decides_over_the_status() {
        let with = |status: u16, should: Option<bool>| ApiError {
            should_retry: should,
            ..api(Some(status), Some("server_error"))
        };
        assert_eq!(with(503, Some(false)).retry(), Retry::Never);
        assert_eq!(with(429, Some(false)).retry(), Retry::Never);
        assert_eq!(with(503, None).retry(), Retry::Backoff);
        assert_eq!(with(400, Some(true)).retry(), Retry::Backoff);
        let capped = ApiError {
            retry_after: Some(MAX_RETRY_AFTER + Duration::from_secs(1)),
            ..with(503, Some(true))
        };
        assert_eq!(capped.retry(), Retry::Never);
        let refused = ClientError::Api(Box::new(with(503, Some(false))));
        assert_eq!(
            crate::retry::RetryPolicy::default().backoff(&refused, 0),
            None
        );
        assert!(
            refused.to_string().contains("x-should-retry: false"),
            "{refused}"
        );
    }
}
