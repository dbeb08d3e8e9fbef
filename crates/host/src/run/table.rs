//! The runs table: one row per run, derived from the journal.
//!
//! Each run has a lease row `run:<id>` (the journal's lease table): a worker's claim on it
//! (holder, expiry, epoch), whether workers may claim it (`open`: submitted and not done),
//! and a summary of the run (status, steps, tokens, title, the last seq it was folded at).
//!
//! Invariants:
//! - The journal is the source: a row whose `last_seq` is behind its thread is refolded
//!   and rewritten; a missing row (lost table, a crash between `run.created` and its offer)
//!   is rebuilt, open exactly when the run was submitted and can still run.
//! - Refreshing writes only the summary of an existing row, never its claim or status, so
//!   it cannot take a run from a worker or reopen a run a worker closed.

use std::collections::HashMap;

use agent_journal::{Journal, Lease, LeaseRow, LeaseStatus};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::kinds;
use super::owner::Owner;
use super::query::{fold_after, load_latest};
use super::state::{RunState, RunStatus};
use super::status::{LeaseView, shown};
use super::view::now_ms;

/// How long a listing waits for another process's SQLite write lock to write the rows it
/// refreshed back (the journal's busy timeout is 5 s; the rows are a cache).
const ROW_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(100);
use crate::error::HostError;

/// One run as the table shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    /// The run id.
    pub run_id: String,
    /// The status to show (see the status model in `status`).
    pub status: RunStatus,
    /// Calls waiting for a human decision.
    pub pending_approvals: usize,
    /// Model steps recorded.
    pub steps: u64,
    /// Tokens used (input + output).
    pub tokens: u64,
    /// When the run was created (Unix ms).
    pub created_at: i64,
    /// When its last event was appended (Unix ms).
    pub updated_at: i64,
    /// The first line of the prompt, shortened (see [`RunState::title`]).
    pub title: String,
    /// The model.
    pub model: Option<String>,
    /// The worker holding the run's lease, if any and not expired.
    pub worker: Option<String>,
    /// The lease's fencing epoch (claims so far).
    pub epoch: i64,
    /// When the worker's lease expires (Unix ms), if held.
    pub lease_expires_at: Option<i64>,
    /// Whether workers may claim it.
    pub claimable: bool,
    /// The run that spawned it (a sub-agent's parent), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// The summary a run's lease row keeps (its `info`), folded from the journal.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct RowInfo {
    /// The status the journal recorded.
    #[serde(default)]
    pub(crate) status: Option<RunStatus>,
    /// The host driving it, as recorded.
    #[serde(default)]
    pub(crate) driver: Option<Owner>,
    #[serde(default)]
    pub(crate) steps: u64,
    #[serde(default)]
    pub(crate) tokens: u64,
    #[serde(default)]
    pub(crate) created_at: i64,
    #[serde(default)]
    pub(crate) title: String,
    /// The seq it was folded at; a row behind its thread is folded again.
    #[serde(default)]
    pub(crate) last_seq: i64,
    /// Calls waiting for a decision; `None` in a row written before it was kept (folded
    /// again).
    #[serde(default)]
    pub(crate) pending_approvals: Option<usize>,
    /// The model; `None` in a row written before it was kept (folded again).
    #[serde(default)]
    pub(crate) model: Option<String>,
    /// When the last event was appended (Unix ms).
    #[serde(default)]
    pub(crate) updated_at: i64,
    /// The parent run of a sub-agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) parent: Option<String>,
}

impl RowInfo {
    /// The summary of a run just submitted, before any fold.
    pub(crate) fn queued() -> Value {
        encode(&RowInfo {
            status: Some(RunStatus::Queued),
            ..RowInfo::default()
        })
    }
}

/// The summary a row keeps of `state`.
pub(crate) fn summary(state: &RunState) -> Value {
    encode(&RowInfo {
        status: state.status,
        driver: state.driver.clone(),
        steps: state.step_count(),
        tokens: state.usage.total_tokens,
        created_at: state.created_at,
        title: state.title(),
        last_seq: state.last_seq,
        pending_approvals: Some(state.pending_approvals().count()),
        model: state.spec.as_ref().map(|s| s.model.clone()),
        updated_at: state.updated_at,
        parent: state
            .spec
            .as_ref()
            .and_then(|s| s.parent.as_ref())
            .map(|p| p.run_id.clone()),
    })
}

fn encode(info: &RowInfo) -> Value {
    // Cannot fail: plain fields, string keys.
    serde_json::to_value(info).unwrap_or(Value::Null)
}

/// The folds a process's listings made of the runs they refreshed last, so that a later
/// listing folds only a run's events after them (a live run changes between any two
/// listings; refolding it whole made each listing cost the whole run).
///
/// Invariants:
/// - A fold is of one journal's run up to its `last_seq`, from its latest checkpoint on
///   ([`load_for_view`]: its summary is a full fold's); the journal's events up to a seq
///   never change, so folding the events after it gives what a fold of them all gives.
/// - At most [`RowFolds::CAPACITY`] folds are kept, the least recently used going first: the
///   memory is that of a few runs' folds since their latest checkpoints.
#[derive(Debug)]
pub struct RowFolds {
    states: std::sync::Mutex<std::collections::VecDeque<RunState>>,
    capacity: usize,
    /// Events folded by listings, in all (what tests bound).
    folded: std::sync::atomic::AtomicU64,
}

impl Default for RowFolds {
    fn default() -> RowFolds {
        RowFolds::with_capacity(RowFolds::CAPACITY)
    }
}

impl RowFolds {
    /// Most folds kept.
    pub const CAPACITY: usize = 8;

    fn with_capacity(capacity: usize) -> RowFolds {
        RowFolds {
            states: std::sync::Mutex::default(),
            capacity,
            folded: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The fold of run `id`, taken out (a concurrent listing folds the run itself).
    fn take(&self, id: &str) -> Option<RunState> {
        let mut states = self
            .states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = states.iter().position(|s| s.id == id)?;
        states.remove(at)
    }

    /// Keeps `state`, a fold of its run up to its `last_seq`, as the most recently used.
    fn keep(&self, state: RunState) {
        let mut states = self
            .states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        states.retain(|s| s.id != state.id);
        if self.capacity == 0 {
            return;
        }
        if states.len() >= self.capacity {
            states.pop_front();
        }
        states.push_back(state);
    }

    /// Run `id` folded up to `last` (its thread's last seq) or later: a kept fold with what
    /// is new folded in, else a fold from its latest checkpoint.
    async fn fold(&self, journal: &Journal, id: &str, last: i64) -> Result<RunState, HostError> {
        let (state, folded) = match self.take(id) {
            Some(state) if state.last_seq <= last => {
                let after = state.last_seq;
                fold_after(journal, state, after).await?
            }
            _ => load_latest(journal, id).await?,
        };
        self.folded
            .fetch_add(folded, std::sync::atomic::Ordering::Relaxed);
        Ok(state)
    }

    /// Events folded by listings so far.
    #[cfg(test)]
    fn folded(&self) -> u64 {
        self.folded.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Run `id` as its view (`runs show`) and its row show it, read from its latest checkpoint
/// on: the view of a long run costs the events since its last compaction, not the run
/// (see the fold's own docs for what it leaves out: the steps and calls before it).
///
/// # Cancel safety
/// Read-only: a dropped future leaves nothing behind.
pub async fn load_for_view(journal: &Journal, id: &str) -> Result<RunState, HostError> {
    Ok(load_latest(journal, id).await?.0)
}

/// Brings the table up to date with the journal and returns every run, newest first.
///
/// # Cancel safety
/// Each run's row is written on its own: dropped midway, some rows are refreshed and the
/// rest are refreshed by the next call. Rows only follow the journal, so none is wrong.
pub async fn runs_table(journal: &Journal) -> Result<Vec<RunRow>, HostError> {
    // A listing of its own keeps no fold: each run behind is folded once and dropped.
    runs_table_with(journal, &RowFolds::with_capacity(0)).await
}

/// [`runs_table`] for a process that lists `journal`'s runs again and again (a server):
/// a run whose row is behind is folded from its fold in `folds`, which keeps the new one.
///
/// # Cancel safety
/// As [`runs_table`]; a fold taken out when the future is dropped is not kept (the next
/// listing folds that run again from its latest checkpoint).
pub async fn runs_table_with(
    journal: &Journal,
    folds: &RowFolds,
) -> Result<Vec<RunRow>, HostError> {
    let mut rows: HashMap<String, LeaseRow> = journal
        .leases("run:")
        .await?
        .into_iter()
        .map(|row| (row.name.clone(), row))
        .collect();
    let now = now_ms();
    let mut out = Vec::new();
    let mut writable = !journal.is_read_only();
    for thread in journal.threads().await? {
        let Some(id) = kinds::run_of(&thread) else {
            continue;
        };
        let last = journal.last_seq(&thread).await?.unwrap_or(0);
        let fresh = rows.get(&thread).is_some_and(|row| {
            let info = RowInfo::deserialize(&row.info).unwrap_or_default();
            info.last_seq == last && info.pending_approvals.is_some() && info.model.is_some()
        });
        if !fresh {
            let state = match folds.fold(journal, id, last).await {
                Ok(state) => state,
                Err(err) if super::unreadable_run(&err) => {
                    // Listed as last read, when it was read before; left out otherwise.
                    tracing::warn!(run = id, %err, "runs table: a run that cannot be read");
                    if let Some(row) = rows.get(&thread) {
                        out.push(row_of(id, row, now));
                    }
                    continue;
                }
                Err(err) => return Err(err),
            };
            if state.spec.is_none() {
                continue;
            }
            let info = summary(&state);
            // An existing row keeps its status; a rebuilt one is open exactly when the run
            // was submitted and can still run.
            let rebuilt = (!rows.contains_key(&thread)).then(|| {
                let open = state.spec.as_ref().is_some_and(|s| s.submitted)
                    && matches!(state.status, Some(RunStatus::Queued | RunStatus::Running));
                if open {
                    LeaseStatus::Open
                } else {
                    LeaseStatus::Closed
                }
            });
            folds.keep(state);
            // A journal opened read-only (an archive) is shown as it is, its table unwritten;
            // so is one whose writes fail (a full disk): the row is derived, a listing must
            // not need room, and the next listing that can write catches the table up.
            // Refreshing a row's info does not wait for another process's write lock past
            // a moment: the info is a cache, caught up by a later listing. A missing row
            // (a lost offer) is worth the wait: it makes the run claimable.
            if writable {
                let put = match rebuilt {
                    Some(_) => journal.put_lease(&thread, rebuilt, &info).await,
                    None => {
                        journal
                            .put_lease_waiting_at_most(&thread, None, &info, ROW_LOCK_WAIT)
                            .await
                    }
                };
                if let Err(err) = put {
                    tracing::warn!(%err, "runs table: listing without writing the rows back");
                    writable = false;
                }
            }
            let row = rows.entry(thread.clone()).or_insert_with(|| LeaseRow {
                name: thread.clone(),
                status: rebuilt.unwrap_or(LeaseStatus::Closed),
                holder: None,
                epoch: 0,
                expires_at: 0,
                info: Value::Null,
                updated_at: now,
            });
            row.info = info;
        }
        if let Some(row) = rows.get(&thread) {
            out.push(row_of(id, row, now));
        }
    }
    out.sort_by(|a, b| b.run_id.cmp(&a.run_id));
    Ok(out)
}

fn row_of(id: &str, row: &LeaseRow, now: i64) -> RunRow {
    let info = RowInfo::deserialize(&row.info).unwrap_or_default();
    let lease = lease_view(row, now);
    let held = lease.held;
    let pending = info.pending_approvals.unwrap_or(0);
    // Liveness is asked now, not when the row was folded.
    let status = shown(
        info.status,
        pending,
        || info.driver.as_ref().is_some_and(Owner::is_alive),
        Some(lease),
    );
    RunRow {
        run_id: id.to_string(),
        status,
        pending_approvals: pending,
        steps: info.steps,
        tokens: info.tokens,
        created_at: info.created_at,
        updated_at: info.updated_at,
        title: info.title,
        model: info.model,
        worker: row.holder.clone().filter(|_| held),
        epoch: row.epoch,
        lease_expires_at: held.then_some(row.expires_at),
        // Open and not held: a worker may take it now (a held claim waits for its expiry).
        claimable: lease.open && !held,
        parent: info.parent,
    }
}

/// A submitted run's lease, taken out of the workers' queue ([`take_queued`]).
pub(crate) enum Queued {
    /// The run is not in the workers' queue (never submitted, or its lease is closed).
    No,
    /// A worker holds it (its claim has not expired).
    Held(LeaseRow),
    /// Claimed for `holder`, with the row as it was: the caller closes or reopens it.
    Taken(LeaseRow, Lease),
}

/// Claims run `id`'s open lease for `holder` (a process that acts on a queued run
/// itself: a `resume`, an `interrupt`), fencing a worker that claimed it meanwhile.
pub(crate) async fn take_queued(
    journal: &Journal,
    id: &str,
    holder: &str,
) -> Result<Queued, HostError> {
    /// Long enough for the caller's next write; it closes or reopens the lease at once.
    const TTL: std::time::Duration = std::time::Duration::from_secs(60);
    let thread = kinds::thread_of(id);
    let Some(row) = journal
        .leases(&thread)
        .await?
        .into_iter()
        .find(|row| row.name == thread && row.status == LeaseStatus::Open)
    else {
        return Ok(Queued::No);
    };
    Ok(match journal.reclaim_lease(&thread, holder, TTL).await? {
        Some(lease) => Queued::Taken(row, lease),
        None => Queued::Held(row),
    })
}

/// What the status model needs of a lease row at `now`.
pub(crate) fn lease_view(row: &LeaseRow, now: i64) -> LeaseView {
    LeaseView {
        held: row.holder.is_some() && row.expires_at > now,
        open: row.status == LeaseStatus::Open,
    }
}

/// The status of `state` with its lease row, as the runs table shows it: the word
/// `runs show` and `runs list` agree on.
///
/// # Cancel safety
/// Read-only: a dropped future leaves nothing behind.
pub async fn status_with_lease(
    journal: &Journal,
    state: &RunState,
) -> Result<RunStatus, HostError> {
    let thread = super::kinds::thread_of(&state.id);
    let lease = journal
        .leases(&thread)
        .await?
        .into_iter()
        .find(|row| row.name == thread)
        .map(|row| lease_view(&row, now_ms()));
    Ok(shown(
        state.status,
        state.pending_approvals().count(),
        || state.driver.as_ref().is_some_and(Owner::is_alive),
        lease,
    ))
}

#[cfg(test)]
mod tests {
    use agent_journal::NewEvent;
    use serde_json::json;

    use super::*;
    use crate::run::query::load;

    async fn append(journal: &Journal, kind: &str, payload: Value) {
        journal
            .append(NewEvent::new("run:r", kind, payload))
            .await
            .unwrap();
    }

    /// Step `step` of run `r`: a call that asks for approval, decided when `decide`, and
    /// run when approved.
    async fn step(journal: &Journal, step: u64, decide: bool) {
        let call = format!("c{step}");
        append(
            journal,
            kinds::MODEL_REQUESTED,
            json!({"step": step, "attempt": 1}),
        )
        .await;
        append(
            journal,
            kinds::MODEL_COMPLETED,
            json!({"step": step, "response_id": format!("resp{step}"),
                "output": [{"type": "function_call", "call_id": call, "name": "shell",
                            "arguments": "{}"}],
                "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}),
        )
        .await;
        append(
            journal,
            kinds::APPROVAL_REQUESTED,
            json!({"call_id": call, "round": 0, "reason": "indeterminate", "args_sha256": "h"}),
        )
        .await;
        if decide {
            append(
                journal,
                kinds::APPROVAL_DECIDED,
                json!({"call_id": call, "round": 0, "approve": true, "by": "ana"}),
            )
            .await;
        }
    }

    /// A listing with kept folds folds each event once, and its row is the row of a full
    /// fold: a live run's listing costs what the run added, not the whole run.
    #[tokio::test]
    async fn a_listing_folds_only_what_is_new_and_its_row_is_a_full_folds() {
        let journal = Journal::open("memory:").await.unwrap();
        append(
            &journal,
            kinds::RUN_CREATED,
            json!({"prompt": "p", "model": "m", "workspace": "/w", "tools": [],
                   "approval": "default", "budgets": {"max_steps": 50},
                   "owner": {"host": "h", "pid": 1}}),
        )
        .await;
        let folds = RowFolds::default();
        let mut steps = 0;
        for round in 0..6_u64 {
            for _ in 0..=round {
                steps += 1;
                // Every third call is left waiting, so pending approvals come and stay.
                step(&journal, steps, steps % 3 != 0).await;
            }
            let rows = runs_table_with(&journal, &folds).await.unwrap();
            let full = load(&journal, "r").await.unwrap();
            let kept = folds.take("r").expect("the listing keeps its fold");
            assert_eq!(kept, full, "round {round}: the kept fold is a full fold");
            folds.keep(kept);
            let last = journal.last_seq("run:r").await.unwrap().unwrap();
            // Each event folded once in all (a full fold at every listing: their sum).
            assert_eq!(
                folds.folded(),
                u64::try_from(last).unwrap(),
                "round {round}"
            );
            let row = &rows[0];
            assert_eq!(row.steps, full.step_count());
            assert_eq!(row.tokens, full.usage.total_tokens);
            assert_eq!(row.pending_approvals, full.pending_approvals().count());
            assert_eq!(row.pending_approvals, steps as usize / 3);
            assert_eq!(row.updated_at, full.updated_at);
            let info =
                RowInfo::deserialize(&journal.leases("run:r").await.unwrap()[0].info).unwrap();
            assert_eq!(info, RowInfo::deserialize(&summary(&full)).unwrap());
        }
        // A listing of its own (the CLI's) folds the run whole and gives the same rows.
        let again = runs_table(&journal).await.unwrap();
        assert_eq!(again, runs_table_with(&journal, &folds).await.unwrap());
    }
}
