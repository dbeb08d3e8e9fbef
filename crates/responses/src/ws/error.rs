//! WebSocket session errors. No variant carries the API key: the upgrade request's headers
//! are never formatted, only the server's HTTP status and the transport's message.

use std::time::Duration;

/// Everything that can go wrong with a WebSocket session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WsError {
    #[error("OPENAI_API_KEY is not set")]
    MissingApiKey,
    #[error("invalid base URL `{0}` (expected http(s):// or ws(s)://)")]
    InvalidBaseUrl(String),
    #[error("WebSocket handshake did not finish within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("WebSocket handshake refused with HTTP {status}: {message}")]
    HandshakeRefused { status: u16, message: String },
    #[error("cannot open the WebSocket: {0}")]
    Connect(String),
    #[error("the WebSocket session is closed{}", close_text(*.code, .reason))]
    Closed { code: Option<u16>, reason: String },
    #[error("cannot encode the client event: {0}")]
    Encode(String),
    #[error("cannot decode a server frame: {error} (frame starts: {frame_start})")]
    Decode { error: String, frame_start: String },
    #[error(
        "no terminal event within {0:?} for a request in flight; its outcome (and any steering acceptance) is unknown"
    )]
    RequestTimeout(Duration),
    #[error("invalid steering input: {0}")]
    InvalidSteer(String),
    #[error("invalid stream_id `{0}` (1-256 characters of A-Z a-z 0-9 _ . -)")]
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
