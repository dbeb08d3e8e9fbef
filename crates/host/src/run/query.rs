//! Reading runs: every reader folds the journal with the same [`RunState::apply`].

use agent_journal::{Event, Journal};

use super::kinds;
use super::state::{RunState, RunStatus};
use crate::error::HostError;

/// The run `run_id` as folded from its journal.
///
/// # Cancel safety
/// Read-only: a dropped future leaves nothing behind.
pub async fn load(journal: &Journal, run_id: &str) -> Result<RunState, HostError> {
    Ok(load_for_resume(journal, run_id).await?.state)
}

/// A run folded from its journal, with the events it was folded from, for
/// [`Host::resume_loaded`](super::Host::resume_loaded): resuming reads the thread once,
/// however many parts of the host need it (its fold, the runtime's adoption).
#[derive(Debug)]
pub struct LoadedRun {
    /// The folded run.
    pub state: RunState,
    /// Every event of the run's thread up to `state.last_seq`, in seq order.
    pub(crate) events: Vec<Event>,
}

/// The run `run_id` and its events, read once (see [`LoadedRun`]).
///
/// # Cancel safety
/// Read-only: a dropped future leaves nothing behind.
pub async fn load_for_resume(journal: &Journal, run_id: &str) -> Result<LoadedRun, HostError> {
    let events = journal.replay(&kinds::thread_of(run_id), 0).await?;
    if events.is_empty() {
        return Err(HostError::NotFound(run_id.into()));
    }
    Ok(LoadedRun {
        state: RunState::from_events(run_id, &events),
        events,
    })
}

/// Every run of the journal, newest first.
///
/// # Cancel safety
/// Read-only: a dropped future leaves nothing behind.
pub async fn list(journal: &Journal) -> Result<Vec<RunState>, HostError> {
    let mut runs = Vec::new();
    for thread in journal.threads().await? {
        let Some(id) = thread.strip_prefix("run:") else {
            continue;
        };
        let state = load(journal, id).await?;
        if state.spec.is_some() {
            runs.push(state);
        }
    }
    runs.sort_by(|a, b| b.id.cmp(&a.id));
    Ok(runs)
}

/// The status a reader should show: a run recorded as running whose driver is gone (a
/// crash) shows as interrupted.
pub fn shown_status(state: &RunState) -> RunStatus {
    match state.status {
        Some(RunStatus::Running) if state.driver.as_ref().is_none_or(|d| !d.is_alive()) => {
            RunStatus::Interrupted
        }
        Some(status) => status,
        None => RunStatus::Failed,
    }
}
