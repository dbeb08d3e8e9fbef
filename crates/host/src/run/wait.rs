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

/// How often a wait on a run recorded as running checks that its driver is still there:
/// a driver that died (`kill -9`) writes nothing more, so no event would end the wait.
const LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// Follows run `id` until it stops, or until `timeout` passes. A run that has already
/// stopped is reported at once, whatever the timeout. A run recorded as running whose
/// driver is gone (and that no worker may take over) has stopped too: it shows
/// `interrupted`, as `runs show` says, and is reported within a second.
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
    let mut check_driver = true;
    loop {
        if has_stopped(state.status) || (check_driver && driver_gone(journal, &state).await?) {
            return Ok(WaitEnd::Stopped(Box::new(state)));
        }
        let tick = tokio::time::Instant::now() + LIVENESS_CHECK;
        let until = deadline.map_or(tick, |at| at.min(tick));
        match tokio::time::timeout_at(until, events.next()).await {
            Ok(Some(event)) => {
                state.apply(&event?);
                check_driver = false;
            }
            Ok(None) => return Err(HostError::Journal(agent_journal::JournalError::Closed)),
            Err(_elapsed) if deadline.is_some_and(|at| at <= until) => {
                return Ok(WaitEnd::TimedOut(Box::new(state)));
            }
            Err(_elapsed) => check_driver = true,
        }
    }
}

/// Whether `state`, recorded as running, has no driver left to move it: the one status
/// model says `interrupted`. A submitted run always has one to come: when its worker dies,
/// another takes it over once the lease expires (which the status model shows as
/// `interrupted` meanwhile).
async fn driver_gone(journal: &Journal, state: &RunState) -> Result<bool, HostError> {
    let submitted = state.spec().is_some_and(|spec| spec.submitted);
    if state.status != Some(RunStatus::Running) || submitted {
        return Ok(false);
    }
    let shown = run::table::status_with_lease(journal, state).await?;
    Ok(shown == RunStatus::Interrupted)
}
