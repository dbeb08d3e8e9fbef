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
//!
//! Only writes take the database's write lock: opening a journal whose schema is current,
//! and every read (leases too), never waits for another connection's write, so a journal
//! can be inspected while another process holds the lock.

mod failure;
mod read;
mod write;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_schema::sqlite_file::{file_uri, wal_holds_nothing};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::error::JournalError;
use crate::options::{Durability, JournalOptions};

pub(crate) use failure::explain_open;
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
/// The path's `%XX` escapes are decoded, as the context store decodes them, so that one
/// URL names one file for both.
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
        path => agent_redact::percent_decoded(path)
            .map(|path| Location::File(PathBuf::from(path)))
            .ok_or_else(|| "the path is not UTF-8 once its %XX escapes are decoded".into()),
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
    // Another process opening the same new file at the same moment may hold the lock that
    // switching to WAL needs; SQLite then fails at once without calling the busy handler.
    // The setup is idempotent (the schema steps are one transaction), so it is tried
    // again until `busy_timeout` has passed: opening waits for the lock instead of failing.
    retry_while_busy(options.busy_timeout, || {
        setup(&conn, location, options, shown_url)
    })?;
    let writer = Arc::new(Mutex::new(conn));
    let reader = match location {
        Location::Memory => Reader::shared(Arc::clone(&writer)),
        Location::File(path) => Reader::files(
            path.clone(),
            None,
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

/// The connection settings and the schema of a database opened for writing.
fn setup(
    conn: &Connection,
    location: &Location,
    options: &JournalOptions,
    shown_url: &str,
) -> Result<(), JournalError> {
    let open_err = |source: rusqlite::Error| JournalError::Open {
        url: shown_url.to_string(),
        source: Box::new(source),
    };
    let synchronous = match options.durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    if let Location::File(_) = location {
        // Only a new file is switched to WAL (which takes an exclusive lock); the mode is
        // kept in the file, so later opens find it set.
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            conn.query_row("PRAGMA journal_mode = WAL", [], |row| {
                row.get::<_, String>(0)
            })
            .map_err(open_err)?;
        }
        // A checkpoint every 8,000 WAL pages (~32 MB) instead of SQLite's 1,000: runs append
        // to many threads at once, so each commit dirties a leaf page per thread, and the
        // same hot pages were copied back to the database (and re-read from the WAL) every
        // few dozen commits. The WAL file stays at the size it reached; it is reused, not
        // grown.
        conn.execute_batch("PRAGMA wal_autocheckpoint = 8000;")
            .map_err(open_err)?;
    }
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {synchronous}; PRAGMA cache_size = -{WRITE_CACHE_KIB};"
    ))
    .map_err(open_err)?;
    // Kept inside `Open` as before, so every failure to open says which journal.
    migrate(conn, shown_url).map_err(|err| match err {
        open @ JournalError::Open { .. } => open,
        other => JournalError::Open {
            url: shown_url.to_string(),
            source: Box::new(other),
        },
    })
}

/// Runs `step` again while it fails because another connection holds a lock SQLite did not
/// wait for (`SQLITE_BUSY`, `SQLITE_LOCKED`), pausing 1 ms, then twice as long each time up
/// to 50 ms, until `patience` has passed; then its last error is returned.
fn retry_while_busy<T>(
    patience: std::time::Duration,
    mut step: impl FnMut() -> Result<T, JournalError>,
) -> Result<T, JournalError> {
    use std::time::{Duration, Instant};
    let deadline = Instant::now() + patience;
    let mut pause = Duration::from_millis(1);
    loop {
        match step() {
            Err(err) if is_busy(&err) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(err);
                }
                tracing::debug!(%err, ?pause, "the journal's database is locked; opening waits");
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// Whether opening failed on a lock held by another connection.
fn is_busy(err: &JournalError) -> bool {
    use rusqlite::ErrorCode as C;
    let JournalError::Open { source, .. } = err else {
        return false;
    };
    source
        .downcast_ref::<rusqlite::Error>()
        .and_then(rusqlite::Error::sqlite_error_code)
        .is_some_and(|code| matches!(code, C::DatabaseBusy | C::DatabaseLocked))
}

/// A database opened read-only: the read side, and a read-only connection for the lease
/// table (its reads answer; its writes fail, as the database is read-only).
pub(crate) struct ReadOnly {
    pub(crate) reader: Reader,
    pub(crate) leases: Arc<Mutex<Connection>>,
}

/// Opens an existing database file read-only: no file is created, nothing is written, no
/// schema step applied (a database whose schema is not this build's is refused). Tries
/// `mode=ro` (sees commits of writers running elsewhere), then, when the file's `-wal`
/// holds no commits, `immutable=1`: SQLite reads a WAL database `mode=ro` only where it
/// can make its `-shm` file, which an archived journal's directory (mode 555) refuses.
/// Blocking: call from a blocking context.
pub(crate) fn open_read_only(
    location: &Location,
    shown_url: &str,
    options: &JournalOptions,
) -> Result<ReadOnly, JournalError> {
    let Location::File(path) = location else {
        return Err(JournalError::InvalidUrl {
            url: shown_url.to_string(),
            reason: "an in-memory journal cannot be opened read-only (it starts empty)".into(),
        });
    };
    let open_err = |source: Box<dyn std::error::Error + Send + Sync>| JournalError::Open {
        url: shown_url.to_string(),
        source,
    };
    let mut uris = vec![file_uri(path, "mode=ro")];
    if wal_holds_nothing(path) {
        uris.push(file_uri(path, "immutable=1"));
    }
    let mut failure = None;
    for uri in uris {
        let conn = match read::open_uri(&uri, options.busy_timeout) {
            Ok(conn) => conn,
            Err(err) => {
                failure = Some(err);
                continue;
            }
        };
        let version = match schema_version(&conn) {
            Ok(version) => version,
            Err(err) => {
                failure = Some(JournalError::from(err));
                continue;
            }
        };
        let supported = SCHEMA.last().map_or(0, |(v, _)| *v);
        if version > supported {
            return Err(JournalError::SchemaTooNew {
                found: version,
                supported,
            });
        }
        if version < supported {
            return Err(open_err(
                format!(
                    "its journal schema is version {version}, this build reads version {supported}, \
                     and a read-only journal applies no schema step (open it once read-write)"
                )
                .into(),
            ));
        }
        let reader = Reader::files(
            path.clone(),
            Some(uri),
            options.busy_timeout,
            options.read_connections as usize,
        )
        .map_err(|err| open_err(Box::new(err)))?;
        return Ok(ReadOnly {
            reader,
            leases: Arc::new(Mutex::new(conn)),
        });
    }
    Err(match failure {
        Some(JournalError::Database(err)) => open_err(Box::new(err)),
        Some(other) => other,
        None => open_err("no way to read it".into()),
    })
}

/// The schema version recorded in the database (an error when it has no journal schema).
fn schema_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM journal_schema",
        [],
        |row| row.get(0),
    )
}

/// Whether `err`, from opening a database for writing, says it cannot be written, so that
/// reading it may still work ([`agent_schema::sqlite_file::cannot_write`]; `runs show` on a
/// full disk failed before a full disk counted).
pub(crate) fn cannot_write(err: &JournalError) -> bool {
    let JournalError::Open { source, .. } = err else {
        return false;
    };
    source
        .downcast_ref::<rusqlite::Error>()
        .is_some_and(agent_schema::sqlite_file::cannot_write)
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

/// Whether a schema step of this build is not yet recorded, read without the write lock
/// (a schema newer than this build's is refused here, as under the lock).
///
/// Under WAL a plain read never waits for a writer, so opening a current journal while
/// another connection holds the write lock does not wait for that lock: an inspecting
/// command reads at once, and a writer's first append waits as every append does. A
/// stale answer is harmless: `journal_schema` only ever gains rows, so a database seen
/// current stays current, and one seen behind is checked again under the lock.
fn steps_pending(conn: &Connection, shown_url: &str) -> Result<bool, JournalError> {
    let sql = |source: rusqlite::Error| JournalError::Open {
        url: shown_url.to_string(),
        source: Box::new(source),
    };
    let recorded =
        agent_schema::sqlite_file::recorded_version(conn, "journal_schema").map_err(sql)?;
    let Some(current) = recorded else {
        return Ok(true);
    };
    Ok(agent_schema::pending_steps(SCHEMA, current)?
        .next()
        .is_some())
}

/// Applies the embedded schema steps not yet recorded in `journal_schema`, all in one
/// transaction: a step that fails leaves the database as it was. A failure of SQLite
/// itself (a lock, a read-only file) is [`JournalError::Open`] with SQLite's error.
///
/// The write lock is taken only when [`steps_pending`] finds a step to apply: opening a
/// current journal never waits for another connection's write.
fn migrate(conn: &Connection, shown_url: &str) -> Result<(), JournalError> {
    let sql = |source: rusqlite::Error| JournalError::Open {
        url: shown_url.to_string(),
        source: Box::new(source),
    };
    if !steps_pending(conn, shown_url)? {
        return Ok(());
    }
    // The write lock first, so two processes opening a new file apply each step once.
    conn.execute_batch("BEGIN IMMEDIATE").map_err(sql)?;
    let applied = (|| {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS journal_schema (version INTEGER PRIMARY KEY)",
        )
        .map_err(sql)?;
        let current = schema_version(conn).map_err(sql)?;
        for (version, step) in agent_schema::pending_steps(SCHEMA, current)? {
            conn.execute_batch(step)
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
        Ok(()) => conn.execute_batch("COMMIT").map_err(sql),
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
        assert_eq!(
            parse_url("sqlite:///tmp/a%20b%25c.db"),
            Ok(Location::File("/tmp/a b%c.db".into()))
        );
        assert!(parse_url("sqlite:///tmp/%ff.db").is_err());
        assert!(parse_url("sqlite://").is_err());
        assert!(parse_url("sqlite:").is_err());
        assert!(parse_url("sqlite://a.db?mode=ro").is_err());
        assert!(parse_url("postgres://x").is_err());
    }

    /// Issue 37, item 14: which failures of a read-write open make a read-only command fall
    /// back to reading (the decision, without needing a file root cannot write).
    #[test]
    fn only_a_database_that_cannot_be_written_falls_back_to_reading() {
        let open = |code: i32| JournalError::Open {
            url: "sqlite://j.db".into(),
            source: Box::new(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(code),
                None,
            )),
        };
        for code in [
            rusqlite::ffi::SQLITE_READONLY,
            rusqlite::ffi::SQLITE_CANTOPEN,
            rusqlite::ffi::SQLITE_PERM,
            rusqlite::ffi::SQLITE_FULL,
            rusqlite::ffi::SQLITE_IOERR_SHMSIZE,
        ] {
            assert!(cannot_write(&open(code)), "{code}");
        }
        for code in [
            rusqlite::ffi::SQLITE_BUSY,
            rusqlite::ffi::SQLITE_NOTADB,
            rusqlite::ffi::SQLITE_CORRUPT,
            rusqlite::ffi::SQLITE_IOERR_READ,
        ] {
            assert!(!cannot_write(&open(code)), "{code}");
        }
        assert!(!cannot_write(&JournalError::SchemaTooNew {
            found: 9,
            supported: 3
        }));
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
