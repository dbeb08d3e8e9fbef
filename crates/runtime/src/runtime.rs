//! The [`Runtime`]: turns, steering, commits and tool jobs over a journal.
//!
//! Invariants (each is a test in `tests/`):
//! - At most one running turn per thread. Turn-level operations of a thread (start, steer,
//!   commit, cancel, finish) are serialised, so a commit is journaled only at the revision
//!   current at its position in the journal.
//! - `tool.scheduled` is durable before a tool runs; every scheduled call gets exactly one
//!   terminal event (the journal's `done:` dedup key makes a second one a no-op).
//! - For a tool that is not retry-safe, `tool.started` is durable before it runs, so a
//!   crash can never lead to running it twice.
//! - A finished job leaves memory once its terminal event is durable; its result is then
//!   read from the journal.

use foldhash::HashMap;
use foldhash::HashMapExt as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_journal::{Event, Journal, JournalError, NewEvent};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::RuntimeError;
use crate::events;
use crate::options::{Deadlines, RuntimeOptions};
use crate::outcome::{DeadlinePhase, Outcome, ToolResult};
use crate::settlement::{Settlement, Settler};
use crate::signature::signature;
use crate::tool::{Tool, ToolContext};

/// Identifies one call: the owner (thread, turn) and the model's call id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct JobKey {
    pub thread: String,
    pub turn: String,
    pub call_id: String,
}

/// Where a turn is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    Running,
    /// Being cancelled or finished: its jobs are being stopped.
    Ending,
    Completed,
    Cancelled,
    Interrupted,
}

/// The latest turn of a thread.
#[derive(Debug, Clone)]
pub(crate) struct TurnState {
    pub(crate) id: String,
    pub(crate) revision: u64,
    pub(crate) status: TurnStatus,
    pub(crate) cancel: CancellationToken,
}

/// A job that has not yet settled (or whose terminal event is being written).
pub(crate) struct JobEntry {
    pub(crate) signature: String,
    pub(crate) done: Arc<Settlement>,
    pub(crate) abort: Option<AbortHandle>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) turns: HashMap<String, TurnState>,
    /// Keyed by the job's own key (shared with its task, not copied).
    pub(crate) jobs: HashMap<Arc<JobKey>, JobEntry>,
    pub(crate) closed: bool,
}

pub(crate) struct Inner {
    pub(crate) journal: Journal,
    pub(crate) options: RuntimeOptions,
    pub(crate) slots: Arc<Semaphore>,
    pub(crate) state: Mutex<State>,
    thread_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Parent of every turn's and job's token; fired by `close`.
    pub(crate) root: CancellationToken,
    pub(crate) last_recovery: Mutex<crate::recover::RecoveryReport>,
    /// Set by [`Runtime::crash`]: job tasks of a "dead" runtime never journal again.
    crashed: std::sync::atomic::AtomicBool,
}

/// A cheap, cloneable handle to the runtime. Build it with [`Runtime::recover`] (a process
/// that owns every thread of its journal) or with [`Runtime::open`] and
/// [`Runtime::adopt`] (a process that drives some threads of a shared journal).
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("journal", &self.inner.journal)
            .field("tools", &self.inner.options.tools)
            .finish()
    }
}

impl Inner {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn thread_lock(&self, thread: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .thread_locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        locks.entry(thread.to_string()).or_default().clone()
    }

    /// Appends an event the runtime built; one that could not be built fails like an
    /// append would.
    async fn append(
        &self,
        event: Result<NewEvent, JournalError>,
    ) -> Result<agent_journal::Appended, JournalError> {
        self.journal.append(event?).await
    }

    /// Appends on behalf of a job; after a simulated crash it never returns (the job
    /// task is being aborted), as if the process had died before this write.
    async fn job_append(
        &self,
        event: Result<NewEvent, JournalError>,
    ) -> Result<agent_journal::Appended, JournalError> {
        if self.crashed.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.append(event).await
    }

    /// Removes a settled (or abandoned) job from memory.
    pub(crate) fn forget(&self, key: &JobKey) {
        self.state().jobs.remove(key);
    }
}

impl Runtime {
    /// A runtime over `journal` that has recovered nothing: it knows no thread until it
    /// adopts one ([`adopt`](Self::adopt)) or starts a turn there. Use it when other live
    /// processes drive other threads of the same journal; [`recover`](Self::recover) is
    /// for a process that owns them all.
    pub fn open(journal: Journal, options: RuntimeOptions) -> Runtime {
        let slots = Arc::new(Semaphore::new(options.concurrency.max(1)));
        Runtime {
            inner: Arc::new(Inner {
                journal,
                options,
                slots,
                state: Mutex::new(State::default()),
                thread_locks: Mutex::new(HashMap::new()),
                root: CancellationToken::new(),
                last_recovery: Mutex::new(Default::default()),
                crashed: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// The journal this runtime writes to.
    pub fn journal(&self) -> &Journal {
        &self.inner.journal
    }

    /// The options the runtime was built with.
    pub fn options(&self) -> &RuntimeOptions {
        &self.inner.options
    }

    /// Jobs currently held in memory (queued, running, or writing their terminal event).
    pub fn jobs_in_memory(&self) -> usize {
        self.inner.state().jobs.len()
    }

    /// The running turn of `thread`, if any.
    pub fn running_turn(&self, thread: &str) -> Option<String> {
        let st = self.inner.state();
        st.turns
            .get(thread)
            .filter(|t| t.status == TurnStatus::Running)
            .map(|t| t.id.clone())
    }

    /// The latest turn of `thread` known to this runtime: id, revision and status.
    pub fn turn_status(&self, thread: &str) -> Option<(String, u64, TurnStatus)> {
        let st = self.inner.state();
        st.turns
            .get(thread)
            .map(|t| (t.id.clone(), t.revision, t.status))
    }

    /// Runs `work` in a task of its own and waits for it: dropping the returned future
    /// does not stop `work`. For the turn-level operations, whose journal write and
    /// in-memory update must not be separated by a caller giving up.
    pub(crate) async fn detached<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, RuntimeError>> + Send + 'static,
    ) -> Result<T, RuntimeError> {
        match tokio::spawn(work).await {
            Ok(result) => result,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            // Only a runtime shutting down cancels the task.
            Err(_) => Err(RuntimeError::Closed),
        }
    }

    /// Starts a turn on `thread`; refused while another turn is running there.
    ///
    /// # Cancel safety
    ///
    /// Runs to completion in a task of its own: dropping the future does not stop it. The
    /// turn is then started (or refused) as if the caller had waited, and its id is lost:
    /// [`running_turn`](Self::running_turn) tells it.
    pub async fn start(&self, thread: &str) -> Result<String, RuntimeError> {
        let this = self.clone();
        let thread = thread.to_string();
        self.detached(async move { this.start_here(&thread).await })
            .await
    }

    async fn start_here(&self, thread: &str) -> Result<String, RuntimeError> {
        let lock = self.inner.thread_lock(thread);
        let _serial = lock.lock().await;
        {
            let st = self.inner.state();
            if st.closed {
                return Err(RuntimeError::Closed);
            }
            if let Some(t) = st.turns.get(thread)
                && matches!(t.status, TurnStatus::Running | TurnStatus::Ending)
            {
                return Err(RuntimeError::TurnActive {
                    thread: thread.to_string(),
                    turn: t.id.clone(),
                });
            }
        }
        let id = uuid::Uuid::now_v7().simple().to_string();
        self.inner
            .journal
            .append(NewEvent::new(
                thread,
                events::TURN_STARTED,
                json!({ "turn_id": id }),
            ))
            .await?;
        let cancel = self.inner.root.child_token();
        self.inner.state().turns.insert(
            thread.to_string(),
            TurnState {
                id: id.clone(),
                revision: 0,
                status: TurnStatus::Running,
                cancel,
            },
        );
        Ok(id)
    }

    /// Checks that `turn` is the running turn of `thread`; returns its revision.
    fn active(&self, st: &State, thread: &str, turn: &str) -> Result<u64, RuntimeError> {
        match st.turns.get(thread) {
            Some(t) if t.id == turn && t.status == TurnStatus::Running => Ok(t.revision),
            _ => Err(RuntimeError::TurnNotActive {
                thread: thread.to_string(),
                turn: turn.to_string(),
            }),
        }
    }

    /// Accepts user input into the running turn: bumps the revision (journaled as
    /// `steer.accepted`) so that results launched before it come back stale.
    ///
    /// # Cancel safety
    ///
    /// Runs to completion in a task of its own: dropping the future does not stop it, so
    /// the journal and the in-memory revision never disagree. The new revision is then
    /// lost to the caller: [`turn_status`](Self::turn_status) tells it.
    pub async fn steer(&self, thread: &str, turn: &str, text: &str) -> Result<u64, RuntimeError> {
        let this = self.clone();
        let (thread, turn, text) = (thread.to_string(), turn.to_string(), text.to_string());
        self.detached(async move { this.steer_here(&thread, &turn, &text).await })
            .await
    }

    async fn steer_here(&self, thread: &str, turn: &str, text: &str) -> Result<u64, RuntimeError> {
        let lock = self.inner.thread_lock(thread);
        let _serial = lock.lock().await;
        let revision = {
            let st = self.inner.state();
            self.active(&st, thread, turn)? + 1
        };
        self.inner
            .journal
            .append(NewEvent::new(
                thread,
                events::STEER_ACCEPTED,
                json!({ "turn_id": turn, "revision": revision, "text": text }),
            ))
            .await?;
        let mut st = self.inner.state();
        if let Some(t) = st.turns.get_mut(thread)
            && t.id == turn
        {
            t.revision = revision;
        }
        Ok(revision)
    }

    /// Records a proposal made at `revision`; refused unless it is the current revision.
    /// Records only: it authorises and performs nothing outside the journal.
    ///
    /// # Cancel safety
    ///
    /// Like [`Journal::append`]: dropped before its turn of the thread's serialisation, it
    /// records nothing; dropped later, the proposal may be recorded (at the revision that
    /// was current) and its seq is lost. Nothing in memory changes either way.
    pub async fn commit(
        &self,
        thread: &str,
        turn: &str,
        revision: u64,
        proposal: impl Into<Value>,
    ) -> Result<i64, RuntimeError> {
        let lock = self.inner.thread_lock(thread);
        let _serial = lock.lock().await;
        {
            let st = self.inner.state();
            let current = self.active(&st, thread, turn)?;
            if revision != current {
                return Err(RuntimeError::StaleRevision {
                    given: revision,
                    current,
                });
            }
        }
        let appended = self
            .inner
            .journal
            .append(NewEvent::new(
                thread,
                events::PROPOSAL_COMMITTED,
                json!({ "turn_id": turn, "revision": revision, "proposal": proposal.into() }),
            ))
            .await?;
        Ok(appended.seq)
    }

    /// Cancels the running turn: its jobs are cancelled and awaited (a tool that ignores
    /// cancellation is dropped after the grace period), then `turn.cancelled` is journaled.
    ///
    /// # Cancel safety
    ///
    /// Runs to completion in a task of its own: dropping the future does not stop it (a
    /// turn left half-ended would refuse every later `start` on its thread).
    pub async fn cancel(&self, thread: &str, turn: &str) -> Result<(), RuntimeError> {
        self.end(thread, turn, events::TURN_CANCELLED, TurnStatus::Cancelled)
            .await
    }

    /// Ends the running turn normally (`turn.completed`). Jobs still pending are cancelled
    /// first, so no call is left without a terminal event.
    ///
    /// # Cancel safety
    ///
    /// As for [`cancel`](Self::cancel): it runs to completion whether or not the future is
    /// dropped.
    pub async fn finish(&self, thread: &str, turn: &str) -> Result<(), RuntimeError> {
        self.end(thread, turn, events::TURN_COMPLETED, TurnStatus::Completed)
            .await
    }

    async fn end(
        &self,
        thread: &str,
        turn: &str,
        kind: &'static str,
        status: TurnStatus,
    ) -> Result<(), RuntimeError> {
        let this = self.clone();
        let (thread, turn) = (thread.to_string(), turn.to_string());
        self.detached(async move { this.end_here(&thread, &turn, kind, status).await })
            .await
    }

    async fn end_here(
        &self,
        thread: &str,
        turn: &str,
        kind: &'static str,
        status: TurnStatus,
    ) -> Result<(), RuntimeError> {
        let lock = self.inner.thread_lock(thread);
        let _serial = lock.lock().await;
        let (token, revision) = {
            let mut st = self.inner.state();
            self.active(&st, thread, turn)?;
            match st.turns.get_mut(thread) {
                Some(t) => {
                    t.status = TurnStatus::Ending;
                    (t.cancel.clone(), t.revision)
                }
                None => {
                    return Err(RuntimeError::TurnNotActive {
                        thread: thread.to_string(),
                        turn: turn.to_string(),
                    });
                }
            }
        };
        token.cancel();
        self.settle_jobs(|k| k.thread == thread && k.turn == turn)
            .await;
        let appended = self
            .inner
            .journal
            .append(
                NewEvent::new(
                    thread,
                    kind,
                    json!({ "turn_id": turn, "revision": revision }),
                )
                .with_dedup_key(events::end_key(turn)),
            )
            .await;
        let mut st = self.inner.state();
        if let Some(t) = st.turns.get_mut(thread)
            && t.id == turn
        {
            // If the end event could not be written, the turn stays refused here and
            // recovery marks it interrupted.
            t.status = status;
        }
        drop(st);
        appended?;
        Ok(())
    }

    /// Waits for every job matching `which` to settle. Tokens must already be fired. A job
    /// whose task does not settle within twice the grace period (a tool blocking its
    /// thread) is aborted and given a `tool.cancelled` terminal event here.
    pub(crate) async fn settle_jobs(&self, which: impl Fn(&JobKey) -> bool) {
        let waits: Vec<(Arc<JobKey>, Arc<Settlement>, Option<AbortHandle>)> = {
            let st = self.inner.state();
            st.jobs
                .iter()
                .filter(|(k, _)| which(k))
                .map(|(k, j)| (Arc::clone(k), Arc::clone(&j.done), j.abort.clone()))
                .collect()
        };
        // Twice the grace plus a margin. tokio's sleep turns a duration too long for an
        // `Instant` into "never" instead of overflowing.
        let backstop = tokio::time::sleep(
            self.inner
                .options
                .cancel_grace
                .saturating_mul(2)
                .saturating_add(Duration::from_millis(100)),
        )
        .deadline();
        for (key, done, abort) in waits {
            let Some(abort) = abort else {
                // Not spawned yet: its scheduled event is being written; it settles as soon
                // as it sees the fired token. Forcing it here could put its terminal event
                // before its scheduled one.
                done.wait().await;
                continue;
            };
            let settled = tokio::time::timeout_at(backstop, done.wait()).await.is_ok();
            if settled {
                continue;
            }
            abort.abort();
            let revision = self.job_revision(&key).await.unwrap_or(0);
            let outcome = Outcome::cancelled(revision, true);
            let event = outcome.terminal_event(&key.thread, &key.turn, &key.call_id);
            if let Err(err) = self.inner.append(event).await {
                tracing::error!(call_id = %key.call_id, %err, "cannot journal forced cancellation");
            }
            self.inner.forget(&key);
        }
    }

    async fn job_revision(&self, key: &JobKey) -> Option<u64> {
        let event = self
            .inner
            .journal
            .find_by_dedup_key(&key.thread, &events::scheduled_key(&key.turn, &key.call_id))
            .await
            .ok()??;
        event.payload.get("revision")?.as_u64()
    }

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
        tool.validate(&args)
            .map_err(|reason| RuntimeError::InvalidArgs {
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
                Some(t) if t.id == turn && t.status == TurnStatus::Running => {
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
        let mut launch = PendingLaunch {
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
        launch.schedule().await?;
        Ok(key)
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

    /// The current revision of a turn, or the final one of an ended turn.
    async fn turn_revision(&self, thread: &str, turn: &str) -> Result<u64, RuntimeError> {
        if let Some(t) = self.inner.state().turns.get(thread)
            && t.id == turn
        {
            return Ok(t.revision);
        }
        let end = Box::pin(
            self.inner
                .journal
                .find_by_dedup_key(thread, &events::end_key(turn)),
        )
        .await?;
        end.and_then(|e| e.payload.get("revision").and_then(Value::as_u64))
            .ok_or_else(|| RuntimeError::TurnNotActive {
                thread: thread.to_string(),
                turn: turn.to_string(),
            })
    }

    /// Appends an event to a thread of this runtime's journal (independent work the host
    /// wants on record, like the seed's `independent.work`).
    ///
    /// # Cancel safety
    ///
    /// As for [`Journal::append`]: once handed to the journal's writer (normally at the
    /// first poll) the event is written whether or not the future is dropped.
    pub async fn record(
        &self,
        thread: &str,
        kind: &str,
        payload: Value,
    ) -> Result<i64, RuntimeError> {
        Ok(self
            .inner
            .journal
            .append(NewEvent::new(thread, kind, payload))
            .await?
            .seq)
    }

    /// Shuts down: refuses new work, cancels every pending job and waits for their
    /// terminal events (bounded by the grace period). Turns stay open in the journal; the
    /// next [`recover`](crate::recover) marks them interrupted. The journal stays open (the
    /// caller owns it).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not reopen anything: from its first poll the runtime
    /// refuses new work and every job's token is fired, and the jobs still settle and
    /// journal their terminal events in their own tasks. Only the waiting is given up,
    /// including the forced cancellation of a tool that ignores its token.
    pub async fn close(&self) {
        self.inner.state().closed = true;
        self.inner.root.cancel();
        self.settle_jobs(|_| true).await;
    }

    /// Simulates a process crash for tests: every job task is aborted where it stands
    /// and nothing more is journaled by this runtime.
    #[doc(hidden)]
    pub fn crash(&self) {
        self.inner
            .crashed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let mut st = self.inner.state();
        st.closed = true;
        for job in st.jobs.values() {
            if let Some(abort) = &job.abort {
                abort.abort();
            }
        }
        st.jobs.clear();
    }
}

/// An outcome from a terminal event.
pub(crate) fn outcome_of(event: &Event) -> Result<Outcome, RuntimeError> {
    Outcome::from_event(&event.kind, &event.payload).ok_or_else(|| RuntimeError::CorruptEvent {
        seq: event.seq,
        kind: event.kind.to_string(),
        reason: "not a terminal tool event with a revision".into(),
    })
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

impl PendingLaunch {
    /// Makes `tool.scheduled` durable, then spawns the job, or settles it from the journal
    /// when the call was recorded before (a finished call evicted from memory, or a call
    /// of an earlier process).
    async fn schedule(&mut self) -> Result<(), RuntimeError> {
        let Some(job) = self.job.as_ref() else {
            return Ok(());
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
            return self.spawn();
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
                Ok(())
            }
            // The dropped launch's own write got through: this is the call, run it.
            Err(RuntimeError::Unresolved { .. }) if self.redo => self.spawn(),
            Err(err) => {
                self.abandon();
                Err(err)
            }
        }
    }

    /// Spawns the job's task and records its abort handle, unless the runtime closed (or
    /// crashed) meanwhile: then the call is left to recovery, as a crash would leave it.
    fn spawn(&mut self) -> Result<(), RuntimeError> {
        let Some(job) = self.job.take() else {
            return Ok(());
        };
        let inner = Arc::clone(&job.inner);
        let key = Arc::clone(&job.key);
        let mut st = inner.state();
        if st.closed {
            st.jobs.remove(&*key);
            drop(st);
            drop(job);
            return Err(RuntimeError::Closed);
        }
        let abort = job.spawn();
        if let Some(entry) = st.jobs.get_mut(&*key) {
            entry.abort = Some(abort);
        }
        Ok(())
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
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    if let Err(err) = redo.schedule().await {
                        tracing::warn!(%err, "a launch whose caller went away could not be scheduled");
                    }
                });
            }
            Err(_) => redo.abandon(),
        }
    }
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
    /// The call's `tool.scheduled` event, keyed so that it is written once.
    fn scheduled_event(&self, signature: &str) -> Result<NewEvent, JournalError> {
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
        .map(|event| event.with_dedup_key(events::scheduled_key(&self.key.turn, &self.key.call_id)))
    }

    /// Starts the job's task.
    pub(crate) fn spawn(self) -> AbortHandle {
        // Boxed: the task then moves a pointer where it would move the whole (2 KB)
        // future at spawn and at every stage change.
        tokio::spawn(Box::pin(self.run())).abort_handle()
    }

    /// Runs the call and journals its one terminal event, then leaves memory.
    async fn run(mut self) {
        // The tool runs once: it takes the arguments instead of a copy.
        let args = std::mem::take(&mut self.args);
        let mut outcome = self.execute(args).await;
        let event = outcome.terminal_event(&self.key.thread, &self.key.turn, &self.key.call_id);
        match self.inner.job_append(event).await {
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
        let mut call = self.tool.call(args, ctx);
        // A run deadline too far away to represent is no deadline.
        let deadline = self
            .deadlines
            .run
            .and_then(|d| Instant::now().checked_add(d));
        tokio::select! {
            biased;
            result = &mut call => match result {
                Ok(value) => Outcome::completed(revision, value),
                Err(failure) => {
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
        }
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
