//! The job task: one call from the queue to its one terminal event.
//!
//! Queue and run deadlines are separate; a tool that is not retry-safe has `tool.started`
//! durable before it runs; the job leaves memory before it settles, so whoever sees the
//! outcome also sees the job gone.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use agent_journal::{Event, JournalError, NewEvent};
use futures::FutureExt as _;
use serde_json::Value;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Inner, JobKey};
use crate::error::RuntimeError;
use crate::events;
use crate::options::Deadlines;
use crate::outcome::{DeadlinePhase, Outcome};
use crate::settlement::Settler;
use crate::tool::{Tool, ToolContext, panicked};

/// An outcome from a terminal event.
pub(crate) fn outcome_of(event: &Event) -> Result<Outcome, RuntimeError> {
    Outcome::from_event(&event.kind, &event.payload).ok_or_else(|| RuntimeError::CorruptEvent {
        seq: event.seq,
        kind: event.kind.to_string(),
        reason: "not a terminal tool event with a revision".into(),
    })
}

/// One call on its way from the queue to its terminal event.
pub(crate) struct Job {
    pub(crate) inner: Arc<Inner>,
    pub(crate) key: Arc<JobKey>,
    pub(crate) tool: Arc<dyn Tool>,
    pub(crate) args: Value,
    pub(crate) revision: u64,
    pub(crate) deadlines: Deadlines,
    pub(crate) cancel: CancellationToken,
    pub(crate) done: Settler,
}

impl Job {
    /// The call's `tool.scheduled` event, keyed so that it is written once. Relaxed: only
    /// `tool.started` must be durable before the effect, and its commit makes this one
    /// durable too.
    pub(super) fn scheduled_event(&self, signature: &str) -> Result<NewEvent, JournalError> {
        NewEvent::encoded(
            self.key.thread.as_str(),
            events::TOOL_SCHEDULED,
            &events::Scheduled {
                turn_id: &self.key.turn,
                call_id: &self.key.call_id,
                name: self.tool.name(),
                args: &self.args,
                signature,
                revision: self.revision,
            },
        )
        .map(|event| {
            event
                .with_dedup_key(events::scheduled_key(&self.key.turn, &self.key.call_id))
                .relaxed()
        })
    }

    /// Starts the job's task.
    pub(crate) fn spawn(self) -> AbortHandle {
        // Boxed: the task then moves a pointer where it would move the whole (2 KB)
        // future at spawn and at every stage change.
        tokio::spawn(Box::pin(self.run())).abort_handle()
    }

    /// Runs the call and journals its one terminal event, then leaves memory.
    pub(crate) async fn run(mut self) {
        // The tool runs once: it takes the arguments instead of a copy.
        let args = std::mem::take(&mut self.args);
        let mut outcome = self.execute(args).await;
        let mut appended = self.append_terminal(&outcome).await;
        if matches!(appended, Err(JournalError::InvalidInput { .. })) && outcome.holds_nul() {
            // Binary output (`printf 'x\0y'`, `find -print0`): the journal cannot store NUL,
            // so the outcome is recorded, and answered, with U+FFFD in its place.
            outcome = outcome.without_nul();
            appended = self.append_terminal(&outcome).await;
        }
        if let Err(err @ JournalError::InvalidInput { .. }) = &appended {
            // The outcome itself is what the journal refused (its value or error too large
            // or too deep to store): record why instead, so that the caller now and a
            // reader after a restart see the same failure, not a call left interrupted.
            tracing::warn!(call_id = %self.key.call_id, %err, "the call's outcome cannot be journaled; recording it as failed");
            outcome = Outcome {
                started: outcome.started,
                ..Outcome::failed(
                    outcome.revision,
                    format!("the tool's outcome could not be journaled: {err}"),
                )
            };
            appended = self.append_terminal(&outcome).await;
        }
        match appended {
            Ok(appended) if appended.deduplicated => {
                // Someone (a forced cancellation) wrote the terminal first: that one counts.
                if let Ok(Some(event)) = Box::pin(self.inner.journal.find_by_dedup_key(
                    &self.key.thread,
                    &events::done_key(&self.key.turn, &self.key.call_id),
                ))
                .await
                    && let Ok(recorded) = outcome_of(&event)
                {
                    outcome = recorded;
                }
            }
            Ok(_) => {}
            Err(err) => {
                tracing::error!(call_id = %self.key.call_id, %err, "cannot journal the call's terminal event; recovery will mark it interrupted");
            }
        }
        // Leave memory first: whoever sees the outcome also sees the job gone.
        self.inner.forget(&self.key);
        self.done.settle(outcome);
    }

    /// Journals `outcome` as the call's terminal event.
    ///
    /// Relaxed: the outcome reaches no one outside this process before the caller's next
    /// durable event (a request carrying the result, the run's end), whose commit makes
    /// this one durable too. Lost to a power failure, the call reads as interrupted, as
    /// when the process dies before this append.
    async fn append_terminal(
        &self,
        outcome: &Outcome,
    ) -> Result<agent_journal::Appended, JournalError> {
        let event = outcome
            .terminal_event(&self.key.thread, &self.key.turn, &self.key.call_id)
            .map(NewEvent::relaxed);
        self.inner.job_append(event).await
    }

    async fn execute(&self, args: Value) -> Outcome {
        let revision = self.revision;
        if self.cancel.is_cancelled() {
            return Outcome::cancelled(revision, false);
        }
        // Queue phase: wait for a slot, bounded by the queue deadline.
        let acquire = self.inner.slots.clone().acquire_owned();
        let permit = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Outcome::cancelled(revision, false),
            permit = opt_timeout(self.deadlines.queue, acquire) => match permit {
                Some(Ok(permit)) => permit,
                Some(Err(_closed)) => return Outcome::cancelled(revision, false),
                None => return Outcome::timeout(revision, DeadlinePhase::Queue),
            },
        };
        let started = NewEvent::encoded(
            self.key.thread.as_str(),
            events::TOOL_STARTED,
            &events::Started {
                turn_id: &self.key.turn,
                call_id: &self.key.call_id,
            },
        );
        if self.tool.retry_safe() {
            // At-least-once is acceptable: journal `tool.started` alongside the run. It is
            // queued to the writer before the tool is polled, so it precedes the terminal.
            let run = async {
                let outcome = self.run_tool(args).await;
                drop(permit);
                outcome
            };
            let (journaled, outcome) = tokio::join!(self.inner.job_append(started), run);
            if let Err(err) = journaled {
                tracing::error!(call_id = %self.key.call_id, %err, "cannot journal tool.started");
            }
            outcome
        } else {
            // At-most-once: the start is durable before the effect.
            if let Err(err) = self.inner.job_append(started).await {
                return Outcome {
                    started: false,
                    ..Outcome::failed(revision, format!("not started: {err}"))
                };
            }
            let outcome = self.run_tool(args).await;
            drop(permit);
            outcome
        }
    }

    /// Runs the tool under the run deadline; on cancellation gives it the grace period to
    /// stop on its own, then drops it.
    async fn run_tool(&self, args: Value) -> Outcome {
        let revision = self.revision;
        let ctx = ToolContext {
            key: Arc::clone(&self.key),
            revision,
            cancel: self.cancel.clone(),
        };
        // A tool that panics fails its call: unwinding would end the job task without a
        // terminal event, leave the call in memory forever and its waiters `Unresolved`.
        let call = std::panic::catch_unwind(AssertUnwindSafe(|| self.tool.call(args, ctx)));
        let mut call = match call {
            Ok(call) => AssertUnwindSafe(call).catch_unwind(),
            Err(panic) => return Outcome::failed(revision, panicked(&*panic)),
        };
        // A run deadline too far away to represent is no deadline.
        let deadline = self
            .deadlines
            .run
            .and_then(|d| Instant::now().checked_add(d));
        let outcome = tokio::select! {
            biased;
            result = &mut call => match result {
                Ok(Ok(value)) => Outcome::completed(revision, value),
                Err(panic) => Outcome::failed(revision, panicked(&*panic)),
                Ok(Err(failure)) => {
                    if self.cancel.is_cancelled() {
                        Outcome::cancelled(revision, true)
                    } else {
                        Outcome::failed(revision, failure.0)
                    }
                }
            },
            () = self.cancel.cancelled() => {
                let grace = self.inner.options.cancel_grace;
                // Cooperative stop within the grace period, else the future is dropped.
                let _ = tokio::time::timeout(grace, &mut call).await;
                Outcome::cancelled(revision, true)
            }
            () = sleep_until_opt(deadline) => {
                self.cancel.cancel();
                Outcome::timeout(revision, DeadlinePhase::Run)
            }
        };
        // A tool future dropped unfinished (cancelled, timed out) may panic in its
        // destructor: that must not end the job task before its terminal event either.
        if std::panic::catch_unwind(AssertUnwindSafe(move || drop(call))).is_err() {
            tracing::warn!(call_id = %self.key.call_id, "the tool's future panicked when dropped");
        }
        outcome
    }
}

async fn opt_timeout<F: std::future::Future>(limit: Option<Duration>, fut: F) -> Option<F::Output> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, fut).await.ok(),
        None => Some(fut.await),
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
