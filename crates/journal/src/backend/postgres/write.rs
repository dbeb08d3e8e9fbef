//! The PostgreSQL writer task: one task owns the write connection and commits each batch
//! in one transaction under the journal's advisory write lock, so commit order equals seq
//! order across every process that writes the same database. Each commit notifies
//! [`CHANNEL`] once per thread it wrote to.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;
use sqlx::{Connection as _, Postgres, QueryBuilder, Row as _};
use tokio::sync::mpsc;

use super::{CHANNEL, WRITE_LOCK_KEY};
use crate::backend::batch::{self, PAIRS_PER_LOOKUP, ROWS_PER_STATEMENT};
use crate::writer::{
    Answer, Batch, Msg, Pending, Request, Settle, drain_after_close, relaxed_batch,
};

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
            let result = write_batch(&mut conn, &requests).await;
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
) -> Result<Vec<Answer>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    if relaxed_batch(batch) {
        // Acknowledged once committed, before the WAL is flushed: a later synchronous
        // commit waits for the flush up to its own record, which covers this one.
        sqlx::query("SET LOCAL synchronous_commit = off")
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(WRITE_LOCK_KEY)
        .execute(&mut *tx)
        .await?;
    let max_seq: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM journal_events")
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
    // Heads of the threads that conditional requests name: one index probe each.
    let mut conditions = batch::Conditions::default();
    let heads = &mut conditions.heads;
    let threads = batch::expected_threads(batch);
    if !threads.is_empty() {
        let rows = sqlx::query(
            "SELECT t, (SELECT MAX(seq) FROM journal_events WHERE thread = t) \
             FROM unnest($1::text[]) AS t",
        )
        .bind(threads)
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
    let plan = batch::plan(batch, max_seq, existing, conditions);
    for rows in plan.rows.chunks(ROWS_PER_STATEMENT) {
        let mut query: QueryBuilder<Postgres> = QueryBuilder::new(
            "INSERT INTO journal_events (seq, thread, kind, payload, at, dedup_key, epoch) ",
        );
        query.push_values(rows, |mut b, row| {
            b.push_bind(row.seq)
                .push_bind(row.event.thread.as_str())
                .push_bind(row.event.kind.as_str())
                .push_bind(row.event.payload.as_str())
                .push_bind(row.event.at)
                .push_bind(row.event.dedup_key.as_deref())
                .push_bind(row.event.epoch);
        });
        query.build().execute(&mut *tx).await?;
    }
    let mut threads: Vec<&str> = plan.rows.iter().map(|r| r.event.thread.as_str()).collect();
    threads.sort_unstable();
    threads.dedup();
    if !threads.is_empty() {
        sqlx::query("SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t")
            .bind(CHANNEL)
            .bind(threads)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(plan.acks)
}
