//! WAL checkpoints off the write path (file databases).
//!
//! SQLite's default checkpoints the WAL in the committing connection once the log holds
//! 1000 pages: on the writer thread, inside an append, with a write of every page to the
//! database file and an fsync of it (perf on a batched 100k fill: a third of the writer
//! thread's time). Here the writer connection's WAL hook only records the log size, and
//! after a job that grew the log by [`SOFT_PAGES`] since the last nudge the writer thread
//! nudges a checkpointer thread, which runs PASSIVE checkpoints on its own connection to
//! the same file beside the writer.
//!
//! The log restarts from its start only when a write transaction begins with every frame
//! already copied, which a checkpointer racing a busy writer rarely leaves; a nudge after
//! every job past a log size (as first built) then checkpointed once per append, each with
//! two fsyncs beside the append's own. So nudges follow growth, and the writer's own
//! checkpoint at [`HARD_PAGES`] (by then only the frames since the last pass are left to
//! copy) lets the log restart. (A hard limit of 4,000 pages made a lone durable appender
//! ~15% faster still, but cost the batched catch-up of `runs search --all` ~25%: the
//! writer then copied a quarter of all frames itself, on its write path.)
//!
//! Invariants:
//! - What readers see and what is durable do not change: a checkpoint copies committed
//!   frames into the database file (syncing the WAL first and the file after, whatever
//!   connection runs it), a PASSIVE one never blocks the writer or a reader, and a commit
//!   is durable once in the WAL (`synchronous=FULL`) as before.
//! - The WAL stays bounded: a commit that leaves [`HARD_PAGES`] or more in the log (the
//!   checkpointer stalled or cannot keep up) checkpoints in the committing connection, as
//!   SQLite's default would at 1000.
//! - The checkpointer stops when the writer thread does (its nudge channel closes), and the
//!   writer thread waits for it before it reports that it has stopped.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use rusqlite::hooks::Wal;
use rusqlite::{Connection, OpenFlags};

use super::url::Target;
use crate::options::{ContextOptions, StoreDurability};

/// Log growth (pages) after which the writer thread asks for a checkpoint: SQLite's
/// default autocheckpoint threshold.
pub(super) const SOFT_PAGES: c_int = 1000;
/// Log size (pages) from which the committing connection checkpoints itself (64 MiB of
/// 4 KiB pages).
pub(super) const HARD_PAGES: c_int = 16 * SOFT_PAGES;

thread_local! {
    /// Pages in the WAL after the last commit on this thread's connection (the hook is a
    /// plain function, and each store's writer connection lives on its own thread).
    static WAL_PAGES: Cell<c_int> = const { Cell::new(0) };
}

/// The writer connection's WAL hook (replaces SQLite's autocheckpoint).
fn record_wal_size(wal: &Wal, pages: c_int) -> rusqlite::Result<()> {
    WAL_PAGES.with(|p| p.set(pages));
    if pages >= HARD_PAGES {
        // As SQLite's own autocheckpoint: a busy checkpointer is not an error of the commit.
        let _ = wal.checkpoint();
    }
    Ok(())
}

/// The checkpointer of one store, held by its writer thread.
pub(super) struct Checkpointer {
    nudge: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
    /// The log's size at the last nudge (0 after the log restarted).
    nudged_at: Cell<c_int>,
    /// Checkpoints the thread has run.
    #[cfg(test)]
    passes: Arc<AtomicUsize>,
}

impl Checkpointer {
    /// Starts a checkpointer for the writable file database `target`, and installs the WAL
    /// hook on `writer` (to be called on the writer thread). `None` (SQLite's default
    /// checkpoints kept) for `:memory:`, read-only files, or when the checkpointer's
    /// connection or thread cannot be had.
    pub(super) fn start(
        writer: &Connection,
        target: &Target,
        options: &ContextOptions,
    ) -> Option<Self> {
        let Target::File { path, mode } = target else {
            return None;
        };
        if !mode.writes() {
            return None;
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .ok()?;
        conn.busy_timeout(options.busy_timeout).ok()?;
        let synchronous = match options.durability {
            StoreDurability::Full => "FULL",
            StoreDurability::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", synchronous).ok()?;
        let (nudge, nudged) = sync_channel(1);
        let passes = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&passes);
        let thread = std::thread::Builder::new()
            .name("context-sqlite-checkpoint".into())
            .spawn(move || run(conn, nudged, &counted))
            .ok()?;
        WAL_PAGES.with(|p| p.set(0));
        writer.wal_hook(Some(record_wal_size));
        Some(Checkpointer {
            nudge: Some(nudge),
            thread: Some(thread),
            nudged_at: Cell::new(0),
            #[cfg(test)]
            passes,
        })
    }

    /// After a job on the writer thread: asks for a checkpoint when the log grew by
    /// [`SOFT_PAGES`] since the last request. Never blocks (a request already waiting
    /// covers this one).
    pub(super) fn after_job(&self) {
        let pages = WAL_PAGES.with(Cell::get);
        if pages < self.nudged_at.get() {
            // The log restarted.
            self.nudged_at.set(0);
        }
        if pages - self.nudged_at.get() < SOFT_PAGES || pages >= HARD_PAGES {
            // At the hard limit the writer checkpoints itself after each commit, and a
            // pass under way holds the lock it needs: passes asked back to back would
            // keep the log from ever restarting.
            return;
        }
        self.nudged_at.set(pages);
        if let Some(nudge) = &self.nudge {
            match nudge.try_send(()) {
                Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
            }
        }
    }
}

impl Drop for Checkpointer {
    /// Stops the checkpointer and waits for it (it finishes a checkpoint under way).
    fn drop(&mut self) {
        self.nudge.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The checkpointer thread: one PASSIVE checkpoint per nudge, each counted in `passes`,
/// until the writer is gone.
fn run(conn: Connection, nudged: Receiver<()>, passes: &AtomicUsize) {
    while nudged.recv().is_ok() {
        let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(0));
        if let Err(err) = done {
            tracing::debug!(error = %err, "context: background WAL checkpoint failed");
        }
        passes.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sqlite::url::FileMode;

    /// A busy writer of small commits: the log passes [`SOFT_PAGES`] and keeps growing
    /// between passes, so a nudge per job (as first built) ran a checkpoint, with two
    /// fsyncs, after nearly every commit it could (271 passes for 12,000 commits). Nudged
    /// by growth, the thread runs about one pass per [`SOFT_PAGES`] written (32), and the
    /// writer's own checkpoint at the hard limit restarts the log.
    #[test]
    fn a_busy_writer_is_checkpointed_per_growth_not_per_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let writer = Connection::open(&path).unwrap();
        writer.pragma_update(None, "journal_mode", "WAL").unwrap();
        writer.pragma_update(None, "synchronous", "NORMAL").unwrap();
        writer
            .execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
            .unwrap();
        let target = Target::File {
            path: path.clone(),
            mode: FileMode::Write,
        };
        let options = ContextOptions::default().durability(StoreDurability::Normal);
        let checkpointer = Checkpointer::start(&writer, &target, &options).unwrap();
        let body = "x".repeat(3000);
        let commits = 24_000;
        let (mut most_pages, mut last_pages, mut restarts) = (0, 0, 0);
        for _ in 0..commits {
            writer
                .execute("INSERT INTO t (body) VALUES (?1)", [&body])
                .unwrap();
            let pages = WAL_PAGES.with(Cell::get);
            most_pages = most_pages.max(pages);
            restarts += usize::from(pages < last_pages);
            last_pages = pages;
            checkpointer.after_job();
        }
        let passes = checkpointer.passes.load(Ordering::Relaxed);
        drop(checkpointer);
        // Each commit writes a new leaf and rewrites its parent: ~2 frames, ~24,000 in all.
        assert!(passes >= 5, "{passes} checkpoints");
        assert!(passes <= 120, "{passes} checkpoints for {commits} commits");
        // The log restarts (~48,000 frames in all, so it would reach three times the hard
        // limit if it never did): past the hard limit the checkpointer is left idle, so the
        // writer's own checkpoint gets its lock once a pass under way ends.
        assert!(
            restarts >= 1,
            "the log never restarted (it reached {most_pages} pages)"
        );
        let rows: i64 = writer
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, commits);
    }
}
