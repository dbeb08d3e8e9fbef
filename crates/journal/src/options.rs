//! Open options.

use std::time::Duration;

/// When an append is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// After the commit is fsync'd (SQLite `synchronous=FULL`, PostgreSQL
    /// `synchronous_commit=on`). Acknowledged events survive power loss and `kill -9`.
    #[default]
    Full,
    /// SQLite WAL with `synchronous=NORMAL` (PostgreSQL `synchronous_commit=off`): survives a
    /// process crash, may lose the last commits on power loss.
    Normal,
}

/// Whether a journal may write, and what opening does when it cannot.
///
/// Read-only opening is for inspecting a journal (listing, showing, replaying): it writes
/// nothing to the database, applies no schema step (a database whose schema is older or
/// newer than this build's is refused), and every append fails with
/// [`JournalError::ReadOnly`](crate::JournalError::ReadOnly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    /// Read and write, creating the database and applying the schema as needed.
    #[default]
    ReadWrite,
    /// Read only. A SQLite file is opened `mode=ro`; where SQLite cannot read it that way
    /// (a WAL database in a directory it may not write, so no `-shm` file can be made) and
    /// no `-wal` file holds commits, it is opened `immutable=1`. PostgreSQL sessions are
    /// `default_transaction_read_only`. `memory:` and `sqlite::memory:` cannot be opened
    /// read-only (there is nothing to read).
    ReadOnly,
    /// [`ReadWrite`](Access::ReadWrite) when the database can be written; when opening it
    /// for writing fails because it cannot be written (a read-only file or directory, a
    /// read-only file system, a disk too full for SQLite's `-shm` file),
    /// [`ReadOnly`](Access::ReadOnly). For commands that only read.
    ReadOnlyWhenUnwritable,
}

/// Options for [`Journal::open_with`](crate::Journal::open_with).
#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// When an append is acknowledged (default: [`Durability::Full`]).
    pub durability: Durability,
    /// Most events written in one transaction by the group-commit writer (default 1024;
    /// clamped to `1..=4096`, which keeps a batch's binds under SQLite's limit).
    pub max_batch: usize,
    /// Capacity of the queue in front of the writer; appends wait (backpressure) when full.
    pub queue_capacity: usize,
    /// How long SQLite waits for a lock held by another process.
    pub busy_timeout: Duration,
    /// How often `tail` re-reads when no in-process notification arrives (appends made by
    /// another process on SQLite; a lost LISTEN connection on PostgreSQL).
    pub tail_poll: Duration,
    /// Read connections in the pool, and so the most reads that run at once; further reads
    /// wait for a free connection.
    pub read_connections: u32,
    /// PostgreSQL: how long a read connection may sit idle in the pool before it is closed
    /// (default [`DEFAULT_READ_IDLE_TIMEOUT`]), so that a pool grown by a burst of reads
    /// gives its connections back to the server; checked every this long, so one closes
    /// within twice this time. The LISTEN connection is held, never idle.
    pub read_idle_timeout: Duration,
    /// SQLite: the longest a commit waits for producers acknowledged by the previous commit
    /// to append again (group commit), also never more than half the previous commit's
    /// duration; zero commits whatever is queued at once.
    pub linger: Duration,
    /// Whether the journal may write (default: [`Access::ReadWrite`]).
    pub access: Access,
    /// Test builds only: awaited by the PostgreSQL writer inside each write transaction.
    #[cfg(feature = "test-hooks")]
    pub write_hook: Option<crate::hooks::WriteHook>,
}

/// Default for [`JournalOptions::read_idle_timeout`]: a long-lived process (a worker) keeps
/// connections for reads that come often and gives back within a minute those of a burst.
pub const DEFAULT_READ_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Default for [`JournalOptions::linger`]: short next to an fsync.
pub const DEFAULT_LINGER: Duration = Duration::from_micros(200);

/// Default for [`JournalOptions::max_batch`]; bounded by SQLite's bind-variable limit.
pub(crate) const DEFAULT_MAX_BATCH: usize = 1024;
/// Upper clamp for [`JournalOptions::max_batch`] (6 binds per row stays under 32766).
pub(crate) const MAX_MAX_BATCH: usize = 4096;

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            durability: Durability::Full,
            max_batch: DEFAULT_MAX_BATCH,
            queue_capacity: 65_536,
            busy_timeout: Duration::from_secs(5),
            tail_poll: Duration::from_millis(250),
            read_connections: 4,
            read_idle_timeout: DEFAULT_READ_IDLE_TIMEOUT,
            linger: DEFAULT_LINGER,
            access: Access::ReadWrite,
            #[cfg(feature = "test-hooks")]
            write_hook: None,
        }
    }
}

impl JournalOptions {
    /// These options with `durability`.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// These options with `access`.
    pub fn access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    pub(crate) fn batch_limit(&self) -> usize {
        self.max_batch.clamp(1, MAX_MAX_BATCH)
    }
}
