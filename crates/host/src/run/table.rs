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

use agent_journal::{Journal, LeaseRow, LeaseStatus};
use serde::Serialize;
use serde_json::{Value, json};

use super::owner::Owner;
use super::query::load;
use super::state::{RunState, RunStatus};
use crate::error::HostError;

/// One run as the table shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    /// The run id.
    pub run_id: String,
    /// The status to show (a run whose driver died shows as interrupted).
    pub status: String,
    /// Model steps recorded.
    pub steps: u64,
    /// Tokens used (input + output).
    pub tokens: u64,
    /// When the run was created (Unix ms).
    pub created_at: i64,
    /// The first line of the prompt.
    pub title: String,
    /// The worker holding the run's lease, if any and not expired.
    pub worker: Option<String>,
    /// The lease's fencing epoch (claims so far).
    pub epoch: i64,
    /// When the worker's lease expires (Unix ms), if held.
    pub lease_expires_at: Option<i64>,
    /// Whether workers may claim it.
    pub claimable: bool,
}

/// The summary a row keeps of `state`.
pub(crate) fn summary(state: &RunState) -> Value {
    json!({
        "status": state.status.map(RunStatus::as_str),
        "driver": state.driver,
        "steps": state.step_count(),
        "tokens": state.usage.total_tokens,
        "created_at": state.created_at,
        "title": state.title(),
        "last_seq": state.last_seq,
    })
}

/// Brings the table up to date with the journal and returns every run, newest first.
///
/// # Cancel safety
/// Each run's row is written on its own: dropped midway, some rows are refreshed and the
/// rest are refreshed by the next call. Rows only follow the journal, so none is wrong.
pub async fn runs_table(journal: &Journal) -> Result<Vec<RunRow>, HostError> {
    let mut rows: HashMap<String, LeaseRow> = journal
        .leases("run:")
        .await?
        .into_iter()
        .map(|row| (row.name.clone(), row))
        .collect();
    let now = now_ms();
    let mut out = Vec::new();
    for thread in journal.threads().await? {
        let Some(id) = thread.strip_prefix("run:") else {
            continue;
        };
        let last = journal.last_seq(&thread).await?.unwrap_or(0);
        let fresh = rows
            .get(&thread)
            .is_some_and(|row| row.info.get("last_seq").and_then(Value::as_i64) == Some(last));
        if !fresh {
            let state = load(journal, id).await?;
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
            journal.put_lease(&thread, rebuilt, &info).await?;
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
    let info = &row.info;
    let held = row.holder.is_some() && row.expires_at > now;
    let folded = info
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("failed");
    let status = match folded {
        _ if held => "running",
        "running" => {
            // Liveness is asked now, not when the row was folded.
            let alive = info
                .get("driver")
                .cloned()
                .and_then(|d| serde_json::from_value::<Owner>(d).ok())
                .is_some_and(|d| d.is_alive());
            match (alive, row.status) {
                (true, _) => "running",
                // Its worker died; the next free worker takes it over.
                (false, LeaseStatus::Open) => "queued",
                (false, LeaseStatus::Closed) => "interrupted",
            }
        }
        other => other,
    }
    .to_string();
    let n = |key: &str| info.get(key).and_then(Value::as_u64).unwrap_or(0);
    RunRow {
        run_id: id.to_string(),
        status,
        steps: n("steps"),
        tokens: n("tokens"),
        created_at: info.get("created_at").and_then(Value::as_i64).unwrap_or(0),
        title: info
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        worker: row.holder.clone().filter(|_| held),
        epoch: row.epoch,
        lease_expires_at: held.then_some(row.expires_at),
        claimable: row.status == LeaseStatus::Open,
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
