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
//!   the budget exceeded) the read is queued on the writer thread.
//! - WAL checkpoints (file databases) run on a checkpointer thread with its own connection,
//!   not inside the writer's commits (see [`super::checkpoint`]).
//! - Idle work ([`IdleWork`], the background index fold): when it wants to run, the writer
//!   thread runs one step of it each time no job has arrived for its delay, so jobs sent
//!   back to back never wait for it; a job arriving during a step waits for that step only.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::checkpoint::Checkpointer;
use super::url::Target;
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
    /// Fires when the writer thread has stopped.
    exited: Mutex<Option<oneshot::Receiver<()>>>,
    /// The writer's connection (`None` once closed).
    writer: Shared,
    readers: Option<ReadPool>,
    closed: AtomicBool,
}

struct ReadPool {
    path: PathBuf,
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
                loop {
                    let job = if idle.wanted() {
                        match jobs_rx.recv_timeout(idle.delay()) {
                            Ok(job) => Some(job),
                            Err(RecvTimeoutError::Timeout) => None,
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                    } else {
                        match jobs_rx.recv() {
                            Ok(job) => Some(job),
                            Err(_) => break,
                        }
                    };
                    let Ok(mut slot) = thread_writer.lock() else {
                        break;
                    };
                    // A job for a closed store is dropped: its caller sees `Closed`.
                    let Some(conn) = slot.as_mut() else {
                        continue;
                    };
                    match job {
                        Some(job) => job(conn),
                        None => idle.step(conn),
                    }
                    drop(slot);
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
            Target::File { path, .. } => Some(ReadPool {
                path: path.clone(),
                busy_timeout: options.busy_timeout,
                idle: Mutex::new(Vec::new()),
                permits: Arc::new(Semaphore::new(
                    usize::try_from(options.connections.max(1)).unwrap_or(1),
                )),
            }),
        };
        Ok(Arc::new(Db {
            jobs: Mutex::new(Some(jobs_tx)),
            exited: Mutex::new(Some(exit_rx)),
            writer,
            readers,
            closed: AtomicBool::new(false),
        }))
    }

    /// Run `job` on the writer thread, on the write connection.
    pub(crate) async fn write<T, F>(&self, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let _ = reply_tx.send(job(conn));
        });
        {
            let jobs = self.jobs.lock().map_err(|_| ContextError::Closed)?;
            let sender = jobs.as_ref().ok_or(ContextError::Closed)?;
            sender.send(job).map_err(|_| ContextError::Closed)?;
        }
        reply_rx.await.map_err(|_| ContextError::Closed)?
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
        let path = pool.path.clone();
        let busy_timeout = pool.busy_timeout;
        let (conn, result) = tokio::task::spawn_blocking(move || {
            let conn = match conn {
                Some(conn) => conn,
                None => match open_reader(&path, busy_timeout) {
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
        Target::File {
            path,
            create,
            read_only,
        } => {
            let mut flags = OpenFlags::SQLITE_OPEN_NO_MUTEX;
            flags |= if *read_only {
                OpenFlags::SQLITE_OPEN_READ_ONLY
            } else {
                OpenFlags::SQLITE_OPEN_READ_WRITE
            };
            if *create {
                flags |= OpenFlags::SQLITE_OPEN_CREATE;
            }
            let conn = Connection::open_with_flags(path, flags)?;
            conn.busy_timeout(options.busy_timeout)?;
            if !*read_only {
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
    Ok(conn)
}

fn open_reader(path: &std::path::Path, busy_timeout: Duration) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(busy_timeout)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}
