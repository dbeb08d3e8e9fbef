//! The parent's side of [`ChildHold`](crate::subagents::ChildHold): a `spawn_agents` call
//! whose child paused on an approval holds, and the drive pauses the run with that call
//! left open.

use agent_runtime::JobKey;
use futures::StreamExt as _;

use super::Driver;
use crate::error::HostError;
use crate::run::events::PauseReason;
use crate::run::state::CallProgress;
use crate::run::{RunEnd, kinds};

impl Driver {
    /// When the drive was stopped by a call holding for a waiting child (not by the user,
    /// nor an `interrupt`): lets the step's other calls end, then pauses the run on the
    /// children's approvals. The holding calls get no terminal event (the runtime is
    /// abandoned as a crash would leave it, `Runtime::abandon`): the next resume runs them again, as it does
    /// every retry-safe call cut off, and their children go on with their decisions.
    /// `None` when the drive is to be interrupted instead.
    pub(super) async fn pause_for_children(&mut self) -> Result<Option<RunEnd>, HostError> {
        let hold = std::sync::Arc::clone(&self.hold);
        loop {
            if hold.user_cancelled() || self.state.interrupt_requested.is_some() {
                return Ok(None);
            }
            let held = hold.held_calls();
            if held.is_empty() {
                return Ok(None);
            }
            let others: Vec<JobKey> = self
                .state
                .calls
                .iter()
                .filter(|c| matches!(&c.progress, CallProgress::Scheduled { turn, .. } if *turn == self.turn))
                .filter(|c| !held.contains(&c.call_id))
                .map(|c| JobKey {
                    thread: self.thread.clone(),
                    turn: self.turn.clone(),
                    call_id: c.call_id.clone(),
                })
                .collect();
            if others.is_empty() {
                break;
            }
            let runtime = self.runtime.clone();
            let (thread, turn) = (self.thread.clone(), self.turn.clone());
            let results = futures::future::join_all(others.iter().map(|key| {
                let runtime = runtime.clone();
                let (thread, turn) = (thread.clone(), turn.clone());
                async move { runtime.result(&thread, &turn, key).await }
            }));
            // Not the drive's `cancel`: the hold has fired it already, and a wait on it
            // would end at once, every time, for as long as the other calls run.
            let user = hold.user_token();
            let mut interrupts = self.journal.tail_kind(
                &self.thread,
                kinds::INTERRUPT_REQUESTED,
                self.state.last_seq,
            );
            tracing::debug!(
                held = held.len(),
                others = others.len(),
                "a call holds for a waiting sub-agent; waiting for the step's other calls"
            );
            tokio::select! {
                _ = results => {}
                // Another call holds now: it is not waited for.
                () = hold.changed() => {}
                () = user.cancelled() => {}
                // `interrupt` from another process (which fires only the drive's `cancel`).
                _ = interrupts.next() => {}
            }
            self.sync().await?;
        }
        let waiting = hold.waiting();
        self.runtime.abandon();
        let end = self
            .pause(
                PauseReason::Approval,
                crate::subagents::waiting_detail(&waiting),
            )
            .await?;
        self.held_children = waiting;
        Ok(Some(end))
    }
}
