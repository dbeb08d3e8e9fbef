//! The public handle: one API, two backends.

use serde::Serialize;
use serde_json::Value;

use crate::backend::{
    AnyBackend, AppendCommit, MemoryStore as _, StoreBackend as _, UnitStore as _, on_backend,
};
use crate::error::{ContextError, Result};
use crate::limits;
use crate::memory::{self, Consolidation, Evidence, MemoryEntry, NewEvidence, Revocation};
use crate::options::ContextOptions;
use crate::unit::{self, NewUnit, Unit, UnitsAppended, Window};

/// A thread and how many units it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadInfo {
    /// The thread's name.
    pub thread: String,
    /// How many units it holds.
    pub units: u64,
}

/// A cheap, cloneable handle on a context store (connection pools inside).
#[derive(Clone)]
pub struct ContextStore {
    backend: AnyBackend,
}

/// Which database a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BackendKind {
    /// SQLite (`sqlite:` URLs).
    Sqlite,
    /// PostgreSQL (`postgres://` URLs).
    Postgres,
}

impl std::fmt::Debug for ContextStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextStore")
            .field("backend", &self.backend_kind())
            .finish()
    }
}

impl ContextStore {
    /// Open (and create or migrate) a store: `sqlite://PATH`, `sqlite:PATH`,
    /// `sqlite::memory:` or `postgres://...` / `postgresql://...`.
    ///
    /// # Cancel safety
    ///
    /// As for [`open_with`](Self::open_with).
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(url, ContextOptions::default()).await
    }

    /// [`open`](Self::open) with options.
    ///
    /// Errors never show a password of `url` (userinfo or `password=`/`sslpassword=`).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing running or open once the step under way ends: on
    /// SQLite the writer thread finishes opening the file (creating it if asked) or the
    /// schema migration already handed to it, then stops and closes its connection; on
    /// PostgreSQL the connections are closed. The migration is one transaction either way:
    /// committed whole or not at all.
    pub async fn open_with(url: &str, options: ContextOptions) -> Result<Self> {
        let backend = AnyBackend::open(url, &options)
            .await
            .unwrap_or_else(|| Err(ContextError::UnsupportedUrl(agent_redact::redact_url(url))))
            .map_err(|err| err.redacted_for(url))?;
        Ok(ContextStore { backend })
    }

    /// Which database this store runs on.
    pub fn backend_kind(&self) -> BackendKind {
        self.backend.kind()
    }

    /// Whether this store was opened read-only (`sqlite://PATH?mode=ro`, or
    /// [`Access::ReadOnlyWhenUnwritable`](crate::Access::ReadOnlyWhenUnwritable) on a file it
    /// could not write): every write fails with [`ContextError::ReadOnly`].
    pub fn is_read_only(&self) -> bool {
        match &self.backend {
            AnyBackend::Sqlite(sqlite) => sqlite.is_read_only(),
            AnyBackend::Postgres(_) => false,
        }
    }

    /// Close the connections; later calls fail ([`ContextError::Closed`] on SQLite, a
    /// database error on PostgreSQL).
    ///
    /// # Cancel safety
    ///
    /// The store is closed at the first poll (later calls fail); dropping the future does
    /// not undo that, it only stops the waiting. On SQLite the writer thread still runs the
    /// jobs queued before and stops, but the write connection then stays open until the
    /// last handle on the store is dropped (or `close` is called again); on PostgreSQL the
    /// connections not yet closed go at the latest when the last handle is dropped.
    pub async fn close(&self) {
        on_backend!(&self.backend, b => b.close().await)
    }

    /// Append one unit at the end of `thread`. Refused (nothing written) when its tool
    /// calls and outputs do not pair up by `call_id` (the error names the unpaired ids),
    /// when `unit` already exists in the thread, or when it breaks a [`limits`] rule.
    ///
    /// # Cancel safety
    ///
    /// As for [`append_units`](Self::append_units): a dropped append writes the unit or
    /// not, and the caller does not learn which.
    pub async fn append_unit(
        &self,
        thread: &str,
        unit: &str,
        items: &[Value],
    ) -> Result<UnitsAppended> {
        let prepared = unit::prepare(thread, unit, items)?;
        let position = self
            .append_prepared(thread, vec![prepared], AppendCommit::Durable, None)
            .await?;
        Ok(UnitsAppended { position })
    }

    /// Append several units to `thread` in one transaction: all or none.
    ///
    /// # Errors
    ///
    /// A [`ContextError::Database`] from a full disk (SQLite's `database or disk is full`)
    /// wrote nothing, and the same store takes the units once there is room. One raised
    /// by the commit itself (SQLite's `disk I/O error` when it cannot grow its `-shm` file)
    /// may come after the units reached the disk: they may then be found once the store is
    /// reopened, and appending them there again is refused as a duplicate unit.
    ///
    /// # Cancel safety
    ///
    /// A dropped append writes all of the units or none, and the caller does not learn
    /// which ([`window`](Self::window) tells; a retry is refused as a duplicate unit if the
    /// first got through). On SQLite the transaction goes to the writer thread at the first
    /// poll and then commits or fails whether or not the future is still there; on
    /// PostgreSQL it is rolled back, unless dropped while its COMMIT is in flight, when it
    /// may have committed.
    pub async fn append_units(&self, thread: &str, units: &[NewUnit]) -> Result<UnitsAppended> {
        self.append_batch(thread, units, AppendCommit::Durable)
            .await
    }

    /// [`append_units`](Self::append_units) for units the caller can derive again (a run's
    /// history, re-derived from its journal): the same checks, atomicity and contract (the
    /// units are found by the next search, in this process or another), but the commit does
    /// not wait for the disk whatever the store's [`StoreDurability`](crate::StoreDurability)
    /// (SQLite `synchronous=NORMAL`; PostgreSQL `synchronous_commit=off`). A power cut, or
    /// on PostgreSQL a server crash, may lose the last such batches, each whole, which the
    /// caller then appends again; a process crash loses nothing acknowledged.
    ///
    /// # Cancel safety
    ///
    /// As for [`append_units`](Self::append_units).
    pub async fn append_derived_units(
        &self,
        thread: &str,
        units: &[NewUnit],
    ) -> Result<UnitsAppended> {
        self.append_batch(thread, units, AppendCommit::Relaxed)
            .await
    }

    /// [`append_derived_units`](Self::append_derived_units) that also records, in the same
    /// transaction, that the thread is derived from its source through `position` (see
    /// [`derived_through`](Self::derived_through)). With no units, only the record is
    /// written, as [`mark_derived_through`](Self::mark_derived_through) does, except that an
    /// unknown thread is created, with no units: a source from which nothing was derived
    /// is recorded as derived too.
    ///
    /// # Cancel safety
    ///
    /// As for [`append_units`](Self::append_units): the units and the record are written
    /// together or not at all.
    pub async fn append_derived_units_through(
        &self,
        thread: &str,
        units: &[NewUnit],
        position: i64,
    ) -> Result<UnitsAppended> {
        if units.is_empty() {
            limits::name("thread", thread)?;
            let position = self
                .append_prepared(thread, Vec::new(), AppendCommit::Relaxed, Some(position))
                .await?;
            return Ok(UnitsAppended { position });
        }
        self.append_batch_through(thread, units, AppendCommit::Relaxed, Some(position))
            .await
    }

    /// How far `thread`'s source has been derived into it: the highest position recorded
    /// by [`append_derived_units_through`](Self::append_derived_units_through) or
    /// [`mark_derived_through`](Self::mark_derived_through), opaque to the store (for a
    /// run's history, a journal seq). `None` for an unknown thread or one never marked.
    ///
    /// # Cancel safety
    ///
    /// Read-only.
    pub async fn derived_through(&self, thread: &str) -> Result<Option<i64>> {
        limits::name("thread", thread)?;
        on_backend!(&self.backend, b => b.derived_through(thread).await)
    }

    /// Records that `thread` is derived from its source through `position`: raises the
    /// record, never lowers it (two writers that derived different extents leave the
    /// larger, each having written its units first). A commit that does not wait for the
    /// disk, as derived units' do: a power cut may lose it, and the caller derives again.
    /// Returns whether the thread exists (an unknown thread is not created).
    ///
    /// # Cancel safety
    ///
    /// Written whole or not at all.
    pub async fn mark_derived_through(&self, thread: &str, position: i64) -> Result<bool> {
        limits::name("thread", thread)?;
        on_backend!(&self.backend, b => b.set_derived_through(thread, position).await)
    }

    async fn append_batch(
        &self,
        thread: &str,
        units: &[NewUnit],
        commit: AppendCommit,
    ) -> Result<UnitsAppended> {
        self.append_batch_through(thread, units, commit, None).await
    }

    async fn append_batch_through(
        &self,
        thread: &str,
        units: &[NewUnit],
        commit: AppendCommit,
        derived_through: Option<i64>,
    ) -> Result<UnitsAppended> {
        if units.len() > limits::MAX_BATCH_UNITS {
            return Err(ContextError::TooLarge {
                field: "batch unit count",
                got: units.len(),
                max: limits::MAX_BATCH_UNITS,
            });
        }
        let prepared = units
            .iter()
            .map(|u| unit::prepare(thread, &u.unit, &u.items))
            .collect::<Result<Vec<_>>>()?;
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = prepared.iter().find(|u| !seen.insert(u.unit.as_str())) {
            return Err(ContextError::DuplicateUnit {
                thread: thread.into(),
                unit: dup.unit.clone(),
            });
        }
        if prepared.is_empty() {
            limits::name("thread", thread)?;
            return Ok(UnitsAppended { position: 0 });
        }
        let position = self
            .append_prepared(thread, prepared, commit, derived_through)
            .await?;
        Ok(UnitsAppended { position })
    }

    async fn append_prepared(
        &self,
        thread: &str,
        units: Vec<unit::Prepared>,
        commit: AppendCommit,
        derived_through: Option<i64>,
    ) -> Result<u64> {
        on_backend!(&self.backend, b => b.append(thread, units, commit, derived_through).await)
    }

    /// The pinned goal plus the last `keep_units` units of `thread`, oldest first.
    /// `keep_units` must be in `1..=MAX_WINDOW_UNITS`. An unknown thread has no units.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. Dropping the future discards the answer; a read already
    /// running (on the blocking pool, the writer thread or the database server) finishes
    /// there, unseen.
    pub async fn window(&self, thread: &str, goal: &str, keep_units: usize) -> Result<Window> {
        limits::name("thread", thread)?;
        limits::keep_units(keep_units)?;
        let units = on_backend!(&self.backend, b => b.window(thread, keep_units).await?);
        Ok(make_window(goal, units))
    }

    /// The pinned goal plus as many of the most recent units as fit `budget_bytes`.
    ///
    /// Size measure: a unit costs the length in bytes of its stored JSON (the compact
    /// serialisation of its items, as returned in `items`); the goal costs its UTF-8 length.
    /// The goal is always kept, even when it alone exceeds the budget; units are taken
    /// newest first while the running total stays within the budget, never split, and the
    /// first one that does not fit ends the window (the window stays a contiguous suffix).
    /// At most `MAX_WINDOW_UNITS` units are returned.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. As for [`window`](Self::window).
    pub async fn window_budget(
        &self,
        thread: &str,
        goal: &str,
        budget_bytes: u64,
    ) -> Result<Window> {
        limits::name("thread", thread)?;
        let goal_bytes = u64::try_from(goal.len()).unwrap_or(u64::MAX);
        let budget = budget_bytes.saturating_sub(goal_bytes);
        let units = if budget == 0 {
            (Vec::new(), 0)
        } else {
            on_backend!(&self.backend, b => b.window_budget(thread, budget, limits::MAX_WINDOW_UNITS).await?)
        };
        Ok(make_window(goal, units))
    }

    /// Units of `thread` whose stored JSON contains `term`, case-insensitively, in thread
    /// order, at most `limit` (`1..=MAX_SEARCH_LIMIT`). Empty term is an error.
    ///
    /// Matching is a substring test on the folded (see [`fold`](crate::fold)) JSON text of the
    /// unit, like SQL's `instr(lower(body), lower(term))`, CJK included. Terms of 3 or
    /// more characters use the trigram index (SQLite FTS5 `trigram`, PostgreSQL `pg_trgm`
    /// GIN); on SQLite the thread's first `4 x limit` units (at least 16, at most 256) are
    /// tested directly first, and a term that already gives `limit` hits there never
    /// touches the index (a common term's posting lists are long; its first hits are
    /// near). Shorter terms, which no trigram index can serve, are answered by scanning only
    /// this thread's units through the thread's key range, stopping at `limit` hits, so
    /// they cost O(units of the thread), never O(store). Units the index does not hold
    /// yet (see [`index_backlog`](Self::index_backlog)) are scanned after it, so every
    /// acknowledged unit is found; that scan is bounded by
    /// [`ContextOptions::index_tail_bytes`] per thread.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. As for [`window`](Self::window).
    pub async fn search(&self, thread: &str, term: &str, limit: usize) -> Result<Vec<Unit>> {
        limits::name("thread", thread)?;
        limits::search(term, limit)?;
        let plan = unit::plan_term(term);
        on_backend!(&self.backend, b => b.search(thread, &plan, limit).await)
    }

    /// All threads with their unit counts, by name.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. As for [`window`](Self::window).
    pub async fn threads(&self) -> Result<Vec<ThreadInfo>> {
        on_backend!(&self.backend, b => b.threads().await)
    }

    /// How many units `thread` holds; 0 for a thread never appended to. Costs one row
    /// read whatever the number of threads (where [`threads`](Self::threads) lists them
    /// all), so a caller walking many threads does O(threads) work.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. As for [`window`](Self::window).
    pub async fn thread_units(&self, thread: &str) -> Result<u64> {
        limits::name("thread", thread)?;
        on_backend!(&self.backend, b => b.thread_units(thread).await)
    }

    /// How many units, over all threads, are not in the trigram index yet.
    ///
    /// Appends do not index: a fold brings units into the index later, in batches, when
    /// the store is idle (or at once for a thread whose un-indexed tail outgrew
    /// [`ContextOptions::index_tail_bytes`]). Until then a search scans them, so they are
    /// found all the same: this number is about cost, never about results. On SQLite the
    /// fold runs on the writer thread of the process that appended; on PostgreSQL on a task
    /// of that store. A tail left by a process that stopped is folded by the next store
    /// opened on the database (or by the next append over the bound).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. As for [`window`](Self::window).
    pub async fn index_backlog(&self) -> Result<u64> {
        on_backend!(&self.backend, b => b.index_backlog().await)
    }

    /// Test seam (feature `test-hooks`, not for products): stops (`true`) or resumes the
    /// background fold of the index, and with it the idle merging of the index's segments
    /// (SQLite). Appends over the tail bound still fold.
    ///
    /// # Cancel safety
    ///
    /// The flag is set at the first poll.
    #[cfg(feature = "test-hooks")]
    pub async fn pause_index_fold(&self, paused: bool) -> Result<()> {
        on_backend!(&self.backend, b => b.pause_fold(paused).await)
    }

    /// Test seam (feature `test-hooks`, not for products): one fold transaction of at most
    /// `max_units` units of one thread, paused or not; returns how many it indexed (0:
    /// nothing left).
    ///
    /// # Cancel safety
    ///
    /// The fold is done whole or not at all.
    #[cfg(feature = "test-hooks")]
    pub async fn fold_index_step(&self, max_units: u64) -> Result<u64> {
        on_backend!(&self.backend, b => b.fold_step(max_units.max(1)).await)
    }

    /// Test seam (feature `test-hooks`, not for products): whether the background index
    /// work is done: every unit folded and, on SQLite, the index's segments merged (the
    /// last merge step found nothing to do), with no append since.
    ///
    /// # Cancel safety
    ///
    /// Read-only.
    #[cfg(feature = "test-hooks")]
    pub async fn index_settled(&self) -> Result<bool> {
        on_backend!(&self.backend, b => b.index_settled().await)
    }

    /// Record evidence. Its source must be new ([`ContextError::DuplicateSource`] otherwise)
    /// and its `observed` time between 1970 and a day from now
    /// ([`ContextError::ObservedOutOfRange`] otherwise). It affects memory at the next
    /// [`consolidate`](Self::consolidate).
    ///
    /// # Cancel safety
    ///
    /// As for [`add_evidence_batch`](Self::add_evidence_batch).
    pub async fn add_evidence(&self, evidence: &NewEvidence) -> Result<()> {
        self.add_evidence_batch(std::slice::from_ref(evidence))
            .await
    }

    /// Record several pieces of evidence in one transaction: all or none (at most
    /// `MAX_BATCH_UNITS` rows). A source that exists, or repeats in the batch, is refused.
    ///
    /// # Cancel safety
    ///
    /// As for [`append_units`](Self::append_units): a dropped call records the whole batch
    /// or nothing, and the caller does not learn which ([`evidence`](Self::evidence) tells;
    /// a retry is refused with [`ContextError::DuplicateSource`] if the first got through).
    pub async fn add_evidence_batch(&self, evidence: &[NewEvidence]) -> Result<()> {
        if evidence.len() > limits::MAX_BATCH_UNITS {
            return Err(ContextError::TooLarge {
                field: "evidence batch count",
                got: evidence.len(),
                max: limits::MAX_BATCH_UNITS,
            });
        }
        let now = memory::unix_now();
        let mut seen = std::collections::HashSet::new();
        for e in evidence {
            memory::check(e, now)?;
            if !seen.insert(e.source.as_str()) {
                return Err(ContextError::DuplicateSource(e.source.clone()));
            }
        }
        if evidence.is_empty() {
            return Ok(());
        }
        on_backend!(&self.backend, b => b.add_evidence(evidence).await)
    }

    /// Revoke a source: it never again counts for memory (after the next consolidation).
    /// Unknown source: [`ContextError::UnknownSource`]; revoking twice is harmless.
    ///
    /// # Cancel safety
    ///
    /// As for [`append_units`](Self::append_units): a dropped call revokes the source or
    /// not, and the caller does not learn which; revoking again is harmless and settles it.
    pub async fn revoke(&self, source: &str) -> Result<Revocation> {
        limits::name("evidence source", source)?;
        on_backend!(&self.backend, b => b.revoke(source).await)
    }

    /// Bring memory up to date with the evidence: per (project, key), the confirmed,
    /// unrevoked evidence with the latest `observed` (ties: the greatest source) wins, with
    /// its source as provenance; a pair with none left is forgotten.
    ///
    /// Atomic (one transaction; readers see the old or the new memory, never a mix) and
    /// incremental: only pairs whose evidence was added or revoked since the last
    /// consolidation are recomputed, each by one index lookup.
    ///
    /// On SQLite the commit does not wait for the disk even with
    /// [`StoreDurability::Full`](crate::StoreDurability::Full): the
    /// dirty set is cleared in the same transaction, so a consolidation lost to a power cut
    /// leaves memory and [`pending`](Self::pending) as they were before it, and the next
    /// call redoes it.
    ///
    /// # Cancel safety
    ///
    /// A dropped consolidation is done whole or not at all (if not, its pairs stay
    /// [`pending`](Self::pending) for the next call). On SQLite it goes to the writer thread
    /// at the first poll and then commits (or fails) whether or not the future is still
    /// there; on PostgreSQL it is rolled back, its lock on the dirty set going with it,
    /// unless dropped while its COMMIT is in flight, when it may have committed.
    pub async fn consolidate(&self) -> Result<Consolidation> {
        on_backend!(&self.backend, b => b.consolidate().await)
    }

    /// How many (project, key) pairs changed since the last consolidation.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. As for [`window`](Self::window).
    pub async fn pending(&self) -> Result<u64> {
        on_backend!(&self.backend, b => b.pending().await)
    }

    /// The consolidated memory of `project` only, by key; `needs_refresh` is set when
    /// `now - observed > max_age` (`max_age >= 0`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. As for [`window`](Self::window).
    pub async fn recall(&self, project: &str, now: i64, max_age: i64) -> Result<Vec<MemoryEntry>> {
        limits::name("project", project)?;
        memory::check_max_age(max_age)?;
        on_backend!(&self.backend, b => b.recall(project, now, max_age).await)
    }

    /// All evidence of `project` (optionally one key), revoked and unconfirmed included.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. As for [`window`](Self::window).
    pub async fn evidence(&self, project: &str, key: Option<&str>) -> Result<Vec<Evidence>> {
        limits::name("project", project)?;
        if let Some(key) = key {
            limits::name("key", key)?;
        }
        on_backend!(&self.backend, b => b.evidence(project, key).await)
    }
}

fn make_window(goal: &str, (recent_units, units_bytes): (Vec<Unit>, u64)) -> Window {
    Window {
        pinned_goal: goal.into(),
        recent_units,
        units_bytes,
    }
}
