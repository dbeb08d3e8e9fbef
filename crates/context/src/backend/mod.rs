//! The store's backends, one directory each with the same layout: `sqlite/` and
//! `postgres/`, each split by domain into `units` (history units, windows, search),
//! `memory` (evidence and consolidated memory) and `schema` (the versioned migration).
//!
//! Parity is held by the compiler: each domain is a trait ([`UnitStore`],
//! [`MemoryStore`]) that every backend implements whole, [`StoreBackend`] requires both,
//! and [`on_backend!`] dispatches a call to whichever backend a store opened with one
//! exhaustive `match`. A method added for one backend cannot be forgotten on the other.
//! Arguments arrive already checked against [`crate::limits`].

mod postgres;
mod sqlite;

use crate::error::Result;
use crate::memory::{Consolidation, Evidence, MemoryEntry, NewEvidence, Revocation};
use crate::options::ContextOptions;
use crate::store::{BackendKind, ThreadInfo};
use crate::unit::{Prepared, TermPlan, Unit};

pub(crate) use postgres::PgBackend;
pub(crate) use sqlite::SqliteBackend;

/// Whether an append's commit waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AppendCommit {
    /// At the store's durability (SQLite) or the server's `synchronous_commit` (PostgreSQL).
    Durable,
    /// Without waiting for the disk, for units the caller can derive again: a power cut
    /// (or a PostgreSQL server crash) may lose the last such appends whole, never part of
    /// one, and never an earlier durable commit.
    Relaxed,
}

/// History units: appends, windows, search.
pub(crate) trait UnitStore {
    /// Appends `units` at the end of `thread` in one transaction, all or none; returns the
    /// position of the last one. With `derived_through`, raises the thread's to it in the
    /// same transaction. With no units, creates the thread when unknown and returns its
    /// last position.
    async fn append(
        &self,
        thread: &str,
        units: Vec<Prepared>,
        commit: AppendCommit,
        derived_through: Option<i64>,
    ) -> Result<u64>;

    /// The thread's `derived_through` (`None`: unknown thread, or never set).
    async fn derived_through(&self, thread: &str) -> Result<Option<i64>>;

    /// Raises an existing thread's `derived_through` to `position` (never lowers it), in a
    /// commit that does not wait for the disk; returns whether the thread exists.
    async fn set_derived_through(&self, thread: &str, position: i64) -> Result<bool>;

    /// The newest `keep` units, oldest first, with the sum of their stored sizes.
    async fn window(&self, thread: &str, keep: usize) -> Result<(Vec<Unit>, u64)>;

    /// The newest units (at most `cap`) whose stored sizes fit `budget`, oldest first, with
    /// the sum of their sizes. Stops at the first unit that does not fit.
    async fn window_budget(
        &self,
        thread: &str,
        budget: u64,
        cap: usize,
    ) -> Result<(Vec<Unit>, u64)>;

    /// Units of `thread` matching `plan`, in thread order, at most `limit`.
    async fn search(&self, thread: &str, plan: &TermPlan, limit: usize) -> Result<Vec<Unit>>;

    /// Every thread with its unit count, by name.
    async fn threads(&self) -> Result<Vec<ThreadInfo>>;

    /// How many units `thread` holds (0 for an unknown thread): one row read.
    async fn thread_units(&self, thread: &str) -> Result<u64>;

    /// How many units (all threads) are not in the trigram index yet.
    async fn index_backlog(&self) -> Result<u64>;

    /// Test seam: stops (`true`) or resumes the background fold of the index.
    #[cfg(feature = "test-hooks")]
    async fn pause_fold(&self, paused: bool) -> Result<()>;

    /// Test seam: one fold transaction of at most `max_units` units of one thread; returns
    /// how many it indexed (0: nothing left).
    #[cfg(feature = "test-hooks")]
    async fn fold_step(&self, max_units: u64) -> Result<u64>;

    /// Test seam: whether the background index work is done (every unit folded and, on
    /// SQLite, the last merge step found nothing to merge) with no append since.
    #[cfg(feature = "test-hooks")]
    async fn index_settled(&self) -> Result<bool>;
}

/// Evidence and the memory consolidated from it.
pub(crate) trait MemoryStore {
    /// Inserts evidence rows and marks their pairs dirty, in one transaction.
    async fn add_evidence(&self, rows: &[NewEvidence]) -> Result<()>;

    /// Marks a source revoked (idempotent) and its pair dirty.
    async fn revoke(&self, source: &str) -> Result<Revocation>;

    /// Recomputes memory for the dirty pairs and clears them, atomically.
    async fn consolidate(&self) -> Result<Consolidation>;

    /// How many pairs are dirty.
    async fn pending(&self) -> Result<u64>;

    /// One project's memory, by key, flagged against `max_age`.
    async fn recall(&self, project: &str, now: i64, max_age: i64) -> Result<Vec<MemoryEntry>>;

    /// One project's evidence (optionally one key), revoked and unconfirmed included.
    async fn evidence(&self, project: &str, key: Option<&str>) -> Result<Vec<Evidence>>;
}

/// A whole backend: every domain, and closing.
pub(crate) trait StoreBackend: UnitStore + MemoryStore {
    /// Closes the connections; later calls fail.
    async fn close(&self);
}

/// Whichever backend a store opened; cheap to clone (pools and handles inside).
#[derive(Clone)]
pub(crate) enum AnyBackend {
    Sqlite(SqliteBackend),
    Postgres(PgBackend),
}

/// Runs `$call` with `$b` bound to whichever backend `$backend` holds.
macro_rules! on_backend {
    ($backend:expr, $b:ident => $call:expr) => {
        match $backend {
            $crate::backend::AnyBackend::Sqlite($b) => $call,
            $crate::backend::AnyBackend::Postgres($b) => $call,
        }
    };
}
pub(crate) use on_backend;

impl AnyBackend {
    /// Opens the backend `url` names (`sqlite:` or `postgres(ql)://`), applying its schema;
    /// `None` for any other scheme. Errors may quote `url`: the caller redacts them.
    pub(crate) async fn open(url: &str, options: &ContextOptions) -> Option<Result<Self>> {
        if url.starts_with("sqlite:") {
            Some(
                SqliteBackend::open(url, options)
                    .await
                    .map(AnyBackend::Sqlite),
            )
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(
                PgBackend::open(url, options)
                    .await
                    .map(AnyBackend::Postgres),
            )
        } else {
            None
        }
    }

    /// Which database this is.
    pub(crate) fn kind(&self) -> BackendKind {
        match self {
            AnyBackend::Sqlite(_) => BackendKind::Sqlite,
            AnyBackend::Postgres(_) => BackendKind::Postgres,
        }
    }
}
