//! History units on PostgreSQL: `(thread_id, seq)` keys, a `pg_trgm` GIN index on the
//! folded text for search.

use sqlx::Row as _;
use sqlx::postgres::PgRow;

use super::{PgBackend, row_placeholders};
use crate::backend::UnitStore;
use crate::error::{ContextError, Result, is_unique_violation};
use crate::store::ThreadInfo;
use crate::unit::{Prepared, TermPlan, Unit, decode};

/// Rows per multi-row INSERT (6 binds each, well under PostgreSQL's 65535).
const INSERT_CHUNK: usize = 1000;

impl UnitStore for PgBackend {
    /// Append `units` to `thread` in one transaction: one upsert reserves the positions
    /// (and row-locks the thread, serialising its appenders), multi-row inserts write them.
    async fn append(&self, thread: &str, units: Vec<Prepared>) -> Result<u64> {
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
                    return Err(self.duplicate_of(thread, &units).await);
                }
                Err(err) => return Err(err.into()),
            }
        }
        tx.commit().await?;
        Ok(u64::try_from(last).unwrap_or_default())
    }

    async fn window(&self, thread: &str, keep: usize) -> Result<(Vec<Unit>, u64)> {
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
        Ok(with_sizes(units))
    }

    async fn window_budget(
        &self,
        thread: &str,
        budget: u64,
        cap: usize,
    ) -> Result<(Vec<Unit>, u64)> {
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
        rows_to_units(rows).map(with_sizes)
    }

    async fn search(&self, thread: &str, plan: &TermPlan, limit: usize) -> Result<Vec<Unit>> {
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

    async fn threads(&self) -> Result<Vec<ThreadInfo>> {
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
}

impl PgBackend {
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
}

/// Units with their total size, measured by serialising them again (the SQLite backend
/// reads the stored size instead: the stored JSON is that same serialisation).
fn with_sizes(units: Vec<Unit>) -> (Vec<Unit>, u64) {
    let bytes = units
        .iter()
        .map(|u| serde_json::to_string(&u.items).map_or(0, |s| s.len() as u64))
        .sum();
    (units, bytes)
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
