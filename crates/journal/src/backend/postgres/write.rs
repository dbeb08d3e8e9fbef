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

use std::collections::HashMap;

use sqlx::postgres::PgConnection;
use sqlx::{Connection as _, Postgres, QueryBuilder, Row as _};
use tokio::sync::mpsc;

use super::CHANNEL;
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
            settle.finish(&requests, acks, result);
        }
    }
    if let Err(err) = conn.close().await {
        tracing::warn!(%err, "closing the journal's write connection failed");
    }
    drain_after_close(&mut rx, close);
}

async fn write_batch(
    conn: &mut PgConnection,
    batch: &[Request],
    #[cfg(feature = "test-hooks")] hook: Option<&crate::hooks::WriteHook>,
) -> Result<Vec<Answer>, sqlx::Error> {
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
    // Each INSERT notifies the threads it wrote (PostgreSQL delivers a repeated
    // notification of one transaction once, at commit).
    for rows in plan.rows.chunks(ROWS_PER_STATEMENT) {
        let mut query: QueryBuilder<Postgres> = QueryBuilder::new(
            "WITH written AS (INSERT INTO journal_events \
             (seq, thread, kind, payload, at, dedup_key, epoch, tx) ",
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
        query.push(" RETURNING thread) SELECT pg_notify(");
        query.push_bind(CHANNEL);
        query.push(", t) FROM (SELECT DISTINCT thread AS t FROM written) AS threads");
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
