//! The table of calls waiting for a response.
//!
//! Invariants:
//! - Every registered call is resolved exactly once: by its response, by the caller giving
//!   up (timeout), or by the connection being lost, which resolves every waiter with the
//!   same reason and refuses new registrations.
//! - Call ids are issued here, from 1 upwards, so an answer can be told apart as *late* (an
//!   id that was issued but nobody waits for any more) or *unknown* (an id never issued).
//!   Unknown answers are counted so that a call that then times out can say they came.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::oneshot;

use crate::error::{ConnectionLost, UnknownAnswers};
use crate::wire::RpcError;

/// How many unknown answers' ids are kept for error messages (the most recent ones).
const UNKNOWN_IDS_KEPT: usize = 3;
/// The longest id text kept for error messages, in characters.
const UNKNOWN_ID_CHARS: usize = 40;

/// How a call ended, as delivered to its waiter.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The server's result.
    Result(Value),
    /// The server's error.
    Error(RpcError),
    /// The connection ended first.
    Lost(ConnectionLost),
}

/// What became of a response the server sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Its call was waiting and got it.
    Delivered,
    /// Its id was issued, but nobody waits for it any more (timed out, dropped, answered).
    Late,
    /// Its id was never issued by this client.
    Unknown,
}

/// A point in the count of unknown answers, taken when a call is registered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UnknownMark(u64);

#[derive(Debug, Default)]
struct State {
    waiting: HashMap<i64, oneshot::Sender<Outcome>>,
    lost: Option<ConnectionLost>,
    /// Ids `1..=issued` have been handed out.
    issued: i64,
    /// How many answers with unknown ids came, ever.
    unknown_count: u64,
    /// The most recent unknown answers: (their number in `unknown_count`, the id as text).
    unknown_recent: VecDeque<(u64, String)>,
}

/// Pending calls plus the latched reason the connection ended (if it did).
#[derive(Debug, Default)]
pub(crate) struct PendingCalls {
    state: Mutex<State>,
}

impl PendingCalls {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked mid-update of a plain map;
        // the map is still consistent enough to resolve waiters.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Issues a new call id and registers its waiter; fails with the loss reason once the
    /// connection is gone. The mark tells [`unknown_since`](Self::unknown_since) where
    /// this call's wait began.
    pub(crate) fn register(
        &self,
    ) -> Result<(i64, oneshot::Receiver<Outcome>, UnknownMark), ConnectionLost> {
        let mut state = self.lock();
        if let Some(reason) = &state.lost {
            return Err(reason.clone());
        }
        state.issued = state.issued.saturating_add(1);
        let id = state.issued;
        let (tx, rx) = oneshot::channel();
        state.waiting.insert(id, tx);
        Ok((id, rx, UnknownMark(state.unknown_count)))
    }

    /// Delivers a response to the call with id `id`, or says why nobody got it. An unknown
    /// id is counted (see [`unknown_since`](Self::unknown_since)).
    pub(crate) fn resolve(&self, id: &Value, outcome: Outcome) -> Delivery {
        let waiter = {
            let mut state = self.lock();
            let issued = id.as_i64().filter(|n| (1..=state.issued).contains(n));
            match issued {
                Some(n) => state.waiting.remove(&n),
                None => {
                    state.unknown_count = state.unknown_count.saturating_add(1);
                    let number = state.unknown_count;
                    if state.unknown_recent.len() == UNKNOWN_IDS_KEPT {
                        state.unknown_recent.pop_front();
                    }
                    state.unknown_recent.push_back((number, id_text(id)));
                    return Delivery::Unknown;
                }
            }
        };
        match waiter {
            Some(tx) => {
                // The waiter may have just timed out and dropped its receiver; that's fine.
                let _ = tx.send(outcome);
                Delivery::Delivered
            }
            None => Delivery::Late,
        }
    }

    /// The answers with unknown ids that came after `mark`, if any.
    pub(crate) fn unknown_since(&self, mark: UnknownMark) -> Option<UnknownAnswers> {
        let state = self.lock();
        let count = state.unknown_count.saturating_sub(mark.0);
        (count > 0).then(|| UnknownAnswers {
            count,
            ids: state
                .unknown_recent
                .iter()
                .filter(|(number, _)| *number > mark.0)
                .map(|(_, id)| id.clone())
                .collect(),
        })
    }

    /// Forgets call `id` (its caller stopped waiting).
    pub(crate) fn forget(&self, id: i64) {
        self.lock().waiting.remove(&id);
    }

    /// Latches `reason` (the first reason wins) and fails every waiter with it.
    pub(crate) fn lose(&self, reason: ConnectionLost) {
        let waiters: Vec<_> = {
            let mut state = self.lock();
            if state.lost.is_none() {
                state.lost = Some(reason);
            }
            state.waiting.drain().map(|(_, tx)| tx).collect()
        };
        let reason = self.lost().unwrap_or(ConnectionLost::EndOfStream);
        for tx in waiters {
            let _ = tx.send(Outcome::Lost(reason.clone()));
        }
    }

    /// Why the connection ended, if it has.
    pub(crate) fn lost(&self) -> Option<ConnectionLost> {
        self.lock().lost.clone()
    }

    /// How many calls are waiting (for tests and diagnostics).
    pub(crate) fn len(&self) -> usize {
        self.lock().waiting.len()
    }
}

/// `id` as JSON text, at most [`UNKNOWN_ID_CHARS`] characters.
fn id_text(id: &Value) -> String {
    let text = id.to_string();
    if text.chars().count() <= UNKNOWN_ID_CHARS {
        return text;
    }
    let mut short: String = text.chars().take(UNKNOWN_ID_CHARS).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_are_told_apart_as_delivered_late_or_unknown() {
        let calls = PendingCalls::default();
        let (first, _rx, mark) = calls.register().unwrap();
        assert_eq!(first, 1);
        let (second, rx, _) = calls.register().unwrap();
        calls.forget(first);
        let ok = || Outcome::Result(json!({}));
        assert_eq!(calls.resolve(&json!(first), ok()), Delivery::Late);
        assert_eq!(calls.unknown_since(mark), None);
        assert_eq!(calls.resolve(&json!(999), ok()), Delivery::Unknown);
        assert_eq!(calls.resolve(&json!("2"), ok()), Delivery::Unknown);
        assert_eq!(calls.resolve(&json!(0), ok()), Delivery::Unknown);
        assert_eq!(calls.resolve(&json!(second), ok()), Delivery::Delivered);
        assert!(rx.blocking_recv().is_ok());
        let unknown = calls.unknown_since(mark).unwrap();
        assert_eq!(unknown.count, 3);
        assert_eq!(unknown.ids, ["999", "\"2\"", "0"]);
        let (_, _, later) = calls.register().unwrap();
        assert_eq!(calls.unknown_since(later), None);
        let long = "x".repeat(100);
        assert_eq!(calls.resolve(&json!(long), ok()), Delivery::Unknown);
        let unknown = calls.unknown_since(mark).unwrap();
        assert_eq!(unknown.count, 4);
        assert_eq!(unknown.ids.len(), UNKNOWN_IDS_KEPT);
        assert!(unknown.ids[2].ends_with('…'));
        assert_eq!(
            unknown.to_string(),
            format!(
                "the server sent 4 answers with ids that were never asked: \"2\", 0, {} and 1 more",
                unknown.ids[2]
            )
        );
    }
}
