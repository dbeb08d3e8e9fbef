//! Workers: processes that drive submitted runs, many of them over one journal.
//!
//! A run submitted with [`Host::submit`](crate::run::Host::submit) has an open lease
//! `run:<id>` in the runs table. A worker claims it, drives it by the resume rules of
//! [`Host::resume`](crate::run::Host::resume) and releases it when the drive ends.
//!
//! Invariants:
//! - A worker writes to a run only through a journal handle fenced with its lease: once
//!   another worker claimed the run (after this one's lease expired), every append of this
//!   one is refused, and it drops the run at once (its drive future is dropped, which
//!   cancels its running tools) without releasing anything.
//! - The lease is renewed every third of its time-to-live while the drive runs. A drive
//!   whose lease could not be renewed stops (dropped, its tools' process groups killed)
//!   a quarter of the time-to-live before the lease can expire by the worker's clock, so
//!   before another worker may claim the run: a partitioned worker never runs a command
//!   beside its successor's (while clocks drift apart by less than that quarter).
//! - A worker never claims a run it is driving: one whose lease expired while the worker
//!   stalled is renewed by its drive, not claimed again (which would fence that drive).
//!   A restarted worker of the same name drives nothing yet, and takes over its
//!   predecessor's runs once their leases expire.
//! - Approvals are waited for, not paused on: a decision from any process (`agentctl
//!   approve`) reaches the driving worker through the journal.
//! - A journal failure (a database restart) ends the drives on that handle; the worker
//!   reopens the journal with backoff, takes its runs back ([`Journal::reclaim_lease`]:
//!   the epoch moves on, fencing whatever the old handle still had in flight) and resumes
//!   them. Nothing acknowledged is lost; nothing unacknowledged is taken as done.
//! - At start the runs table is refreshed from the journal (a lost offer becomes claimable).
//! - A drive that panics (a bug) pauses its run (`cannot_drive`, with the panic's message)
//!   and closes its lease: no worker claims it again until `agentctl resume` takes it, so
//!   a run that makes the host panic is not retried in a loop against the model API.
//! - Stopping: no new claims; drives stop at their next step boundary and their leases are
//!   released open (another worker takes them at once); after the grace period the rest
//!   are dropped and released the same way.

mod drive;
#[cfg(test)]
mod grace_tests;
#[cfg(test)]
mod panic_tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_journal::{Journal, Lease, LeaseStatus};
use agent_responses::Client;
use agent_runtime::CancellationToken;
use futures::future::BoxFuture;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::error::HostError;
use crate::run::{RunSpec, RunStatus};
use drive::Outcome;

/// How a worker works.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The name it claims leases under (unique per worker process).
    pub name: String,
    /// Runs driven at once.
    pub concurrency: usize,
    /// How long a claim lasts without renewal.
    pub lease_ttl: Duration,
    /// How often it looks for claimable runs when it has room.
    pub poll: Duration,
    /// How long a stop waits for drives to reach a step boundary.
    pub grace: Duration,
}

impl WorkerConfig {
    /// Read connections a worker's journal may open for `concurrency` runs: each drive
    /// reads its run and tails it for interrupts, the lease keeper reads summaries, and a
    /// few stay for claims and the loop; at most [`MAX_READ_CONNECTIONS`] whatever the
    /// concurrency.
    pub fn read_connections(concurrency: usize) -> u32 {
        let wanted =
            u32::try_from(concurrency.saturating_mul(3).saturating_add(4)).unwrap_or(u32::MAX);
        wanted.min(MAX_READ_CONNECTIONS)
    }
}

/// The most read connections a worker's journal opens, however many runs it drives at
/// once.
///
/// A run spends nearly all its time waiting on the model or a tool, not on the database:
/// its reads take a connection for a millisecond and give it back, and a tail waits for a
/// wake-up holding none. So 16 connections serve hundreds of runs, while the former
/// `3 × concurrency + 4` let `--concurrency 1024` take every connection of a server
/// (PostgreSQL's default `max_connections` is 100, a few of them reserved), so that
/// `runs list` or `submit` elsewhere failed with "too many clients". With the writer's,
/// the notifier's and the LISTEN connection a worker holds at most 19; idle read
/// connections close after `JournalOptions::read_idle_timeout`.
pub const MAX_READ_CONNECTIONS: u32 = 16;

/// A model client for one run, and whatever must live while it is used (an in-process
/// emulator, say).
pub struct Connected {
    /// The client.
    pub client: Client,
    /// The MCP servers and tool policies the run may need (see
    /// [`Host::with_tools`](crate::run::Host::with_tools)).
    pub tools: crate::tools::ToolConfig,
    /// The tools written in Rust the run may have recorded (see
    /// [`Host::tool`](crate::run::Host::tool)); a run that recorded one missing here is
    /// not driven ([`HostError::RustToolMissing`]).
    pub rust_tools: Vec<crate::tools::RustTool>,
    /// The sandbox this worker drives the run under when it is not the recorded one (see
    /// [`crate::sandbox::for_resume`]): journaled as `run.sandbox_changed` with the claim.
    pub sandbox: Option<crate::sandbox::SandboxChange>,
    /// Dropped when the drive ends.
    pub guard: Option<Box<dyn Send + Sync>>,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected")
            .field("client", &self.client)
            .field("guard", &self.guard.is_some())
            .finish()
    }
}

/// Where a worker's journal and model clients come from.
pub trait Connector: Send + Sync {
    /// Opens the journal (again, after a failure).
    fn journal(&self) -> BoxFuture<'_, Result<Journal, HostError>>;
    /// A client and the tool configuration for a run with `spec` (its recorded endpoint, or
    /// the worker's own).
    fn client<'a>(&'a self, spec: &'a RunSpec) -> BoxFuture<'a, Result<Connected, HostError>>;
}

/// How a worker's drive of a run ended (`status` of [`WorkerEvent::Ended`], written as the
/// word each variant names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerEnd {
    /// The run completed.
    Completed,
    /// The run paused (the detail says why).
    Paused,
    /// The run was interrupted.
    Interrupted,
    /// The run failed.
    Failed,
    /// Given back unfinished, on the worker's stop.
    Released,
    /// The run cannot be driven here (its workspace is gone, say); closed, so no worker
    /// loops on it.
    Error,
}

impl WorkerEnd {
    /// The word, as `--json` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerEnd::Completed => "completed",
            WorkerEnd::Paused => "paused",
            WorkerEnd::Interrupted => "interrupted",
            WorkerEnd::Failed => "failed",
            WorkerEnd::Released => "released",
            WorkerEnd::Error => "error",
        }
    }

    /// A run found ended when it was claimed ([`HostError::Ended`]: completed or failed).
    pub(crate) fn already(status: RunStatus) -> WorkerEnd {
        if status == RunStatus::Completed {
            WorkerEnd::Completed
        } else {
            WorkerEnd::Failed
        }
    }
}

impl std::fmt::Display for WorkerEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a worker reports as it works.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkerEvent {
    /// It claimed a run.
    Claimed {
        /// The run id.
        run_id: String,
        /// The lease epoch of this claim.
        epoch: i64,
    },
    /// A drive ended and the lease was released.
    Ended {
        /// The run id.
        run_id: String,
        /// How the drive ended.
        status: WorkerEnd,
        /// A short detail (the pause reason, the error).
        detail: Option<String>,
    },
    /// The run is no longer this worker's: another worker claimed it, or its lease could
    /// not be renewed before it would expire. This one stopped at once (its tools killed)
    /// and wrote nothing more.
    Lost {
        /// The run id.
        run_id: String,
        /// Why it knows.
        reason: String,
    },
    /// The journal failed; the worker reopens it.
    JournalDown {
        /// Reopen attempt number (1 for the first).
        attempt: u32,
        /// The error.
        error: String,
    },
    /// The journal was reopened; the worker takes its runs back.
    JournalBack {
        /// Runs it takes back.
        runs: usize,
    },
    /// It stopped claiming and gives its runs back.
    Stopping {
        /// Runs being driven.
        running: usize,
    },
}

/// Sees a worker's events.
pub trait WorkerObserver: Send + Sync {
    /// One event.
    fn event(&self, event: &WorkerEvent);
}

/// What a worker did, when it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WorkerSummary {
    /// Claims taken.
    pub claimed: u64,
    /// Drives that ended with the run completed.
    pub completed: u64,
    /// Drives that ended otherwise (paused, interrupted, failed).
    pub ended_otherwise: u64,
    /// Runs given back unfinished.
    pub released: u64,
    /// Runs lost to another worker.
    pub lost: u64,
    /// Journal reopenings.
    pub reopened: u64,
}

/// The prefix of every run's lease name.
const RUN_LEASES: &str = "run:";

/// Drives claimable runs until `stop` fires, then gives back what it holds and returns.
///
/// Errors only when the journal cannot be opened at start; later failures are survived.
///
/// # Cancel safety
/// Not for dropping: fire `stop` and await the return, which hands runs back at a step
/// boundary. Dropped, every drive is aborted where it stands and its lease stays held until
/// it expires; another worker then claims the run and resumes it (a run is resumable from
/// any point, as after `kill -9`).
pub async fn run_worker(
    connector: Arc<dyn Connector>,
    config: WorkerConfig,
    observer: Arc<dyn WorkerObserver>,
    stop: CancellationToken,
) -> Result<WorkerSummary, HostError> {
    let mut journal = connector.journal().await?;
    // The runs table is derived from the journal: bring it up to date, so a run whose offer
    // was lost (a crash inside `submit`, a dropped table) is claimable.
    if let Err(err) = crate::run::table::runs_table(&journal).await {
        tracing::warn!(error = %err, "cannot refresh the runs table");
    }
    let mut generation = 0u64;
    let mut summary = WorkerSummary::default();
    let drives_stop = CancellationToken::new();
    let mut tasks: JoinSet<(Lease, u64, Outcome)> = JoinSet::new();
    let mut held: HashMap<tokio::task::Id, Lease> = HashMap::new();
    let mut retake: Vec<String> = Vec::new();
    let mut grace_ends: Option<tokio::time::Instant> = None;
    let spawn = |tasks: &mut JoinSet<(Lease, u64, Outcome)>,
                 held: &mut HashMap<tokio::task::Id, Lease>,
                 journal: &Journal,
                 lease: Lease,
                 asked: tokio::time::Instant,
                 generation: u64| {
        // Boxed: a drive holds a whole run's fold; the task stays pointer-sized.
        let job = Box::pin(drive::drive(
            journal.clone(),
            lease.clone(),
            asked,
            Arc::clone(&connector),
            config.lease_ttl,
            drives_stop.clone(),
        ));
        let lease_out = lease.clone();
        let handle = tasks.spawn(async move { (lease_out, generation, job.await) });
        held.insert(handle.id(), lease);
    };
    loop {
        if grace_ends.is_none() {
            while tasks.len() < config.concurrency {
                let asked = tokio::time::Instant::now();
                // Bounded: a database out of reach may leave a claim hanging, and the loop
                // must go on to report its drives' ends. A claim dropped after it landed
                // leaves a lease nobody drives, which expires and is claimed again.
                let bound = config.lease_ttl;
                let claimed = match retake.pop() {
                    Some(name) => match tokio::time::timeout(
                        bound,
                        journal.reclaim_lease(&name, &config.name, config.lease_ttl),
                    )
                    .await
                    {
                        Ok(Ok(lease)) => lease,
                        Ok(Err(err)) => {
                            tracing::warn!(run = %name, error = %err, "cannot take a run back yet");
                            retake.push(name);
                            break;
                        }
                        Err(_) => {
                            tracing::warn!(run = %name, "cannot take a run back yet: no answer from the database");
                            retake.push(name);
                            break;
                        }
                    },
                    // Never one of its own: a lease of a run this worker drives may have
                    // expired while the worker stalled, and claiming it again would fence
                    // the live drive (its keeper renews it instead).
                    None => match tokio::time::timeout(
                        bound,
                        journal.claim_lease_skipping(
                            RUN_LEASES,
                            &config.name,
                            config.lease_ttl,
                            &ours(&held, &retake),
                        ),
                    )
                    .await
                    {
                        Ok(Ok(Some(lease))) => Some(lease),
                        Ok(Ok(None)) => break,
                        Ok(Err(err)) => {
                            tracing::warn!(error = %err, "cannot claim runs now");
                            break;
                        }
                        Err(_) => {
                            tracing::warn!("cannot claim runs now: no answer from the database");
                            break;
                        }
                    },
                };
                if let Some(lease) = claimed {
                    summary.claimed += 1;
                    observer.event(&WorkerEvent::Claimed {
                        run_id: run_id(&lease).to_string(),
                        epoch: lease.epoch,
                    });
                    spawn(&mut tasks, &mut held, &journal, lease, asked, generation);
                }
            }
        }
        if grace_ends.is_some() && tasks.is_empty() {
            break;
        }
        let grace_sleep = async {
            match grace_ends {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            joined = tasks.join_next_with_id(), if !tasks.is_empty() => {
                let Some(joined) = joined else { continue };
                let (id, lease, task_generation, outcome) = match joined {
                    Ok((id, (lease, g, outcome))) => (id, lease, g, outcome),
                    Err(err) => {
                        let Some(lease) = held.remove(&err.id()) else { continue };
                        if err.is_panic() {
                            // A bug: taken again, the run would panic again, at once.
                            let detail = drive::give_up_after_panic(
                                &journal,
                                &lease,
                                &panic_message(err.into_panic()),
                            )
                            .await;
                            summary.ended_otherwise += 1;
                            observer.event(&WorkerEvent::Ended {
                                run_id: run_id(&lease).to_string(),
                                status: WorkerEnd::Error,
                                detail: Some(detail),
                            });
                        } else {
                            // Aborted: give its run back.
                            release_open(&journal, &lease).await;
                        }
                        continue;
                    }
                };
                held.remove(&id);
                match outcome {
                    Outcome::Ended { status, detail } => {
                        match status {
                            WorkerEnd::Completed => summary.completed += 1,
                            WorkerEnd::Released => summary.released += 1,
                            _ => summary.ended_otherwise += 1,
                        }
                        observer.event(&WorkerEvent::Ended {
                            run_id: run_id(&lease).to_string(),
                            status,
                            detail,
                        });
                    }
                    Outcome::Lost(reason) => {
                        summary.lost += 1;
                        observer.event(&WorkerEvent::Lost {
                            run_id: run_id(&lease).to_string(),
                            reason,
                        });
                    }
                    Outcome::JournalFailed(error) => {
                        retake.push(lease.name.clone());
                        if task_generation == generation {
                            match reopen(&*connector, &*observer, error, &stop).await {
                                Some(fresh) => {
                                    journal = fresh;
                                    generation += 1;
                                    summary.reopened += 1;
                                    observer.event(&WorkerEvent::JournalBack {
                                        runs: retake.len() + tasks.len(),
                                    });
                                }
                                None => grace_ends = Some(tokio::time::Instant::now()),
                            }
                        }
                    }
                }
            }
            () = stop.cancelled(), if grace_ends.is_none() => {
                observer.event(&WorkerEvent::Stopping { running: tasks.len() });
                drives_stop.cancel();
                grace_ends = Some(crate::run::wait::instant_after(config.grace));
            }
            () = grace_sleep => {
                // Past the grace period: drop what still runs and give it back.
                tasks.abort_all();
                while let Some(joined) = tasks.join_next_with_id().await {
                    // A drive that ended on its own released its lease already.
                    if let Ok((id, _)) = joined {
                        held.remove(&id);
                    }
                }
                for lease in held.values() {
                    release_open(&journal, lease).await;
                    summary.released += 1;
                    observer.event(&WorkerEvent::Ended {
                        run_id: run_id(lease).to_string(),
                        status: WorkerEnd::Released,
                        detail: Some("dropped at the end of the grace period".into()),
                    });
                }
                held.clear();
                break;
            }
            () = tokio::time::sleep(config.poll), if grace_ends.is_none() => {}
        }
    }
    Ok(summary)
}

/// The leases this worker process drives or is about to take back: a claim passes over
/// them. A restarted worker of the same name holds none of its predecessor's, and takes
/// them over once they expire as any other worker would.
fn ours(held: &HashMap<tokio::task::Id, Lease>, retake: &[String]) -> Vec<String> {
    held.values()
        .map(|lease| lease.name.clone())
        .chain(retake.iter().cloned())
        .collect()
}

/// The run id of a run's lease.
fn run_id(lease: &Lease) -> &str {
    lease.name.strip_prefix(RUN_LEASES).unwrap_or(&lease.name)
}

/// What a panic said, when it said it as text.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => payload
            .downcast::<&'static str>()
            .map(|text| (*text).to_string())
            .unwrap_or_else(|_| "no message".into()),
    }
}

async fn release_open(journal: &Journal, lease: &Lease) {
    let info = serde_json::json!({"status": "running"});
    if let Err(err) = journal.release_lease(lease, LeaseStatus::Open, &info).await {
        tracing::warn!(run = %lease.name, error = %err, "cannot release the run; its lease will expire");
    }
}

/// Reopens the journal with backoff until it opens or `stop` fires (then `None`).
async fn reopen(
    connector: &dyn Connector,
    observer: &dyn WorkerObserver,
    first_error: String,
    stop: &CancellationToken,
) -> Option<Journal> {
    let mut delay = Duration::from_millis(200);
    let mut error = first_error;
    for attempt in 1u32.. {
        tracing::warn!(attempt, %error, "journal failed; reopening");
        observer.event(&WorkerEvent::JournalDown {
            attempt,
            error: error.clone(),
        });
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stop.cancelled() => return None,
        }
        match connector.journal().await {
            Ok(journal) => return Some(journal),
            Err(err) => error = err.to_string(),
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_opens_at_most_max_read_connections_whatever_its_concurrency() {
        assert_eq!(WorkerConfig::read_connections(1), 7);
        assert_eq!(WorkerConfig::read_connections(4), MAX_READ_CONNECTIONS);
        for concurrency in [8, 100, 1024, usize::MAX] {
            assert_eq!(
                WorkerConfig::read_connections(concurrency),
                MAX_READ_CONNECTIONS
            );
        }
    }

    #[test]
    fn an_ended_drive_is_written_with_its_status_word() {
        for (end, word) in [
            (WorkerEnd::Completed, "completed"),
            (WorkerEnd::Paused, "paused"),
            (WorkerEnd::Interrupted, "interrupted"),
            (WorkerEnd::Failed, "failed"),
            (WorkerEnd::Released, "released"),
            (WorkerEnd::Error, "error"),
        ] {
            let event = WorkerEvent::Ended {
                run_id: "r1".into(),
                status: end,
                detail: None,
            };
            let json = serde_json::to_value(&event).unwrap();
            assert_eq!(json["type"], "ended");
            assert_eq!(json["status"], word);
            assert_eq!(end.to_string(), word);
        }
        assert_eq!(
            WorkerEnd::already(RunStatus::Completed),
            WorkerEnd::Completed
        );
        assert_eq!(WorkerEnd::already(RunStatus::Failed), WorkerEnd::Failed);
    }
}
