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
//!
//! This module holds the shared state and the handle; the operations live by concern:
//! [`turn`] (turn lifecycle), [`launch`] (launching calls and reading results),
//! [`scheduling`] (a launch's scheduling, which a turn's end can take over) and [`job`]
//! (the task that runs one call).

mod job;
mod launch;
mod scheduling;
mod serial;
mod turn;

use foldhash::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;

use agent_journal::{Journal, JournalError, NewEvent};
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use crate::error::RuntimeError;
use crate::options::RuntimeOptions;
use crate::settlement::Settlement;

pub(crate) use job::Job;

/// Identifies one call: the owner (thread, turn) and the model's call id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct JobKey {
    /// The journal thread the call belongs to.
    pub thread: String,
    /// The turn that launched it; only this turn may ask for its result.
    pub turn: String,
    /// The caller's id for the call (a model's `call_id`), unique within the turn.
    pub call_id: String,
}

/// Where a runtime turn is in its life (the runtime's own bookkeeping; the Codex
/// app-server's wire status is `agent_appserver::TurnStatus`). Only a `Running` turn accepts
/// launches, steers and commits; every other status is final except `Ending`, which becomes
/// the status of the end event once the journal holds it (after its jobs are stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeTurnStatus {
    /// Started and not yet ended: the one turn of its thread that can launch tool calls.
    Running,
    /// Being cancelled or finished: its jobs are being stopped, or its end event could not
    /// be journaled (then `finish` or `cancel` may try again, and no new turn starts on
    /// the thread meanwhile).
    Ending,
    /// Finished by [`Runtime::finish`]; its journal holds `turn.completed`.
    Completed,
    /// Ended by [`Runtime::cancel`]; its jobs were cancelled.
    Cancelled,
    /// Found running by recovery after a restart: the process that ran it is gone.
    Interrupted,
}

/// The latest turn of a thread.
#[derive(Debug, Clone)]
pub(crate) struct TurnState {
    pub(crate) id: String,
    pub(crate) revision: u64,
    pub(crate) status: RuntimeTurnStatus,
    pub(crate) cancel: CancellationToken,
}

/// A job that has not yet settled (or whose terminal event is being written).
pub(crate) struct JobEntry {
    pub(crate) signature: String,
    pub(crate) done: Arc<Settlement>,
    /// The task that schedules and runs the call (a recovered call's: the task that runs it).
    pub(crate) abort: Option<AbortHandle>,
    /// The launch's scheduling while the call's `tool.scheduled` is not durable yet, for a
    /// turn's end to take over from a launch future that is not polled any more; `None`
    /// once it is (and for a recovered call, whose is).
    pub(crate) scheduling: Option<Arc<scheduling::Scheduling>>,
}

impl JobEntry {
    /// The handle to abort the call's task with, once that can no longer put a terminal
    /// event before its `tool.scheduled` (the call is scheduled).
    pub(crate) fn abortable(&self) -> Option<&AbortHandle> {
        self.abort.as_ref().filter(|_| self.scheduling.is_none())
    }
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) turns: HashMap<String, TurnState>,
    /// Keyed by the job's own key (shared with its task, not copied).
    pub(crate) jobs: HashMap<Arc<JobKey>, JobEntry>,
    pub(crate) closed: bool,
}

impl State {
    /// Refuses a closed runtime, or a thread whose latest turn is running or ending here.
    pub(crate) fn refuse_an_active_turn(&self, thread: &str) -> Result<(), RuntimeError> {
        if self.closed {
            return Err(RuntimeError::Closed);
        }
        match self.turns.get(thread) {
            Some(t)
                if matches!(
                    t.status,
                    RuntimeTurnStatus::Running | RuntimeTurnStatus::Ending
                ) =>
            {
                Err(RuntimeError::TurnActive {
                    thread: thread.to_string(),
                    turn: t.id.clone(),
                })
            }
            _ => Ok(()),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) journal: Journal,
    pub(crate) options: RuntimeOptions,
    pub(crate) slots: Arc<Semaphore>,
    pub(crate) state: Mutex<State>,
    /// Serialises each thread's turn operations.
    pub(crate) thread_locks: serial::ThreadLocks,
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

    /// Waits for `thread`'s turn: its turn operations are serialised while the guard lives.
    pub(crate) async fn serial(&self, thread: &str) -> serial::Serial<'_> {
        self.thread_locks.serial(thread).await
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

    /// [`Runtime::abandon`] was called: this runtime's tasks must not act any more.
    pub(crate) fn crashed(&self) -> bool {
        self.crashed.load(std::sync::atomic::Ordering::SeqCst)
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
        // More slots than a semaphore holds (`usize::MAX` for "no limit") is no limit.
        let slots = options.concurrency.clamp(1, Semaphore::MAX_PERMITS);
        let slots = Arc::new(Semaphore::new(slots));
        Runtime {
            inner: Arc::new(Inner {
                journal,
                options,
                slots,
                state: Mutex::new(State::default()),
                thread_locks: serial::ThreadLocks::default(),
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
            .filter(|t| t.status == RuntimeTurnStatus::Running)
            .map(|t| t.id.clone())
    }

    /// The latest turn of `thread` known to this runtime: id, revision and status.
    pub fn turn_status(&self, thread: &str) -> Option<(String, u64, RuntimeTurnStatus)> {
        let st = self.inner.state();
        st.turns
            .get(thread)
            .map(|t| (t.id.clone(), t.revision, t.status))
    }

    /// Runs `work` in a task of its own and waits for it: dropping the returned future
    /// does not stop `work`. For the turn-level operations, whose journal write and
    /// in-memory update must not be separated by a caller giving up.
    ///
    /// `work` is polled once by the caller first: it takes its place (in its thread's turn
    /// lock's queue, in the journal's) in the order the caller asked, not in the order the
    /// tasks happen to start (a later operation's task could overtake it), and work done
    /// within that poll needs no task at all.
    pub(crate) async fn detached<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, RuntimeError>> + Send + 'static,
    ) -> Result<T, RuntimeError> {
        let mut work = Box::pin(work);
        if let Poll::Ready(result) =
            std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await
        {
            return result;
        }
        match tokio::spawn(work).await {
            Ok(result) => result,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            // Only a runtime shutting down cancels the task.
            Err(_) => Err(RuntimeError::Closed),
        }
    }

    /// Shuts down: refuses new work (every turn operation and launch then fails with
    /// [`RuntimeError::Closed`]), cancels every pending job and waits for their
    /// terminal events (bounded by the grace period). Turns stay open in the journal; the
    /// next [`recover`](Self::recover) or [`adopt`](Self::adopt) marks them interrupted.
    /// The journal stays open (the caller owns it).
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

    /// Simulates a process crash for tests: [`abandon`](Self::abandon).
    #[doc(hidden)]
    pub fn crash(&self) {
        self.abandon();
    }

    /// Stops this runtime as a crash would: every job task is aborted where it stands and
    /// nothing more is journaled by it, so its open calls read as cut off (interrupted) to
    /// the next runtime on the journal, which recovers them as after a crash. For a host
    /// that leaves calls open on purpose, for a later resume to run again.
    pub fn abandon(&self) {
        self.inner
            .crashed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let mut st = self.inner.state();
        st.closed = true;
        for job in st.jobs.values() {
            if let Some(abort) = job.abortable() {
                abort.abort();
            }
        }
        st.jobs.clear();
    }
}
