//! SQLite backend: one file in WAL mode (or a shared in-memory database).

use std::collections::HashMap;
use std::str::FromStr as _;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Connection as _, QueryBuilder, Row as _, Sqlite};

use crate::backend::{self, PAIRS_PER_LOOKUP, ROWS_PER_STATEMENT, select_events};
use crate::error::JournalError;
use crate::event::{Appended, Event};
use crate::options::{Durability, JournalOptions};
use crate::writer::Prepared;

const SCHEMA: &[(i64, &str)] = &[(1, include_str!("../migrations/sqlite/0001_events.sql"))];

/// Rows a read connection may buffer ahead of the caller.
const READ_ROW_BUFFER: usize = 4096;

pub(crate) struct Opened {
    pub writer: SqliteConnection,
    pub reads: SqlitePool,
}

pub(crate) async fn open(
    url: &str,
    shown_url: &str,
    options: &JournalOptions,
) -> Result<Opened, JournalError> {
    let connect = SqliteConnectOptions::from_str(url)
        .map_err(|e| JournalError::InvalidUrl {
            url: shown_url.to_string(),
            reason: e.to_string(),
        })?
        .create_if_missing(true)
        .busy_timeout(options.busy_timeout)
        .foreign_keys(false)
        .synchronous(match options.durability {
            Durability::Full => SqliteSynchronous::Full,
            Durability::Normal => SqliteSynchronous::Normal,
        });
    let in_memory = url.contains(":memory:") || url.contains("mode=memory");
    let connect = if in_memory {
        connect
    } else {
        connect.journal_mode(SqliteJournalMode::Wal)
    };
    let open_err = |source| JournalError::Open {
        url: shown_url.to_string(),
        source,
    };
    let mut writer = SqliteConnection::connect_with(&connect)
        .await
        .map_err(open_err)?;
    migrate(&mut writer).await?;
    // Replays stream many rows; a deep row buffer lets the connection's worker thread run
    // ahead instead of handing rows over one scheduler round trip at a time.
    let reads = SqlitePoolOptions::new()
        .max_connections(options.read_connections.max(1))
        .min_connections(0)
        .connect_with(
            connect
                .read_only(!in_memory)
                .row_buffer_size(READ_ROW_BUFFER),
        )
        .await
        .map_err(open_err)?;
    Ok(Opened { writer, reads })
}

/// Applies the embedded schema steps not yet recorded in `journal_schema`.
async fn migrate(conn: &mut SqliteConnection) -> Result<(), JournalError> {
    sqlx::query("CREATE TABLE IF NOT EXISTS journal_schema (version INTEGER PRIMARY KEY)")
        .execute(&mut *conn)
        .await?;
    let current: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM journal_schema")
        .fetch_one(&mut *conn)
        .await?;
    for (version, sql) in SCHEMA.iter().filter(|(v, _)| *v > current) {
        let mut tx = conn.begin().await?;
        sqlx::raw_sql(*sql).execute(&mut *tx).await?;
        sqlx::query("INSERT INTO journal_schema (version) VALUES (?)")
            .bind(version)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
    }
    Ok(())
}

pub(crate) async fn write_batch(
    conn: &mut SqliteConnection,
    batch: &[Vec<Prepared>],
) -> Result<Vec<Vec<Appended>>, sqlx::Error> {
    sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    match write_in_transaction(conn, batch).await {
        Ok(acks) => {
            sqlx::query("COMMIT").execute(&mut *conn).await?;
            Ok(acks)
        }
        Err(err) => {
            if let Err(rollback) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
                tracing::warn!(%rollback, "rollback after a failed journal write failed");
            }
            Err(err)
        }
    }
}

async fn write_in_transaction(
    conn: &mut SqliteConnection,
    batch: &[Vec<Prepared>],
) -> Result<Vec<Vec<Appended>>, sqlx::Error> {
    let max_seq: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM journal_events")
        .fetch_one(&mut *conn)
        .await?;
    let mut existing = HashMap::new();
    for pairs in backend::dedup_pairs(batch).chunks(PAIRS_PER_LOOKUP) {
        let mut query: QueryBuilder<Sqlite> =
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
        for row in query.build().fetch_all(&mut *conn).await? {
            existing.insert((row.try_get(0)?, row.try_get(1)?), row.try_get(2)?);
        }
    }
    let plan = backend::plan(batch, max_seq, existing);
    for rows in plan.rows.chunks(ROWS_PER_STATEMENT) {
        let mut query: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO journal_events (seq, thread, kind, payload, at, dedup_key) ",
        );
        query.push_values(rows, |mut b, row| {
            b.push_bind(row.seq)
                .push_bind(row.event.thread.as_str())
                .push_bind(row.event.kind.as_str())
                .push_bind(row.event.payload.as_str())
                .push_bind(row.event.at)
                .push_bind(row.event.dedup_key.as_deref());
        });
        query.build().execute(&mut *conn).await?;
    }
    Ok(plan.acks)
}

pub(crate) async fn replay_page(
    pool: &SqlitePool,
    thread: &str,
    after: i64,
    limit: i64,
) -> Result<Vec<Event>, JournalError> {
    // Served by the clustered primary key (thread, seq): O(events of the thread).
    let sql = select_events!("WHERE thread = ? AND seq > ? ORDER BY seq LIMIT ?");
    let rows = sqlx::query(sql)
        .bind(thread)
        .bind(after)
        .bind(limit)
        .fetch_all(pool)
        .await?;
    rows.iter().map(backend::decode).collect()
}

pub(crate) async fn find_by_key(
    pool: &SqlitePool,
    thread: &str,
    key: &str,
) -> Result<Option<Event>, JournalError> {
    let sql = select_events!("WHERE thread = ? AND dedup_key = ?");
    let row = sqlx::query(sql)
        .bind(thread)
        .bind(key)
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(backend::decode).transpose()
}

pub(crate) async fn threads(pool: &SqlitePool) -> Result<Vec<String>, JournalError> {
    Ok(
        sqlx::query_scalar("SELECT DISTINCT thread FROM journal_events ORDER BY thread")
            .fetch_all(pool)
            .await?,
    )
}

pub(crate) async fn last_seq(pool: &SqlitePool, thread: &str) -> Result<Option<i64>, JournalError> {
    Ok(
        sqlx::query_scalar("SELECT MAX(seq) FROM journal_events WHERE thread = ?")
            .bind(thread)
            .fetch_one(pool)
            .await?,
    )
}
