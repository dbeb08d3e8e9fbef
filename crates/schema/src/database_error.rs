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
        DatabaseError::new(kind, err)
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
        DatabaseError::new(kind, err)
    }

    fn new(kind: DatabaseErrorKind, err: &dyn std::error::Error) -> Self {
        DatabaseError {
            kind,
            message: one_line(err),
        }
    }
}

/// The error and its causes on one line (a cause already quoted by its parent is skipped).
fn one_line(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut cause = err.source();
    while let Some(err) = cause {
        let text = err.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
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

    #[test]
    fn driver_errors_become_a_kind_and_a_message() {
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            Some("database is locked".into()),
        );
        let err = DatabaseError::from_rusqlite(&busy);
        assert_eq!(err.kind(), DatabaseErrorKind::Timeout);
        assert!(err.to_string().contains("database is locked"), "{err}");
        let interrupted = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_INTERRUPT),
            None,
        );
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
}
