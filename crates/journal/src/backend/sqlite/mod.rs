//! SQLite backend: one file in WAL mode, or a private in-memory database.
//!
//! Driven directly through the SQLite C library on our own threads: the writer is one OS
//! thread that owns the write connection (`write`), reads run on tokio's blocking pool
//! with a small set of read-only connections (`read`). Every statement is a function call,
//! not a hand-off to another thread, which is what makes small commits and long replays
//! cheap.
//!
//! An in-memory database exists only inside its one connection, so there the writer and
//! the readers share that connection behind a mutex.

mod read;
mod write;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::error::JournalError;
use crate::options::{Durability, JournalOptions};

pub(crate) use read::Reader;
pub(crate) use write::spawn_writer;

/// The page cache of the write connection, KiB (SQLite's default is 2,000).
///
/// An append touches the right edge of the events table and, per index, the leaf of its
/// thread: with a hundred runs appending at once the default cache filled and stayed full,
/// ~2 MiB of a 28 MiB process. A page it no longer holds is read again from the OS's page
/// cache, not the disk; with a thousand runs the threads' leaves outgrow either size, and
/// appends were as fast with this one.
const WRITE_CACHE_KIB: u32 = 512;

const SCHEMA: &agent_schema::Steps = &[
    (
        1,
        include_str!("../../../migrations/sqlite/0001_events.sql"),
    ),
    (2, include_str!("../../../migrations/sqlite/0002_head.sql")),
    (
        3,
        include_str!("../../../migrations/sqlite/0003_leases.sql"),
    ),
];

/// Where the database lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    File(PathBuf),
    Memory,
}

/// Parses `sqlite::memory:`, `sqlite://PATH` or `sqlite:PATH` (an optional `?mode=rwc` is
/// accepted for compatibility and means what opening does anyway: read, write, create).
pub(crate) fn parse_url(url: &str) -> Result<Location, String> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .ok_or_else(|| "expected a sqlite: URL".to_string())?;
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    if let Some(query) = query {
        for param in query.split('&').filter(|p| !p.is_empty()) {
            if param != "mode=rwc" {
                return Err(format!(
                    "unsupported parameter `{param}` (the journal always opens read-write-create)"
                ));
            }
        }
    }
    match path {
        ":memory:" => Ok(Location::Memory),
        "" => Err("missing file path (use sqlite://PATH or sqlite::memory:)".into()),
        path => Ok(Location::File(PathBuf::from(path))),
    }
}

/// An opened database: the connection the writer owns and the read side.
pub(crate) struct Opened {
    pub(crate) writer: Arc<Mutex<Connection>>,
    pub(crate) reader: Reader,
}

/// Opens (creating if missing) the database, applies the schema and prepares the readers.
/// Blocking: call from a blocking context.
pub(crate) fn open(
    location: &Location,
    shown_url: &str,
    options: &JournalOptions,
) -> Result<Opened, JournalError> {
    let open_err = |source: rusqlite::Error| JournalError::Open {
        url: shown_url.to_string(),
        source: Box::new(source),
    };
    let conn = match location {
        Location::Memory => Connection::open_in_memory(),
        Location::File(path) => Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        ),
    }
    .map_err(open_err)?;
    conn.busy_timeout(options.busy_timeout).map_err(open_err)?;
    stable_plans(&conn).map_err(open_err)?;
    let synchronous = match options.durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    // A checkpoint every 8,000 WAL pages (~32 MB) instead of SQLite's 1,000: runs append
    // to many threads at once, so each commit dirties a leaf page per thread, and the same
    // hot pages were copied back to the database (and re-read from the WAL) every few
    // dozen commits. The WAL file stays at the size it reached; it is reused, not grown.
    let journal_mode = match location {
        Location::File(_) => "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 8000;",
        Location::Memory => "",
    };
    conn.execute_batch(&format!(
        "{journal_mode} PRAGMA synchronous = {synchronous}; PRAGMA cache_size = -{WRITE_CACHE_KIB};"
    ))
    .map_err(open_err)?;
    migrate(&conn).map_err(|source| JournalError::Open {
        url: shown_url.to_string(),
        source: Box::new(source),
    })?;
    let writer = Arc::new(Mutex::new(conn));
    let reader = match location {
        Location::Memory => Reader::shared(Arc::clone(&writer)),
        Location::File(path) => Reader::files(
            path.clone(),
            options.busy_timeout,
            options.read_connections as usize,
        ),
    }
    .map_err(|err| JournalError::Open {
        url: shown_url.to_string(),
        source: Box::new(err),
    })?;
    Ok(Opened { writer, reader })
}

/// Turns on SQLite's query planner stability guarantee: plans do not depend on bound values.
///
/// Without it, a statement whose `LIMIT ?n` the planner read is expired by each new binding
/// of `?n` and compiled again on its next step, so every cached read paid a full prepare
/// (~10% of a host's CPU with a hundred runs). Every statement here is served by the
/// primary key whatever the values, so the guarantee costs no plan.
pub(super) fn stable_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map(|_| ())
}

/// Applies the embedded schema steps not yet recorded in `journal_schema`, all in one
/// transaction: a step that fails leaves the database as it was.
fn migrate(conn: &Connection) -> Result<(), JournalError> {
    // The write lock first, so two processes opening a new file apply each step once.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let applied = (|| {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS journal_schema (version INTEGER PRIMARY KEY)",
        )?;
        let current: i64 = conn.query_row(
            "SELECT COALESCE(MAX(version), 0) FROM journal_schema",
            [],
            |row| row.get(0),
        )?;
        for (version, sql) in agent_schema::pending_steps(SCHEMA, current)? {
            conn.execute_batch(sql)
                .and_then(|()| {
                    conn.execute(
                        "INSERT INTO journal_schema (version) VALUES (?1)",
                        [version],
                    )
                })
                .map_err(|err| JournalError::Migration {
                    version: *version,
                    reason: sqlite_reason(&err),
                })?;
        }
        Ok(())
    })();
    match applied {
        Ok(()) => Ok(conn.execute_batch("COMMIT")?),
        Err(err) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(err)
        }
    }
}

/// SQLite's message without the statement it quotes (a migration is many lines of SQL).
fn sqlite_reason(err: &rusqlite::Error) -> String {
    match err {
        rusqlite::Error::SqlInputError { msg, .. } => msg.clone(),
        other => other
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(parse_url("sqlite::memory:"), Ok(Location::Memory));
        assert_eq!(parse_url("sqlite://:memory:"), Ok(Location::Memory));
        assert_eq!(
            parse_url("sqlite:///tmp/a.db"),
            Ok(Location::File("/tmp/a.db".into()))
        );
        assert_eq!(
            parse_url("sqlite://rel/a.db?mode=rwc"),
            Ok(Location::File("rel/a.db".into()))
        );
        assert_eq!(parse_url("sqlite:a.db"), Ok(Location::File("a.db".into())));
        assert!(parse_url("sqlite://").is_err());
        assert!(parse_url("sqlite:").is_err());
        assert!(parse_url("sqlite://a.db?mode=ro").is_err());
        assert!(parse_url("postgres://x").is_err());
    }

    #[test]
    fn a_file_journal_writes_ahead_and_checkpoints_every_8000_pages() {
        let dir = tempfile::tempdir().unwrap();
        let location = Location::File(dir.path().join("j.db"));
        let opened = open(&location, "sqlite://j.db", &JournalOptions::default()).unwrap();
        let conn = opened.writer.lock().unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap();
        let pages: i64 = conn
            .query_row("PRAGMA wal_autocheckpoint", [], |row| row.get(0))
            .unwrap();
        assert_eq!((mode.as_str(), pages), ("wal", 8000));
    }

    #[test]
    fn the_write_connection_keeps_a_small_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let location = Location::File(dir.path().join("j.db"));
        let opened = open(&location, "sqlite://j.db", &JournalOptions::default()).unwrap();
        let cache: i64 = opened
            .writer
            .lock()
            .unwrap()
            .query_row("PRAGMA cache_size", [], |row| row.get(0))
            .unwrap();
        assert_eq!(cache, -i64::from(WRITE_CACHE_KIB));
        let default: i64 = Connection::open_in_memory()
            .unwrap()
            .query_row("PRAGMA cache_size", [], |row| row.get(0))
            .unwrap();
        assert_ne!(cache, default);
    }
}
