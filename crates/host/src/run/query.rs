//! Reading runs: every reader folds the journal with the same [`RunState::apply`].

use agent_journal::{Event, Journal};
use agent_runtime::ThreadCheckpoint;
use futures::StreamExt as _;

use super::kinds;
use super::state::RunState;
use crate::error::HostError;

/// The run `run_id` as folded from its journal, its whole history held.
///
/// The events are folded as they are read, a page at a time: what a read holds is the
/// fold, not the run's events (a long run's outputs can be hundreds of MB).
///
/// # Cancel safety
/// Read-only: a dropped future leaves nothing behind.
pub async fn load(journal: &Journal, run_id: &str) -> Result<RunState, HostError> {
    let (state, _) = fold_after(journal, RunState::new(run_id), 0).await?;
    if state.last_seq == 0 {
        return Err(HostError::NotFound(run_id.into()));
    }
    Ok(state)
}

/// The run `run_id` folded from its latest checkpoint on (as a driving host folds it), from
/// its first event when it has none or none this version reads, and how many events were
/// folded after the checkpoint.
///
/// What its view (`runs show`) and its row show is what [`load`] gives, read from the
/// events after the checkpoint only: the checkpoint holds the spec, status, usage, budgets,
/// children and the counts of what it leaves out. The steps, calls and rejected answers
/// before it are not held (every such call is answered; they are counted in
/// [`RunState::elided`]): a reader that needs them uses [`load`].
///
/// # Cancel safety
/// Read-only: a dropped future leaves nothing behind.
pub(crate) async fn load_latest(
    journal: &Journal,
    run_id: &str,
) -> Result<(RunState, u64), HostError> {
    let (state, after) = match latest_checkpoint(journal, run_id).await? {
        Some((state, _, seq)) => (state, seq),
        None => (RunState::new(run_id), 0),
    };
    let (state, folded) = fold_after(journal, state, after).await?;
    if state.last_seq == 0 {
        return Err(HostError::NotFound(run_id.into()));
    }
    Ok((state, folded))
}

/// `state`, a fold of run `state.id` up to seq `after`, with the run's events after
/// `after` folded in as they are read; and how many were.
pub(crate) async fn fold_after(
    journal: &Journal,
    mut state: RunState,
    after: i64,
) -> Result<(RunState, u64), HostError> {
    let mut events = journal.replay_stream(&thread_of_run(&state.id)?, after);
    let mut folded = 0_u64;
    while let Some(event) = events.next().await {
        state.apply(&event?);
        folded = folded.saturating_add(1);
    }
    Ok((state, folded))
}

/// Whether `err`, from reading one run, concerns that run alone: a stored event that is
/// not JSON (a file edited by hand, a disk fault). A listing or a search over every run
/// leaves such a run out, saying so in the log, rather than fail for all of them.
pub(crate) fn unreadable_run(err: &HostError) -> bool {
    matches!(
        err,
        HostError::Journal(agent_journal::JournalError::CorruptPayload { .. })
    )
}

/// The journal thread of the run `run_id`, or [`HostError::NotFound`] when no run can have
/// that id: one the journal would refuse as a thread name (too long, a NUL) is asked for by
/// mistake like any unknown id, not a failure of the journal.
fn thread_of_run(run_id: &str) -> Result<String, HostError> {
    let thread = kinds::thread_of(run_id);
    if thread.len() > agent_journal::MAX_THREAD_BYTES || thread.contains('\0') {
        return Err(HostError::NotFound(run_id.into()));
    }
    Ok(thread)
}

/// A run as a host that drives it folds it (since its latest checkpoint), for
/// [`Host::resume_loaded`](super::Host::resume_loaded): resuming reads the thread once,
/// from its latest checkpoint on, however many parts of the host need it (its fold, the
/// runtime's adoption).
#[derive(Debug)]
pub struct LoadedRun {
    /// The folded run.
    pub state: RunState,
    /// The events of the run's thread the fold read after `start`, in seq order.
    pub(crate) events: Vec<Event>,
    /// The checkpoint the fold started from (the runtime's part, and its event's seq);
    /// `None`: the thread's first event.
    pub(crate) start: Option<(ThreadCheckpoint, i64)>,
}

/// The run `run_id` from its latest checkpoint on (see [`LoadedRun`]); from its first event
/// when it has none or none this version reads.
///
/// # Cancel safety
/// Read-only: a dropped future leaves nothing behind.
pub async fn load_for_resume(journal: &Journal, run_id: &str) -> Result<LoadedRun, HostError> {
    let thread = thread_of_run(run_id)?;
    let (mut state, start) = match latest_checkpoint(journal, run_id).await? {
        Some((state, runtime, seq)) => (state, Some((runtime, seq))),
        None => (RunState::for_driving(run_id), None),
    };
    let after = start.as_ref().map_or(0, |(_, seq)| *seq);
    let events = journal.replay(&thread, after).await?;
    if events.is_empty() && start.is_none() {
        return Err(HostError::NotFound(run_id.into()));
    }
    for event in &events {
        state.apply(event);
    }
    Ok(LoadedRun {
        state,
        events,
        start,
    })
}

/// The run's latest checkpoint this version reads: the fold it holds, the runtime's part,
/// and its event's seq.
async fn latest_checkpoint(
    journal: &Journal,
    run_id: &str,
) -> Result<Option<(RunState, ThreadCheckpoint, i64)>, HostError> {
    let thread = thread_of_run(run_id)?;
    let checkpoint = journal
        .last_of_kind(&thread, kinds::CONTEXT_COMPACTED)
        .await?;
    Ok(checkpoint.and_then(|event| {
        let (state, runtime) = RunState::from_checkpoint(run_id, &event)?;
        Some((state, runtime, event.seq))
    }))
}

/// Every run of the journal, newest first.
///
/// # Cancel safety
/// Read-only: a dropped future leaves nothing behind.
pub async fn list(journal: &Journal) -> Result<Vec<RunState>, HostError> {
    let mut runs = Vec::new();
    for id in ids(journal).await? {
        let state = match load(journal, &id).await {
            Ok(state) => state,
            Err(err) if unreadable_run(&err) => {
                tracing::warn!(run = id, %err, "runs: a run that cannot be read is left out");
                continue;
            }
            Err(err) => return Err(err),
        };
        if state.spec.is_some() {
            runs.push(state);
        }
    }
    Ok(runs)
}

/// The ids of the journal's run threads, newest first (the order of [`list`]), without
/// reading the runs: a thread whose run was never created (no `run.created`) is among
/// them, and [`list`] leaves it out.
///
/// # Cancel safety
/// Read-only: a dropped future leaves nothing behind.
pub async fn ids(journal: &Journal) -> Result<Vec<String>, HostError> {
    let mut ids: Vec<String> = journal
        .threads()
        .await?
        .iter()
        .filter_map(|thread| kinds::run_of(thread).map(str::to_string))
        .collect();
    ids.sort_by(|a, b| b.cmp(a));
    Ok(ids)
}
