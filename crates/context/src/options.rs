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

/// Options for [`ContextStore::open_with`](crate::ContextStore::open_with).
#[derive(Debug, Clone)]
pub struct ContextOptions {
    /// When a write is acknowledged (SQLite; default [`StoreDurability::Full`]).
    pub durability: StoreDurability,
    /// How long SQLite waits for a lock held by another process or connection.
    pub busy_timeout: Duration,
    /// Read connections (SQLite file) or pool size (PostgreSQL).
    pub connections: u32,
}

impl Default for ContextOptions {
    fn default() -> Self {
        ContextOptions {
            durability: StoreDurability::Full,
            busy_timeout: Duration::from_secs(5),
            connections: 4,
        }
    }
}

impl ContextOptions {
    /// These options with `durability`.
    pub fn durability(mut self, durability: StoreDurability) -> Self {
        self.durability = durability;
        self
    }
}
