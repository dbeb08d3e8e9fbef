//! A database driver's failure in a form that does not name the driver's types.
//!
//! Invariant: the message is the driver's error with its causes on one line, as the driver
//! wrote it; a caller that opened a URL masks its passwords ([`DatabaseError::map_message`])
//! before the error leaves its crate.

/// A failure of the database driver: its message and a coarse [`kind`](Self::kind). The
/// driver's own error type stays private, so upgrading a driver does not change the API
/// of the crates that return this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseError {
    kind: DatabaseErrorKind,
    message: String,
    /// The database said it cannot be written ([`DatabaseError::refuses_writes`]).
    refuses_writes: bool,
}

/// What kind of database failure a [`DatabaseError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DatabaseErrorKind {
    /// The server or file could not be reached or opened, or the connection was lost.
    Unavailable,
    /// A lock or a connection was not obtained in time (busy database, full pool).
    Timeout,
    /// The statement was interrupted on purpose (a deadline of the caller).
    Interrupted,
    /// The URL's options were rejected by the driver.
    Configuration,
    /// Anything else the database reported (constraint, I/O error, corrupt file, ...).
    Other,
}

impl DatabaseError {
    /// What kind of failure this is.
    pub fn kind(&self) -> DatabaseErrorKind {
        self.kind
    }

    /// Whether the database said it cannot be written: for SQLite a read-only file,
    /// directory or file system, or a full disk; for PostgreSQL a read-only transaction
    /// (`25006`: a hot standby, `default_transaction_read_only`) or a missing privilege
    /// (`42501`). Reading it may still work.
    pub fn refuses_writes(&self) -> bool {
        self.refuses_writes
    }

    /// The same error with its message rewritten (to mask a password it quotes).
    pub fn map_message(mut self, rewrite: impl FnOnce(&str) -> String) -> Self {
        self.message = rewrite(&self.message);
        self
    }

    /// A PostgreSQL (sqlx) failure.
    pub fn from_sqlx(err: &sqlx::Error) -> Self {
        use sqlx::Error as E;
        let kind = match err {
            E::Io(_) | E::Tls(_) | E::PoolClosed | E::WorkerCrashed => {
                DatabaseErrorKind::Unavailable
            }
            E::PoolTimedOut => DatabaseErrorKind::Timeout,
            E::Configuration(_) => DatabaseErrorKind::Configuration,
            _ => DatabaseErrorKind::Other,
        };
        let mut error = DatabaseError::new(kind, err);
        // A read-only transaction (a hot standby, `default_transaction_read_only`) or a
        // role without the privilege (SELECT-only grants).
        error.refuses_writes = err
            .as_database_error()
            .and_then(|db| db.code())
            .is_some_and(|code| matches!(code.as_ref(), "25006" | "42501"));
        error
    }

    /// A SQLite (rusqlite) failure.
    pub fn from_rusqlite(err: &rusqlite::Error) -> Self {
        use rusqlite::ErrorCode as C;
        let kind = match err.sqlite_error_code() {
            Some(C::DatabaseBusy | C::DatabaseLocked) => DatabaseErrorKind::Timeout,
            Some(C::OperationInterrupted) => DatabaseErrorKind::Interrupted,
            Some(C::CannotOpen | C::NotADatabase | C::PermissionDenied) => {
                DatabaseErrorKind::Unavailable
            }
            _ => DatabaseErrorKind::Other,
        };
        let mut error = DatabaseError::new(kind, err);
        error.refuses_writes = crate::sqlite_file::cannot_write(err);
        if let Some(cause) = err
            .sqlite_error()
            .and_then(|e| sqlite_disk_failure(e.extended_code))
        {
            error.message = format!("{} ({cause})", error.message);
        }
        error
    }

    fn new(kind: DatabaseErrorKind, err: &dyn std::error::Error) -> Self {
        DatabaseError {
            kind,
            message: one_line(err),
            refuses_writes: false,
        }
    }
}

/// What failed, for the SQLite extended result codes a failing disk gives, where SQLite's
/// own message says only `disk I/O error` (also when the disk is full: it could not grow
/// the `-shm` index after the commit reached the WAL, say). `None` for any other code,
/// `SQLITE_FULL` included ("database or disk is full" says it already).
pub fn sqlite_disk_failure(extended_code: i32) -> Option<&'static str> {
    use rusqlite::ffi;
    Some(match extended_code {
        ffi::SQLITE_IOERR_WRITE => {
            "a write to the database's files failed: is the disk full, or a file size limit reached?"
        }
        ffi::SQLITE_IOERR_SHMSIZE => {
            "SQLite could not grow the database's -shm file: is the disk full?"
        }
        ffi::SQLITE_IOERR_TRUNCATE => "SQLite could not resize a database file",
        ffi::SQLITE_IOERR_FSYNC | ffi::SQLITE_IOERR_DIR_FSYNC => {
            "the disk did not confirm a write (fsync failed)"
        }
        _ => return None,
    })
}

/// `err` and its causes on one line, joined by `: `. A cause with no text is skipped, and so
/// is one the line already quotes, also when the driver prefixed it with its code (SQLite's
/// `Error code 26: ...`).
pub fn one_line(err: &dyn std::error::Error) -> String {
    let mut message = String::new();
    let mut cause = Some(err);
    while let Some(err) = cause {
        let text = err.to_string();
        let quoted = text
            .strip_prefix("Error code ")
            .and_then(|rest| rest.split_once(": "))
            .map_or(text.as_str(), |(_, rest)| rest);
        if !text.is_empty() && !message.contains(quoted) {
            if !message.is_empty() {
                message.push_str(": ");
            }
            message.push_str(&text);
        }
        cause = err.source();
    }
    message
}

impl std::fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// No source: the message already holds the driver's causes.
impl std::error::Error for DatabaseError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SQLite failure with `code` and, if given, SQLite's message.
    fn sqlite(code: i32, message: Option<&str>) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), message.map(Into::into))
    }

    #[test]
    fn a_sqlite_io_error_names_what_failed_on_the_disk() {
        let shm = sqlite(rusqlite::ffi::SQLITE_IOERR_SHMSIZE, Some("disk I/O error"));
        let err = DatabaseError::from_rusqlite(&shm);
        assert_eq!(
            err.to_string(),
            "disk I/O error (SQLite could not grow the database's -shm file: is the disk full?)"
        );
        let full = sqlite(rusqlite::ffi::SQLITE_FULL, Some("database or disk is full"));
        assert_eq!(
            DatabaseError::from_rusqlite(&full).to_string(),
            "database or disk is full"
        );
    }

    #[test]
    fn driver_errors_become_a_kind_and_a_message() {
        let busy = sqlite(rusqlite::ffi::SQLITE_BUSY, Some("database is locked"));
        let err = DatabaseError::from_rusqlite(&busy);
        assert_eq!(err.kind(), DatabaseErrorKind::Timeout);
        assert!(err.to_string().contains("database is locked"), "{err}");
        let interrupted = sqlite(rusqlite::ffi::SQLITE_INTERRUPT, None);
        assert_eq!(
            DatabaseError::from_rusqlite(&interrupted).kind(),
            DatabaseErrorKind::Interrupted
        );
        let closed = DatabaseError::from_sqlx(&sqlx::Error::PoolClosed);
        assert_eq!(closed.kind(), DatabaseErrorKind::Unavailable);
        assert!(std::error::Error::source(&closed).is_none());
        let masked = closed.map_message(|m| format!("masked {m}"));
        assert!(masked.to_string().starts_with("masked "));
    }

    #[test]
    fn a_cause_the_message_quotes_is_said_once() {
        let not_a_db = sqlite(rusqlite::ffi::SQLITE_NOTADB, Some("file is not a database"));
        assert_eq!(
            DatabaseError::from_rusqlite(&not_a_db).to_string(),
            "file is not a database"
        );
        // A cause that adds something is kept, code and all.
        let cant_open = sqlite(rusqlite::ffi::SQLITE_CANTOPEN, Some("/x/y.db"));
        assert_eq!(
            DatabaseError::from_rusqlite(&cant_open).to_string(),
            "/x/y.db: Error code 14: unable to open database file"
        );
    }
}
