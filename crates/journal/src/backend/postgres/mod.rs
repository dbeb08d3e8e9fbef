//! PostgreSQL backend: shared by processes and hosts.
//!
//! Writers of different threads never wait for each other, in this process or in others:
//! a write transaction locks only the threads it writes (`write.rs`). Each thread's commits
//! are in seq order; the whole journal's are ordered by writing transaction, and read up
//! to the oldest transaction still running (`read.rs`). Each commit notifies channel
//! [`CHANNEL`] with the thread name; `tail` listens there to see other processes' appends.

mod append;
mod checked;
mod direct;
mod listen;
mod notify;
mod read;
mod write;

use std::str::FromStr as _;
use std::time::Duration;

use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};

use crate::error::JournalError;
use crate::options::{Durability, JournalOptions};

pub(crate) use direct::{Direct, try_write as try_direct};
pub(crate) use listen::spawn as spawn_listener;
pub(crate) use notify::Notifier;
pub(crate) use read::PgReader;
pub(crate) use write::{Queuing, Shared, spawn as spawn_writer};

/// LISTEN/NOTIFY channel; the payload is the thread name.
pub(crate) const CHANNEL: &str = "agent_journal";
/// Advisory lock key that serialises schema steps of concurrent opens ("agentjnl" in
/// ASCII; before schema 3 every write transaction held it too).
const MIGRATE_LOCK_KEY: i64 = 0x6167_656e_746a_6e6c;
/// How long opening waits for the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA: &agent_schema::Steps = &[
    (
        1,
        include_str!("../../../migrations/postgres/0001_events.sql"),
    ),
    (
        2,
        include_str!("../../../migrations/postgres/0002_leases.sql"),
    ),
    (
        3,
        include_str!("../../../migrations/postgres/0003_lock_free_writes.sql"),
    ),
    (
        4,
        include_str!("../../../migrations/postgres/0004_append_function.sql"),
    ),
    (
        5,
        include_str!("../../../migrations/postgres/0005_append_short_paths.sql"),
    ),
];

/// An opened database: the connection the writer task will own (none when read-only), and
/// the read side.
pub(crate) struct Opened {
    pub(crate) writer: Option<write::WriteConn>,
    pub(crate) reader: PgReader,
}

/// Connects, applies the schema and opens the read pool; `read_only`: every session is
/// `default_transaction_read_only`, no schema step is applied (a schema that is not this
/// build's is refused) and no writer connection is made.
pub(crate) async fn open(
    url: &str,
    shown_url: &str,
    options: &JournalOptions,
    read_only: bool,
) -> Result<Opened, JournalError> {
    let mut connect = PgConnectOptions::from_str(url).map_err(|e| JournalError::InvalidUrl {
        url: shown_url.to_string(),
        reason: agent_redact::redact_in(&e.to_string(), url),
    })?;
    // Every session of the journal reads committed data statement by statement, whatever
    // the database's default: the writer reads a thread's head and dedup keys after
    // taking the thread's lock, in a snapshot taken after it. Under a default of
    // REPEATABLE READ the transaction's one snapshot predated the lock, and an append
    // expecting a head another process had just moved was written (a lost update).
    connect = connect.options([("default_transaction_isolation", "read committed")]);
    let open_err = |source: sqlx::Error| JournalError::Open {
        url: shown_url.to_string(),
        source: Box::new(source),
    };
    if read_only {
        connect = connect.options([("default_transaction_read_only", "on")]);
        let reads = pool(options, connect).await.map_err(open_err)?;
        check_encoding(&reads, shown_url).await?;
        let version: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM journal_schema")
            .fetch_one(&reads)
            .await
            .map_err(open_err)?;
        let version = version.unwrap_or(0);
        let supported = SCHEMA.last().map_or(0, |(v, _)| *v);
        if version > supported {
            return Err(JournalError::SchemaTooNew {
                found: version,
                supported,
            });
        }
        if version < supported {
            return Err(JournalError::Open {
                url: shown_url.to_string(),
                source: format!(
                    "its journal schema is version {version}, this build reads version {supported}, \
                     and a read-only journal applies no schema step (open it once read-write)"
                )
                .into(),
            });
        }
        return Ok(Opened {
            writer: None,
            reader: PgReader::new(reads),
        });
    }
    let relaxed = options.durability == Durability::Normal;
    let mut writer = match writer_connection(&connect, relaxed).await {
        Ok(conn) => conn,
        Err(WriterConnectError::TimedOut) => return Err(open_err(sqlx::Error::PoolTimedOut)),
        Err(WriterConnectError::Connect(err)) => return Err(open_err(err)),
        Err(WriterConnectError::Session(err)) => return Err(err.into()),
    };
    check_encoding(&mut writer, shown_url).await?;
    migrate(&mut writer).await?;
    let reads = pool(options, connect.clone()).await.map_err(open_err)?;
    Ok(Opened {
        writer: Some(write::WriteConn::new(writer, connect, relaxed)),
        reader: PgReader::new(reads),
    })
}

/// [`JournalError::Open`] unless the database can store every character: its encoding is
/// UTF8, or SQL_ASCII (which stores bytes as they come). Threads, kinds and payloads are
/// any Unicode; in a LATIN1 database the first event of CJK text failed the writer's
/// statement, and the writer latched failed for good.
async fn check_encoding<'c>(
    db: impl sqlx::PgExecutor<'c>,
    shown_url: &str,
) -> Result<(), JournalError> {
    let open_err = |source: Box<dyn std::error::Error + Send + Sync>| JournalError::Open {
        url: shown_url.to_string(),
        source,
    };
    let encoding: String = sqlx::query_scalar("SELECT current_setting('server_encoding')")
        .fetch_one(db)
        .await
        .map_err(|err| open_err(Box::new(err)))?;
    if matches!(encoding.as_str(), "UTF8" | "SQL_ASCII") {
        return Ok(());
    }
    Err(open_err(
        format!(
            "the database's encoding is {encoding}, which cannot hold every character an event \
             may carry; the journal needs a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')"
        )
        .into(),
    ))
}

/// Why the write connection could not be made.
pub(super) enum WriterConnectError {
    TimedOut,
    Connect(sqlx::Error),
    Session(sqlx::Error),
}

/// A new write connection with the writer's session settings (`relaxed`: commits do not
/// wait for the WAL flush, [`Durability::Normal`]).
pub(super) async fn writer_connection(
    connect: &PgConnectOptions,
    relaxed: bool,
) -> Result<PgConnection, WriterConnectError> {
    let mut writer = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(connect))
        .await
        .map_err(|_| WriterConnectError::TimedOut)?
        .map_err(WriterConnectError::Connect)?;
    let session = |sql: &'static str| sqlx::query(sql);
    // Set either way: a database or role default of `off` must not make `Full` appends
    // acknowledged before their WAL flush.
    session(if relaxed {
        "SET synchronous_commit = off"
    } else {
        "SET synchronous_commit = on"
    })
    .execute(&mut writer)
    .await
    .map_err(WriterConnectError::Session)?;
    // A writer process stopped mid-transaction (SIGSTOP, a VM pause) holds its threads'
    // locks and, by running, holds back the horizon of every reader of the whole journal;
    // the server ends such a transaction so the others go on. Ours last microseconds
    // between statements.
    session("SET idle_in_transaction_session_timeout = '30s'")
        .execute(&mut writer)
        .await
        .map_err(WriterConnectError::Session)?;
    // Whatever the database's defaults, no timeout on the writer's statements: their only
    // waits are for threads' locks that other writers hold (bounded by those writers'
    // timeout above), and a statement that fails latches the writer for good. With a
    // `lock_timeout` of the database's, an append that waited for another process's
    // commit failed the journal.
    session("SET lock_timeout = 0")
        .execute(&mut writer)
        .await
        .map_err(WriterConnectError::Session)?;
    session("SET statement_timeout = 0")
        .execute(&mut writer)
        .await
        .map_err(WriterConnectError::Session)?;
    // `transaction_timeout` (PostgreSQL 17) likewise, where the server has it.
    session(
        "SELECT set_config('transaction_timeout', '0', false) FROM pg_settings \
         WHERE name = 'transaction_timeout'",
    )
    .execute(&mut writer)
    .await
    .map_err(WriterConnectError::Session)?;
    // The writer's statements are few and fixed; planned once, not on every execution
    // (a custom plan of the one-statement append cost more CPU than executing it).
    session("SET plan_cache_mode = force_generic_plan")
        .execute(&mut writer)
        .await
        .map_err(WriterConnectError::Session)?;
    Ok(writer)
}

/// The pool reads (and lease operations) use.
async fn pool(
    options: &JournalOptions,
    connect: PgConnectOptions,
) -> Result<sqlx::PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(options.read_connections.max(1))
        .min_connections(0)
        // Connections a burst opened are closed once idle, not kept until the process ends.
        .idle_timeout(options.read_idle_timeout.max(Duration::from_millis(100)))
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(connect)
        .await
}

async fn migrate(conn: &mut PgConnection) -> Result<(), JournalError> {
    let mut tx = conn.begin().await?;
    // Serialise concurrent first opens of an empty database.
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATE_LOCK_KEY)
        .execute(&mut *tx)
        .await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS journal_schema (version BIGINT PRIMARY KEY)")
        .execute(&mut *tx)
        .await?;
    let current: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM journal_schema")
        .fetch_one(&mut *tx)
        .await?;
    for (version, sql) in agent_schema::pending_steps(SCHEMA, current)? {
        sqlx::raw_sql(*sql).execute(&mut *tx).await?;
        sqlx::query("INSERT INTO journal_schema (version) VALUES ($1)")
            .bind(version)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the writer's session says of `synchronous_commit` on a database whose default
    /// is `off`: `Full` must wait for the WAL flush whatever the database says.
    #[tokio::test]
    async fn the_writer_s_durability_does_not_inherit_the_database_s_default() {
        let Some(db) = agent_testkit::fresh_pg_database("journal_sync_default").await else {
            return;
        };
        let mut admin = PgConnection::connect(db.url()).await.unwrap();
        sqlx::query(
            "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = off', \
             current_database()); END $$",
        )
        .execute(&mut admin)
        .await
        .unwrap();
        for (durability, expected) in [(Durability::Full, "on"), (Durability::Normal, "off")] {
            let options = JournalOptions::default().durability(durability);
            let opened = open(db.url(), db.url(), &options, false).await.unwrap();
            let mut writer = opened.writer.unwrap().conn;
            let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
                .fetch_one(&mut writer)
                .await
                .unwrap();
            assert_eq!(setting, expected, "{durability:?}");
        }
    }
}
