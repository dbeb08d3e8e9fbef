//! SQLite backend on rusqlite: every write is one `BEGIN IMMEDIATE` transaction run whole on
//! the writer thread (it never fails half-way on a lock upgrade, and costs one thread
//! hand-off); reads run on pooled read-only connections (WAL: readers see the last
//! committed state and never block the writer). See [`worker`] for who runs what.
//!
//! The schema (`migrations/sqlite/0001_context.sql`, version table `context_schema`) is
//! the same one the earlier sqlx-based backend created, so existing files open unchanged.

mod url;
mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension as _, Row, TransactionBehavior, params};

use crate::error::{ContextError, Result, is_sqlite_unique_violation};
use crate::memory::{Consolidation, Evidence, MemoryEntry, NewEvidence, Revocation, needs_refresh};
use crate::options::ContextOptions;
use crate::store::ThreadInfo;
use crate::unit::{Prepared, TermPlan, Unit, decode};

use worker::Db;

const SCHEMA_VERSION: i64 = 1;
const MIGRATION_0001: &str = include_str!("../migrations/sqlite/0001_context.sql");
/// Positions live in the low 32 bits of a unit id, the thread id in the high bits.
const SEQ_BITS: u32 = 32;
const MAX_SEQ: i64 = (1 << SEQ_BITS) - 1;
const MAX_THREAD_ID: i64 = (1 << 31) - 1;

/// How many of a thread's first units an indexed search tests directly before it asks the
/// trigram index: four per requested hit, within these bounds. A term found in at least a
/// quarter of the units gives `limit` hits among them and is answered there (they are its
/// first `limit` hits in position order), without loading the term's long posting lists; a
/// rarer term costs this short scan plus an index query over the positions after it.
const SEARCH_PREFIX_PER_HIT: i64 = 4;
const SEARCH_PREFIX_MIN: i64 = 16;
const SEARCH_PREFIX_MAX: i64 = 256;

/// Recompute memory for the dirty (project, key) pairs, then clear them. The planner is
/// held to the dirty set as the outer loop (CROSS JOIN), so the cost is one index lookup
/// per changed pair.
const CONSOLIDATE_FORGET: &str =
    "DELETE FROM context_memory WHERE (project, key) IN (SELECT project, key FROM context_dirty)";
const CONSOLIDATE_WRITE: &str = "\
INSERT INTO context_memory (project, key, value, source, observed)
SELECT e.project, e.key, e.value, e.source, e.observed
FROM context_dirty d CROSS JOIN context_evidence e
WHERE e.source = (
    SELECT w.source FROM context_evidence w
    WHERE w.project = d.project AND w.key = d.key AND w.confirmed = 1 AND w.revoked = 0
    ORDER BY w.observed DESC, w.source DESC LIMIT 1)";
const CONSOLIDATE_CLEAR: &str = "DELETE FROM context_dirty";

/// thread name -> thread id; ids are never reused or changed, so entries stay valid.
type ThreadIds = Arc<Mutex<HashMap<String, i64>>>;

#[derive(Clone)]
pub(crate) struct SqliteBackend {
    db: Arc<Db>,
    threads: ThreadIds,
}

impl SqliteBackend {
    pub(crate) async fn open(url: &str, options: &ContextOptions) -> Result<Self> {
        let target = url::parse(url)?;
        let db = Db::open(&target, options).await?;
        db.write(migrate).await?;
        Ok(SqliteBackend {
            db,
            threads: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    pub(crate) async fn close(&self) {
        self.db.close().await;
    }

    /// Append `units` to `thread` in one transaction: one upsert reserves the positions,
    /// then one multi-row INSERT per chunk (a trigger feeds the FTS index).
    pub(crate) async fn append(&self, thread: &str, units: Vec<Prepared>) -> Result<u64> {
        let thread = thread.to_string();
        let threads = self.threads.clone();
        self.db
            .write(move |conn| {
                let count = i64::try_from(units.len()).unwrap_or(i64::MAX);
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let (thread_id, last): (i64, i64) = tx
                    .prepare_cached(
                        "INSERT INTO context_threads (thread, last_seq) VALUES (?1, ?2) \
                         ON CONFLICT (thread) DO UPDATE SET last_seq = last_seq + ?2 \
                         RETURNING id, last_seq",
                    )?
                    .query_row(params![thread, count], |r| Ok((r.get(0)?, r.get(1)?)))?;
                if thread_id > MAX_THREAD_ID {
                    return Err(ContextError::TooManyThreads);
                }
                if last > MAX_SEQ {
                    return Err(ContextError::ThreadFull(thread));
                }
                let first = last - count + 1;
                for (chunk_no, chunk) in units.chunks(INSERT_CHUNK).enumerate() {
                    let first = first + i64::try_from(chunk_no * INSERT_CHUNK).unwrap_or(0);
                    match insert_units(&tx, thread_id, first, chunk) {
                        Ok(()) => {}
                        Err(err) if is_sqlite_unique_violation(&err) => {
                            return Err(duplicate_in(&tx, &thread, thread_id, chunk));
                        }
                        Err(err) => return Err(err.into()),
                    }
                }
                tx.commit()?;
                if let Ok(mut map) = threads.lock() {
                    map.entry(thread).or_insert(thread_id);
                }
                Ok(u64::try_from(last).unwrap_or_default())
            })
            .await
    }

    /// The newest `keep` units, oldest first, with the sum of their stored sizes.
    pub(crate) async fn window(&self, thread: &str, keep: usize) -> Result<(Vec<Unit>, u64)> {
        self.window_budget(thread, u64::MAX, keep).await
    }

    /// The newest units (at most `cap`) whose stored sizes fit `budget`, oldest first, with
    /// the sum of their sizes. Stops at the first unit that does not fit.
    pub(crate) async fn window_budget(
        &self,
        thread: &str,
        budget: u64,
        cap: usize,
    ) -> Result<(Vec<Unit>, u64)> {
        let thread = thread.to_string();
        let threads = self.threads.clone();
        self.db
            .read(move |conn| {
                let Some((lo, hi)) = thread_range(conn, &threads, &thread)? else {
                    return Ok((Vec::new(), 0));
                };
                let mut stmt = conn.prepare_cached(
                    "SELECT id, unit, body, size FROM context_units WHERE id > ?1 AND id < ?2 \
                     ORDER BY id DESC",
                )?;
                let mut rows = stmt.query(params![lo, hi])?;
                let mut used: u64 = 0;
                let mut units = Vec::with_capacity(cap.min(64));
                while units.len() < cap
                    && let Some(row) = rows.next()?
                {
                    let size = size_of(row)?;
                    if used.saturating_add(size) > budget {
                        break;
                    }
                    used = used.saturating_add(size);
                    units.push(unit_of(row)?);
                }
                units.reverse();
                Ok((units, used))
            })
            .await
    }

    /// Indexed terms: first a direct test of the thread's first few units (see
    /// [`SEARCH_PREFIX_PER_HIT`]), then (when that gave fewer than `limit` hits) the
    /// trigram index over the positions after them. Short terms: a scan of the thread's id
    /// range that stops at `limit` hits. Every path tests the same thing,
    /// `instr(folded, term) > 0`, which is what the trigram index answers for a phrase of 3
    /// or more characters.
    pub(crate) async fn search(
        &self,
        thread: &str,
        plan: &TermPlan,
        limit: usize,
    ) -> Result<Vec<Unit>> {
        let thread = thread.to_string();
        let threads = self.threads.clone();
        let (term, indexed) = match plan {
            TermPlan::Indexed(term) => (term.clone(), true),
            TermPlan::ThreadScan(term) => (term.clone(), false),
        };
        self.db
            .read(move |conn| {
                let Some((lo, hi)) = thread_range(conn, &threads, &thread)? else {
                    return Ok(Vec::new());
                };
                let scan_end = if indexed {
                    let prefix = i64::try_from(limit)
                        .unwrap_or(i64::MAX)
                        .saturating_mul(SEARCH_PREFIX_PER_HIT)
                        .clamp(SEARCH_PREFIX_MIN, SEARCH_PREFIX_MAX);
                    (lo + prefix + 1).min(hi)
                } else {
                    hi
                };
                let mut scan = conn.prepare_cached(
                    "SELECT id, unit, body FROM context_units \
                     WHERE id > ?1 AND id < ?2 AND instr(folded, ?3) > 0 \
                     ORDER BY id",
                )?;
                let mut units = collect_units(scan.query(params![lo, scan_end, term])?, limit)?;
                if !indexed || units.len() >= limit {
                    return Ok(units);
                }
                let last: i64 = conn
                    .prepare_cached("SELECT last_seq FROM context_threads WHERE id = ?1")?
                    .query_row(params![lo >> SEQ_BITS], |r| r.get(0))?;
                if lo + last < scan_end {
                    return Ok(units);
                }
                let phrase = format!("\"{}\"", term.replace('"', "\"\""));
                // The index walks its matches in rowid order, lazily: reading stops at `limit`.
                let mut index = conn.prepare_cached(
                    "SELECT u.id, u.unit, u.body \
                     FROM context_units_fts f CROSS JOIN context_units u ON u.id = f.rowid \
                     WHERE context_units_fts MATCH ?1 AND f.rowid >= ?2 AND f.rowid < ?3 \
                     ORDER BY f.rowid",
                )?;
                let rest = limit - units.len();
                units.extend(collect_units(
                    index.query(params![phrase, scan_end, hi])?,
                    rest,
                )?);
                Ok(units)
            })
            .await
    }

    pub(crate) async fn threads(&self) -> Result<Vec<ThreadInfo>> {
        self.db
            .read(|conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT thread, last_seq FROM context_threads ORDER BY thread",
                )?;
                let rows = stmt.query_map([], |row| {
                    Ok(ThreadInfo {
                        thread: row.get(0)?,
                        units: u64::try_from(row.get::<_, i64>(1)?).unwrap_or_default(),
                    })
                })?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }

    /// Insert evidence rows and mark their pairs dirty, in one transaction.
    pub(crate) async fn add_evidence(&self, rows: &[NewEvidence]) -> Result<()> {
        let rows = rows.to_vec();
        self.db
            .write(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                {
                    let mut insert = tx.prepare_cached(
                        "INSERT INTO context_evidence \
                         (source, project, key, value, observed, confirmed) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )?;
                    let mut mark = tx.prepare_cached(MARK_DIRTY)?;
                    for e in &rows {
                        let inserted = insert.execute(params![
                            e.source,
                            e.project,
                            e.key,
                            e.value,
                            e.observed,
                            i64::from(e.confirmed),
                        ]);
                        match inserted {
                            Ok(_) => {}
                            // Sources do not repeat within a batch (checked before), so
                            // this row's source is the one that already exists.
                            Err(err) if is_sqlite_unique_violation(&err) => {
                                return Err(ContextError::DuplicateSource(e.source.clone()));
                            }
                            Err(err) => return Err(err.into()),
                        }
                        mark.execute(params![e.project, e.key])?;
                    }
                }
                tx.commit()?;
                Ok(())
            })
            .await
    }

    pub(crate) async fn revoke(&self, source: &str) -> Result<Revocation> {
        let source = source.to_string();
        self.db
            .write(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let found: Option<(String, String, i64)> = tx
                    .prepare_cached(
                        "SELECT project, key, revoked FROM context_evidence WHERE source = ?1",
                    )?
                    .query_row(params![source], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()?;
                let Some((project, key, revoked)) = found else {
                    return Err(ContextError::UnknownSource(source));
                };
                let already = revoked != 0;
                if !already {
                    tx.prepare_cached("UPDATE context_evidence SET revoked = 1 WHERE source = ?1")?
                        .execute(params![source])?;
                    tx.prepare_cached(MARK_DIRTY)?
                        .execute(params![project, key])?;
                }
                tx.commit()?;
                Ok(Revocation {
                    source,
                    project,
                    key,
                    newly_revoked: !already,
                })
            })
            .await
    }

    /// One transaction whose commit does not wait for the disk (`synchronous=NORMAL` for
    /// this commit only, whatever the store's durability): memory is derived data, and the
    /// dirty set is cleared in the same transaction, so a consolidation lost to a power cut
    /// comes back whole as pending work. The WAL is sequential, so the next durable commit
    /// makes it durable too. This turns the cost of a one-change consolidation from one
    /// fsync (0.25 to 4 ms measured on this machine) into CPU time.
    pub(crate) async fn consolidate(&self) -> Result<Consolidation> {
        self.db
            .write(|conn| {
                let synchronous: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
                let relax = synchronous > SYNCHRONOUS_NORMAL;
                if relax {
                    conn.pragma_update(None, "synchronous", SYNCHRONOUS_NORMAL)?;
                }
                let result = consolidate_tx(conn);
                if relax {
                    conn.pragma_update(None, "synchronous", synchronous)?;
                }
                result
            })
            .await
    }

    pub(crate) async fn pending(&self) -> Result<u64> {
        self.db
            .read(|conn| {
                let n: i64 = conn
                    .prepare_cached("SELECT count(*) FROM context_dirty")?
                    .query_row([], |r| r.get(0))?;
                Ok(u64::try_from(n).unwrap_or_default())
            })
            .await
    }

    pub(crate) async fn recall(
        &self,
        project: &str,
        now: i64,
        max_age: i64,
    ) -> Result<Vec<MemoryEntry>> {
        let project = project.to_string();
        self.db
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT project, key, value, source, observed FROM context_memory \
                     WHERE project = ?1 ORDER BY key",
                )?;
                let rows = stmt.query_map(params![project], |row| {
                    let observed: i64 = row.get(4)?;
                    Ok(MemoryEntry {
                        project: row.get(0)?,
                        key: row.get(1)?,
                        value: row.get(2)?,
                        source: row.get(3)?,
                        observed,
                        needs_refresh: needs_refresh(now, observed, max_age),
                    })
                })?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }

    pub(crate) async fn evidence(&self, project: &str, key: Option<&str>) -> Result<Vec<Evidence>> {
        let project = project.to_string();
        let key = key.map(str::to_string);
        self.db
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT source, project, key, value, observed, confirmed, revoked \
                     FROM context_evidence WHERE project = ?1 AND (?2 IS NULL OR key = ?2) \
                     ORDER BY key, observed, source",
                )?;
                let rows = stmt.query_map(params![project, key], |row| {
                    Ok(Evidence {
                        source: row.get(0)?,
                        project: row.get(1)?,
                        key: row.get(2)?,
                        value: row.get(3)?,
                        observed: row.get(4)?,
                        confirmed: row.get::<_, i64>(5)? != 0,
                        revoked: row.get::<_, i64>(6)? != 0,
                    })
                })?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }
}

const MARK_DIRTY: &str = "INSERT OR IGNORE INTO context_dirty (project, key) VALUES (?1, ?2)";

/// Units per multi-row INSERT (5 binds each, under SQLite's 32766 bind limit).
///
/// One statement per chunk, not one per unit: every statement inside a transaction opens a
/// savepoint, and FTS5 writes its pending index data out as a new segment at each
/// savepoint, so per-unit statements would cost one index segment (and its merges) per unit.
const INSERT_CHUNK: usize = 500;

/// Insert `units` at positions `first..` of the thread, in one statement.
fn insert_units(
    conn: &Connection,
    thread_id: i64,
    first: i64,
    units: &[Prepared],
) -> rusqlite::Result<()> {
    let mut sql = String::from("INSERT INTO context_units (id, unit, size, body, folded) VALUES ");
    for i in 0..units.len() {
        sql.push_str(if i == 0 {
            "(?,?,?,?,?)"
        } else {
            ",(?,?,?,?,?)"
        });
    }
    let mut insert = conn.prepare_cached(&sql)?;
    let mut n = 0;
    for (i, unit) in units.iter().enumerate() {
        let seq = first + i64::try_from(i).unwrap_or(i64::MAX);
        let size = i64::try_from(unit.body.len()).unwrap_or(i64::MAX);
        insert.raw_bind_parameter(n + 1, (thread_id << SEQ_BITS) | seq)?;
        insert.raw_bind_parameter(n + 2, &unit.unit)?;
        insert.raw_bind_parameter(n + 3, size)?;
        insert.raw_bind_parameter(n + 4, &unit.body)?;
        insert.raw_bind_parameter(n + 5, &unit.folded)?;
        n += 5;
    }
    insert.raw_execute()?;
    Ok(())
}

/// The error for a chunk refused by the (thread, unit) index: its first unit that already
/// exists. The chunk's own rows were undone with its statement, and a batch has no repeats
/// (checked before), so any match is an older unit.
fn duplicate_in(
    conn: &Connection,
    thread: &str,
    thread_id: i64,
    units: &[Prepared],
) -> ContextError {
    let duplicate = |unit: &str| ContextError::DuplicateUnit {
        thread: thread.into(),
        unit: unit.into(),
    };
    let mut find = match conn
        .prepare_cached("SELECT 1 FROM context_units WHERE (id >> 32) = ?1 AND unit = ?2")
    {
        Ok(find) => find,
        Err(err) => return err.into(),
    };
    for unit in units {
        match find.exists(params![thread_id, unit.unit]) {
            Ok(true) => return duplicate(&unit.unit),
            Ok(false) => {}
            Err(err) => return err.into(),
        }
    }
    duplicate(units.first().map_or("", |u| u.unit.as_str()))
}

/// `PRAGMA synchronous` value of NORMAL.
const SYNCHRONOUS_NORMAL: i64 = 1;

fn consolidate_tx(conn: &mut Connection) -> Result<Consolidation> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.prepare_cached(CONSOLIDATE_FORGET)?.execute([])?;
    let written = tx.prepare_cached(CONSOLIDATE_WRITE)?.execute([])?;
    let recomputed = tx.prepare_cached(CONSOLIDATE_CLEAR)?.execute([])?;
    tx.commit()?;
    Ok(Consolidation {
        written: u64::try_from(written).unwrap_or_default(),
        recomputed: u64::try_from(recomputed).unwrap_or_default(),
    })
}

/// Create or check the schema, in one immediate transaction (several processes may open
/// the same file at once).
fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS context_schema (version INTEGER NOT NULL)")?;
    let found: Option<i64> =
        tx.query_row("SELECT max(version) FROM context_schema", [], |r| r.get(0))?;
    match found {
        Some(found) if found > SCHEMA_VERSION => {
            return Err(ContextError::SchemaTooNew {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        Some(_) => {}
        None => {
            tx.execute_batch(MIGRATION_0001).map_err(|err| {
                // SQLite's message without the statement it quotes (the whole schema).
                ContextError::Migration(match err {
                    rusqlite::Error::SqlInputError { msg, .. } => msg,
                    other => other.to_string(),
                })
            })?;
            tx.execute(
                "INSERT INTO context_schema (version) VALUES (?1)",
                params![SCHEMA_VERSION],
            )?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// The id range `(lo, hi)` (exclusive) of a thread's units, or `None` for an unknown thread.
fn thread_range(
    conn: &Connection,
    threads: &ThreadIds,
    thread: &str,
) -> Result<Option<(i64, i64)>> {
    let cached = threads
        .lock()
        .map(|map| map.get(thread).copied())
        .unwrap_or(None);
    let thread_id = match cached {
        Some(id) => id,
        None => {
            let found: Option<i64> = conn
                .prepare_cached("SELECT id FROM context_threads WHERE thread = ?1")?
                .query_row(params![thread], |r| r.get(0))
                .optional()?;
            let Some(id) = found else { return Ok(None) };
            if let Ok(mut map) = threads.lock() {
                map.insert(thread.to_string(), id);
            }
            id
        }
    };
    Ok(Some((thread_id << SEQ_BITS, (thread_id + 1) << SEQ_BITS)))
}

/// The stored size (bytes of the body) in column 3.
fn size_of(row: &Row<'_>) -> Result<u64> {
    let size: i64 = row.get(3)?;
    u64::try_from(size).map_err(|_| ContextError::Corrupt(format!("negative unit size {size}")))
}

/// A unit from a row whose first three columns are `id, unit, body`.
fn unit_of(row: &Row<'_>) -> Result<Unit> {
    let id: i64 = row.get(0)?;
    let body = row.get_ref(2)?.as_str().map_err(rusqlite::Error::from)?;
    decode(row.get(1)?, id & MAX_SEQ, body)
}

/// The first `max` units of `rows`. Limits are applied here, not by a bound `LIMIT ?`:
/// SQLite's planner reads a bound LIMIT value, so rebinding it would force a re-prepare of
/// the statement on every call.
fn collect_units(mut rows: rusqlite::Rows<'_>, max: usize) -> Result<Vec<Unit>> {
    let mut units = Vec::new();
    while units.len() < max
        && let Some(row) = rows.next()?
    {
        units.push(unit_of(row)?);
    }
    Ok(units)
}
