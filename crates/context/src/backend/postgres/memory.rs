//! Evidence and consolidated memory on PostgreSQL: writers mark the (project, key) pairs
//! they touch dirty in the same transaction; a consolidation recomputes only those.
//!
//! Names are compared by code point (`COLLATE "C"`), as SQLite compares them, whatever the
//! database's default collation: the greatest source wins a tie, and lists come by key.

use sqlx::Row as _;

use super::{PgBackend, row_placeholders};
use crate::backend::MemoryStore;
use crate::error::{ContextError, Result, is_unique_violation};
use crate::memory::{Consolidation, Evidence, MemoryEntry, NewEvidence, Revocation, needs_refresh};

/// Evidence rows per multi-row INSERT (6 binds each).
const EVIDENCE_CHUNK: usize = 1000;

impl MemoryStore for PgBackend {
    /// Insert evidence rows and mark their pairs dirty, in one transaction.
    async fn add_evidence(&self, rows: &[NewEvidence]) -> Result<()> {
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

    async fn revoke(&self, source: &str) -> Result<Revocation> {
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

    async fn consolidate(&self) -> Result<Consolidation> {
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
               ORDER BY w.observed DESC, w.source COLLATE \"C\" DESC LIMIT 1)",
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

    async fn pending(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM context_dirty")
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(n).unwrap_or_default())
    }

    async fn recall(&self, project: &str, now: i64, max_age: i64) -> Result<Vec<MemoryEntry>> {
        let rows = sqlx::query(
            "SELECT project, key, value, source, observed FROM context_memory \
             WHERE project = $1 ORDER BY key COLLATE \"C\"",
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

    async fn evidence(&self, project: &str, key: Option<&str>) -> Result<Vec<Evidence>> {
        let rows = sqlx::query(
            "SELECT source, project, key, value, observed, confirmed, revoked \
             FROM context_evidence WHERE project = $1 AND ($2::text IS NULL OR key = $2) \
             ORDER BY key COLLATE \"C\", observed, source COLLATE \"C\"",
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

impl PgBackend {
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
