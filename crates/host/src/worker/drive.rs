//! One claimed run, driven under its lease.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_journal::{Event, Journal, JournalError, Lease, LeaseStatus};
use agent_runtime::{CancellationToken, RuntimeError};
use serde_json::Value;
use tokio::time::Instant;

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
///
/// `asked` is when the claim of `lease` was sent, by this machine's clock: the lease is
/// held from then on (see [`keep`]).
pub(super) async fn drive(
    journal: Journal,
    lease: Lease,
    asked: Instant,
    connector: Arc<dyn Connector>,
    ttl: Duration,
    stop: CancellationToken,
) -> Outcome {
    let id = super::run_id(&lease).to_string();
    let fenced = journal.fenced(&lease);
    let lost = CancellationToken::new();
    let expired = CancellationToken::new();
    let broken = CancellationToken::new();
    let summary = Arc::new(Summary(Mutex::new(None)));
    let keeper = Keeper(tokio::spawn(keep(
        journal.clone(),
        lease.clone(),
        Term { asked, ttl },
        Signals {
            lost: lost.clone(),
            expired: expired.clone(),
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
        // Dropping the drive kills its tools' process groups, before any other worker
        // may claim the run.
        () = expired.cancelled() => Err(Outcome::Lost(
            "its lease expired without renewal (the database was out of reach): its tools \
             were stopped before another worker could claim the run"
                .into(),
        )),
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
    /// The lease may expire before any renewal lands: the drive must stop now.
    expired: CancellationToken,
    /// The journal's writer failed.
    broken: CancellationToken,
}

/// The terms of a lease: when its claim was sent (by this machine's clock) and for how
/// long a claim or renewal holds it.
struct Term {
    asked: Instant,
    ttl: Duration,
}

/// The part of a lease's time-to-live a holder that cannot renew gives up: it stops its
/// drive this long before the lease can expire by its own clock.
fn safety_margin(ttl: Duration) -> Duration {
    ttl / 4
}

/// `at` plus `after`, or a time too far away to matter.
fn later(at: Instant, after: Duration) -> Instant {
    at.checked_add(after)
        .or_else(|| at.checked_add(Duration::from_secs(86_400 * 365 * 30)))
        .unwrap_or(at)
}

/// Renews the lease every third of its ttl; fires `lost` when someone else claimed it,
/// `broken` when the journal's writer failed, and `expired` when no renewal landed in time.
///
/// Invariant: the drive is told to stop before another worker may claim its run. The
/// database sets a lease's expiry to `ttl` after it received the claim or renewal, which
/// was sent no earlier than the instant it is counted from here, so the lease is held at
/// least until that instant plus `ttl` by this machine's clock. Without a renewal landed
/// by that instant plus `ttl` minus [`safety_margin`], `expired` fires: the drive is
/// dropped, and with it its tools' process groups, while the lease still holds (as long as
/// the clocks of this machine and the database's drift apart by less than the margin).
///
/// A keeper that finds itself woken late (by half the margin or more: its process was
/// stopped or starved, so nothing of it ran, and neither could it renew) tries again, for
/// the margin, before giving up: a renewal that lands proves that nobody claimed the run
/// meanwhile, and the drive goes on.
async fn keep(journal: Journal, lease: Lease, term: Term, signals: Signals, summary: Arc<Summary>) {
    let Term { asked, ttl } = term;
    let margin = safety_margin(ttl);
    let hold = ttl.saturating_sub(margin);
    let mut held_until = later(asked, hold);
    let mut next = later(asked, ttl / 3);
    let mut failing = false;
    loop {
        let wake = if failing { next.min(held_until) } else { next };
        tokio::time::sleep_until(wake).await;
        if journal.writer_failed() {
            signals.broken.cancel();
            return;
        }
        let now = Instant::now();
        let stalled = now.saturating_duration_since(wake) >= margin / 2;
        if now >= held_until && !stalled {
            tracing::warn!(run = %lease.name, "the lease was not renewed in time; the drive stops");
            signals.expired.cancel();
            return;
        }
        let bound = if now < held_until {
            held_until
        } else {
            later(now, margin)
        };
        let info = summary.take();
        match renew_by(&journal, &lease, ttl, info.as_ref(), bound, margin).await {
            Some(Ok(_)) => {
                held_until = later(now, hold);
                failing = false;
            }
            Some(Err(JournalError::Fenced { .. })) => {
                signals.lost.cancel();
                return;
            }
            // The database may be restarting: the drive goes on while the lease holds.
            Some(Err(err)) => {
                tracing::warn!(run = %lease.name, error = %err, "cannot renew the lease");
                failing = true;
            }
            None => {
                tracing::warn!(run = %lease.name, "the lease was not renewed in time; the drive stops");
                signals.expired.cancel();
                return;
            }
        }
        next = later(now, ttl / 3);
    }
}

/// Renews `lease` unless `bound` passes first (`None`). A bound found passed by half the
/// margin or more passed while the process was stopped, not while the renewal had its
/// chance (an answer that came meanwhile is not read yet): the renewal is given the margin
/// again.
async fn renew_by(
    journal: &Journal,
    lease: &Lease,
    ttl: Duration,
    info: Option<&Value>,
    mut bound: Instant,
    margin: Duration,
) -> Option<Result<Lease, JournalError>> {
    loop {
        let renewal = journal.renew_lease(lease, ttl, info);
        match tokio::time::timeout_at(bound, renewal).await {
            Ok(renewed) => return Some(renewed),
            Err(_) => {
                let now = Instant::now();
                if now.saturating_duration_since(bound) < margin / 2 {
                    return None;
                }
                bound = later(now, margin);
            }
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
