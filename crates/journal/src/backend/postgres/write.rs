//! The PostgreSQL write side: one write connection, behind one lock taken by the writer
//! task for each batch of queued requests and by a producer that writes directly while the
//! writer is idle (`direct.rs`); each batch commits in one transaction. There is no
//! journal-wide lock in the database: a transaction holds the locks of the
//! threads it writes only, so writers of different threads (in this process's batches or
//! in other processes) never wait for each other. Each commit's threads are notified on
//! `CHANNEL` after it (`notify.rs`).
//!
//! Invariants of a write transaction, in statement order (the proof that tails neither
//! skip nor repeat an event is in `docs/architecture.md`, "PostgreSQL write path"):
//! 1. It first takes a transaction-scoped advisory lock per thread of the batch (keyed by a
//!    64-bit hash of the name), in key order, so two batches cannot deadlock. Until commit
//!    no other transaction writes those threads: dedup keys, heads and expectations read
//!    next are final.
//! 2. Only then is its transaction id assigned (`pg_current_xact_id()`: advisory locks do
//!    not assign one). A transaction that waited for a thread's lock gets a higher id than
//!    the one it waited for, so transaction ids order each thread's commits.
//!    (`nextval` may assign it too, which is why it also runs only after the locks.)
//! 3. Its seqs come from the `journal_seq` sequence after the locks, so a thread's seqs
//!    increase in its commit order. Every row stores the transaction id (`tx`); readers of
//!    the whole journal order by `(tx, seq)` and stop below the oldest running transaction.
//! 4. Fences are read `FOR SHARE` inside the transaction, as before.
//!
//! A batch without dedup keys, conditions, fences or relaxed events (the common awaited
//! append) is one statement in its own implicit transaction: the same steps in the same
//! order, in one round trip (`append.rs`). Any other batch is one call of a function that
//! takes the same steps when the database holds what the batch's plan assumes
//! (`checked.rs`), and a transaction that reads first when it does not.
//!
//! Wake-ups are sent after the commit, by the notifier task on a pool connection, never
//! inside the write transaction: PostgreSQL commits the transactions that `NOTIFY` one at
//! a time under a database-wide lock held through the WAL flush, which serialised every
//! writer of the cluster. A notification lost to a crash between the commit and its send
//! is covered by the tails' polling, as one lost with the LISTEN connection is.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::{Duration, Instant};

use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::{Mutex, mpsc, oneshot};

use super::notify::Notifier;
use super::{append, checked};
use crate::writer::{Answer, Batch, Msg, Pending, Request, Settle, drain_after_close};

/// The write side of one journal: the connection and what settles its batches, shared by
/// the writer task and producers that write directly (`direct.rs`).
///
/// Invariants:
/// - Whoever holds `side` is the only writer; a batch is written and settled (acks sent)
///   before the lock is released.
/// - `queued` counts the messages handed to the queue and not yet taken by the writer
///   task under the lock. A producer writes directly only while it holds the lock and
///   `queued` is zero, so nothing queued before it is written after it: requests still
///   commit in arrival order, and a `Close` is processed after every request before it.
pub(crate) struct Shared {
    pub(super) side: Arc<Mutex<WriteSide>>,
    pub(super) queued: AtomicUsize,
}

/// One message counted in [`Shared::queued`] while it is being queued: dropped before
/// [`Queuing::queued`] (refused, or abandoned while waiting for room), it is taken back.
pub(crate) struct Queuing<'a> {
    shared: &'a Shared,
}

impl<'a> Queuing<'a> {
    pub(crate) fn new(shared: &'a Shared) -> Self {
        shared.queued.fetch_add(1, Ordering::SeqCst);
        Queuing { shared }
    }

    /// The message is in the queue: the writer task takes it back from the count.
    pub(crate) fn queued(self) {
        std::mem::forget(self);
    }
}

impl Drop for Queuing<'_> {
    fn drop(&mut self) {
        self.shared.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The connection and what a writer keeps between batches.
pub(crate) struct WriteSide {
    /// `None` once the writer task took it to close it.
    open: Option<Open>,
    settle: Settle,
    /// Set while a batch is being written, cleared once it is settled. Found set, it means
    /// a direct write was dropped mid-statement outside a runtime (it could not finish on
    /// a task of its own): the connection's state and the batch's outcome are unknown.
    writing: bool,
    #[cfg(feature = "test-hooks")]
    hook: Option<crate::hooks::WriteHook>,
}

struct Open {
    conn: WriteConn,
    notifier: Notifier,
}

/// How long the write connection may have been idle before a write checks it first.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The write connection, and what it takes to make it again.
///
/// Invariant: a connection that has been idle for [`IDLE_CHECK`] or more is pinged before
/// the next batch is sent on it, and replaced when the ping fails. The server drops idle
/// sessions (`idle_session_timeout`, a restart, a proxy's timeout) while a run waits on a
/// tool for minutes; a batch sent on such a connection would fail, latch the writer and
/// lose a finished call's outcome. Nothing of the batch has been sent when the ping fails,
/// so the retry cannot write anything twice. A connection that fails mid-batch is not
/// replaced: whether that batch committed is unknown, so the writer latches as before.
pub(crate) struct WriteConn {
    pub(crate) conn: PgConnection,
    connect: PgConnectOptions,
    relaxed: bool,
    last_used: Instant,
}

impl WriteConn {
    pub(super) fn new(conn: PgConnection, connect: PgConnectOptions, relaxed: bool) -> Self {
        WriteConn {
            conn,
            connect,
            relaxed,
            last_used: Instant::now(),
        }
    }

    /// The connection, checked first when it has been idle (see the type's invariant).
    async fn ready(&mut self) -> &mut PgConnection {
        if self.last_used.elapsed() >= IDLE_CHECK
            && let Err(err) = self.conn.ping().await
        {
            match super::writer_connection(&self.connect, self.relaxed).await {
                Ok(conn) => {
                    tracing::warn!(%err, "the journal's write connection was lost while idle; reconnected");
                    self.conn = conn;
                }
                // The batch fails on the dead connection, as it would have.
                Err(_) => {
                    tracing::warn!(%err, "the journal's write connection was lost while idle and cannot be made again");
                }
            }
        }
        self.last_used = Instant::now();
        &mut self.conn
    }
}

impl WriteSide {
    /// Whether the writer task has closed the connection.
    pub(super) fn closed(&self) -> bool {
        self.open.is_none()
    }

    /// Writes and settles `batch` (`direct`: on the appending task); returns the `Close`
    /// it ended with, if any.
    pub(super) async fn write(
        &mut self,
        batch: Batch,
        direct: bool,
    ) -> Option<oneshot::Sender<()>> {
        if self.writing {
            self.settle
                .latch("a write was dropped before its outcome was known".to_string());
        }
        let (pending, closing) = self.settle.begin(batch);
        let Some(Pending { requests, acks }) = pending else {
            return closing;
        };
        let Some(open) = self.open.as_mut() else {
            // Not reached: nobody writes after the writer task closed the connection.
            for ack in acks {
                let _ = ack.send(Err(crate::error::JournalError::Closed));
            }
            return closing;
        };
        self.writing = true;
        let result = write_batch(
            open.conn.ready().await,
            &requests,
            #[cfg(feature = "test-hooks")]
            self.hook.as_ref(),
        )
        .await;
        self.writing = false;
        if let Ok(answers) = &result {
            open.notifier.send(written_threads(&requests, answers));
            if direct {
                self.settle.count_direct();
            }
        }
        self.settle.finish(&requests, acks, result);
        closing
    }
}

/// Starts the PostgreSQL writer task on `conn`; returns what producers share with it.
pub(crate) fn spawn(
    conn: WriteConn,
    notifier: Notifier,
    rx: mpsc::Receiver<Msg>,
    settle: Settle,
    max_batch: usize,
    #[cfg(feature = "test-hooks")] hook: Option<crate::hooks::WriteHook>,
) -> Arc<Shared> {
    let shared = Arc::new(Shared {
        side: Arc::new(Mutex::new(WriteSide {
            open: Some(Open { conn, notifier }),
            settle,
            writing: false,
            #[cfg(feature = "test-hooks")]
            hook,
        })),
        queued: AtomicUsize::new(0),
    });
    tokio::spawn(run(Arc::clone(&shared), rx, max_batch));
    shared
}

/// The PostgreSQL writer task. Runs until `Close` or until every handle is dropped.
///
/// Batching: after the first queued request, everything already queued is taken, and the
/// task yields once whenever the queue runs dry, to let producers that were just
/// acknowledged join this commit (up to `max_batch` events). It holds the write side's
/// lock from taking a batch until the batch is settled.
async fn run(shared: Arc<Shared>, mut rx: mpsc::Receiver<Msg>, max_batch: usize) {
    let mut close = None;
    let mut open = None;
    while close.is_none() {
        let Some(first) = rx.recv().await else { break };
        let mut side = shared.side.lock().await;
        let mut batch = Batch::default();
        let mut taken = 1;
        let mut more = batch.take(first, max_batch);
        while more {
            let msg = match rx.try_recv() {
                Ok(msg) => msg,
                // Linger: producers woken by the previous commit's acks may be about to
                // append. Yielding once lets them run (they find the lock taken and
                // queue); stop as soon as a yield brings nothing, so an idle writer adds
                // no latency beyond one scheduler pass.
                Err(_) => {
                    tokio::task::yield_now().await;
                    match rx.try_recv() {
                        Ok(msg) => msg,
                        Err(_) => break,
                    }
                }
            };
            taken += 1;
            more = batch.take(msg, max_batch);
        }
        shared.queued.fetch_sub(taken, Ordering::SeqCst);
        close = side.write(batch, false).await;
        if close.is_some() {
            open = side.open.take();
        }
    }
    if open.is_none() {
        // Every handle was dropped: only a dropped direct write finishing on a task of
        // its own can still hold the lock, and this waits for it.
        open = shared.side.lock().await.open.take();
    }
    if let Some(Open { conn, notifier }) = open {
        if let Err(err) = conn.conn.close().await {
            tracing::warn!(%err, "closing the journal's write connection failed");
        }
        // A close returns once every commit's wake-up is sent: a process that appends,
        // closes and exits does not leave other processes' tails to find its events by
        // polling.
        notifier.flush().await;
    }
    drain_after_close(&mut rx, close);
}

/// The threads that a committed batch wrote new events to, each once.
fn written_threads(batch: &[Request], answers: &[Answer]) -> Vec<String> {
    let mut threads: Vec<String> = batch
        .iter()
        .zip(answers)
        .filter(|(_, answer)| {
            answer
                .as_ref()
                .is_ok_and(|acks| acks.iter().any(|a| !a.deduplicated))
        })
        .flat_map(|(request, _)| request.events.iter().map(|e| e.thread.clone()))
        .collect();
    threads.sort_unstable();
    threads.dedup();
    threads
}

async fn write_batch(
    conn: &mut PgConnection,
    batch: &[Request],
    #[cfg(feature = "test-hooks")] hook: Option<&crate::hooks::WriteHook>,
) -> Result<Vec<Answer>, sqlx::Error> {
    #[cfg(feature = "test-hooks")]
    if let Some(hook) = hook {
        // Held open between the inserts and the commit: only a transaction can be.
        return append::in_transaction(conn, batch, || async {
            (hook.0)().await == crate::hooks::HookAction::Commit
        })
        .await;
    }
    if append::is_plain(batch) {
        return append::plain(conn, batch).await;
    }
    if let Some(answers) = checked::write(conn, batch).await? {
        return Ok(answers);
    }
    append::in_transaction(conn, batch, || async { true }).await
}
