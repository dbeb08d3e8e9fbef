//! Who runs SQLite calls.
//!
//! - Writes: one writer thread owns the write connection and runs each write job whole (a
//!   job is one transaction), so a write costs one thread hand-off, not one per statement.
//! - Reads: on the caller's thread, on a read-only connection from a small pool (WAL: a
//!   reader sees the last committed state and never blocks the writer), for at most
//!   [`INLINE_BUDGET`]: a SQLite progress handler interrupts a read that runs longer, and
//!   it is run again from the start on tokio's blocking pool, as is a read that finds the
//!   database locked (the inline attempt never waits for a lock). Short reads (a window, a
//!   search that stops at its limit) so cost no thread hand-off at all (on this 2-core
//!   machine a hand-off alone measured 15-70 µs), and no read holds up the async runtime
//!   for much more than the budget. A read must therefore have no side effects beyond
//!   idempotent caching.
//! - A `:memory:` database exists only inside its one connection: the writer's connection
//!   sits behind a mutex that reads take when it is free; otherwise (a write running, or
//!   the budget exceeded) the read is queued on the writer thread. Short writes (appends
//!   that do not fold the index) take it the same way when no job is queued or running
//!   ([`Db::write_short`]), so neither costs a hand-off.
//! - WAL checkpoints (file databases) run on a checkpointer thread with its own connection,
//!   not inside the writer's commits (see [`super::checkpoint`]).
//! - Idle work ([`IdleWork`], the background index fold): when it wants to run, the writer
//!   thread starts once no job has arrived for its delay, then runs step after step until
//!   a job arrives or nothing is left, so jobs sent back to back never wait for it; a job
//!   arriving during a step waits for that step only.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::checkpoint::Checkpointer;
use super::url::{FileMode, Target};
use crate::error::{ContextError, DatabaseErrorKind, Result};
use crate::options::{ContextOptions, StoreDurability};

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// Work the writer thread does when it has no job, one bounded step at a time.
pub(crate) trait IdleWork: Send {
    /// Whether there is work to do now.
    fn wanted(&self) -> bool;
    /// How long the writer must have been without a job before a step runs.
    fn delay(&self) -> Duration;
    /// One step; keeps [`wanted`](Self::wanted) up to date.
    fn step(&mut self, conn: &mut Connection);
}
type Shared = Arc<Mutex<Option<Connection>>>;

/// Statements kept prepared per connection (the backend uses about twenty).
const STATEMENT_CACHE: usize = 64;
/// The writer connection's page cache, in KiB (`PRAGMA cache_size` takes it negated).
const WRITER_CACHE_KIB: i64 = -16 << 10;
/// Longest a read runs on the caller's thread before it moves to the blocking pool.
pub(crate) const INLINE_BUDGET: Duration = Duration::from_micros(250);
/// SQLite virtual-machine steps between two checks of the budget.
const PROGRESS_STEPS: i32 = 1000;

pub(crate) struct Db {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    /// Jobs sent to the writer thread and not finished (or dropped) yet. Decremented by the
    /// writer thread while it still holds the writer connection's lock, so a caller that
    /// holds that lock and reads 0 knows no job is queued or running.
    pending: Arc<AtomicUsize>,
    inline: Arc<InlineWrites>,
    /// Fires when the writer thread has stopped.
    exited: Mutex<Option<oneshot::Receiver<()>>>,
    /// The writer's connection (`None` once closed).
    writer: Shared,
    readers: Option<ReadPool>,
    /// Every write fails with [`ContextError::ReadOnly`] (a file opened read-only).
    read_only: bool,
    closed: AtomicBool,
}

/// What the writer thread must know of writes run on callers' threads (`:memory:`).
#[derive(Default)]
struct InlineWrites {
    /// How many ran: the writer thread's idle delay counts from the last of them.
    writes: AtomicU64,
    /// The writer thread waits for a job with no timeout (it had no idle work): a write
    /// that may have made some wakes it.
    parked: AtomicBool,
}

struct ReadPool {
    path: PathBuf,
    /// [`FileMode::Read`] or [`FileMode::Immutable`] (how the readers open `path`).
    mode: FileMode,
    busy_timeout: Duration,
    idle: Mutex<Vec<Connection>>,
    /// Bounds concurrent reads to the configured number of connections.
    permits: Arc<Semaphore>,
}

impl Db {
    /// Open the write connection and start the writer thread, which runs `idle` when it has
    /// no job.
    pub(crate) async fn open(
        target: &Target,
        options: &ContextOptions,
        mut idle: Box<dyn IdleWork>,
    ) -> Result<Arc<Db>> {
        let (opened_tx, opened_rx) = oneshot::channel();
        let (exit_tx, exit_rx) = oneshot::channel();
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let writer: Shared = Arc::new(Mutex::new(None));
        let thread_writer = writer.clone();
        let pending = Arc::new(AtomicUsize::new(0));
        let thread_pending = pending.clone();
        let inline = Arc::new(InlineWrites::default());
        let thread_inline = inline.clone();
        let writer_target = target.clone();
        let writer_options = options.clone();
        std::thread::Builder::new()
            .name("context-sqlite-writer".into())
            .spawn(move || {
                let checkpointer = match open_writer(&writer_target, &writer_options) {
                    Ok(conn) => {
                        let checkpointer =
                            Checkpointer::start(&conn, &writer_target, &writer_options);
                        if let Ok(mut slot) = thread_writer.lock() {
                            *slot = Some(conn);
                        }
                        let _ = opened_tx.send(Ok(()));
                        checkpointer
                    }
                    Err(err) => {
                        let _ = opened_tx.send(Err(err));
                        return;
                    }
                };
                // Whether the last turn was an idle step with no write anywhere since the
                // idle delay ran out: the store is still idle, so the next step need not
                // wait the delay again (a backlog folds at the index's speed, not one step
                // per delay), and a job that arrives waits for one step at most, as before.
                let mut still_idle = false;
                loop {
                    let job = if idle.wanted() && still_idle {
                        match jobs_rx.try_recv() {
                            Ok(job) => Some(job),
                            Err(mpsc::TryRecvError::Empty) => None,
                            Err(mpsc::TryRecvError::Disconnected) => break,
                        }
                    } else if idle.wanted() {
                        let writes = thread_inline.writes.load(Ordering::Acquire);
                        match jobs_rx.recv_timeout(idle.delay()) {
                            Ok(job) => Some(job),
                            // Not idle if a write ran on a caller's thread meanwhile.
                            Err(RecvTimeoutError::Timeout)
                                if thread_inline.writes.load(Ordering::Acquire) != writes =>
                            {
                                continue;
                            }
                            Err(RecvTimeoutError::Timeout) => None,
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                    } else {
                        // Published before idle work is looked at again, so that a write on
                        // a caller's thread that makes work either is seen here or sees the
                        // flag and wakes this thread (both sides are SeqCst).
                        thread_inline.parked.store(true, Ordering::SeqCst);
                        if idle.wanted() {
                            thread_inline.parked.store(false, Ordering::SeqCst);
                            continue;
                        }
                        let job = jobs_rx.recv();
                        thread_inline.parked.store(false, Ordering::SeqCst);
                        match job {
                            Ok(job) => Some(job),
                            Err(_) => break,
                        }
                    };
                    let Ok(mut slot) = thread_writer.lock() else {
                        break;
                    };
                    let is_job = job.is_some();
                    let writes = thread_inline.writes.load(Ordering::Acquire);
                    // A job for a closed store is dropped: its caller sees `Closed`.
                    match (slot.as_mut(), job) {
                        (Some(conn), Some(job)) => job(conn),
                        (Some(conn), None) => idle.step(conn),
                        (None, _) => {}
                    }
                    if is_job {
                        thread_pending.fetch_sub(1, Ordering::AcqRel);
                    }
                    drop(slot);
                    // Inline writes (`:memory:`) wait for the lock held during the step;
                    // one that ran since it was taken ends the idle run.
                    still_idle = !is_job && thread_inline.writes.load(Ordering::Acquire) == writes;
                    if let Some(checkpointer) = &checkpointer {
                        checkpointer.after_job();
                    }
                }
                // Stops the checkpointer and waits for it.
                drop(checkpointer);
                let _ = exit_tx.send(());
            })
            .map_err(|err| ContextError::Worker(format!("cannot start the writer: {err}")))?;
        opened_rx.await.map_err(|_| ContextError::Closed)??;
        let readers = match target {
            Target::Memory => None,
            Target::File { path, mode } => Some(ReadPool {
                path: path.clone(),
                mode: if *mode == FileMode::Immutable {
                    FileMode::Immutable
                } else {
                    FileMode::Read
                },
                busy_timeout: options.busy_timeout,
                idle: Mutex::new(Vec::new()),
                permits: Arc::new(Semaphore::new(
                    usize::try_from(options.connections.max(1)).unwrap_or(1),
                )),
            }),
        };
        Ok(Arc::new(Db {
            jobs: Mutex::new(Some(jobs_tx)),
            pending,
            inline,
            exited: Mutex::new(Some(exit_rx)),
            writer,
            readers,
            read_only: target.read_only(),
            closed: AtomicBool::new(false),
        }))
    }

    /// Whether every write is refused (a file opened read-only).
    pub(crate) fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Run `job` on the writer thread, on the write connection; refused at once on a store
    /// opened read-only.
    pub(crate) async fn write<T, F>(&self, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        if self.read_only {
            return Err(ContextError::ReadOnly);
        }
        let (reply_tx, reply_rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let _ = reply_tx.send(job(conn));
        });
        {
            let jobs = self.jobs.lock().map_err(|_| ContextError::Closed)?;
            let sender = jobs.as_ref().ok_or(ContextError::Closed)?;
            self.pending.fetch_add(1, Ordering::AcqRel);
            if sender.send(job).is_err() {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                return Err(ContextError::Closed);
            }
        }
        reply_rx.await.map_err(|_| ContextError::Closed)?
    }

    /// A write that is usually short (an append). On `:memory:`, when the writer
    /// connection is free and no job is queued or running, `job(conn, true)` runs on the
    /// caller's thread, saving the thread hand-off (15-70 µs here, more than the append
    /// itself); jobs still run in the order they were issued. `job` may decline there
    /// (return `Ok(None)` having written nothing, e.g. when the write would fold the index)
    /// and then runs as `job(conn, false)` on the writer thread, where it must not decline,
    /// as do all writes to a file (a durable commit waits for the disk, which no async
    /// caller's thread should).
    pub(crate) async fn write_short<T, F>(&self, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&mut Connection, bool) -> Result<Option<T>> + Send + 'static,
    {
        if self.readers.is_none()
            && !self.closed.load(Ordering::Acquire)
            && self.pending.load(Ordering::Acquire) == 0
            && let Ok(mut slot) = self.writer.try_lock()
            && self.pending.load(Ordering::Acquire) == 0
        {
            let conn = slot.as_mut().ok_or(ContextError::Closed)?;
            if let Some(done) = job(conn, true).transpose() {
                drop(slot);
                self.inline.writes.fetch_add(1, Ordering::AcqRel);
                if self.inline.parked.load(Ordering::SeqCst) {
                    self.nudge();
                }
                return done;
            }
        }
        self.write(move |conn| {
            job(conn, false)?
                .ok_or_else(|| ContextError::Worker("a write declined on the writer thread".into()))
        })
        .await
    }

    /// Wakes the writer thread (an empty job, not waited for) so that it looks at its idle
    /// work again.
    fn nudge(&self) {
        if let Ok(jobs) = self.jobs.lock()
            && let Some(sender) = jobs.as_ref()
        {
            self.pending.fetch_add(1, Ordering::AcqRel);
            if sender.send(Box::new(|_: &mut Connection| {})).is_err() {
                self.pending.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Wake the writer thread so that it looks at its idle work again.
    #[cfg(feature = "test-hooks")]
    pub(crate) async fn wake(&self) -> Result<()> {
        self.write(|_| Ok(())).await
    }

    /// Run the read `job` (see the module docs for where). It may run twice: once cut short
    /// by the budget, then to completion.
    pub(crate) async fn read<T, F>(&self, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        if self.closed.load(Ordering::Acquire) {
            return Err(ContextError::Closed);
        }
        let Some(pool) = &self.readers else {
            if let Ok(slot) = self.writer.try_lock() {
                let conn = slot.as_ref().ok_or(ContextError::Closed)?;
                if let Some(result) = run_within_budget(conn, &job, None) {
                    return result;
                }
            }
            return self.write(move |conn| job(conn)).await;
        };
        let permit = match pool.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => pool
                .permits
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| ContextError::Closed)?,
        };
        let conn = pool.idle.lock().ok().and_then(|mut idle| idle.pop());
        let conn = match conn {
            Some(conn) => match run_within_budget(&conn, &job, Some(pool.busy_timeout)) {
                Some(result) => {
                    self.put_back(pool, conn);
                    return result;
                }
                None => Some(conn),
            },
            None => None,
        };
        self.read_blocking(pool, conn, permit, job).await
    }

    /// Run `job` to completion on tokio's blocking pool (opening a connection if needed).
    async fn read_blocking<T, F>(
        &self,
        pool: &ReadPool,
        conn: Option<Connection>,
        permit: OwnedSemaphorePermit,
        job: F,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        let (path, mode) = (pool.path.clone(), pool.mode);
        let busy_timeout = pool.busy_timeout;
        let (conn, result) = tokio::task::spawn_blocking(move || {
            let conn = match conn {
                Some(conn) => conn,
                None => match open_reader(&path, mode, busy_timeout) {
                    Ok(conn) => conn,
                    Err(err) => return (None, Err(err)),
                },
            };
            let result = job(&conn);
            (Some(conn), result)
        })
        .await
        .map_err(|err| ContextError::Worker(format!("read task failed: {err}")))?;
        if let Some(conn) = conn {
            self.put_back(pool, conn);
        }
        drop(permit);
        result
    }

    fn put_back(&self, pool: &ReadPool, conn: Connection) {
        if !self.closed.load(Ordering::Acquire)
            && let Ok(mut idle) = pool.idle.lock()
        {
            idle.push(conn);
        }
    }

    /// Stop the writer (after the jobs already queued) and drop every connection; later
    /// calls fail with [`ContextError::Closed`].
    pub(crate) async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.take();
        }
        if let Some(pool) = &self.readers {
            pool.permits.close();
            if let Ok(mut idle) = pool.idle.lock() {
                idle.clear();
            }
        }
        let exited = self.exited.lock().ok().and_then(|mut e| e.take());
        if let Some(exited) = exited {
            let _ = exited.await;
        }
        if let Ok(mut slot) = self.writer.lock() {
            slot.take();
        }
    }
}

/// `Some(result)` when `job` finished within [`INLINE_BUDGET`], `None` when it was cut short.
///
/// With `busy_timeout` (a pooled file connection) the inline attempt never waits for a
/// lock: a busy database (rare under WAL) also returns `None`, and the read is retried on
/// the blocking pool, where the connection's usual `busy_timeout` applies again.
fn run_within_budget<T, F>(
    conn: &Connection,
    job: &F,
    busy_timeout: Option<Duration>,
) -> Option<Result<T>>
where
    F: Fn(&Connection) -> Result<T>,
{
    let deadline = Instant::now() + INLINE_BUDGET;
    conn.progress_handler(PROGRESS_STEPS, Some(move || Instant::now() >= deadline))
        .ok()?;
    if busy_timeout.is_some() {
        conn.busy_timeout(Duration::ZERO).ok()?;
    }
    let result = job(conn);
    let _ = conn.progress_handler(0, None::<fn() -> bool>);
    if let Some(timeout) = busy_timeout {
        let _ = conn.busy_timeout(timeout);
    }
    let kind = match &result {
        Err(err) => err.database_kind(),
        Ok(_) => None,
    };
    match kind {
        Some(DatabaseErrorKind::Interrupted) => None,
        // SQLite's busy and locked: the writer holds the lock.
        Some(DatabaseErrorKind::Timeout) if busy_timeout.is_some() => None,
        _ => Some(result),
    }
}

fn open_writer(target: &Target, options: &ContextOptions) -> Result<Connection> {
    let conn = match target {
        Target::Memory => Connection::open_in_memory()?,
        Target::File { path, mode } => {
            let conn = open_file(path, *mode)?;
            conn.busy_timeout(options.busy_timeout)?;
            if mode.writes() {
                conn.pragma_update(None, "journal_mode", "WAL")?;
            }
            conn.pragma_update(
                None,
                "synchronous",
                match options.durability {
                    StoreDurability::Full => "FULL",
                    StoreDurability::Normal => "NORMAL",
                },
            )?;
            // The fill of a large store inserts at the ends of many threads' id ranges and
            // into the unit-name index at random: a larger page cache (16 MiB, the
            // default is 2) saves re-reading those pages from the file.
            conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)?;
            conn
        }
    };
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    super::holds::register(&conn)?;
    Ok(conn)
}

/// Opens `path` as `mode` says; [`FileMode::Immutable`] through its `file:` URI.
fn open_file(path: &std::path::Path, mode: FileMode) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_NO_MUTEX;
    match mode {
        FileMode::Create => Connection::open_with_flags(
            path,
            flags | OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        ),
        FileMode::Write => {
            Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_READ_WRITE)
        }
        FileMode::Read => {
            Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_READ_ONLY)
        }
        FileMode::Immutable => Connection::open_with_flags(
            agent_schema::sqlite_file::file_uri(path, "immutable=1"),
            flags | OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
        ),
    }
}

/// A pooled read connection; `mode` is [`FileMode::Read`] or [`FileMode::Immutable`].
fn open_reader(
    path: &std::path::Path,
    mode: FileMode,
    busy_timeout: Duration,
) -> Result<Connection> {
    let conn = open_file(path, mode)?;
    conn.busy_timeout(busy_timeout)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    super::holds::register(&conn)?;
    Ok(conn)
}
