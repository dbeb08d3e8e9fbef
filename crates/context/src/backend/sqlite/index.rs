//! The deferred trigram index on SQLite.
//!
//! An append writes `context_units` only. The FTS5 trigram index (`context_units_fts`)
//! is brought up to date by a *fold*: one transaction that copies a thread's oldest
//! un-indexed units into the index and advances the thread's `indexed_seq` watermark.
//!
//! Invariants (schema v2, `migrations/sqlite/0002_deferred_index.sql`; v3 keeps them and
//! drops positions from the index):
//! - a thread's units with position `<= indexed_seq` are in the index exactly once, the
//!   others not at all: a fold inserts a range and moves the watermark past it in the same
//!   transaction, so a crash (even `kill -9`) keeps both or neither;
//! - `indexed_seq` only grows, so a reader that read it once may query the index below it
//!   and scan the base table above it in later statements without missing a unit;
//! - `tail_bytes` = the sum of the stored sizes of the units above the watermark.
//!
//! Who folds: the writer thread when it has been idle for [`IDLE_DELAY`] (batches of
//! [`FOLD_BATCH_BYTES`], see [`Folder`]), and an append that leaves its thread's tail above
//! the store's bound (the whole tail, in the append's own transaction).
//!
//! Each fold writes one FTS5 segment. Inside a fold, FTS5 merges segments only once a
//! level holds 16 (schema v4), so the write path does little merge work; once nothing is
//! left to fold, the idle writer merges in steps of [`MERGE_STEP_PAGES`] until no level
//! holds 4 (FTS5's `usermerge`), which is what keeps searches fast. A merge changes how
//! the index is laid out, never what it holds, and is one transaction like a fold.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};

use super::relaxed::with_relaxed_sync;
use super::units::SEQ_BITS;
use super::worker::IdleWork;
use crate::error::{DatabaseErrorKind, Result};

/// How long the writer thread waits with no write before it folds: a caller appending back
/// to back never waits for a background fold. 20 ms, not less: a caller that does some
/// work between appends (the catch-up of `runs search --all` reads and searches between
/// runs) is often descheduled for more than 5 ms on a loaded 2-core machine, and each fold
/// step that slipped in there held up its next append (measured: the first search over
/// 1,000 runs took 5.0 s instead of 2.6 s).
pub(super) const IDLE_DELAY: Duration = Duration::from_millis(20);

/// Stored bytes one background fold transaction takes (at least one unit): about 45 units
/// of 700 bytes, roughly 1-5 ms of FTS5 work here (schema v3), the longest a write queued
/// behind it waits (FTS5's cost per unit does not depend on the batch size).
pub(super) const FOLD_BATCH_BYTES: u64 = 32 << 10;

/// Pages (about 4 KB each) of FTS5 merge work one background step does: about 2 ms here
/// (67 µs a page, measured after a 100k-unit fill), which is what a write queued behind it
/// waits at most.
pub(super) const MERGE_STEP_PAGES: i64 = 32;

/// Whether background fold or merge work may be waiting, and whether it is paused (a test
/// seam).
#[derive(Debug, Default)]
pub(super) struct FoldSignal {
    pending: AtomicBool,
    paused: AtomicBool,
}

impl FoldSignal {
    /// A signal with work pending (a store just opened may hold a tail left by a process
    /// that stopped before folding it).
    pub(super) fn new(pending: bool) -> Arc<Self> {
        Arc::new(FoldSignal {
            pending: AtomicBool::new(pending),
            paused: AtomicBool::new(false),
        })
    }

    /// Marks background work waiting (called by an append, on the writer thread or inline).
    ///
    /// SeqCst, as is the load in [`should_fold`](Self::should_fold): an append on a
    /// caller's thread sets this then reads whether the writer thread is parked, the writer
    /// thread sets that then reads this (see `worker.rs`); one of them sees the other.
    pub(super) fn set_pending(&self) {
        self.pending.store(true, Ordering::SeqCst);
    }

    /// Whether the writer thread should fold when idle.
    pub(super) fn should_fold(&self) -> bool {
        self.pending.load(Ordering::SeqCst) && !self.paused.load(Ordering::Acquire)
    }

    /// Whether the last background step found nothing to fold or merge, and no append
    /// came after it.
    #[cfg(feature = "test-hooks")]
    pub(super) fn settled(&self) -> bool {
        !self.pending.load(Ordering::SeqCst)
    }

    /// Stops or resumes background folds and merges (appends over the bound still fold).
    #[cfg(feature = "test-hooks")]
    pub(super) fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
    }
}

/// Longest a background step waits for another connection's write lock (at most the
/// store's busy timeout). The step is optional work: waiting the whole busy timeout behind
/// a long write of another process would hold up this store's next job and its `close`
/// (a command that only reads would take that long to finish), so it gives up instead, as
/// a failed step does, and the next append asks for it again.
pub(super) const IDLE_LOCK_WAIT: Duration = Duration::from_millis(50);

/// The writer thread's idle work: one background fold batch per step, or once nothing is
/// left to fold, one merge step.
pub(super) struct Folder {
    signal: Arc<FoldSignal>,
    /// The writer connection's busy timeout, restored after each step; `None` for
    /// `:memory:` (nothing else can hold its lock).
    busy_timeout: Option<Duration>,
}

impl Folder {
    pub(super) fn new(signal: Arc<FoldSignal>, busy_timeout: Option<Duration>) -> Self {
        Folder {
            signal,
            busy_timeout,
        }
    }

    /// One fold batch, or one merge step when nothing is left to fold: whether more work
    /// is left.
    fn fold_or_merge(conn: &mut Connection) -> Result<bool> {
        match fold_batch(conn, FOLD_BATCH_BYTES, u64::MAX)? {
            0 => merge_step(conn, MERGE_STEP_PAGES),
            _ => Ok(true),
        }
    }
}

impl IdleWork for Folder {
    fn wanted(&self) -> bool {
        self.signal.should_fold()
    }

    fn delay(&self) -> Duration {
        IDLE_DELAY
    }

    /// Folds one batch, or merges one step when nothing is left to fold; clears the
    /// pending flag once neither has work, or on an error, which is logged: the next append
    /// sets the flag again, so a failing step is retried then, not in a loop. The step waits
    /// at most [`IDLE_LOCK_WAIT`] for the write lock.
    fn step(&mut self, conn: &mut Connection) {
        if let Some(timeout) = self.busy_timeout {
            let _ = conn.busy_timeout(IDLE_LOCK_WAIT.min(timeout));
        }
        let more = match Self::fold_or_merge(conn) {
            Ok(more) => more,
            Err(err) if err.database_kind() == Some(DatabaseErrorKind::Timeout) => {
                tracing::debug!(error = %err, "context index: background step skipped, another connection holds the write lock");
                false
            }
            Err(err) => {
                tracing::warn!(error = %err, "context index: background fold or merge failed");
                false
            }
        };
        if let Some(timeout) = self.busy_timeout {
            let _ = conn.busy_timeout(timeout);
        }
        if !more {
            self.signal.pending.store(false, Ordering::Release);
        }
    }
}

/// One step of FTS5's incremental merge, about `pages` pages of merged segments, on levels
/// that hold at least `usermerge` (4) segments or where a merge is under way. Returns
/// whether there was work (FTS5 changes at least two rows when it merges anything). Commits
/// without waiting for the disk, as a fold does: a lost merge step is done again.
pub(super) fn merge_step(conn: &mut Connection, pages: i64) -> Result<bool> {
    with_relaxed_sync(conn, |conn| {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let before = tx.total_changes();
        tx.prepare_cached(
            "INSERT INTO context_units_fts (context_units_fts, rank) VALUES ('merge', ?1)",
        )?
        .execute([pages])?;
        let worked = tx.total_changes().saturating_sub(before) >= 2;
        tx.commit()?;
        Ok(worked)
    })
}

/// One fold transaction over the first thread with un-indexed units: its oldest units, up
/// to `max_bytes` of stored size (at least one unit) and `max_units`. Returns how many
/// units it indexed (0: nothing to do). Commits without waiting for the disk: the index is
/// derived data, and a lost fold leaves the watermark where it was.
pub(super) fn fold_batch(conn: &mut Connection, max_bytes: u64, max_units: u64) -> Result<u64> {
    with_relaxed_sync(conn, |conn| {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let pending: Option<(i64, i64, i64)> = tx
            .prepare_cached(
                "SELECT id, indexed_seq, last_seq FROM context_threads \
                 WHERE indexed_seq < last_seq LIMIT 1",
            )?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let Some((thread_id, indexed, last)) = pending else {
            return Ok(0);
        };
        let lo = thread_id << SEQ_BITS;
        let (mut upto, mut bytes, mut units) = (indexed, 0u64, 0u64);
        {
            let mut sizes = tx.prepare_cached(
                "SELECT id, size FROM context_units WHERE id > ?1 AND id <= ?2 ORDER BY id",
            )?;
            let mut rows = sizes.query(params![lo + indexed, lo + last])?;
            while units < max_units
                && bytes < max_bytes
                && let Some(row) = rows.next()?
            {
                let id: i64 = row.get(0)?;
                let size: i64 = row.get(1)?;
                upto = id - lo;
                bytes = bytes.saturating_add(u64::try_from(size).unwrap_or_default());
                units += 1;
            }
        }
        if upto > indexed {
            fold_range(&tx, thread_id, indexed, upto, bytes)?;
        }
        tx.commit()?;
        Ok(units)
    })
}

/// Within the caller's transaction: indexes positions `(indexed, upto]` of thread
/// `thread_id` (whose watermark must be `indexed`), moves the watermark to `upto` and takes
/// `bytes` (their stored size) off the thread's tail.
pub(super) fn fold_range(
    conn: &Connection,
    thread_id: i64,
    indexed: i64,
    upto: i64,
    bytes: u64,
) -> rusqlite::Result<()> {
    let lo = thread_id << SEQ_BITS;
    conn.prepare_cached(
        "INSERT INTO context_units_fts (rowid, folded) \
         SELECT id, folded FROM context_units WHERE id > ?1 AND id <= ?2",
    )?
    .execute(params![lo + indexed, lo + upto])?;
    conn.prepare_cached(
        "UPDATE context_threads SET indexed_seq = ?2, tail_bytes = max(tail_bytes - ?3, 0) \
         WHERE id = ?1",
    )?
    .execute(params![
        thread_id,
        upto,
        i64::try_from(bytes).unwrap_or(i64::MAX)
    ])?;
    Ok(())
}

/// How many units of all threads are not in the index yet.
pub(super) fn backlog(conn: &Connection) -> Result<u64> {
    let n: i64 = conn
        .prepare_cached(
            "SELECT COALESCE(sum(last_seq - indexed_seq), 0) FROM context_threads \
             WHERE indexed_seq < last_seq",
        )?
        .query_row([], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or_default())
}
