//! The deferred trigram index on PostgreSQL.
//!
//! An append writes `context_units` only (no index on the folded text: a `pg_trgm` GIN
//! index there cost about 20x the row insert, measured with its pending list on or off).
//! A *fold* copies a thread's oldest un-indexed units into `context_units_trgm`, which
//! carries the GIN index, and advances the thread's `indexed_seq`, in one transaction.
//!
//! Invariants (schema v2, `migrations/postgres/0002_deferred_index.sql`):
//! - a thread's units with `seq <= indexed_seq` have exactly one row in
//!   `context_units_trgm`, the others none: a fold holds the thread's row lock (appenders
//!   of the thread wait for it, other folders skip it) and commits the copy and the
//!   watermark together, so a crash keeps both or neither;
//! - `indexed_seq` only grows; `tail_bytes` = the stored sizes of the units above it.
//!
//! Who folds: a task of the store, [`IDLE_DELAY`] after the last append it was told of
//! (batches of [`FOLD_BATCH_BYTES`]), and an append that leaves its thread's tail above the
//! store's bound (the whole tail, in the append's own transaction).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnection, PgPool};
use sqlx::{Acquire as _, Row as _};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::error::{ContextError, Result};

/// How long after the last append the task waits before it folds.
const IDLE_DELAY: Duration = Duration::from_millis(5);
/// Stored bytes one background fold transaction takes (at least one unit).
const FOLD_BATCH_BYTES: i64 = 128 << 10;

/// The store's side of the fold task: wakes it, pauses it (a test seam), and stops it when
/// the last handle on the store is dropped.
#[derive(Debug)]
pub(super) struct Folder {
    wake: Arc<Notify>,
    #[cfg(feature = "test-hooks")]
    paused: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Folder {
    /// Starts the task, with one fold pass due (the database may hold a tail left by a
    /// process that stopped before folding it).
    pub(super) fn start(pool: PgPool) -> Self {
        let wake = Arc::new(Notify::new());
        let paused = Arc::new(AtomicBool::new(false));
        wake.notify_one();
        let task = tokio::spawn(run(pool, wake.clone(), paused.clone()));
        Folder {
            wake,
            #[cfg(feature = "test-hooks")]
            paused,
            task,
        }
    }

    /// Tells the task that a thread has a new tail.
    pub(super) fn appended(&self) {
        self.wake.notify_one();
    }

    #[cfg(feature = "test-hooks")]
    pub(super) fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
        self.wake.notify_one();
    }
}

impl Drop for Folder {
    /// An aborted fold is rolled back with its connection.
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(pool: PgPool, wake: Arc<Notify>, paused: Arc<AtomicBool>) {
    loop {
        wake.notified().await;
        // Wait for a pause in the appends: back-to-back appenders never wait for a fold.
        while tokio::time::timeout(IDLE_DELAY, wake.notified())
            .await
            .is_ok()
        {}
        while !paused.load(Ordering::Acquire) {
            match fold_batch(&pool, FOLD_BATCH_BYTES, i64::MAX).await {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) => {
                    if pool.is_closed() {
                        return;
                    }
                    // A reader of a database it cannot write (a hot standby, a read-only
                    // role) leaves the tail to a writer: searches scan it meanwhile.
                    if matches!(&err, ContextError::Database(db) if db.refuses_writes()) {
                        tracing::debug!(error = %err, "context index: the database refuses writes; no fold");
                        return;
                    }
                    tracing::warn!(error = %err, "context index: background fold failed");
                    break;
                }
            }
        }
        if pool.is_closed() {
            return;
        }
    }
}

/// One fold transaction over the first thread with un-indexed units that no one else
/// holds: its oldest units, up to `max_bytes` of stored size (at least one unit) and
/// `max_units`. Returns how many it indexed (0: nothing to do). Commits without waiting
/// for the WAL flush: the index is derived data, and a lost fold leaves the watermark
/// where it was.
pub(super) async fn fold_batch(pool: &PgPool, max_bytes: i64, max_units: i64) -> Result<u64> {
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin().await?;
    sqlx::query("SET LOCAL synchronous_commit = off")
        .execute(&mut *tx)
        .await?;
    let pending = sqlx::query(
        "SELECT id, indexed_seq, last_seq FROM context_threads \
         WHERE indexed_seq < last_seq LIMIT 1 FOR UPDATE SKIP LOCKED",
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = pending else {
        return Ok(0);
    };
    let (thread_id, indexed, last): (i64, i64, i64) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    // The first units whose running size starts below the budget.
    let cut = sqlx::query(
        "SELECT COALESCE(max(seq), 0)::BIGINT, count(*)::BIGINT, COALESCE(sum(size), 0)::BIGINT \
         FROM (SELECT seq, size, sum(size) OVER (ORDER BY seq) - size AS before \
               FROM context_units WHERE thread_id = $1 AND seq > $2 AND seq <= $3 \
               ORDER BY seq LIMIT $5) s \
         WHERE before < $4",
    )
    .bind(thread_id)
    .bind(indexed)
    .bind(last)
    .bind(max_bytes.max(1))
    .bind(max_units)
    .fetch_one(&mut *tx)
    .await?;
    let (upto, units, bytes): (i64, i64, i64) = (cut.try_get(0)?, cut.try_get(1)?, cut.try_get(2)?);
    if upto > indexed {
        fold_range(&mut tx, thread_id, indexed, upto, bytes).await?;
    }
    tx.commit().await?;
    Ok(u64::try_from(units).unwrap_or_default())
}

/// Within the caller's transaction, which holds the thread's row lock: indexes seqs
/// `(indexed, upto]` of thread `thread_id` (whose watermark must be `indexed`), moves the
/// watermark to `upto` and takes `bytes` (their stored size) off the thread's tail.
pub(super) async fn fold_range(
    conn: &mut PgConnection,
    thread_id: i64,
    indexed: i64,
    upto: i64,
    bytes: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO context_units_trgm (thread_id, seq, folded) \
         SELECT thread_id, seq, folded FROM context_units \
         WHERE thread_id = $1 AND seq > $2 AND seq <= $3",
    )
    .bind(thread_id)
    .bind(indexed)
    .bind(upto)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE context_threads SET indexed_seq = $2, \
         tail_bytes = GREATEST(tail_bytes - $3, 0) WHERE id = $1",
    )
    .bind(thread_id)
    .bind(upto)
    .bind(bytes)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// How many units of all threads are not in the index yet.
pub(super) async fn backlog(pool: &PgPool) -> Result<u64> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COALESCE(sum(last_seq - indexed_seq), 0)::BIGINT FROM context_threads \
         WHERE indexed_seq < last_seq",
    )
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(n).unwrap_or_default())
}
