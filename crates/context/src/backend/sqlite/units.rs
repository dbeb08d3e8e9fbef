//! History units on SQLite: a unit id packs (thread id, position), so a thread's units are
//! one primary-key range and a window is a range scan. Appends do not touch the trigram
//! index; [`super::index`] folds units into it later, and a search covers the units not
//! folded yet by scanning them.

use rusqlite::{Connection, OptionalExtension as _, Row, TransactionBehavior, params};

use super::relaxed::with_relaxed_sync;
use super::{SqliteBackend, ThreadIds, index};
use crate::backend::{AppendCommit, UnitStore};
use crate::error::{ContextError, Result, is_sqlite_unique_violation};
use crate::store::ThreadInfo;
use crate::unit::{Prepared, TermPlan, Unit, decode, search_prefix};

/// Positions live in the low 32 bits of a unit id, the thread id in the high bits.
pub(super) const SEQ_BITS: u32 = 32;
const MAX_SEQ: i64 = (1 << SEQ_BITS) - 1;
const MAX_THREAD_ID: i64 = (1 << 31) - 1;

impl UnitStore for SqliteBackend {
    /// Append `units` to `thread` in one transaction: one upsert reserves the positions
    /// and adds their sizes to the thread's un-indexed tail, then one multi-row INSERT per
    /// chunk writes them. The trigram index is not touched, unless the tail is now above
    /// the store's bound: then the whole tail is folded in this same transaction (the
    /// write path pays for the index only for threads that outgrow the bound), on the
    /// writer thread.
    async fn append(
        &self,
        thread: &str,
        units: Vec<Prepared>,
        commit: AppendCommit,
        derived_through: Option<i64>,
    ) -> Result<u64> {
        let thread = thread.to_string();
        let threads = self.threads.clone();
        let fold = self.fold.clone();
        let tail_bound = self.tail_bound;
        // Run on the caller's thread when it can be (`:memory:`, see `Db::write_short`),
        // unless it folds: a fold takes milliseconds, too long for an async caller.
        self.db
            .write_short(move |conn, inline| {
                let append = |conn: &mut Connection| -> Result<Option<u64>> {
                    let count = i64::try_from(units.len()).unwrap_or(i64::MAX);
                    let bytes: u64 = units.iter().map(|u| u.body.len() as u64).sum();
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let (thread_id, last, indexed, tail): (i64, i64, i64, i64) = tx
                        .prepare_cached(
                            "INSERT INTO context_threads \
                         (thread, last_seq, tail_bytes, derived_through) \
                         VALUES (?1, ?2, ?3, ?4) \
                         ON CONFLICT (thread) DO UPDATE SET last_seq = last_seq + ?2, \
                         tail_bytes = tail_bytes + ?3, \
                         derived_through = coalesce(max(derived_through, ?4), derived_through, ?4) \
                         RETURNING id, last_seq, indexed_seq, tail_bytes",
                        )?
                        .query_row(
                            params![
                                thread,
                                count,
                                i64::try_from(bytes).unwrap_or(i64::MAX),
                                derived_through
                            ],
                            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                        )?;
                    let tail = u64::try_from(tail).unwrap_or_default();
                    let over_bound = tail > tail_bound;
                    if over_bound && inline {
                        // Declined: the transaction rolls back when dropped.
                        return Ok(None);
                    }
                    if thread_id > MAX_THREAD_ID {
                        return Err(ContextError::TooManyThreads);
                    }
                    if last > MAX_SEQ {
                        return Err(ContextError::ThreadFull(thread.clone()));
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
                    if over_bound {
                        index::fold_range(&tx, thread_id, indexed, last, tail)?;
                    }
                    tx.commit()?;
                    if !over_bound {
                        fold.set_pending();
                    }
                    if let Ok(mut map) = threads.lock() {
                        map.entry(thread.clone()).or_insert(thread_id);
                    }
                    Ok(Some(u64::try_from(last).unwrap_or_default()))
                };
                match commit {
                    AppendCommit::Durable => append(conn),
                    AppendCommit::Relaxed => with_relaxed_sync(conn, append),
                }
            })
            .await
    }

    async fn derived_through(&self, thread: &str) -> Result<Option<i64>> {
        let thread = thread.to_string();
        self.db
            .read(move |conn| {
                let found: Option<Option<i64>> = conn
                    .prepare_cached(
                        "SELECT derived_through FROM context_threads WHERE thread = ?1",
                    )?
                    .query_row(params![thread], |r| r.get(0))
                    .optional()?;
                Ok(found.flatten())
            })
            .await
    }

    async fn set_derived_through(&self, thread: &str, position: i64) -> Result<bool> {
        let thread = thread.to_string();
        self.db
            .write(move |conn| {
                with_relaxed_sync(conn, |conn| {
                    let changed = conn
                        .prepare_cached(
                            "UPDATE context_threads SET derived_through = \
                             coalesce(max(derived_through, ?2), ?2) WHERE thread = ?1",
                        )?
                        .execute(params![thread, position])?;
                    Ok(changed > 0)
                })
            })
            .await
    }

    /// The newest `keep` units, oldest first, with the sum of their stored sizes.
    async fn window(&self, thread: &str, keep: usize) -> Result<(Vec<Unit>, u64)> {
        self.window_budget(thread, u64::MAX, keep).await
    }

    /// The newest units (at most `cap`) whose stored sizes fit `budget`, oldest first, with
    /// the sum of their sizes. Stops at the first unit that does not fit.
    async fn window_budget(
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
    /// [`search_prefix`]), then (when that gave fewer than `limit` hits) the
    /// trigram index over the folded positions after them, then a scan of the units not
    /// folded yet (the tail, at most the store's bound in bytes unless a fold is paused or
    /// failing). Short terms: a scan of the thread's id range that stops at `limit` hits.
    /// Every path tests the same thing, `agent_holds(folded, term)` (which is
    /// `instr(folded, term) > 0`, see [`super::holds`]): the index only narrows the units to
    /// test to those holding all of the term's trigrams (a superset of the hits); the three
    /// ranges follow each other, so hits come in thread order. The watermark is read once and
    /// only grows (see [`super::index`]): a fold committing during the search moves units
    /// from the tail into the index, and both still hold them.
    async fn search(&self, thread: &str, plan: &TermPlan, limit: usize) -> Result<Vec<Unit>> {
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
                    (lo + search_prefix(limit) + 1).min(hi)
                } else {
                    hi
                };
                let mut units = scan(conn, lo, scan_end, &term, limit)?;
                if !indexed || units.len() >= limit {
                    return Ok(units);
                }
                let (last, folded): (i64, i64) = conn
                    .prepare_cached(
                        "SELECT last_seq, indexed_seq FROM context_threads WHERE id = ?1",
                    )?
                    .query_row(params![lo >> SEQ_BITS], |r| Ok((r.get(0)?, r.get(1)?)))?;
                if lo + last < scan_end {
                    return Ok(units);
                }
                // Index: positions [scan_end, folded]; tail: positions after both.
                let index_end = lo + folded + 1;
                if index_end > scan_end {
                    // The index walks its candidates in rowid order, lazily: reading stops
                    // at `limit` verified hits.
                    let mut index = conn.prepare_cached(
                        "SELECT u.id, u.unit, u.body \
                         FROM context_units_fts f CROSS JOIN context_units u ON u.id = f.rowid \
                         WHERE context_units_fts MATCH ?1 AND f.rowid >= ?2 AND f.rowid < ?3 \
                         AND agent_holds(u.folded, ?4) \
                         ORDER BY f.rowid",
                    )?;
                    let rest = limit - units.len();
                    units.extend(collect_units(
                        index.query(params![trigram_query(&term), scan_end, index_end, term])?,
                        rest,
                    )?);
                }
                if units.len() < limit {
                    let tail_from = index_end.max(scan_end) - 1;
                    let rest = limit - units.len();
                    units.extend(scan(conn, tail_from, hi, &term, rest)?);
                }
                Ok(units)
            })
            .await
    }

    async fn threads(&self) -> Result<Vec<ThreadInfo>> {
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

    async fn thread_units(&self, thread: &str) -> Result<u64> {
        let thread = thread.to_string();
        self.db
            .read(move |conn| {
                let last: Option<i64> = conn
                    .prepare_cached("SELECT last_seq FROM context_threads WHERE thread = ?1")?
                    .query_row(params![thread], |r| r.get(0))
                    .optional()?;
                Ok(last.map_or(0, |n| u64::try_from(n).unwrap_or_default()))
            })
            .await
    }

    async fn index_backlog(&self) -> Result<u64> {
        self.db.read(index::backlog).await
    }

    #[cfg(feature = "test-hooks")]
    async fn pause_fold(&self, paused: bool) -> Result<()> {
        self.fold.set_paused(paused);
        self.db.wake().await
    }

    #[cfg(feature = "test-hooks")]
    async fn fold_step(&self, max_units: u64) -> Result<u64> {
        self.db
            .write(move |conn| index::fold_batch(conn, u64::MAX, max_units))
            .await
    }

    #[cfg(feature = "test-hooks")]
    async fn index_settled(&self) -> Result<bool> {
        Ok(self.fold.settled())
    }
}

/// The FTS5 query for the units holding the trigrams of `term` (3 or more characters) that
/// start every third character, and the last one: they cover the term, and their units are
/// a superset of its hits. The index keeps no positions (schema v3), so it cannot answer
/// the phrase itself; each candidate is tested for `term` by the caller. Every third
/// trigram, not all: each costs a posting-list walk, and a term absent from the thread took
/// 0.15 ms with all of them against 0.07 ms so (100k-unit bench store). Each trigram is one
/// quoted string, which the trigram tokenizer reads as one token whatever its characters
/// (`"` doubled).
fn trigram_query(term: &str) -> String {
    let chars: Vec<char> = term.chars().collect();
    let mut seen = std::collections::HashSet::new();
    let mut query = String::new();
    let last = chars.len().saturating_sub(3);
    let starts = (0..=last).step_by(3).chain(std::iter::once(last));
    for start in starts {
        let gram: String = chars.iter().skip(start).take(3).collect();
        if !seen.insert(gram.clone()) {
            continue;
        }
        if !query.is_empty() {
            query.push_str(" AND ");
        }
        query.push('"');
        query.push_str(&gram.replace('"', "\"\""));
        query.push('"');
    }
    query
}

/// Units of ids in `(from, to)` whose folded text contains `term`, in order, at most `max`.
fn scan(conn: &Connection, from: i64, to: i64, term: &str, max: usize) -> Result<Vec<Unit>> {
    let mut scan = conn.prepare_cached(
        "SELECT id, unit, body FROM context_units \
         WHERE id > ?1 AND id < ?2 AND agent_holds(folded, ?3) \
         ORDER BY id",
    )?;
    collect_units(scan.query(params![from, to, term])?, max)
}

/// Units per multi-row INSERT (5 binds each, under SQLite's 32766 bind limit).
///
/// One statement per chunk, not one per unit: fewer statements to step, and (when the
/// append folds) FTS5 writes its pending index data out as a new segment per statement.
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
