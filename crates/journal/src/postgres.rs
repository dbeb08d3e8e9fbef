//! PostgreSQL backend: shared by processes and hosts.
//!
//! Writers from every process serialise on an advisory transaction lock, so commit order
//! equals seq order across processes. Each commit notifies channel [`CHANNEL`] with the
//! thread name; `tail` listens there to see other processes' appends.

use std::collections::HashMap;
use std::str::FromStr as _;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection as _, Postgres, QueryBuilder, Row as _};

use crate::backend::{self, PAIRS_PER_LOOKUP, ROWS_PER_STATEMENT, select_events};
use crate::error::JournalError;
use crate::event::Event;
use crate::options::{Durability, JournalOptions};
use crate::writer::{Answer, Request};

/// LISTEN/NOTIFY channel; the payload is the thread name.
pub(crate) const CHANNEL: &str = "agent_journal";
/// Advisory lock key held by every journal write transaction ("agentjnl" in ASCII).
const WRITE_LOCK_KEY: i64 = 0x6167_656e_746a_6e6c;
/// How long opening waits for the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA: &backend::Schema = &[
    (1, include_str!("../migrations/postgres/0001_events.sql")),
    (2, include_str!("../migrations/postgres/0002_leases.sql")),
];

pub(crate) struct Opened {
    pub writer: PgConnection,
    pub reads: PgPool,
}

pub(crate) async fn open(
    url: &str,
    shown_url: &str,
    options: &JournalOptions,
) -> Result<Opened, JournalError> {
    let connect = PgConnectOptions::from_str(url).map_err(|e| JournalError::InvalidUrl {
        url: shown_url.to_string(),
        reason: redact_error(&e.to_string(), url, shown_url),
    })?;
    let open_err = |source: sqlx::Error| JournalError::Open {
        url: shown_url.to_string(),
        source: Box::new(source),
    };
    let mut writer = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&connect))
        .await
        .map_err(|_| open_err(sqlx::Error::PoolTimedOut))?
        .map_err(open_err)?;
    if options.durability == Durability::Normal {
        sqlx::query("SET synchronous_commit = off")
            .execute(&mut writer)
            .await?;
    }
    // A writer process stopped mid-transaction (SIGSTOP, a VM pause) holds the journal's
    // write lock; the server ends such a transaction so the other processes go on. Ours
    // last microseconds between statements.
    sqlx::query("SET idle_in_transaction_session_timeout = '30s'")
        .execute(&mut writer)
        .await?;
    migrate(&mut writer).await?;
    let reads = PgPoolOptions::new()
        .max_connections(options.read_connections.max(1))
        .min_connections(0)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(connect)
        .await
        .map_err(open_err)?;
    Ok(Opened { writer, reads })
}

fn redact_error(message: &str, url: &str, _shown_url: &str) -> String {
    agent_redact::redact_in(message, url)
}

async fn migrate(conn: &mut PgConnection) -> Result<(), JournalError> {
    let mut tx = conn.begin().await?;
    // Serialise concurrent first opens of an empty database.
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(WRITE_LOCK_KEY)
        .execute(&mut *tx)
        .await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS journal_schema (version BIGINT PRIMARY KEY)")
        .execute(&mut *tx)
        .await?;
    let current: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM journal_schema")
        .fetch_one(&mut *tx)
        .await?;
    for (version, sql) in backend::pending_steps(SCHEMA, current)? {
        sqlx::raw_sql(*sql).execute(&mut *tx).await?;
        sqlx::query("INSERT INTO journal_schema (version) VALUES ($1)")
            .bind(version)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

pub(crate) async fn write_batch(
    conn: &mut PgConnection,
    batch: &[Request],
) -> Result<Vec<Answer>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(WRITE_LOCK_KEY)
        .execute(&mut *tx)
        .await?;
    let max_seq: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM journal_events")
        .fetch_one(&mut *tx)
        .await?;
    let mut existing = HashMap::new();
    for pairs in backend::dedup_pairs(batch).chunks(PAIRS_PER_LOOKUP) {
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
    let mut conditions = backend::Conditions::default();
    let heads = &mut conditions.heads;
    let threads = backend::expected_threads(batch);
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
    let leases = backend::fenced_leases(batch);
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
    let plan = backend::plan(batch, max_seq, existing, conditions);
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

pub(crate) async fn replay_page(
    pool: &PgPool,
    thread: &str,
    after: i64,
    limit: i64,
) -> Result<Vec<Event>, JournalError> {
    let sql = select_events!("WHERE thread = $1 AND seq > $2 ORDER BY seq LIMIT $3");
    let rows = sqlx::query(sql)
        .bind(thread)
        .bind(after)
        .bind(limit)
        .fetch_all(pool)
        .await?;
    rows.iter().map(backend::decode).collect()
}

pub(crate) async fn find_by_key(
    pool: &PgPool,
    thread: &str,
    key: &str,
) -> Result<Option<Event>, JournalError> {
    let sql = select_events!("WHERE thread = $1 AND dedup_key = $2");
    let row = sqlx::query(sql)
        .bind(thread)
        .bind(key)
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(backend::decode).transpose()
}

pub(crate) async fn threads(pool: &PgPool) -> Result<Vec<String>, JournalError> {
    Ok(
        sqlx::query_scalar("SELECT DISTINCT thread FROM journal_events ORDER BY thread")
            .fetch_all(pool)
            .await?,
    )
}

pub(crate) async fn last_seq(pool: &PgPool, thread: &str) -> Result<Option<i64>, JournalError> {
    Ok(
        sqlx::query_scalar("SELECT MAX(seq) FROM journal_events WHERE thread = $1")
            .bind(thread)
            .fetch_one(pool)
            .await?,
    )
}
