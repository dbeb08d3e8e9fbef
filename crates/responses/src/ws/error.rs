//! WebSocket session errors. No variant carries the API key: the upgrade request's headers
//! are never formatted, only the server's HTTP status and the transport's message.

use std::time::Duration;

/// Everything that can go wrong with a WebSocket session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WsError {
    #[error("OPENAI_API_KEY is not set")]
    /// No key in the environment (or an empty one).
    MissingApiKey,
    #[error("invalid base URL `{0}` (expected http(s):// or ws(s)://)")]
    /// The base URL cannot be turned into a `ws(s)://` URL.
    InvalidBaseUrl(String),
    #[error("WebSocket handshake did not finish within {0:?}")]
    /// The upgrade took longer than [`WsConfig::handshake_timeout`](crate::ws::WsConfig::handshake_timeout).
    HandshakeTimeout(Duration),
    #[error("WebSocket handshake refused with HTTP {status}: {message}")]
    /// The server answered the upgrade with an HTTP error.
    HandshakeRefused {
        /// The HTTP status.
        status: u16,
        /// The error body's message.
        message: String,
    },
    #[error("cannot open the WebSocket: {0}")]
    /// No connection to the server.
    Connect(String),
    #[error("the WebSocket session is closed{}", close_text(*.code, .reason))]
    /// The session is closed: by either side, or because its socket task ended.
    Closed {
        /// The close code, when a close frame came.
        code: Option<u16>,
        /// The close reason, possibly empty.
        reason: String,
    },
    #[error("cannot encode the client event: {0}")]
    /// A client event could not be serialised.
    Encode(String),
    #[error("cannot decode a server frame: {error} (frame starts: {frame_start})")]
    /// A server frame is not a valid event.
    Decode {
        /// What the parser said.
        error: String,
        /// The first characters of the frame, for the log.
        frame_start: String,
    },
    #[error(
        "no event for {0:?} while a request was in flight; its outcome (and any steering acceptance) is unknown"
    )]
    /// Requests were in flight and nothing came for `request_timeout`; their outcome is unknown.
    RequestTimeout(Duration),
    #[error("invalid steering input: {0}")]
    /// Steering input the API would refuse (empty, or not user messages).
    InvalidSteer(String),
    #[error("invalid stream_id `{0}` (1-256 characters of A-Z a-z 0-9 _ . -)")]
    /// A `stream_id` outside 1-256 characters of `[A-Za-z0-9_.-]`.
    InvalidStreamId(String),
}

fn close_text(code: Option<u16>, reason: &str) -> String {
    match (code, reason.is_empty()) {
        (Some(code), true) => format!(" (close code {code})"),
        (Some(code), false) => format!(" (close code {code}: {reason})"),
        (None, true) => String::new(),
        (None, false) => format!(" ({reason})"),
    }
}
