//! PostgreSQL backend: one pool; per-thread positions come from a row lock on the thread
//! (an upsert on `context_threads`), consolidation holds an EXCLUSIVE lock on the dirty set
//! so concurrent evidence writes wait for it instead of racing it.

use std::str::FromStr as _;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection as _, Row as _};

use crate::error::{ContextError, Result, is_unique_violation};
use crate::memory::{Consolidation, Evidence, MemoryEntry, NewEvidence, Revocation, needs_refresh};
use crate::options::ContextOptions;
use crate::store::ThreadInfo;
use crate::unit::{Prepared, TermPlan, Unit, decode};

const SCHEMA_VERSION: i64 = 1;
const MIGRATION_0001: &str = include_str!("../migrations/postgres/0001_context.sql");
/// Advisory lock key serialising schema migrations of this crate.
const MIGRATION_LOCK: i64 = 0x0c0e_7e47;
/// Rows per multi-row INSERT (6 binds each, well under PostgreSQL's 65535).
const INSERT_CHUNK: usize = 1000;
/// Evidence rows per multi-row INSERT (6 binds each).
const EVIDENCE_CHUNK: usize = 1000;

#[derive(Clone)]
pub(crate) struct PgBackend {
    pool: PgPool,
}

/// How long opening waits for the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl PgBackend {
    pub(crate) async fn open(url: &str, options: &ContextOptions) -> Result<Self> {
        let connect = PgConnectOptions::from_str(url)?;
        // One direct connection first: a refused or failing connect is reported as itself at
        // once, where the pool would retry it until its acquire timeout and then say only
        // that it timed out.
        tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&connect))
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??
            .close()
            .await?;
        let pool = PgPoolOptions::new()
            .max_connections(options.connections.max(2))
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_with(connect)
            .await?;
        let backend = PgBackend { pool };
        backend.migrate().await?;
        Ok(backend)
    }

    async fn migrate(&self) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await?;
        sqlx::query("CREATE TABLE IF NOT EXISTS context_schema (version BIGINT NOT NULL)")
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
                sqlx::query("INSERT INTO context_schema (version) VALUES ($1)")
                    .bind(SCHEMA_VERSION)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }

    /// Append `units` to `thread` in one transaction: one upsert reserves the positions
    /// (and row-locks the thread, serialising its appenders), multi-row inserts write them.
    pub(crate) async fn append(&self, thread: &str, units: &[Prepared]) -> Result<u64> {
        let count = i64::try_from(units.len()).unwrap_or(i64::MAX);
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "INSERT INTO context_threads (thread, last_seq) VALUES ($1, $2) \
             ON CONFLICT (thread) DO UPDATE SET last_seq = context_threads.last_seq + $2 \
             RETURNING id, last_seq",
        )
        .bind(thread)
        .bind(count)
        .fetch_one(&mut *tx)
        .await?;
        let thread_id: i64 = row.try_get(0)?;
        let last: i64 = row.try_get(1)?;
        let first = last - count + 1;
        for (chunk_no, chunk) in units.chunks(INSERT_CHUNK).enumerate() {
            let mut sql = String::from(
                "INSERT INTO context_units (thread_id, seq, unit, size, body, folded) VALUES ",
            );
            for i in 0..chunk.len() {
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&row_placeholders(i, 6));
            }
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for (i, unit) in chunk.iter().enumerate() {
                let seq = first + i64::try_from(chunk_no * INSERT_CHUNK + i).unwrap_or(i64::MAX);
                query = query
                    .bind(thread_id)
                    .bind(seq)
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
        for unit in units {
            let found = sqlx::query_scalar::<_, i64>(
                "SELECT u.seq FROM context_units u JOIN context_threads t ON t.id = u.thread_id \
                 WHERE t.thread = $1 AND u.unit = $2",
            )
            .bind(thread)
            .bind(&unit.unit)
            .fetch_optional(&self.pool)
            .await;
            match found {
                Ok(Some(_)) => {
                    return ContextError::DuplicateUnit {
                        thread: thread.into(),
                        unit: unit.unit.clone(),
                    };
                }
                Ok(None) => {}
                Err(err) => return err.into(),
            }
        }
        ContextError::DuplicateUnit {
            thread: thread.into(),
            unit: units.first().map_or(String::new(), |u| u.unit.clone()),
        }
    }

    pub(crate) async fn window(&self, thread: &str, keep: usize) -> Result<Vec<Unit>> {
        let rows = sqlx::query(
            "SELECT u.seq, u.unit, u.body FROM context_units u \
             JOIN context_threads t ON t.id = u.thread_id \
             WHERE t.thread = $1 ORDER BY u.seq DESC LIMIT $2",
        )
        .bind(thread)
        .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
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
        // Running total of sizes, newest first; the database stops at the budget.
        let rows = sqlx::query(
            "SELECT seq, unit, body FROM ( \
               SELECT u.seq, u.unit, u.body, \
                      sum(u.size) OVER (ORDER BY u.seq DESC) AS used \
               FROM context_units u JOIN context_threads t ON t.id = u.thread_id \
               WHERE t.thread = $1 ORDER BY u.seq DESC LIMIT $3) w \
             WHERE used <= $2 ORDER BY seq",
        )
        .bind(thread)
        .bind(i64::try_from(budget).unwrap_or(i64::MAX))
        .bind(i64::try_from(cap).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        rows_to_units(rows)
    }

    pub(crate) async fn search(
        &self,
        thread: &str,
        plan: &TermPlan,
        limit: usize,
    ) -> Result<Vec<Unit>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match plan {
            TermPlan::Indexed(term) => {
                sqlx::query(
                    "SELECT u.seq, u.unit, u.body FROM context_units u \
                     JOIN context_threads t ON t.id = u.thread_id \
                     WHERE t.thread = $1 AND u.folded LIKE $2 \
                     ORDER BY u.seq LIMIT $3",
                )
                .bind(thread)
                .bind(format!("%{}%", escape_like(term)))
                .bind(limit)
                .fetch_all(&self.pool)
                .await?
            }
            TermPlan::ThreadScan(term) => {
                sqlx::query(
                    "SELECT u.seq, u.unit, u.body FROM context_units u \
                     JOIN context_threads t ON t.id = u.thread_id \
                     WHERE t.thread = $1 AND strpos(u.folded, $2) > 0 \
                     ORDER BY u.seq LIMIT $3",
                )
                .bind(thread)
                .bind(term)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?
            }
        };
        rows_to_units(rows)
    }

    pub(crate) async fn threads(&self) -> Result<Vec<ThreadInfo>> {
        let rows = sqlx::query("SELECT thread, last_seq FROM context_threads ORDER BY thread")
            .fetch_all(&self.pool)
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
        let mut tx = self.pool.begin().await?;
        for chunk in rows.chunks(EVIDENCE_CHUNK) {
            let mut sql = String::from(
                "INSERT INTO context_evidence (source, project, key, value, observed, confirmed) VALUES ",
            );
            let mut dirty = String::from("INSERT INTO context_dirty (project, key) VALUES ");
            for i in 0..chunk.len() {
                if i > 0 {
                    sql.push_str(", ");
                    dirty.push_str(", ");
                }
                sql.push_str(&row_placeholders(i, 6));
                dirty.push_str(&row_placeholders(i, 2));
            }
            dirty.push_str(" ON CONFLICT DO NOTHING");
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            let mut mark = sqlx::query(sqlx::AssertSqlSafe(dirty));
            for e in chunk {
                query = query
                    .bind(&e.source)
                    .bind(&e.project)
                    .bind(&e.key)
                    .bind(&e.value)
                    .bind(e.observed)
                    .bind(e.confirmed);
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
                "SELECT source FROM context_evidence WHERE source = $1",
            )
            .bind(&e.source)
            .fetch_optional(&self.pool)
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
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "SELECT project, key, revoked FROM context_evidence WHERE source = $1 FOR UPDATE",
        )
        .bind(source)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(ContextError::UnknownSource(source.into()));
        };
        let project: String = row.try_get(0)?;
        let key: String = row.try_get(1)?;
        let already: bool = row.try_get(2)?;
        if !already {
            sqlx::query("UPDATE context_evidence SET revoked = TRUE WHERE source = $1")
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
        let mut tx = self.pool.begin().await?;
        // Writers of evidence mark pairs dirty in the same transaction; this lock makes
        // them wait until the recomputed memory is committed, so no change is lost.
        sqlx::query("LOCK TABLE context_dirty IN EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "DELETE FROM context_memory m USING context_dirty d \
             WHERE m.project = d.project AND m.key = d.key",
        )
        .execute(&mut *tx)
        .await?;
        let written = sqlx::query(
            "INSERT INTO context_memory (project, key, value, source, observed) \
             SELECT e.project, e.key, e.value, e.source, e.observed \
             FROM context_dirty d JOIN context_evidence e ON e.source = ( \
               SELECT w.source FROM context_evidence w \
               WHERE w.project = d.project AND w.key = d.key \
                 AND w.confirmed AND NOT w.revoked \
               ORDER BY w.observed DESC, w.source DESC LIMIT 1)",
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let recomputed = sqlx::query("DELETE FROM context_dirty")
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(Consolidation {
            recomputed,
            written,
        })
    }

    pub(crate) async fn pending(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM context_dirty")
            .fetch_one(&self.pool)
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
             WHERE project = $1 ORDER BY key",
        )
        .bind(project)
        .fetch_all(&self.pool)
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
             FROM context_evidence WHERE project = $1 AND ($2::text IS NULL OR key = $2) \
             ORDER BY key, observed, source",
        )
        .bind(project)
        .bind(key)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(Evidence {
                    source: row.try_get(0)?,
                    project: row.try_get(1)?,
                    key: row.try_get(2)?,
                    value: row.try_get(3)?,
                    observed: row.try_get(4)?,
                    confirmed: row.try_get(5)?,
                    revoked: row.try_get(6)?,
                })
            })
            .collect()
    }
}

async fn mark_dirty(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    project: &str,
    key: &str,
) -> Result<()> {
    sqlx::query("INSERT INTO context_dirty (project, key) VALUES ($1, $2) ON CONFLICT DO NOTHING")
        .bind(project)
        .bind(key)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Escape `%`, `_` and `\` for a LIKE pattern (PostgreSQL's default escape is `\`).
fn escape_like(term: &str) -> String {
    let mut out = String::with_capacity(term.len() + 8);
    for c in term.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn rows_to_units(rows: Vec<PgRow>) -> Result<Vec<Unit>> {
    rows.into_iter()
        .map(|row| {
            let seq: i64 = row.try_get(0)?;
            let body: String = row.try_get(2)?;
            decode(row.try_get(1)?, seq, &body)
        })
        .collect()
}

/// `($k, ..., $k+width-1)` for row `row` of a multi-row VALUES list (`k = row * width + 1`).
fn row_placeholders(row: usize, width: usize) -> String {
    let first = row * width + 1;
    let params: Vec<String> = (first..first + width).map(|n| format!("${n}")).collect();
    format!("({})", params.join(", "))
}

#[cfg(test)]
mod tests {
    use super::row_placeholders;

    #[test]
    fn placeholders_number_rows_consecutively() {
        assert_eq!(row_placeholders(0, 2), "($1, $2)");
        assert_eq!(row_placeholders(2, 3), "($7, $8, $9)");
    }
}
