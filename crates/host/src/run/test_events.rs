//! Events as a thread holds them, for the fold's and the request's unit tests.

use std::sync::Arc;

use agent_journal::Event;
use serde_json::Value;

/// Event `seq` of the run `r`'s thread, at time `1000 + seq`.
pub(crate) fn ev(seq: i64, kind: &str, payload: Value) -> Event {
    Event {
        seq,
        thread: Arc::from("run:r"),
        kind: Arc::from(kind),
        payload,
        at: 1000 + seq,
        dedup_key: None,
        epoch: None,
    }
}
