//! SQLite backend: one writer connection (writes are `BEGIN IMMEDIATE` transactions, so
//! they never fail half-way on a lock upgrade), a pool of readers (WAL: readers see the last
//! committed state and never block the writer).

use std::collections::HashMap;
use std::str::FromStr as _;
use std::sync::{Arc, Mutex};

use futures::TryStreamExt as _;
use sqlx::Row as _;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::error::{ContextError, Result, is_unique_violation};
use crate::memory::{Consolidation, Evidence, MemoryEntry, NewEvidence, Revocation, needs_refresh};
use crate::options::{ContextOptions, Durability};
use crate::store::ThreadInfo;
use crate::unit::{Prepared, TermPlan, Unit, decode};

const SCHEMA_VERSION: i64 = 1;
const MIGRATION_0001: &str = include_str!("../migrations/sqlite/0001_context.sql");
/// Positions live in the low 32 bits of a unit id, the thread id in the high bits.
const SEQ_BITS: u32 = 32;
const MAX_SEQ: i64 = (1 << SEQ_BITS) - 1;
const MAX_THREAD_ID: i64 = (1 << 31) - 1;
/// Recompute memory for the dirty (project, key) pairs, then clear them. The planner is
/// held to the dirty set as the outer loop (CROSS JOIN), so the cost is one index lookup
/// per changed pair.
const CONSOLIDATE: &str = "\
DELETE FROM context_memory WHERE (project, key) IN (SELECT project, key FROM context_dirty);
INSERT INTO context_memory (project, key, value, source, observed)
SELECT e.project, e.key, e.value, e.source, e.observed
FROM context_dirty d CROSS JOIN context_evidence e
WHERE e.source = (
    SELECT w.source FROM context_evidence w
    WHERE w.project = d.project AND w.key = d.key AND w.confirmed = 1 AND w.revoked = 0
    ORDER BY w.observed DESC, w.source DESC LIMIT 1);
DELETE FROM context_dirty;";
/// Rows per multi-row INSERT (5 binds each, under SQLite's 32766 bind limit).
const INSERT_CHUNK: usize = 500;
/// Evidence rows per multi-row INSERT (6 binds each).
const EVIDENCE_CHUNK: usize = 500;

#[derive(Clone)]
pub(crate) struct SqliteBackend {
    writer: SqlitePool,
    reader: SqlitePool,
    /// thread name -> thread id; ids are never reused or changed, so hits stay valid.
    threads: Arc<Mutex<HashMap<String, i64>>>,
}

impl SqliteBackend {
    pub(crate) async fn open(url: &str, options: &ContextOptions) -> Result<Self> {
        let memory = url.starts_with("sqlite::memory:") || url.contains("mode=memory");
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|_| ContextError::UnsupportedUrl(url.into()))?
            .create_if_missing(true)
            .busy_timeout(options.busy_timeout);
        let (writer, reader) = if memory {
            // One connection holds the whole database: it must never be closed.
            let pool = SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                .connect_with(connect)
                .await?;
            (pool.clone(), pool)
        } else {
            let connect = connect.journal_mode(SqliteJournalMode::Wal).synchronous(
                match options.durability {
                    Durability::Full => SqliteSynchronous::Full,
                    Durability::Normal => SqliteSynchronous::Normal,
                },
            );
            let writer = SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(connect.clone())
                .await?;
            let reader = SqlitePoolOptions::new()
                .max_connections(options.connections.max(1))
                .connect_with(connect.read_only(true))
                .await?;
            (writer, reader)
        };
        let backend = SqliteBackend {
            writer,
            reader,
            threads: Arc::new(Mutex::new(HashMap::new())),
        };
        backend.migrate().await?;
        Ok(backend)
    }

    async fn migrate(&self) -> Result<()> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("CREATE TABLE IF NOT EXISTS context_schema (version INTEGER NOT NULL)")
            .execute(&mut *tx)
            .await?;
        let found: Option<i64> = sqlx::query_scalar("SELECT max(version) FROM context_schema")
            .fetch_one(&mut *tx)
            .await?;
        match found {
            Some(found) if found > SCHEMA_VERSION => {
                return Err(ContextError::SchemaTooNew {
                    found,
                    supported: SCHEMA_VERSION,
                });
            }
            Some(_) => {}
            None => {
                sqlx::raw_sql(MIGRATION_0001).execute(&mut *tx).await?;
                sqlx::query("INSERT INTO context_schema (version) VALUES (?1)")
                    .bind(SCHEMA_VERSION)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }

    /// Append `units` to `thread` in one transaction: one upsert reserves the positions,
    /// multi-row inserts write the rows (a trigger feeds the FTS index).
    pub(crate) async fn append(&self, thread: &str, units: &[Prepared]) -> Result<u64> {
        let count = i64::try_from(units.len()).unwrap_or(i64::MAX);
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        let row = sqlx::query(
            "INSERT INTO context_threads (thread, last_seq) VALUES (?1, ?2) \
             ON CONFLICT (thread) DO UPDATE SET last_seq = last_seq + ?2 \
             RETURNING id, last_seq",
        )
        .bind(thread)
        .bind(count)
        .fetch_one(&mut *tx)
        .await?;
        let thread_id: i64 = row.try_get(0)?;
        let last: i64 = row.try_get(1)?;
        if thread_id > MAX_THREAD_ID {
            return Err(ContextError::TooManyThreads);
        }
        if last > MAX_SEQ {
            return Err(ContextError::ThreadFull(thread.into()));
        }
        let first = last - count + 1;
        for (chunk_no, chunk) in units.chunks(INSERT_CHUNK).enumerate() {
            let mut sql =
                String::from("INSERT INTO context_units (id, unit, size, body, folded) VALUES ");
            for i in 0..chunk.len() {
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push_str("(?, ?, ?, ?, ?)");
            }
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for (i, unit) in chunk.iter().enumerate() {
                let seq = first + i64::try_from(chunk_no * INSERT_CHUNK + i).unwrap_or(i64::MAX);
                query = query
                    .bind((thread_id << SEQ_BITS) | seq)
                    .bind(&unit.unit)
                    .bind(i64::try_from(unit.body.len()).unwrap_or(i64::MAX))
                    .bind(&unit.body)
                    .bind(&unit.folded);
            }
            match query.execute(&mut *tx).await {
                Ok(_) => {}
                Err(err) if is_unique_violation(&err) => {
                    drop(tx);
                    return Err(self.duplicate_of(thread, units).await);
                }
                Err(err) => return Err(err.into()),
            }
        }
        tx.commit().await?;
        Ok(u64::try_from(last).unwrap_or_default())
    }

    /// The error for a refused batch: the first unit id that already exists.
    async fn duplicate_of(&self, thread: &str, units: &[Prepared]) -> ContextError {
        let duplicate = |unit: &str| ContextError::DuplicateUnit {
            thread: thread.into(),
            unit: unit.into(),
        };
        let range = match self.thread_range(thread).await {
            Ok(range) => range,
            Err(err) => return err,
        };
        if let Some((lo, hi)) = range {
            for unit in units {
                let found = sqlx::query_scalar::<_, i64>(
                    "SELECT id FROM context_units WHERE id > ?1 AND id < ?2 AND unit = ?3 LIMIT 1",
                )
                .bind(lo)
                .bind(hi)
                .bind(&unit.unit)
                .fetch_optional(&self.reader)
                .await;
                match found {
                    Ok(Some(_)) => return duplicate(&unit.unit),
                    Ok(None) => {}
                    Err(err) => return err.into(),
                }
            }
        }
        duplicate(units.first().map_or("", |u| u.unit.as_str()))
    }

    /// The id range `(lo, hi)` (exclusive) of a thread's units, or `None` for an unknown thread.
    async fn thread_range(&self, thread: &str) -> Result<Option<(i64, i64)>> {
        let cached = self
            .threads
            .lock()
            .map(|map| map.get(thread).copied())
            .unwrap_or(None);
        let thread_id = match cached {
            Some(id) => id,
            None => {
                let found: Option<i64> =
                    sqlx::query_scalar("SELECT id FROM context_threads WHERE thread = ?1")
                        .bind(thread)
                        .fetch_optional(&self.reader)
                        .await?;
                let Some(id) = found else { return Ok(None) };
                if let Ok(mut map) = self.threads.lock() {
                    map.insert(thread.to_string(), id);
                }
                id
            }
        };
        Ok(Some((thread_id << SEQ_BITS, (thread_id + 1) << SEQ_BITS)))
    }

    pub(crate) async fn window(&self, thread: &str, keep: usize) -> Result<Vec<Unit>> {
        let Some((lo, hi)) = self.thread_range(thread).await? else {
            return Ok(Vec::new());
        };
        let rows = sqlx::query(
            "SELECT id, unit, body FROM context_units WHERE id > ?1 AND id < ?2 \
             ORDER BY id DESC LIMIT ?3",
        )
        .bind(lo)
        .bind(hi)
        .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        .fetch_all(&self.reader)
        .await?;
        let mut units = rows_to_units(rows)?;
        units.reverse();
        Ok(units)
    }

    pub(crate) async fn window_budget(
        &self,
        thread: &str,
        budget: u64,
        cap: usize,
    ) -> Result<Vec<Unit>> {
        let Some((lo, hi)) = self.thread_range(thread).await? else {
            return Ok(Vec::new());
        };
        let mut rows = sqlx::query(
            "SELECT id, unit, size, body FROM context_units WHERE id > ?1 AND id < ?2 \
             ORDER BY id DESC LIMIT ?3",
        )
        .bind(lo)
        .bind(hi)
        .bind(i64::try_from(cap).unwrap_or(i64::MAX))
        .fetch(&self.reader);
        let mut used: u64 = 0;
        let mut units = Vec::new();
        while let Some(row) = rows.try_next().await? {
            let size: i64 = row.try_get(2)?;
            used = used.saturating_add(u64::try_from(size).unwrap_or(u64::MAX));
            if used > budget {
                break;
            }
            let id: i64 = row.try_get(0)?;
            let body: String = row.try_get(3)?;
            units.push(decode(row.try_get(1)?, id & MAX_SEQ, &body)?);
        }
        units.reverse();
        Ok(units)
    }

    pub(crate) async fn search(
        &self,
        thread: &str,
        plan: &TermPlan,
        limit: usize,
    ) -> Result<Vec<Unit>> {
        let Some((lo, hi)) = self.thread_range(thread).await? else {
            return Ok(Vec::new());
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match plan {
            TermPlan::Indexed(term) => {
                let phrase = format!("\"{}\"", term.replace('"', "\"\""));
                sqlx::query(
                    "SELECT u.id, u.unit, u.body FROM context_units u WHERE u.id IN ( \
                       SELECT rowid FROM context_units_fts \
                       WHERE context_units_fts MATCH ?1 AND rowid > ?2 AND rowid < ?3 \
                       ORDER BY rowid LIMIT ?4) \
                     ORDER BY u.id",
                )
                .bind(phrase)
                .bind(lo)
                .bind(hi)
                .bind(limit)
                .fetch_all(&self.reader)
                .await?
            }
            TermPlan::ThreadScan(term) => {
                sqlx::query(
                    "SELECT id, unit, body FROM context_units \
                     WHERE id > ?2 AND id < ?3 AND instr(folded, ?1) > 0 \
                     ORDER BY id LIMIT ?4",
                )
                .bind(term)
                .bind(lo)
                .bind(hi)
                .bind(limit)
                .fetch_all(&self.reader)
                .await?
            }
        };
        rows_to_units(rows)
    }

    pub(crate) async fn threads(&self) -> Result<Vec<ThreadInfo>> {
        let rows = sqlx::query("SELECT thread, last_seq FROM context_threads ORDER BY thread")
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter()
            .map(|row| {
                Ok(ThreadInfo {
                    thread: row.try_get(0)?,
                    units: u64::try_from(row.try_get::<i64, _>(1)?).unwrap_or_default(),
                })
            })
            .collect()
    }

    /// Insert evidence rows and mark their pairs dirty, in one transaction.
    pub(crate) async fn add_evidence(&self, rows: &[NewEvidence]) -> Result<()> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        for chunk in rows.chunks(EVIDENCE_CHUNK) {
            let mut sql = String::from(
                "INSERT INTO context_evidence (source, project, key, value, observed, confirmed) VALUES ",
            );
            let mut dirty =
                String::from("INSERT OR IGNORE INTO context_dirty (project, key) VALUES ");
            for i in 0..chunk.len() {
                if i > 0 {
                    sql.push_str(", ");
                    dirty.push_str(", ");
                }
                sql.push_str("(?, ?, ?, ?, ?, ?)");
                dirty.push_str("(?, ?)");
            }
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            let mut mark = sqlx::query(sqlx::AssertSqlSafe(dirty));
            for e in chunk {
                query = query
                    .bind(&e.source)
                    .bind(&e.project)
                    .bind(&e.key)
                    .bind(&e.value)
                    .bind(e.observed)
                    .bind(i64::from(e.confirmed));
                mark = mark.bind(&e.project).bind(&e.key);
            }
            match query.execute(&mut *tx).await {
                Ok(_) => {}
                Err(err) if is_unique_violation(&err) => {
                    drop(tx);
                    return Err(self.existing_source(rows).await);
                }
                Err(err) => return Err(err.into()),
            }
            mark.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The error for refused evidence: the first source that already exists.
    async fn existing_source(&self, rows: &[NewEvidence]) -> ContextError {
        for e in rows {
            let found = sqlx::query_scalar::<_, String>(
                "SELECT source FROM context_evidence WHERE source = ?1",
            )
            .bind(&e.source)
            .fetch_optional(&self.reader)
            .await;
            match found {
                Ok(Some(source)) => return ContextError::DuplicateSource(source),
                Ok(None) => {}
                Err(err) => return err.into(),
            }
        }
        ContextError::DuplicateSource(rows.first().map_or(String::new(), |e| e.source.clone()))
    }

    pub(crate) async fn revoke(&self, source: &str) -> Result<Revocation> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        let row =
            sqlx::query("SELECT project, key, revoked FROM context_evidence WHERE source = ?1")
                .bind(source)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(row) = row else {
            return Err(ContextError::UnknownSource(source.into()));
        };
        let project: String = row.try_get(0)?;
        let key: String = row.try_get(1)?;
        let already = row.try_get::<i64, _>(2)? != 0;
        if !already {
            sqlx::query("UPDATE context_evidence SET revoked = 1 WHERE source = ?1")
                .bind(source)
                .execute(&mut *tx)
                .await?;
            mark_dirty(&mut tx, &project, &key).await?;
        }
        tx.commit().await?;
        Ok(Revocation {
            source: source.into(),
            project,
            key,
            newly_revoked: !already,
        })
    }

    pub(crate) async fn consolidate(&self) -> Result<Consolidation> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        // The three statements travel together (one hand-off to SQLite's worker); each
        // reports its own row count.
        let counts: Vec<u64> = sqlx::raw_sql(CONSOLIDATE)
            .execute_many(&mut *tx)
            .map_ok(|r| r.rows_affected())
            .try_collect()
            .await?;
        tx.commit().await?;
        Ok(Consolidation {
            written: counts.get(1).copied().unwrap_or_default(),
            recomputed: counts.get(2).copied().unwrap_or_default(),
        })
    }

    pub(crate) async fn pending(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM context_dirty")
            .fetch_one(&self.reader)
            .await?;
        Ok(u64::try_from(n).unwrap_or_default())
    }

    pub(crate) async fn recall(
        &self,
        project: &str,
        now: i64,
        max_age: i64,
    ) -> Result<Vec<MemoryEntry>> {
        let rows = sqlx::query(
            "SELECT project, key, value, source, observed FROM context_memory \
             WHERE project = ?1 ORDER BY key",
        )
        .bind(project)
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter()
            .map(|row| {
                let observed: i64 = row.try_get(4)?;
                Ok(MemoryEntry {
                    project: row.try_get(0)?,
                    key: row.try_get(1)?,
                    value: row.try_get(2)?,
                    source: row.try_get(3)?,
                    observed,
                    needs_refresh: needs_refresh(now, observed, max_age),
                })
            })
            .collect()
    }

    pub(crate) async fn evidence(&self, project: &str, key: Option<&str>) -> Result<Vec<Evidence>> {
        let rows = sqlx::query(
            "SELECT source, project, key, value, observed, confirmed, revoked \
             FROM context_evidence WHERE project = ?1 AND (?2 IS NULL OR key = ?2) \
             ORDER BY key, observed, source",
        )
        .bind(project)
        .bind(key)
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(Evidence {
                    source: row.try_get(0)?,
                    project: row.try_get(1)?,
                    key: row.try_get(2)?,
                    value: row.try_get(3)?,
                    observed: row.try_get(4)?,
                    confirmed: row.try_get::<i64, _>(5)? != 0,
                    revoked: row.try_get::<i64, _>(6)? != 0,
                })
            })
            .collect()
    }
}

async fn mark_dirty(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    project: &str,
    key: &str,
) -> Result<()> {
    sqlx::query("INSERT OR IGNORE INTO context_dirty (project, key) VALUES (?1, ?2)")
        .bind(project)
        .bind(key)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn rows_to_units(rows: Vec<sqlx::sqlite::SqliteRow>) -> Result<Vec<Unit>> {
    rows.into_iter()
        .map(|row| {
            let id: i64 = row.try_get(0)?;
            let body: String = row.try_get(2)?;
            decode(row.try_get(1)?, id & MAX_SEQ, &body)
        })
        .collect()
}
