//! The table of calls waiting for a response.
//!
//! Invariant: every registered call is resolved exactly once: by its response, by the
//! caller giving up (timeout), or by the connection being lost, which resolves every
//! waiter with the same reason and refuses new registrations.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::oneshot;

use crate::error::ConnectionLost;
use crate::wire::RpcError;

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

#[derive(Debug, Default)]
struct State {
    waiting: HashMap<i64, oneshot::Sender<Outcome>>,
    lost: Option<ConnectionLost>,
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

    /// Registers call `id`; fails with the loss reason once the connection is gone.
    pub(crate) fn register(&self, id: i64) -> Result<oneshot::Receiver<Outcome>, ConnectionLost> {
        let mut state = self.lock();
        if let Some(reason) = &state.lost {
            return Err(reason.clone());
        }
        let (tx, rx) = oneshot::channel();
        state.waiting.insert(id, tx);
        Ok(rx)
    }

    /// Delivers a response; false when nobody waits for `id` (late or unknown).
    pub(crate) fn resolve(&self, id: i64, outcome: Outcome) -> bool {
        let waiter = self.lock().waiting.remove(&id);
        match waiter {
            Some(tx) => {
                // The waiter may have just timed out and dropped its receiver; that's fine.
                let _ = tx.send(outcome);
                true
            }
            None => false,
        }
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
