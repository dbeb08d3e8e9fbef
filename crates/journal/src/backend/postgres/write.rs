//! The PostgreSQL writer task: one task owns the write connection and commits each batch
//! in one transaction. There is no journal-wide lock: a transaction holds the locks of the
//! threads it writes only, so writers of different threads (in this process's batches or
//! in other processes) never wait for each other. Each commit notifies [`CHANNEL`] once per
//! thread it wrote to.
//!
//! Invariants of a write transaction, in statement order (the proof that tails neither
//! skip nor repeat an event is in `docs/architecture.md`, "PostgreSQL write path"):
//! 1. It first takes a transaction-scoped advisory lock per thread of the batch (keyed by a
//!    64-bit hash of the name), in key order, so two batches cannot deadlock. Until commit
//!    no other transaction writes those threads: dedup keys, heads and expectations read
//!    next are final.
//! 2. Only then is its transaction id assigned (`pg_current_xact_id()`: advisory locks do
//!    not assign one). A transaction that waited for a thread's lock gets a higher id than
//!    the one it waited for, so transaction ids order each thread's commits.
//!    (`nextval` may assign it too, which is why it also runs only after the locks.)
//! 3. Its seqs come from the `journal_seq` sequence after the locks, so a thread's seqs
//!    increase in its commit order. Every row stores the transaction id (`tx`); readers of
//!    the whole journal order by `(tx, seq)` and stop below the oldest running transaction.
//! 4. Fences are read `FOR SHARE` inside the transaction, as before.
//!
//! A batch without dedup keys, conditions, fences or relaxed events (the common awaited
//! append) is one statement in its own implicit transaction ([`PLAIN_SQL`]): the same
//! steps in the same order, in one round trip instead of four.
//!
//! Wake-ups are sent after the commit, by the notifier task on a pool connection, never
//! inside the write transaction: PostgreSQL commits the transactions that `NOTIFY` one at
//! a time under a database-wide lock held through the WAL flush, which serialised every
//! writer of the cluster. A notification lost to a crash between the commit and its send
//! is covered by the tails' polling, as one lost with the LISTEN connection is.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;
use sqlx::{Connection as _, Postgres, QueryBuilder, Row as _};
use tokio::sync::mpsc;

use super::notify::Notifier;
use crate::backend::batch::{self, PAIRS_PER_LOOKUP, ROWS_PER_STATEMENT};
use crate::writer::{
    Answer, Batch, Msg, Pending, Request, Settle, drain_after_close, relaxed_batch,
};

/// Seed of the hash that keys a thread's advisory lock (any constant; all processes agree).
const THREAD_LOCK_SEED: i64 = 0x6a6e_6c74_6872_6561;
/// How many times a batch re-allocates seqs that another writer's allocation interleaved
/// with, to give it consecutive ones (the values passed over are never used).
const CONSECUTIVE_TRIES: usize = 4;

/// The PostgreSQL writer task. Runs until `Close` or until every handle is dropped.
///
/// Batching: after the first queued request, everything already queued is taken, and the
/// task yields once whenever the queue runs dry, to let producers that were just
/// acknowledged join this commit (up to `max_batch` events).
pub(crate) async fn run(
    mut conn: sqlx::PgConnection,
    notifier: Notifier,
    mut rx: mpsc::Receiver<Msg>,
    mut settle: Settle,
    max_batch: usize,
    #[cfg(feature = "test-hooks")] hook: Option<crate::hooks::WriteHook>,
) {
    let mut close = None;
    while close.is_none() {
        let Some(first) = rx.recv().await else { break };
        let mut batch = Batch::default();
        let mut more = batch.take(first, max_batch);
        while more {
            let msg = match rx.try_recv() {
                Ok(msg) => msg,
                // Linger: producers woken by the previous commit's acks may be about to
                // append. Yielding once lets them run; stop as soon as a yield brings
                // nothing, so an idle writer adds no latency beyond one scheduler pass.
                Err(_) => {
                    tokio::task::yield_now().await;
                    match rx.try_recv() {
                        Ok(msg) => msg,
                        Err(_) => break,
                    }
                }
            };
            more = batch.take(msg, max_batch);
        }
        let (pending, closing) = settle.begin(batch);
        close = closing;
        if let Some(Pending { requests, acks }) = pending {
            let result = write_batch(
                &mut conn,
                &requests,
                #[cfg(feature = "test-hooks")]
                hook.as_ref(),
            )
            .await;
            if let Ok(answers) = &result {
                notifier.send(written_threads(&requests, answers));
            }
            settle.finish(&requests, acks, result);
        }
    }
    if let Err(err) = conn.close().await {
        tracing::warn!(%err, "closing the journal's write connection failed");
    }
    // A close returns once every commit's wake-up is sent: a process that appends, closes
    // and exits does not leave other processes' tails to find its events by polling.
    notifier.flush().await;
    drain_after_close(&mut rx, close);
}

/// The threads that a committed batch wrote new events to, each once.
fn written_threads(batch: &[Request], answers: &[Answer]) -> Vec<String> {
    let mut threads: Vec<String> = batch
        .iter()
        .zip(answers)
        .filter(|(_, answer)| {
            answer
                .as_ref()
                .is_ok_and(|acks| acks.iter().any(|a| !a.deduplicated))
        })
        .flat_map(|(request, _)| request.events.iter().map(|e| e.thread.clone()))
        .collect();
    threads.sort_unstable();
    threads.dedup();
    threads
}

async fn write_batch(
    conn: &mut PgConnection,
    batch: &[Request],
    #[cfg(feature = "test-hooks")] hook: Option<&crate::hooks::WriteHook>,
) -> Result<Vec<Answer>, sqlx::Error> {
    #[cfg(feature = "test-hooks")]
    let hooked = hook.is_some();
    #[cfg(not(feature = "test-hooks"))]
    let hooked = false;
    if plain(batch) && !relaxed_batch(batch) && !hooked {
        return write_plain(conn, batch).await;
    }
    let mut tx = conn.begin().await?;
    if relaxed_batch(batch) {
        // Acknowledged once committed, before the WAL is flushed: a later synchronous
        // commit waits for the flush up to its own record, which covers this one.
        sqlx::query("SET LOCAL synchronous_commit = off")
            .execute(&mut *tx)
            .await?;
    }
    // 1. The batch's threads, locked in key order (nothing before this assigns an xid);
    // 2. then the transaction id, assigned after every lock this transaction waited for:
    // the outer projection runs once the aggregate has consumed (locked) every key.
    let threads = batch_threads(batch);
    // A batch without dedup keys, conditions or fences writes every event: its seqs are
    // taken in the same statement, after the locks (the outer projection, where both the
    // id and the array are evaluated, runs once the aggregate has taken every lock).
    let known = if plain(batch) {
        batch.iter().map(|r| r.events.len()).sum()
    } else {
        0
    };
    let (txid, taken): (i64, Vec<i64>) = sqlx::query_as(
        "SELECT pg_current_xact_id()::text::bigint, \
         ARRAY(SELECT nextval('journal_seq') FROM generate_series(1, $3::bigint)) FROM \
         (SELECT count(pg_advisory_xact_lock(k)) FROM \
          (SELECT DISTINCT hashtextextended(t, $2) AS k FROM unnest($1::text[]) AS t ORDER BY k) \
          AS keys) AS locked",
    )
    .bind(&threads)
    .bind(THREAD_LOCK_SEED)
    .bind(i64::try_from(known).unwrap_or(0))
    .fetch_one(&mut *tx)
    .await?;
    let mut existing = HashMap::new();
    for pairs in batch::dedup_pairs(batch).chunks(PAIRS_PER_LOOKUP) {
        let mut query: QueryBuilder<Postgres> =
            QueryBuilder::new("SELECT e.thread, e.dedup_key, e.seq FROM (VALUES ");
        let mut list = query.separated(", ");
        for (thread, key) in pairs {
            list.push("(");
            list.push_bind_unseparated(*thread);
            list.push_unseparated(", ");
            list.push_bind_unseparated(*key);
            list.push_unseparated(")");
        }
        // The keys drive the join, so each is one probe of the dedup index. (A row-value
        // `IN (VALUES ...)` filter is planned as a scan of the whole table.)
        query.push(
            ") AS k JOIN journal_events AS e ON e.thread = k.column1 AND e.dedup_key = k.column2",
        );
        for row in query.build().fetch_all(&mut *tx).await? {
            existing.insert((row.try_get(0)?, row.try_get(1)?), row.try_get(2)?);
        }
    }
    // Heads of the threads that conditional requests name: one index probe each, final
    // under the threads' locks.
    let mut conditions = batch::Conditions::default();
    let heads = &mut conditions.heads;
    let expected = batch::expected_threads(batch);
    if !expected.is_empty() {
        let rows = sqlx::query(
            "SELECT t, (SELECT MAX(seq) FROM journal_events WHERE thread = t) \
             FROM unnest($1::text[]) AS t",
        )
        .bind(expected)
        .fetch_all(&mut *tx)
        .await?;
        for row in rows {
            heads.insert(row.try_get::<String, _>(0)?, row.try_get(1)?);
        }
    }
    // Epochs of the leases that fenced requests name. FOR SHARE: a claim of one of them
    // (an UPDATE) waits for this transaction, and this read waits for a claim under way,
    // so a fenced append and a claim are never interleaved.
    let leases = batch::fenced_leases(batch);
    if !leases.is_empty() {
        for lease in &leases {
            conditions.epochs.insert((*lease).to_string(), None);
        }
        let rows = sqlx::query(
            "SELECT name, epoch FROM journal_leases WHERE name = ANY($1::text[]) FOR SHARE",
        )
        .bind(leases)
        .fetch_all(&mut *tx)
        .await?;
        for row in rows {
            conditions
                .epochs
                .insert(row.try_get::<String, _>(0)?, row.try_get(1)?);
        }
    }
    // 3. A dry run counts the rows; their seqs come from the sequence, after the locks.
    let count = batch::plan(batch, 0, existing.clone(), conditions.clone())
        .rows
        .len();
    let seqs = if count == known && consecutive(&taken) {
        taken
    } else {
        allocate(&mut tx, count).await?
    };
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
            "the journal allocated fewer seqs than its plan needs".into(),
        ));
    }
    for rows in plan.rows.chunks(ROWS_PER_STATEMENT) {
        let mut query: QueryBuilder<Postgres> = QueryBuilder::new(
            "INSERT INTO journal_events (seq, thread, kind, payload, at, dedup_key, epoch, tx) ",
        );
        query.push_values(rows, |mut b, row| {
            b.push_bind(row.seq)
                .push_bind(row.event.thread.as_str())
                .push_bind(row.event.kind.as_str())
                .push_bind(row.event.payload.as_str())
                .push_bind(row.event.at)
                .push_bind(row.event.dedup_key.as_deref())
                .push_bind(row.event.epoch)
                .push_bind(txid);
        });
        query.build().execute(&mut *tx).await?;
    }
    #[cfg(feature = "test-hooks")]
    if let Some(hook) = hook
        && (hook.0)().await == crate::hooks::HookAction::Rollback
    {
        tx.rollback().await?;
        return Err(sqlx::Error::Protocol("rolled back by a test hook".into()));
    }
    tx.commit().await?;
    Ok(plan.acks)
}

/// One plain batch in one statement (see the module's invariants): the threads' locks in
/// key order, then the transaction id, then the seqs (a block from `journal_seq`, sorted
/// and given to the events in batch order, so each thread's events ascend), then the rows.
/// The `CASE` makes each `nextval` wait for the id, and the id's projection runs once the
/// aggregate has taken every lock. Returns the seqs in batch order.
const PLAIN_SQL: &str = "\
WITH locked AS MATERIALIZED (\
    SELECT count(pg_advisory_xact_lock(k)) AS n FROM \
    (SELECT DISTINCT hashtextextended(t, $2) AS k FROM unnest($1::text[]) AS t ORDER BY k) AS keys), \
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

/// Writes a [`plain`], durable batch with [`PLAIN_SQL`]: one round trip, committed by
/// PostgreSQL as the statement ends.
async fn write_plain(
    conn: &mut PgConnection,
    batch: &[Request],
) -> Result<Vec<Answer>, sqlx::Error> {
    let threads = batch_threads(batch);
    let events: Vec<&crate::writer::Prepared> = batch.iter().flat_map(|r| &r.events).collect();
    let seqs: Vec<i64> = sqlx::query_scalar(PLAIN_SQL)
        .bind(&threads)
        .bind(THREAD_LOCK_SEED)
        .bind(events.iter().map(|e| e.thread.as_str()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>())
        .bind(
            events
                .iter()
                .map(|e| e.payload.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(events.iter().map(|e| e.at).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.epoch).collect::<Vec<_>>())
        .fetch_all(&mut *conn)
        .await?;
    if seqs.len() != events.len() {
        return Err(sqlx::Error::Protocol(
            "the journal wrote another number of events than its batch holds".into(),
        ));
    }
    let mut next = seqs.into_iter();
    let plan = batch::plan_with(
        batch,
        || next.next().unwrap_or_default(),
        HashMap::new(),
        batch::Conditions::default(),
    );
    Ok(plan.acks)
}

/// Whether every event of `batch` will be written: no dedup keys, conditions or fences.
fn plain(batch: &[Request]) -> bool {
    batch.iter().all(|r| {
        r.expected.is_none() && r.fence.is_none() && r.events.iter().all(|e| e.dedup_key.is_none())
    })
}

fn consecutive(seqs: &[i64]) -> bool {
    seqs.windows(2).all(|w| w[1] == w[0] + 1)
}

/// The distinct threads a batch writes or names in a condition, sorted.
fn batch_threads(batch: &[Request]) -> Vec<&str> {
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

/// `count` new seqs from `journal_seq`, ascending; consecutive unless another writer's
/// allocation interleaved with this one [`CONSECUTIVE_TRIES`] times in a row (then they are
/// still increasing, and still adjacent within each thread, which is what readers rely on).
async fn allocate(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    count: usize,
) -> Result<Vec<i64>, sqlx::Error> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    let mut seqs = Vec::new();
    for _ in 0..CONSECUTIVE_TRIES {
        seqs =
            sqlx::query_scalar("SELECT nextval('journal_seq') FROM generate_series(1, $1::bigint)")
                .bind(count)
                .fetch_all(&mut **tx)
                .await?;
        seqs.sort_unstable();
        if consecutive(&seqs) {
            break;
        }
    }
    Ok(seqs)
}
