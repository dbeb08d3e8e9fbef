//! Evidence and consolidated memory on SQLite: writers mark the (project, key) pairs they
//! touch dirty in the same transaction, and a consolidation recomputes only those.

use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};

use super::SqliteBackend;
use super::relaxed::with_relaxed_sync;
use crate::backend::MemoryStore;
use crate::error::{ContextError, Result, is_sqlite_unique_violation};
use crate::memory::{Consolidation, Evidence, MemoryEntry, NewEvidence, Revocation, needs_refresh};

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

const MARK_DIRTY: &str = "INSERT OR IGNORE INTO context_dirty (project, key) VALUES (?1, ?2)";

impl MemoryStore for SqliteBackend {
    /// Insert evidence rows and mark their pairs dirty, in one transaction.
    async fn add_evidence(&self, rows: &[NewEvidence]) -> Result<()> {
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

    async fn revoke(&self, source: &str) -> Result<Revocation> {
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

    /// One transaction whose commit does not wait for the disk (see
    /// [`with_relaxed_sync`]): memory is derived data, and the dirty set is cleared in the
    /// same transaction, so a consolidation lost to a power cut comes back whole as pending
    /// work. This turns the cost of a one-change consolidation from one fsync into CPU time.
    async fn consolidate(&self) -> Result<Consolidation> {
        self.db
            .write(|conn| with_relaxed_sync(conn, consolidate_tx))
            .await
    }

    async fn pending(&self) -> Result<u64> {
        self.db
            .read(|conn| {
                let n: i64 = conn
                    .prepare_cached("SELECT count(*) FROM context_dirty")?
                    .query_row([], |r| r.get(0))?;
                Ok(u64::try_from(n).unwrap_or_default())
            })
            .await
    }

    async fn recall(&self, project: &str, now: i64, max_age: i64) -> Result<Vec<MemoryEntry>> {
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

    async fn evidence(&self, project: &str, key: Option<&str>) -> Result<Vec<Evidence>> {
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
