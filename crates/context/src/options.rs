//! Open options.

use std::time::Duration;

/// When a write is acknowledged (SQLite; PostgreSQL always commits with its server setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreDurability {
    /// WAL with `synchronous=FULL`: an acknowledged append, evidence row or revocation
    /// survives power loss. A consolidation commits without waiting for the disk (memory is
    /// derived data: one lost to a power cut comes back as pending work, see
    /// [`consolidate`](crate::ContextStore::consolidate)).
    #[default]
    Full,
    /// WAL with `synchronous=NORMAL`: survives a process crash, may lose the last commits on
    /// power loss. History can be re-derived from the journal, so this is a sane choice for
    /// bulk imports.
    Normal,
}

/// Whether a store may be opened read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    /// Read and write, creating the database and applying the schema as needed.
    #[default]
    ReadWrite,
    /// [`ReadWrite`](Access::ReadWrite) when the database can be opened for writing; when
    /// opening an existing SQLite file that way fails because SQLite says it cannot be
    /// written (a read-only file, directory or file system, a disk too full for its `-shm`
    /// file; not a lock held past the timeout) and the file reads, read-only: writes then fail
    /// with [`ContextError::ReadOnly`](crate::ContextError::ReadOnly), reads see what is
    /// there (a search scans the units not yet in the index, which nothing folds). For
    /// commands that only read. A PostgreSQL server is written to or not by its roles: there
    /// this is [`ReadWrite`](Access::ReadWrite). `sqlite://PATH?mode=ro` opens read-only
    /// whatever this says.
    ReadOnlyWhenUnwritable,
}

/// Options for [`ContextStore::open_with`](crate::ContextStore::open_with).
#[derive(Debug, Clone)]
pub struct ContextOptions {
    /// When a write is acknowledged (SQLite; default [`StoreDurability::Full`]).
    pub durability: StoreDurability,
    /// How long SQLite waits for a lock held by another process or connection (at most
    /// `i32::MAX` milliseconds, about 24.8 days: a longer timeout is that).
    pub busy_timeout: Duration,
    /// Read connections (SQLite file) or pool size (PostgreSQL).
    pub connections: u32,
    /// Most stored bytes (unit JSON) a thread may hold outside the trigram index.
    ///
    /// Appends do not index: units go to the index later, in batches, when the store is
    /// idle (the "fold"), and until then a search scans them. This bounds that scan: an
    /// append that leaves its thread's un-indexed tail above the bound folds the tail in
    /// its own transaction, paying for the index on the write path. A larger bound makes
    /// bursts of appends to one thread cheaper and searches during the burst slower (about
    /// 1-2 µs per 700-byte unit scanned, measured on the 2-core bench machine); `0`
    /// indexes every append at once. Default [`DEFAULT_INDEX_TAIL_BYTES`].
    pub index_tail_bytes: u64,
    /// Whether the store may open read-only (default [`Access::ReadWrite`]).
    pub access: Access,
}

/// Default [`ContextOptions::index_tail_bytes`]: 256 KiB, about 370 units of 700 bytes, a
/// scan of well under a millisecond.
pub const DEFAULT_INDEX_TAIL_BYTES: u64 = 256 << 10;

impl Default for ContextOptions {
    fn default() -> Self {
        ContextOptions {
            durability: StoreDurability::Full,
            busy_timeout: Duration::from_secs(5),
            connections: 4,
            index_tail_bytes: DEFAULT_INDEX_TAIL_BYTES,
            access: Access::ReadWrite,
        }
    }
}

impl ContextOptions {
    /// These options with `durability`.
    pub fn durability(mut self, durability: StoreDurability) -> Self {
        self.durability = durability;
        self
    }

    /// These options with `access`.
    pub fn access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// These options with `index_tail_bytes`.
    pub fn index_tail_bytes(mut self, bytes: u64) -> Self {
        self.index_tail_bytes = bytes;
        self
    }
}
