//! A parent that does not wait for decisions pauses while a child waits for one.
//!
//! Off a terminal without `--wait`, a run pauses on an approval (exit 3) rather than wait.
//! A child driven in the parent's process pauses the same way; its `spawn_agents` call then
//! holds (it neither returns nor fails: the model must not see a child that merely waits
//! as ended) and [`ChildHold`] tells the parent's drive, which pauses the parent too,
//! leaving the call open as a crash would. The next `resume` of the parent runs the call
//! again (it is retry-safe), and each child goes on with the decision made by its own run
//! id meanwhile.

use std::sync::{Arc, Mutex, PoisonError};

use agent_runtime::CancellationToken;

use crate::run::CallRecord;

/// A child that paused on an approval, and the call it waits on.
#[derive(Debug, Clone)]
pub struct WaitingChild {
    /// The child run, by whose id the call is decided.
    pub run_id: String,
    /// The call waiting, with its pending approval.
    pub call: CallRecord,
}

/// What the `spawn_agents` calls of one parent's drive share with the drive: which of
/// them hold for a waiting child.
#[derive(Debug)]
pub(crate) struct ChildHold {
    /// The drive's own cancellation (Ctrl-C, `interrupt`): the drive's `cancel` is a child
    /// of it that a hold fires too.
    user: CancellationToken,
    /// The drive's `cancel`: fired by the user's, or when a call holds.
    token: CancellationToken,
    held: Mutex<Vec<(String, Vec<WaitingChild>)>>,
    changed: tokio::sync::Notify,
}

impl ChildHold {
    /// The hold of a drive whose cancellation is `user`.
    pub(crate) fn new(user: &CancellationToken) -> Arc<ChildHold> {
        Arc::new(ChildHold {
            user: user.clone(),
            token: user.child_token(),
            held: Mutex::new(Vec::new()),
            changed: tokio::sync::Notify::new(),
        })
    }

    /// The cancellation the drive watches: the user's, or a call holding.
    pub(crate) fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// The user's cancellation alone (a hold does not fire it).
    pub(crate) fn user_token(&self) -> CancellationToken {
        self.user.clone()
    }

    /// Whether the user (not a hold) stopped the drive.
    pub(crate) fn user_cancelled(&self) -> bool {
        self.user.is_cancelled()
    }

    /// The parent's call `call_id` holds for `waiting`: the drive is told.
    pub(crate) fn hold(&self, call_id: &str, waiting: Vec<WaitingChild>) {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((call_id.to_string(), waiting));
        self.changed.notify_one();
        self.token.cancel();
    }

    /// The calls that hold.
    pub(crate) fn held_calls(&self) -> Vec<String> {
        self.lock().iter().map(|(call, _)| call.clone()).collect()
    }

    /// The children waiting, of every call that holds.
    pub(crate) fn waiting(&self) -> Vec<WaitingChild> {
        self.lock()
            .iter()
            .flat_map(|(_, waiting)| waiting.iter().cloned())
            .collect()
    }

    /// Resolves once a call holds after the last time this resolved.
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Vec<WaitingChild>)>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Why the parent paused: each child and the call it waits on.
pub(crate) fn detail(waiting: &[WaitingChild]) -> String {
    waiting
        .iter()
        .map(|w| {
            format!(
                "sub-agent {} waits for approval of {} ({})",
                w.run_id, w.call.call_id, w.call.name
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
