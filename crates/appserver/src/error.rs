//! Errors of the app-server client.

use std::process::ExitStatus;
use std::time::Duration;

/// Why the connection to the app-server is gone. Cloned to every waiter, so it holds
/// only owned, cheap data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionLost {
    /// The server closed its stdout (it exited or crashed).
    #[error("the app-server closed its output (it exited or crashed)")]
    EndOfStream,
    /// Reading the server's stdout failed.
    #[error("reading from the app-server failed: {0}")]
    ReadFailed(String),
    /// Writing to the server's stdin failed.
    #[error("writing to the app-server failed: {0}")]
    WriteFailed(String),
    /// The server sent a line that is not JSON (or not UTF-8).
    #[error("the app-server sent a malformed line ({detail}): {excerpt}")]
    MalformedLine {
        /// The parser's message.
        detail: String,
        /// The start of the offending line, at most 120 characters.
        excerpt: String,
    },
    /// The server sent a JSON value that is not a JSON-RPC request, response or notification.
    #[error("the app-server sent a message that is not JSON-RPC: {excerpt}")]
    NotJsonRpc {
        /// The start of the offending line, at most 120 characters.
        excerpt: String,
    },
    /// The server sent a line longer than the configured limit.
    #[error("the app-server sent a line longer than {limit} bytes")]
    LineTooLong {
        /// The configured limit in bytes.
        limit: usize,
    },
    /// The server process exited, yet its output stayed open: a process it started still
    /// holds it, so no end of stream will come. Reported once the output has been silent
    /// for a moment after the exit (what the server wrote before exiting is still read).
    #[error(
        "the app-server exited ({}) while a process it started keeps its output open",
        exit_text(.status)
    )]
    ServerExited {
        /// The server's exit status, when it could be collected.
        status: Option<ExitStatus>,
    },
    /// This client was closed.
    #[error("the client was closed")]
    ClosedByClient,
}

fn exit_text(status: &Option<ExitStatus>) -> String {
    status.map_or_else(|| "exit status unknown".to_owned(), |s| s.to_string())
}

/// Answers the server sent with ids this client never used, while a call waited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAnswers {
    /// How many such answers came.
    pub count: u64,
    /// The ids of the last few of them, in arrival order, as JSON text (at most 40
    /// characters each).
    pub ids: Vec<String>,
}

impl std::fmt::Display for UnknownAnswers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (answers, ids) = if self.count == 1 {
            ("answer", "an id that was")
        } else {
            ("answers", "ids that were")
        };
        write!(
            f,
            "the server sent {} {answers} with {ids} never asked: {}",
            self.count,
            self.ids.join(", ")
        )?;
        let shown = u64::try_from(self.ids.len()).unwrap_or(u64::MAX);
        if shown < self.count {
            write!(f, " and {} more", self.count - shown)?;
        }
        Ok(())
    }
}

/// Everything that can go wrong talking to `codex app-server`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppServerError {
    /// The server program could not be started (for example: it is not installed).
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        /// The program that was run.
        program: String,
        /// Why it could not be started.
        #[source]
        source: std::io::Error,
    },
    /// The connection is gone; every pending and later call gets this.
    #[error("app-server connection lost: {0}")]
    ConnectionLost(#[from] ConnectionLost),
    /// No response arrived within the call's timeout.
    #[error("`{method}` got no response within {after:?}")]
    Timeout {
        /// The method called.
        method: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// No response arrived within the call's timeout, and meanwhile the server sent answers
    /// with ids this client never used (it misnumbers its responses, or echoes ids in
    /// another type, such as `"1"` for `1`).
    #[error("`{method}` got no response within {after:?} ({unknown})")]
    TimeoutWithUnknownAnswers {
        /// The method called.
        method: String,
        /// The timeout that expired.
        after: Duration,
        /// The answers with ids never asked.
        unknown: UnknownAnswers,
    },
    /// The server answered with a JSON-RPC error.
    #[error("`{method}` failed with error {code}: {message}")]
    Rpc {
        /// The method called.
        method: String,
        /// The JSON-RPC error code.
        code: i64,
        /// The server's message.
        message: String,
        /// The error's `data`, if any.
        data: Option<Box<serde_json::Value>>,
    },
    /// The server's result did not have the expected shape.
    #[error("`{method}` returned an unexpected result: {source}")]
    UnexpectedResult {
        /// The method called.
        method: String,
        /// Why the result did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The request's parameters could not be serialised.
    #[error("cannot encode the parameters of `{method}`: {source}")]
    Encode {
        /// The method called.
        method: String,
        /// Why the parameters did not serialise.
        #[source]
        source: serde_json::Error,
    },
}

impl AppServerError {
    /// True when the server program was not found (it is probably not installed).
    pub fn is_not_found(&self) -> bool {
        matches!(self, AppServerError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The start of `line`, at most 120 characters, for error messages.
pub(crate) fn excerpt(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let mut out: String = text.chars().take(120).collect();
    if text.chars().count() > 120 {
        out.push('…');
    }
    out
}
