//! One claimed run, driven under its lease.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_journal::{Event, Journal, JournalError, Lease, LeaseStatus};
use agent_runtime::{CancellationToken, RuntimeError};
use serde_json::Value;

use super::{Connector, WorkerEnd};
use crate::error::HostError;
use crate::run::events::{HostEvent as _, PauseReason, RunPaused};
use crate::run::{self, DriveOptions, Host, Observer, ResumeChange, RunEnd, RunState};

/// How a drive ended, for the worker loop.
pub(super) enum Outcome {
    /// The drive ended and the lease was released (`released`: given back unfinished).
    Ended {
        status: WorkerEnd,
        detail: Option<String>,
    },
    /// Another worker holds the run now.
    Lost(String),
    /// The journal failed under the drive; the run is to be taken back after a reopen.
    JournalFailed(String),
}

/// Keeps the run's summary for the lease's heartbeat.
struct Summary(Mutex<Option<Value>>);

impl Observer for Summary {
    fn event(&self, state: &RunState, _: &Event) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(run::table::summary(state));
    }
    fn shows_progress(&self) -> bool {
        false
    }
}

impl Summary {
    fn take(&self) -> Option<Value> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// Drives the run of `lease` until it ends, is lost, or the journal fails.
pub(super) async fn drive(
    journal: Journal,
    lease: Lease,
    connector: Arc<dyn Connector>,
    ttl: Duration,
    stop: CancellationToken,
) -> Outcome {
    let id = super::run_id(&lease).to_string();
    let fenced = journal.fenced(&lease);
    let lost = CancellationToken::new();
    let broken = CancellationToken::new();
    let summary = Arc::new(Summary(Mutex::new(None)));
    let keeper = Keeper(tokio::spawn(keep(
        journal.clone(),
        lease.clone(),
        ttl,
        Signals {
            lost: lost.clone(),
            broken: broken.clone(),
        },
        Arc::clone(&summary),
    )));
    let driven = async {
        let loaded = run::load_for_resume(&fenced, &id).await?;
        let spec = loaded
            .state
            .spec
            .clone()
            .ok_or_else(|| HostError::NotFound(id.clone()))?;
        let connected = connector.client(&spec).await?;
        let host = connected.rust_tools.into_iter().fold(
            Host::new(fenced.clone(), connected.client).with_tools(connected.tools),
            Host::tool,
        );
        let opts = DriveOptions {
            observer: Arc::clone(&summary) as Arc<dyn Observer>,
            decider: None,
            wait: true,
            stop,
            ..DriveOptions::default()
        };
        let change = ResumeChange {
            sandbox: connected.sandbox,
            ..ResumeChange::default()
        };
        let report = host.resume_loaded(&id, loaded, change, opts).await;
        drop(connected.guard);
        report
    };
    let result = tokio::select! {
        result = driven => Ok(result),
        () = lost.cancelled() => Err(Outcome::Lost("its lease was claimed by another worker".into())),
        // A drive can wait on the journal for ever once its writer failed (a call whose
        // end could not be journaled): drop it and take the run back on a fresh journal.
        () = broken.cancelled() => Err(Outcome::JournalFailed("the journal's writer failed".into())),
    };
    drop(keeper);
    let result = match result {
        Err(outcome) => return outcome,
        Ok(result) => result,
    };
    let (status, detail, lease_status) = match result {
        Ok(report) => {
            let (status, detail) = describe(&report.end);
            let lease_status = if matches!(report.end, RunEnd::Released) {
                LeaseStatus::Open
            } else {
                LeaseStatus::Closed
            };
            (status, detail, lease_status)
        }
        Err(err) => match journal_error(&err) {
            Some(JournalError::Fenced { .. }) => return Outcome::Lost(err.to_string()),
            Some(
                JournalError::WriterFailed(_)
                | JournalError::Database(_)
                | JournalError::Closed
                | JournalError::Open { .. },
            ) => return Outcome::JournalFailed(err.to_string()),
            _ => match err {
                HostError::Superseded(_) => return Outcome::Lost(err.to_string()),
                HostError::Ended { status, .. } => {
                    (WorkerEnd::already(status), None, LeaseStatus::Closed)
                }
                // The run cannot be driven here (its workspace is gone, say): paused with
                // the reason, for every reader to see, and closed, so no worker loops on
                // it; `agentctl resume` can still take it.
                other => {
                    let detail = other.to_string();
                    if let Err(err) = record_cannot_drive(&fenced, &id, &detail).await {
                        tracing::warn!(run = %id, error = %err, "cannot record why the run cannot be driven");
                    }
                    (WorkerEnd::Error, Some(detail), LeaseStatus::Closed)
                }
            },
        },
    };
    let info = match run::load(&journal, &id).await {
        Ok(state) => run::table::summary(&state),
        Err(_) => summary.take().unwrap_or(Value::Null),
    };
    match journal.release_lease(&lease, lease_status, &info).await {
        Ok(()) => Outcome::Ended { status, detail },
        Err(JournalError::Fenced { .. }) => {
            Outcome::Lost("its lease was claimed by another worker before release".into())
        }
        Err(err) => {
            tracing::warn!(run = %id, error = %err, "cannot release the run; its lease will expire");
            Outcome::Ended { status, detail }
        }
    }
}

/// After the drive of `lease`'s run panicked with `message`: pauses the run
/// (`cannot_drive`) and closes its lease, so that no worker takes it again on its own;
/// returns the detail recorded.
pub(super) async fn give_up_after_panic(journal: &Journal, lease: &Lease, message: &str) -> String {
    let id = super::run_id(lease).to_string();
    let message: String = message.chars().take(2_000).collect();
    let detail = format!(
        "the worker's drive of this run panicked (a bug in agentctl; the worker's log has it): \
         {message}; `agentctl resume {id}` tries again"
    );
    tracing::error!(run = %id, panic = %message, "a drive panicked; the run is paused");
    let fenced = journal.fenced(lease);
    if let Err(err) = record_cannot_drive(&fenced, &id, &detail).await {
        tracing::warn!(run = %id, error = %err, "cannot record why the run stopped");
    }
    let info = match run::load(journal, &id).await {
        Ok(state) => run::table::summary(&state),
        Err(_) => Value::Null,
    };
    if let Err(err) = journal
        .release_lease(lease, LeaseStatus::Closed, &info)
        .await
    {
        tracing::warn!(run = %id, error = %err, "cannot release the run; its lease will expire");
    }
    crate::tools::mask_key(detail)
}

/// Journals `run.paused` (`cannot_drive`, `detail`) on run `id` through the worker's fenced
/// handle: the run shows `paused` and why, instead of `queued` for a worker that never
/// comes.
async fn record_cannot_drive(journal: &Journal, id: &str, detail: &str) -> Result<(), HostError> {
    let paused = RunPaused {
        reason: PauseReason::CannotDrive,
        detail: crate::tools::mask_key(detail.to_string()),
    };
    let event = paused
        .to_event(&run::kinds::thread_of(id))
        .map_err(HostError::Encode)?;
    journal.append(event).await?;
    Ok(())
}

/// The lease keeper's task, aborted when the drive ends however it ends: a drive dropped
/// at the end of its worker's grace left it renewing a lease the worker had handed back.
struct Keeper(tokio::task::JoinHandle<()>);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the lease keeper tells the drive.
struct Signals {
    /// Someone else claimed the run.
    lost: CancellationToken,
    /// The journal's writer failed.
    broken: CancellationToken,
}

/// Renews the lease every third of `ttl`; fires `lost` when someone else claimed it and
/// `broken` when the journal's writer failed.
async fn keep(
    journal: Journal,
    lease: Lease,
    ttl: Duration,
    signals: Signals,
    summary: Arc<Summary>,
) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        if journal.writer_failed() {
            signals.broken.cancel();
            return;
        }
        let info = summary.take();
        match journal.renew_lease(&lease, ttl, info.as_ref()).await {
            Ok(_) => {}
            Err(JournalError::Fenced { .. }) => {
                signals.lost.cancel();
                return;
            }
            // The database may be restarting: the lease holds until it expires, and a
            // claim by someone else is seen at the next renewal or write.
            Err(err) => tracing::warn!(run = %lease.name, error = %err, "cannot renew the lease"),
        }
    }
}

fn describe(end: &RunEnd) -> (WorkerEnd, Option<String>) {
    match end {
        RunEnd::Completed { .. } => (WorkerEnd::Completed, None),
        RunEnd::Paused { reason, detail } => {
            (WorkerEnd::Paused, Some(format!("{reason}: {detail}")))
        }
        RunEnd::Interrupted => (WorkerEnd::Interrupted, None),
        RunEnd::Released => (WorkerEnd::Released, None),
        RunEnd::Failed { error } => (WorkerEnd::Failed, Some(error.clone())),
    }
}

/// The journal error under a host error, if it is one.
fn journal_error(err: &HostError) -> Option<&JournalError> {
    match err {
        HostError::Journal(err) => Some(err),
        HostError::Runtime(RuntimeError::Journal(err)) => Some(err),
        _ => None,
    }
}
