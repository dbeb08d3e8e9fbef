//! Writing one batch: the statements, in the order the write path's invariants need (the
//! module doc of `write.rs`; the proof is in `docs/architecture.md`, "PostgreSQL write
//! path").
//!
//! - A durable batch without dedup keys, conditions or fences is one statement in its own
//!   implicit transaction ([`SINGLE_SQL`] for one event, [`PLAIN_SQL`] for more): one
//!   round trip.
//! - Any other batch is first tried in one round trip (`checked.rs`), which writes it when
//!   the database holds what its plan assumes (no dedup key written yet, conditions that
//!   hold). When it does not, the batch is a transaction of at most five round trips:
//!   BEGIN; the locks, then the id and the seqs ([`LOCK_SQL`]); what the plan reads, under
//!   the locks and in a snapshot taken after them ([`READ_SQL`], when the batch has
//!   anything to read); the rows, planned with their real seqs ([`INSERT_SQL`]); COMMIT.
//!
//! Every statement passes its rows as arrays, so a batch of any size is one statement.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;
use sqlx::{Connection as _, Row as _};

use crate::backend::batch::{self, Conditions};
use crate::writer::{Answer, Prepared, Request, relaxed_batch};

/// Seed of the hash that keys a thread's advisory lock (any constant; all processes agree).
pub(super) const THREAD_LOCK_SEED: i64 = 0x6a6e_6c74_6872_6561;

/// A plain batch: the threads' locks in key order, then the transaction id, then the seqs
/// (a block from `journal_seq`, sorted and given to the events in batch order, so each
/// thread's events ascend), then the rows. The id is projected from the aggregate's one
/// row, so after every lock; the `CASE` makes each `nextval` wait for the id. Nothing is
/// read, so the statement's snapshot (taken before the locks) decides nothing. Returns
/// the seqs in batch order.
const PLAIN_SQL: &str = "\
WITH locked AS MATERIALIZED (\
    SELECT count(pg_advisory_xact_lock(k)) AS n FROM \
    (SELECT DISTINCT hashtextextended(t, $1) AS k FROM unnest($2::text[]) AS t ORDER BY k) AS keys), \
txn AS MATERIALIZED (SELECT pg_current_xact_id()::text::bigint AS id FROM locked), \
taken AS MATERIALIZED (\
    SELECT CASE WHEN txn.id IS NOT NULL THEN nextval('journal_seq') END AS seq \
    FROM txn, generate_series(1, cardinality($3::text[]))), \
seqs AS MATERIALIZED (SELECT seq, row_number() OVER (ORDER BY seq) AS ord FROM taken), \
written AS (\
    INSERT INTO journal_events (seq, thread, kind, payload, at, dedup_key, epoch, tx) \
    SELECT s.seq, e.thread, e.kind, e.payload, e.at, NULL, e.epoch, txn.id \
    FROM txn, seqs AS s JOIN \
    unnest($3::text[], $4::text[], $5::text[], $6::int8[], $7::int8[]) \
    WITH ORDINALITY AS e(thread, kind, payload, at, epoch, ord) ON e.ord = s.ord) \
SELECT seq FROM seqs ORDER BY ord";

/// [`PLAIN_SQL`] for a batch of one event, the common awaited append: the same order (the
/// thread's lock, then the id projected from the lock's row, then the seq, which the
/// `CASE` makes wait for the id) without the arrays, the sort and the join.
const SINGLE_SQL: &str = "\
WITH txn AS MATERIALIZED (\
    SELECT pg_current_xact_id()::text::bigint AS id FROM \
    (SELECT pg_advisory_xact_lock(hashtextextended($2, $1))) AS locked) \
INSERT INTO journal_events (seq, thread, kind, payload, at, dedup_key, epoch, tx) \
SELECT CASE WHEN txn.id IS NOT NULL THEN nextval('journal_seq') END, \
    $2, $3, $4, $5, NULL, $6, txn.id FROM txn \
RETURNING seq";

/// The transaction's first statement: the threads' locks in key order; then its id and
/// a block of `$4` seqs (one per event of the batch, the most it can write), both
/// computed from the aggregate's one row, so after every lock (the subquery names that
/// row, so it runs per row, not before); and for a batch of relaxed appends only,
/// `synchronous_commit = off` for this transaction. Seqs the plan leaves unused are never
/// used (the sequence has gaps anyway).
const LOCK_SQL: &str = "\
SELECT pg_current_xact_id()::text::bigint, \
    ARRAY(SELECT nextval('journal_seq') FROM generate_series(1, $4::bigint) \
          WHERE locked.n IS NOT NULL), \
    CASE WHEN $3 THEN set_config('synchronous_commit', 'off', true) END \
FROM (SELECT count(pg_advisory_xact_lock(k)) AS n FROM \
    (SELECT DISTINCT hashtextextended(t, $1) AS k FROM unnest($2::text[]) AS t ORDER BY k) \
    AS keys) AS locked";

/// What the plan reads, tagged: `d` the seq of an existing `(thread, dedup key)`, `h` the
/// head of a thread an expected-version condition names, `f` the epoch of a lease a fence
/// names, read `FOR SHARE` (a claim of it, an UPDATE, waits for this transaction, and this
/// read for a claim under way). Each key is one probe of the partial dedup index (a
/// lateral subquery with a `LIMIT` is not flattened into a join, which a generic plan may
/// turn into a scan of the whole index).
const READ_SQL: &str = "\
WITH fences AS MATERIALIZED (\
    SELECT name, epoch FROM journal_leases WHERE name = ANY($4::text[]) FOR SHARE) \
SELECT 'd', k.thread, k.key, d.seq \
    FROM unnest($1::text[], $2::text[]) AS k(thread, key) CROSS JOIN LATERAL \
    (SELECT e.seq FROM journal_events AS e \
     WHERE e.thread = k.thread AND e.dedup_key = k.key AND e.dedup_key IS NOT NULL LIMIT 1) AS d \
UNION ALL \
SELECT 'h', t, NULL, (SELECT MAX(seq) FROM journal_events WHERE thread = t) \
    FROM unnest($3::text[]) AS t \
UNION ALL \
SELECT 'f', name, NULL, epoch FROM fences";

/// The planned rows, with the seqs the plan gave them.
const INSERT_SQL: &str = "\
INSERT INTO journal_events (seq, thread, kind, payload, at, dedup_key, epoch, tx) \
SELECT e.*, $8 FROM \
unnest($1::int8[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::text[], $7::int8[]) AS e";

/// Whether `batch` takes the one-statement path: durable, and every event will be written
/// (no dedup keys, conditions or fences).
pub(super) fn is_plain(batch: &[Request]) -> bool {
    !relaxed_batch(batch)
        && batch.iter().all(|r| {
            r.expected.is_none()
                && r.fence.is_none()
                && r.events.iter().all(|e| e.dedup_key.is_none())
        })
}

/// Writes an [`is_plain`] batch with [`PLAIN_SQL`], committed by PostgreSQL as the
/// statement ends.
pub(super) async fn plain(
    conn: &mut PgConnection,
    batch: &[Request],
) -> Result<Vec<Answer>, sqlx::Error> {
    let events: Vec<&Prepared> = batch.iter().flat_map(|r| &r.events).collect();
    let seqs: Vec<i64> = if let [event] = events.as_slice() {
        vec![
            sqlx::query_scalar(SINGLE_SQL)
                .bind(THREAD_LOCK_SEED)
                .bind(event.thread.as_str())
                .bind(event.kind.as_str())
                .bind(event.payload.as_str())
                .bind(event.at)
                .bind(event.epoch)
                .fetch_one(&mut *conn)
                .await?,
        ]
    } else {
        sqlx::query_scalar(PLAIN_SQL)
            .bind(THREAD_LOCK_SEED)
            .bind(batch_threads(batch))
            .bind(column(&events, |e| e.thread.as_str()))
            .bind(column(&events, |e| e.kind.as_str()))
            .bind(column(&events, |e| e.payload.as_str()))
            .bind(column(&events, |e| e.at))
            .bind(column(&events, |e| e.epoch))
            .fetch_all(&mut *conn)
            .await?
    };
    if seqs.len() != events.len() {
        return Err(sqlx::Error::Protocol(
            "the journal wrote another number of events than its batch holds".into(),
        ));
    }
    let mut next = seqs.into_iter();
    Ok(batch::plan_with(
        batch,
        || next.next().unwrap_or_default(),
        HashMap::new(),
        Conditions::default(),
    )
    .acks)
}

/// Writes any batch in a transaction (see the module doc); `hold` runs after the inserts
/// and before the commit (the test seam), and rolls back when it returns false.
pub(super) async fn in_transaction<F>(
    conn: &mut PgConnection,
    batch: &[Request],
    hold: impl FnOnce() -> F,
) -> Result<Vec<Answer>, sqlx::Error>
where
    F: std::future::Future<Output = bool>,
{
    let mut tx = conn.begin().await?;
    let events = batch.iter().map(|r| r.events.len()).sum::<usize>();
    let (txid, mut seqs, _): (i64, Vec<i64>, Option<String>) = sqlx::query_as(LOCK_SQL)
        .bind(THREAD_LOCK_SEED)
        .bind(batch_threads(batch))
        .bind(relaxed_batch(batch))
        .bind(i64::try_from(events).unwrap_or(i64::MAX))
        .fetch_one(&mut *tx)
        .await?;
    seqs.sort_unstable();
    let (existing, conditions) = read(&mut tx, batch).await?;
    let mut next = seqs.into_iter();
    let mut short = false;
    let plan = batch::plan_with(
        batch,
        || {
            next.next().unwrap_or_else(|| {
                short = true;
                0
            })
        },
        existing,
        conditions,
    );
    if short {
        return Err(sqlx::Error::Protocol(
            "the journal took fewer seqs than its batch holds events".into(),
        ));
    }
    if !plan.rows.is_empty() {
        let written: Vec<&Prepared> = plan.rows.iter().map(|r| r.event).collect();
        sqlx::query(INSERT_SQL)
            .bind(plan.rows.iter().map(|r| r.seq).collect::<Vec<_>>())
            .bind(column(&written, |e| e.thread.as_str()))
            .bind(column(&written, |e| e.kind.as_str()))
            .bind(column(&written, |e| e.payload.as_str()))
            .bind(column(&written, |e| e.at))
            .bind(column(&written, |e| e.dedup_key.as_deref()))
            .bind(column(&written, |e| e.epoch))
            .bind(txid)
            .execute(&mut *tx)
            .await?;
    }
    if !hold().await {
        tx.rollback().await?;
        return Err(sqlx::Error::Protocol("rolled back by a test hook".into()));
    }
    tx.commit().await?;
    Ok(plan.acks)
}

/// Reads, in one statement, the dedup keys the batch carries that are already written, the
/// heads of the threads its conditions name and the epochs of the leases its fences name.
async fn read(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    batch: &[Request],
) -> Result<(HashMap<(String, String), i64>, Conditions), sqlx::Error> {
    let mut existing = HashMap::new();
    let mut conditions = Conditions::default();
    let pairs = batch::dedup_pairs(batch);
    let expected = batch::expected_threads(batch);
    let leases = batch::fenced_leases(batch);
    if pairs.is_empty() && expected.is_empty() && leases.is_empty() {
        return Ok((existing, conditions));
    }
    for lease in &leases {
        conditions.epochs.insert((*lease).to_string(), None);
    }
    let rows = sqlx::query(READ_SQL)
        .bind(pairs.iter().map(|(thread, _)| *thread).collect::<Vec<_>>())
        .bind(pairs.iter().map(|(_, key)| *key).collect::<Vec<_>>())
        .bind(expected)
        .bind(leases)
        .fetch_all(&mut **tx)
        .await?;
    for row in rows {
        let tag: String = row.try_get(0)?;
        let name: String = row.try_get(1)?;
        let value: Option<i64> = row.try_get(3)?;
        match (tag.as_str(), value) {
            ("d", Some(seq)) => {
                existing.insert((name, row.try_get(2)?), seq);
            }
            ("h", head) => {
                conditions.heads.insert(name, head);
            }
            ("f", epoch) => {
                conditions.epochs.insert(name, epoch);
            }
            _ => {
                return Err(sqlx::Error::Protocol(format!(
                    "the journal's read returned an unknown row `{tag}`"
                )));
            }
        }
    }
    Ok((existing, conditions))
}

/// One column of `events`, as an array parameter.
pub(super) fn column<'a, T>(events: &[&'a Prepared], field: impl Fn(&'a Prepared) -> T) -> Vec<T> {
    events.iter().map(|e| field(e)).collect()
}

/// The distinct threads a batch writes or names in a condition, sorted.
pub(super) fn batch_threads(batch: &[Request]) -> Vec<&str> {
    let mut threads: Vec<&str> = batch
        .iter()
        .flat_map(|r| {
            r.events
                .iter()
                .map(|e| e.thread.as_str())
                .chain(r.expected.as_ref().map(|e| e.thread.as_str()))
        })
        .collect();
    threads.sort_unstable();
    threads.dedup();
    threads
}
