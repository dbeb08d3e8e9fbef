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
    /// SQLite: the longest a commit waits for producers acknowledged by the previous commit
    /// to append again (group commit), also never more than half the previous commit's
    /// duration; zero commits whatever is queued at once.
    pub linger: Duration,
}

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
            linger: DEFAULT_LINGER,
        }
    }
}

impl JournalOptions {
    /// These options with `durability`.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    pub(crate) fn batch_limit(&self) -> usize {
        self.max_batch.clamp(1, MAX_MAX_BATCH)
    }
}
