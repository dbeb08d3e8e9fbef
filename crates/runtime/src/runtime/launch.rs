//! Launching calls and reading their results.
//!
//! A call is admitted (its entry in the job table) under the state lock, its
//! `tool.scheduled` made durable by a [`PendingLaunch`], then its task spawned to run it.
//! The launch future drives the scheduling while it is polled; a turn's end that finds a
//! call not scheduled yet takes the scheduling over (`Scheduling::adopt`), so a caller that
//! keeps the launch future without polling it does not hold up that end, and one that
//! drops it does not stop the call: the pending launch, dropped mid-way, finishes the
//! launch in a task of its own. So no entry is left without a task or a settlement, and a
//! call costs one task.

use std::future::Future;
use std::sync::Arc;

use agent_journal::NewEvent;
use serde_json::Value;

use super::job::{Job, outcome_of};
use super::scheduling::{Caller, Progress, Scheduled, Scheduling};
use super::{Inner, JobEntry, JobKey, Runtime, RuntimeTurnStatus};
use crate::error::RuntimeError;
use crate::events;
use crate::options::Deadlines;
use crate::outcome::{Outcome, ToolResult};
use crate::settlement::Settlement;
use crate::signature::signature;
use crate::tool::check_args;

impl Runtime {
    /// Launches a call with the runtime's default deadlines. See [`launch_with`](Self::launch_with).
    ///
    /// # Cancel safety
    ///
    /// As for [`launch_with`](Self::launch_with).
    pub async fn launch(
        &self,
        thread: &str,
        turn: &str,
        call_id: &str,
        name: &str,
        args: Value,
    ) -> Result<JobKey, RuntimeError> {
        let deadlines = self.inner.options.deadlines;
        self.launch_with(thread, turn, call_id, name, args, deadlines)
            .await
    }

    /// Launches a call of tool `name` in the running turn. Idempotent on
    /// `(thread, turn, call_id)`: the same tool and arguments (any key order) give the same
    /// job, even after a restart (the recorded result, no re-run); other arguments are a
    /// [`RuntimeError::CallIdCollision`]. Returns once `tool.scheduled` is durable.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future never leaves a call half-launched. Dropped before the call was
    /// admitted (its first poll), nothing happens. Dropped after, the launch goes on
    /// without the caller, in a task of its own: `tool.scheduled` is made durable (written
    /// again under its dedup key, which is a no-op if the dropped write got through), then
    /// the call runs and gets its terminal event as if the caller had waited; if the
    /// journal refuses, the call leaves memory. Either way a relaunch with the same
    /// `call_id` gets the same job (or its recorded outcome), [`result`](Self::result)
    /// returns, and the call does not count against `max_in_flight` once settled.
    pub async fn launch_with(
        &self,
        thread: &str,
        turn: &str,
        call_id: &str,
        name: &str,
        args: Value,
        deadlines: Deadlines,
    ) -> Result<JobKey, RuntimeError> {
        let Some(tool) = self.inner.options.tools.get(name).cloned() else {
            return Err(RuntimeError::ToolNotAllowed(name.to_string()));
        };
        // A check that panics refuses the arguments: the panic would reach the caller.
        check_args(&*tool, &args).map_err(|reason| RuntimeError::InvalidArgs {
            tool: name.to_string(),
            reason,
        })?;
        let sig = signature(name, &args);
        let key = JobKey {
            thread: thread.to_string(),
            turn: turn.to_string(),
            call_id: call_id.to_string(),
        };
        let (settlement, settler) = Settlement::new();
        let shared_key = Arc::new(key.clone());
        let scheduling = Arc::new(Scheduling::default());
        let admitted = {
            let mut st = self.inner.state();
            if st.closed {
                return Err(RuntimeError::Closed);
            }
            if let Some(job) = st.jobs.get(&key) {
                return if job.signature == sig {
                    Ok(key)
                } else {
                    Err(RuntimeError::CallIdCollision {
                        call_id: call_id.to_string(),
                    })
                };
            }
            let running = match st.turns.get(thread) {
                Some(t) if t.id == turn && t.status == RuntimeTurnStatus::Running => {
                    Some((t.revision, t.cancel.child_token()))
                }
                _ => None,
            };
            match running {
                Some(r) => {
                    let limit = self.inner.options.max_in_flight;
                    if st.jobs.len() >= limit {
                        return Err(RuntimeError::Overloaded {
                            in_flight: st.jobs.len(),
                            limit,
                        });
                    }
                    st.jobs.insert(
                        Arc::clone(&shared_key),
                        JobEntry {
                            signature: sig.clone(),
                            done: settlement,
                            abort: None,
                            scheduling: Some(Arc::clone(&scheduling)),
                        },
                    );
                    Some(r)
                }
                None => None,
            }
        };
        let Some((revision, cancel)) = admitted else {
            // Not running: only a call recorded earlier can be named again.
            return Box::pin(self.relaunch_recorded(key, &sig)).await;
        };
        let call = Arc::clone(&shared_key);
        let launch = PendingLaunch {
            job: Some(Job {
                inner: self.inner.clone(),
                key: shared_key,
                tool,
                args,
                revision,
                deadlines,
                cancel,
                done: settler,
            }),
            signature: sig,
            redo: false,
        };
        // The scheduling is driven by this future, which then spawns the call's task, as
        // long as it is polled. A turn's end waits for every admitted call, so one kept
        // but not polled any more (pinned beside a `select!` branch that cancels the turn)
        // would block that end: the end takes the scheduling over instead
        // (`Scheduling::adopt`). A task for the scheduling alone, every time, took a third
        // off the runtime bench's `memory:` rate and a fifth off `sqlite::memory:`.
        scheduling.begin(Box::pin(launch.schedule_owned()));
        let _caller = Caller(&scheduling);
        match std::future::poll_fn(|cx| scheduling.poll_drive(cx)).await {
            Progress::Scheduled(scheduled) => {
                if let Some(job) = scheduled? {
                    spawn_call(&self.inner, call, job.run());
                }
                Ok(key)
            }
            Progress::Answered(answer) => answer.map(|()| key),
        }
    }

    /// A launch naming a call that is not in memory: it must be recorded with the same
    /// signature and have a terminal event.
    async fn relaunch_recorded(&self, key: JobKey, sig: &str) -> Result<JobKey, RuntimeError> {
        let scheduled = self
            .inner
            .journal
            .find_by_dedup_key(&key.thread, &events::scheduled_key(&key.turn, &key.call_id))
            .await?;
        if scheduled.is_none() {
            return Err(RuntimeError::TurnNotActive {
                thread: key.thread,
                turn: key.turn,
            });
        }
        self.recorded_outcome(&key, sig).await?;
        Ok(key)
    }

    /// The recorded outcome of a call scheduled with signature `sig`.
    async fn recorded_outcome(&self, key: &JobKey, sig: &str) -> Result<Outcome, RuntimeError> {
        let journal = &self.inner.journal;
        let scheduled = journal
            .find_by_dedup_key(&key.thread, &events::scheduled_key(&key.turn, &key.call_id))
            .await?
            .ok_or_else(|| RuntimeError::UnknownCall {
                turn: key.turn.clone(),
                call_id: key.call_id.clone(),
            })?;
        let recorded_sig = scheduled.payload.get("signature").and_then(Value::as_str);
        if recorded_sig != Some(sig) {
            return Err(RuntimeError::CallIdCollision {
                call_id: key.call_id.clone(),
            });
        }
        self.journaled_outcome(key).await
    }

    async fn journaled_outcome(&self, key: &JobKey) -> Result<Outcome, RuntimeError> {
        let journal = &self.inner.journal;
        match journal
            .find_by_dedup_key(&key.thread, &events::done_key(&key.turn, &key.call_id))
            .await?
        {
            Some(event) => outcome_of(&event),
            None => {
                let scheduled = journal
                    .find_by_dedup_key(&key.thread, &events::scheduled_key(&key.turn, &key.call_id))
                    .await?;
                Err(match scheduled {
                    Some(_) => RuntimeError::Unresolved {
                        call_id: key.call_id.clone(),
                    },
                    None => RuntimeError::UnknownCall {
                        turn: key.turn.clone(),
                        call_id: key.call_id.clone(),
                    },
                })
            }
        }
    }

    /// Waits for the call's result. Only the owner `(thread, turn)` may ask; anyone else
    /// gets [`RuntimeError::PermissionDenied`]. `stale` compares the call's revision with
    /// the turn's current (or, for an ended turn, final) revision.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits and reads. Dropping the future changes nothing; the call
    /// goes on and a later `result` returns its outcome.
    pub async fn result(
        &self,
        thread: &str,
        turn: &str,
        key: &JobKey,
    ) -> Result<ToolResult, RuntimeError> {
        if key.thread != thread || key.turn != turn {
            return Err(RuntimeError::PermissionDenied);
        }
        let waiting = self
            .inner
            .state()
            .jobs
            .get(key)
            .map(|j| Arc::clone(&j.done));
        let settled = match waiting {
            // Dropped before taking the outcome, so that it is usually not shared any more.
            Some(done) => done.wait().await,
            None => None,
        };
        let outcome = match settled {
            // Usually the job and every other waiter are gone by now: no copy.
            Some(shared) => Arc::try_unwrap(shared).unwrap_or_else(|shared| (*shared).clone()),
            None => Box::pin(self.journaled_outcome(key)).await?,
        };
        let current = self.turn_revision(thread, turn).await?;
        Ok(ToolResult::new(&key.call_id, outcome, current))
    }

    /// Appends an event to a thread of this runtime's journal (independent work the host
    /// wants on record beside the turn's tool calls). The runtime's own kinds
    /// ([`RUNTIME_KINDS`](crate::events::RUNTIME_KINDS)) are refused with
    /// [`RuntimeError::ReservedKind`].
    ///
    /// # Cancel safety
    ///
    /// As for [`Journal::append`](agent_journal::Journal::append): once handed to the journal's writer (normally at the
    /// first poll) the event is written whether or not the future is dropped.
    pub async fn record(
        &self,
        thread: &str,
        kind: &str,
        payload: Value,
    ) -> Result<i64, RuntimeError> {
        if events::RUNTIME_KINDS.contains(&kind) {
            return Err(RuntimeError::ReservedKind(kind.to_string()));
        }
        Ok(self
            .inner
            .journal
            .append(NewEvent::new(thread, kind, payload))
            .await?
            .seq)
    }
}

/// A launched call between its admission (its entry in the job table) and the spawn of its
/// task: its `tool.scheduled` event is being written.
///
/// Invariant: while `job` is `Some`, the call's entry is in the table with no task. Every
/// way out takes the job: spawned, settled from the journal, or abandoned (entry removed,
/// settlement abandoned so waiters ask the journal). A launch dropped with the job still
/// there (the caller's future was dropped mid-write) finishes in a task of its own.
pub(crate) struct PendingLaunch {
    job: Option<Job>,
    signature: String,
    /// Finishing a launch whose caller went away: its own earlier write of
    /// `tool.scheduled` may be what a deduplicated write finds.
    redo: bool,
}

/// Spawns the task of the call `key` (the `Arc` its entry is keyed by) and puts the task's
/// abort handle in that entry, not in a later one for the same call id (another `Arc`). A
/// runtime abandoned before the handle was there gets its task aborted here, as
/// [`Runtime::abandon`] aborts the others.
pub(crate) fn spawn_call(
    inner: &Arc<Inner>,
    key: Arc<JobKey>,
    work: impl Future<Output = ()> + Send + 'static,
) {
    // Boxed: the task then moves a pointer where it would move the whole future at spawn
    // and at every stage change.
    let task = tokio::spawn(Box::pin(work));
    let mut st = inner.state();
    if let Some((entry_key, _)) = st.jobs.get_key_value(&*key)
        && Arc::ptr_eq(entry_key, &key)
        && let Some(entry) = st.jobs.get_mut(&*key)
    {
        entry.abort = Some(task.abort_handle());
    } else if inner.crashed() {
        task.abort();
    }
}

/// Finishes the scheduling of a launch whose caller went away (a failure is logged: nobody
/// waits for it), then runs the call if it is to run.
async fn schedule_then_run(scheduling: impl Future<Output = Scheduled>) {
    match scheduling.await {
        Ok(Some(job)) => job.run().await,
        Ok(None) => {}
        Err(err) => {
            tracing::warn!(%err, "a launch whose caller went away could not be scheduled");
        }
    }
}

impl PendingLaunch {
    /// [`schedule`](Self::schedule), owning the launch: dropped before it ends, the launch
    /// is finished by another task (see `Drop`).
    async fn schedule_owned(mut self) -> Result<Option<Job>, RuntimeError> {
        self.schedule().await
    }

    /// Journals `tool.scheduled` (relaxed, see `Job::scheduled_event`) and returns the job
    /// to run, or settles it from the journal when the call was recorded before (a
    /// finished call evicted from memory, or a call of an earlier process).
    async fn schedule(&mut self) -> Result<Option<Job>, RuntimeError> {
        let Some(job) = self.job.as_ref() else {
            return Ok(None);
        };
        let appended = job.inner.append(job.scheduled_event(&self.signature)).await;
        let appended = match appended {
            Ok(appended) => appended,
            Err(err) => {
                self.abandon();
                return Err(err.into());
            }
        };
        if !appended.deduplicated {
            return self.start();
        }
        let runtime = Runtime {
            inner: Arc::clone(&job.inner),
        };
        let key = Arc::clone(&job.key);
        match Box::pin(runtime.recorded_outcome(&key, &self.signature)).await {
            Ok(outcome) => {
                if let Some(job) = self.job.take() {
                    job.inner.forget(&job.key);
                    job.done.settle(outcome);
                }
                Ok(None)
            }
            // The dropped launch's own write got through: this is the call, run it.
            Err(RuntimeError::Unresolved { .. }) if self.redo => self.start(),
            Err(err) => {
                self.abandon();
                Err(err)
            }
        }
    }

    /// The call is scheduled: takes the job out to run it and marks its entry abortable,
    /// unless the runtime closed (or crashed) meanwhile: then the call is left to
    /// recovery, as a crash would leave it.
    fn start(&mut self) -> Result<Option<Job>, RuntimeError> {
        let Some(job) = self.job.take() else {
            return Ok(None);
        };
        let inner = Arc::clone(&job.inner);
        let mut st = inner.state();
        if st.closed {
            st.jobs.remove(&*job.key);
            drop(st);
            drop(job);
            return Err(RuntimeError::Closed);
        }
        let scheduling = st
            .jobs
            .get_mut(&*job.key)
            .and_then(|entry| entry.scheduling.take());
        drop(st);
        drop(scheduling);
        Ok(Some(job))
    }

    /// Gives the call up: out of memory, its waiters sent to the journal.
    fn abandon(&mut self) {
        if let Some(job) = self.job.take() {
            job.inner.forget(&job.key);
        }
    }
}

impl Drop for PendingLaunch {
    fn drop(&mut self) {
        let Some(job) = self.job.take() else {
            return;
        };
        let mut redo = PendingLaunch {
            job: Some(job),
            signature: std::mem::take(&mut self.signature),
            redo: true,
        };
        // A finishing task that is itself dropped (its runtime shutting down) gives up
        // instead of trying again.
        if self.redo {
            redo.abandon();
            return;
        }
        match (tokio::runtime::Handle::try_current(), &redo.job) {
            (Ok(_), Some(job)) => {
                let (inner, key) = (Arc::clone(&job.inner), Arc::clone(&job.key));
                spawn_call(&inner, key, schedule_then_run(redo.schedule_owned()));
            }
            _ => redo.abandon(),
        }
    }
}
