//! WAL checkpoints off the write path (file databases).
//!
//! SQLite's default checkpoints the WAL in the committing connection once the log holds
//! 1000 pages: on the writer thread, inside an append, with a write of every page to the
//! database file and an fsync of it (perf on a batched 100k fill: a third of the writer
//! thread's time). Here the writer connection's WAL hook only records the log size, and
//! after each job the writer thread nudges a checkpointer thread, which runs PASSIVE
//! checkpoints on its own connection to the same file beside the writer.
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
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use rusqlite::hooks::Wal;
use rusqlite::{Connection, OpenFlags};

use super::url::Target;
use crate::options::{ContextOptions, StoreDurability};

/// Log size (pages) from which the writer thread asks for a checkpoint: SQLite's default
/// autocheckpoint threshold.
pub(super) const SOFT_PAGES: c_int = 1000;
/// Log size (pages) from which the committing connection checkpoints itself.
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
        let Target::File {
            path,
            read_only: false,
            ..
        } = target
        else {
            return None;
        };
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
        let thread = std::thread::Builder::new()
            .name("context-sqlite-checkpoint".into())
            .spawn(move || run(conn, nudged))
            .ok()?;
        WAL_PAGES.with(|p| p.set(0));
        writer.wal_hook(Some(record_wal_size));
        Some(Checkpointer {
            nudge: Some(nudge),
            thread: Some(thread),
        })
    }

    /// After a job on the writer thread: asks for a checkpoint when the log is long enough.
    /// Never blocks (a request already waiting covers this one).
    pub(super) fn after_job(&self) {
        if WAL_PAGES.with(Cell::get) < SOFT_PAGES {
            return;
        }
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

/// The checkpointer thread: one PASSIVE checkpoint per nudge, until the writer is gone.
fn run(conn: Connection, nudged: Receiver<()>) {
    while nudged.recv().is_ok() {
        let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(0));
        if let Err(err) = done {
            tracing::debug!(error = %err, "context: background WAL checkpoint failed");
        }
    }
}
