//! Waiting until a run stops: completes, fails, pauses or is interrupted.
//!
//! Invariant: the answer is the run's fold ([`RunState`]) at the event that stopped it, read
//! from the journal alone, so any process can wait for a run driven by any other.

use std::time::Duration;

use agent_journal::Journal;
use futures::StreamExt as _;

use crate::HostError;
use crate::follow::follow_thread;
use crate::run::{self, RunState, RunStatus, kinds};

/// How a wait ended.
#[derive(Debug)]
pub enum WaitEnd {
    /// The run stopped (its status is completed, failed, paused or interrupted).
    Stopped(Box<RunState>),
    /// The timeout passed first; the run as it was then.
    TimedOut(Box<RunState>),
}

/// True for the statuses a waiter stops at.
pub fn has_stopped(status: Option<RunStatus>) -> bool {
    matches!(
        status,
        Some(RunStatus::Completed | RunStatus::Failed | RunStatus::Paused | RunStatus::Interrupted)
    )
}

/// Follows run `id` until it stops, or until `timeout` passes. A run that has already
/// stopped is reported at once, whatever the timeout.
///
/// # Cancel safety
/// Cancel-safe: it only reads; dropping it stops the wait.
pub async fn wait_until_stopped(
    journal: &Journal,
    id: &str,
    timeout: Option<Duration>,
) -> Result<WaitEnd, HostError> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut state = run::load(journal, id).await?;
    let mut events = std::pin::pin!(follow_thread(
        journal,
        &kinds::thread_of(id),
        state.last_seq
    ));
    loop {
        if has_stopped(state.status) {
            return Ok(WaitEnd::Stopped(Box::new(state)));
        }
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, events.next()).await {
                Ok(next) => next,
                Err(_elapsed) => return Ok(WaitEnd::TimedOut(Box::new(state))),
            },
            None => events.next().await,
        };
        match next {
            Some(event) => state.apply(&event?),
            None => return Err(HostError::Journal(agent_journal::JournalError::Closed)),
        }
    }
}
