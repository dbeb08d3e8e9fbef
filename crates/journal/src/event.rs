//! Event types.

use serde::{Deserialize, Serialize};

/// A journaled event. `seq` is unique and increasing across the journal; `at` is the
/// append time in Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: i64,
    pub thread: String,
    pub kind: String,
    pub payload: serde_json::Value,
    pub at: i64,
    /// The dedup key the event was appended with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
}

/// An event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub thread: String,
    pub kind: String,
    pub payload: serde_json::Value,
    /// Idempotency key within the thread: a second append with the same key writes nothing
    /// and returns the first event's seq.
    pub dedup_key: Option<String>,
}

impl NewEvent {
    pub fn new(
        thread: impl Into<String>,
        kind: impl Into<String>,
        payload: serde_json::Value,
    ) -> Self {
        NewEvent {
            thread: thread.into(),
            kind: kind.into(),
            payload,
            dedup_key: None,
        }
    }

    /// Sets the per-thread dedup key.
    pub fn with_dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }
}

/// The acknowledgement of one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub seq: i64,
    /// True when the dedup key existed and nothing was written; `seq` is the first event's.
    pub deduplicated: bool,
}
