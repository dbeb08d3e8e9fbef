//! History units on PostgreSQL: `(thread_id, seq)` keys; search through the deferred
//! `pg_trgm` index of [`super::index`] plus a scan of the units not folded yet.

use sqlx::Row as _;
use sqlx::postgres::PgRow;

use super::{PgBackend, index, row_placeholders};
use crate::backend::{AppendCommit, UnitStore};
use crate::error::{ContextError, Result, is_unique_violation};
use crate::store::ThreadInfo;
use crate::unit::{Prepared, TermPlan, Unit, decode, search_prefix};

/// Rows per multi-row INSERT (6 binds each, well under PostgreSQL's 65535).
const INSERT_CHUNK: usize = 1000;
/// Most bytes of unit text (bodies and folded texts) per multi-row INSERT: PostgreSQL
/// refuses a message over 1 GB (it resets the connection), and a batch the limits allow
/// holds up to 10,000 units of 1 MiB, each sent twice (body and folded text).
const INSERT_CHUNK_BYTES: usize = 64 << 20;

/// An indexed search ([`UnitStore::search`]): `$1` thread, `$2` the `LIKE` pattern, `$3` the
/// folded term, `$4` the limit, `$5` the prefix tested directly.
const INDEXED_SEARCH: &str = "\
WITH t AS (SELECT id, indexed_seq FROM context_threads WHERE thread = $1), \
prefix AS (SELECT u.seq, u.unit, u.body FROM t \
  JOIN context_units u ON u.thread_id = t.id \
  WHERE u.seq <= $5 AND strpos(u.folded, $3) > 0 \
  ORDER BY u.seq LIMIT $4) \
SELECT seq, unit, body FROM ( \
  (SELECT seq, unit, body FROM prefix) \
  UNION ALL \
  (SELECT u.seq, u.unit, u.body FROM t \
   JOIN context_units_trgm i ON i.thread_id = t.id \
   JOIN context_units u ON u.thread_id = i.thread_id AND u.seq = i.seq \
   WHERE (SELECT count(*) FROM prefix) < $4 \
     AND i.seq > $5 AND i.seq <= t.indexed_seq AND i.folded LIKE $2 \
   ORDER BY i.seq LIMIT $4) \
  UNION ALL \
  (SELECT u.seq, u.unit, u.body FROM t \
   JOIN context_units u ON u.thread_id = t.id \
   WHERE (SELECT count(*) FROM prefix) < $4 \
     AND u.seq > GREATEST(t.indexed_seq, $5) AND strpos(u.folded, $3) > 0 \
   ORDER BY u.seq LIMIT $4)) hits \
ORDER BY seq LIMIT $4";

/// A scan of a thread's units in order: `$1` thread, `$2` the folded term, `$3` the limit.
const THREAD_SCAN: &str = "\
SELECT u.seq, u.unit, u.body FROM context_units u \
JOIN context_threads t ON t.id = u.thread_id \
WHERE t.thread = $1 AND strpos(u.folded, $2) > 0 \
ORDER BY u.seq LIMIT $3";

impl UnitStore for PgBackend {
    /// Append `units` to `thread` in one transaction: one upsert reserves the positions
    /// (and row-locks the thread, serialising its appenders and folders) and adds their
    /// sizes to the thread's un-indexed tail, multi-row inserts write them. The index is not
    /// touched unless the tail is now above the store's bound: then the whole tail is folded
    /// in this same transaction.
    async fn append(
        &self,
        thread: &str,
        units: Vec<Prepared>,
        commit: AppendCommit,
        derived_through: Option<i64>,
    ) -> Result<u64> {
        let count = i64::try_from(units.len()).unwrap_or(i64::MAX);
        let bytes: i64 = units
            .iter()
            .map(|u| i64::try_from(u.body.len()).unwrap_or(i64::MAX))
            .fold(0, i64::saturating_add);
        let mut tx = self.pool.begin().await?;
        match commit {
            AppendCommit::Durable => {}
            AppendCommit::Relaxed => {
                sqlx::query("SET LOCAL synchronous_commit = off")
                    .execute(&mut *tx)
                    .await?;
            }
        }
        let row = sqlx::query(
            "INSERT INTO context_threads (thread, last_seq, tail_bytes, derived_through) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (thread) DO UPDATE SET last_seq = context_threads.last_seq + $2, \
             tail_bytes = context_threads.tail_bytes + $3, \
             derived_through = GREATEST(context_threads.derived_through, $4) \
             RETURNING id, last_seq, indexed_seq, tail_bytes",
        )
        .bind(thread)
        .bind(count)
        .bind(bytes)
        .bind(derived_through)
        .fetch_one(&mut *tx)
        .await?;
        let thread_id: i64 = row.try_get(0)?;
        let last: i64 = row.try_get(1)?;
        let indexed: i64 = row.try_get(2)?;
        let tail: i64 = row.try_get(3)?;
        let first = last - count + 1;
        let mut offset = 0;
        for chunk in insert_chunks(&units) {
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
                let seq = first + i64::try_from(offset + i).unwrap_or(i64::MAX);
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
            offset += chunk.len();
        }
        let over_bound = tail > self.tail_bound;
        if over_bound {
            index::fold_range(&mut tx, thread_id, indexed, last, tail).await?;
        }
        tx.commit().await?;
        if !over_bound {
            self.fold.appended();
        }
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

    /// Indexed terms: one statement, so one snapshot, of three ranges that follow each
    /// other, so hits come in thread order: a direct test of the thread's first few units
    /// ([`search_prefix`]); then, only when that gave fewer than `limit` hits (a one-time
    /// filter on the prefix's count, so the index is not read at all otherwise), the index
    /// below the watermark and a scan of the tail above it. Short terms, and terms in which
    /// pg_trgm finds no trigram ([`trigram_searchable`]): a scan of the thread's units that
    /// stops at `limit` hits. Every path tests `strpos(folded, term) > 0`, so they find the
    /// same units.
    async fn search(&self, thread: &str, plan: &TermPlan, limit: usize) -> Result<Vec<Unit>> {
        let prefix = search_prefix(limit);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match plan {
            TermPlan::Indexed(term) if trigram_searchable(term) => {
                sqlx::query(INDEXED_SEARCH)
                    .bind(thread)
                    .bind(format!("%{}%", escape_like(term)))
                    .bind(term)
                    .bind(limit)
                    .bind(prefix)
                    .fetch_all(&self.pool)
                    .await?
            }
            TermPlan::Indexed(term) | TermPlan::ThreadScan(term) => {
                sqlx::query(THREAD_SCAN)
                    .bind(thread)
                    .bind(term)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        rows_to_units(rows)
    }

    async fn derived_through(&self, thread: &str) -> Result<Option<i64>> {
        let found: Option<Option<i64>> =
            sqlx::query_scalar("SELECT derived_through FROM context_threads WHERE thread = $1")
                .bind(thread)
                .fetch_optional(&self.pool)
                .await?;
        Ok(found.flatten())
    }

    async fn set_derived_through(&self, thread: &str, position: i64) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET LOCAL synchronous_commit = off")
            .execute(&mut *tx)
            .await?;
        let changed = sqlx::query(
            "UPDATE context_threads SET derived_through = GREATEST(derived_through, $2) \
             WHERE thread = $1",
        )
        .bind(thread)
        .bind(position)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(changed > 0)
    }

    async fn threads(&self) -> Result<Vec<ThreadInfo>> {
        let rows = sqlx::query(
            "SELECT thread, last_seq FROM context_threads ORDER BY thread COLLATE \"C\"",
        )
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

    async fn thread_units(&self, thread: &str) -> Result<u64> {
        let last: Option<i64> =
            sqlx::query_scalar("SELECT last_seq FROM context_threads WHERE thread = $1")
                .bind(thread)
                .fetch_optional(&self.pool)
                .await?;
        Ok(last.map_or(0, |n| u64::try_from(n).unwrap_or_default()))
    }

    async fn index_backlog(&self) -> Result<u64> {
        index::backlog(&self.pool).await
    }

    #[cfg(feature = "test-hooks")]
    async fn pause_fold(&self, paused: bool) -> Result<()> {
        self.fold.set_paused(paused);
        Ok(())
    }

    #[cfg(feature = "test-hooks")]
    async fn fold_step(&self, max_units: u64) -> Result<u64> {
        let max_units = i64::try_from(max_units).unwrap_or(i64::MAX);
        index::fold_batch(&self.pool, i64::MAX, max_units).await
    }

    /// PostgreSQL's index has no segments to merge: settled once every unit is folded.
    #[cfg(feature = "test-hooks")]
    async fn index_settled(&self) -> Result<bool> {
        Ok(self.index_backlog().await? == 0)
    }
}

/// Whether pg_trgm extracts a trigram from the pattern `%term%`, so that the GIN index
/// has something to look up. pg_trgm reads a pattern's words (runs of alphanumerics;
/// anything else separates them), pads a word with two spaces before it unless it starts
/// the term (next to the `%`) and one after it unless it ends the term, and takes the
/// trigrams of the padded word: a word yields one when it is at least 3 characters long
/// padded. Without any (a term of punctuation or spaces, `-->`), the GIN scan reads every
/// entry of the table's index; a scan of the thread's own rows is bounded by the thread.
fn trigram_searchable(term: &str) -> bool {
    let chars: Vec<char> = term.chars().collect();
    let mut start = 0;
    while start < chars.len() {
        if !chars[start].is_alphanumeric() {
            start += 1;
            continue;
        }
        let mut end = start;
        while end < chars.len() && chars[end].is_alphanumeric() {
            end += 1;
        }
        let before = if start > 0 { 2 } else { 0 };
        let after = if end < chars.len() { 1 } else { 0 };
        if end - start + before + after >= 3 {
            return true;
        }
        start = end;
    }
    false
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

/// `units` in runs of at most [`INSERT_CHUNK`] units and [`INSERT_CHUNK_BYTES`] of text
/// (at least one unit each), in order.
fn insert_chunks(units: &[Prepared]) -> impl Iterator<Item = &[Prepared]> {
    let mut rest = units;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0usize;
        let len = rest
            .iter()
            .take(INSERT_CHUNK)
            .take_while(|u| {
                bytes = bytes.saturating_add(u.body.len() + u.folded.len());
                bytes <= INSERT_CHUNK_BYTES
            })
            .count()
            .max(1);
        let (chunk, tail) = rest.split_at(len);
        rest = tail;
        Some(chunk)
    })
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

#[cfg(test)]
mod tests {
    use super::trigram_searchable;

    /// As pg_trgm's extraction for `LIKE '%term%'` decides: each case checked against a
    /// server (`C.UTF-8`) by `EXPLAIN ANALYZE` of a forced GIN scan, which reads no entry
    /// for the first list here and every entry of the index for the second.
    #[test]
    fn a_term_is_searchable_when_pg_trgm_extracts_a_trigram() {
        for term in [
            "abc",
            "cargo test",
            "a.b",
            "x y",
            "a b",
            "-a-",
            "旧登录",
            "--release",
            "ab-",
        ] {
            assert!(trigram_searchable(term), "{term}");
        }
        for term in ["-->", "===", "   ", "##!", "", "ab", "--"] {
            assert!(!trigram_searchable(term), "{term}");
        }
    }
}
