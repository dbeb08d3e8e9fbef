//! Typed journal errors, and the opaque [`DatabaseError`] that keeps the database drivers'
//! types out of them.

/// Everything that can go wrong with a journal operation.
///
/// Messages never contain credentials: URLs are reported with their password removed.
/// Non-exhaustive: new failure kinds may be added without a breaking change, so a `match`
/// needs a `_` arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The URL is not one the journal understands.
    #[error("invalid journal URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL, passwords masked.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The database could not be opened or reached.
    #[error("cannot open journal at `{url}`: {source}")]
    Open {
        /// The URL, passwords masked.
        url: String,
        /// The driver's failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// An event or query argument is outside the documented limits.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The field or argument refused.
        field: &'static str,
        /// Why.
        reason: String,
    },

    /// The database failed (connection, I/O, lock timeout, constraint, ...), on either
    /// backend.
    #[error("journal database error: {0}")]
    Database(DatabaseError),

    /// A stored payload is not valid JSON (the database was changed outside the journal).
    #[error("event {seq} has a corrupt payload: {source}")]
    CorruptPayload {
        /// The event whose payload does not parse.
        seq: i64,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },

    /// An optimistic-concurrency append ([`Journal::append_expecting`]) found that the thread
    /// moved on since the caller read it: its last seq is `actual`, not `expected`. Nothing
    /// of the request was written; the journal and the other requests are unaffected.
    ///
    /// [`Journal::append_expecting`]: crate::Journal::append_expecting
    #[error(
        "thread `{thread}` moved on: expected last seq {}, found {}",
        show_seq(*.expected),
        show_seq(*.actual)
    )]
    Conflict {
        /// The thread of the request.
        thread: String,
        /// The last seq the caller expected (`None`: no events).
        expected: Option<i64>,
        /// The last seq found (`None`: no events).
        actual: Option<i64>,
    },

    /// An append through a fenced handle ([`Journal::fenced`]) found that its lease was
    /// claimed again since (its epoch is `current`, not `epoch`; `None`: the lease is
    /// gone), or a lease operation named an epoch that is no longer the lease's. Nothing
    /// was written: the handle's holder lost the lease and must stop acting for it.
    ///
    /// [`Journal::fenced`]: crate::Journal::fenced
    #[error(
        "lease `{lease}` moved on: this holder has epoch {epoch}, the lease is at {}",
        show_seq(*.current)
    )]
    Fenced {
        /// The lease's name.
        lease: String,
        /// The epoch the holder has.
        epoch: i64,
        /// The lease's epoch now (`None`: the lease is gone).
        current: Option<i64>,
    },

    /// The writer task failed earlier; the journal accepts no more appends.
    #[error("journal writer failed: {0}")]
    WriterFailed(String),

    /// The journal was closed.
    #[error("journal is closed")]
    Closed,

    /// The database was written by a newer build of the journal.
    #[error("journal schema version {found} is newer than this build supports ({supported})")]
    SchemaTooNew {
        /// The version recorded in the database.
        found: i64,
        /// The last version this build knows.
        supported: i64,
    },

    /// A schema step failed, typically because the database holds other tables of the
    /// same name; nothing of the step is kept.
    #[error(
        "cannot apply journal schema step {version}: {reason} (does another program use this database?)"
    )]
    Migration {
        /// The step that failed.
        version: i64,
        /// The database's message.
        reason: String,
    },
}

/// A thread's last seq for messages: the number, or `none` for a thread without events.
fn show_seq(seq: Option<i64>) -> String {
    seq.map_or_else(|| "none".to_string(), |seq| seq.to_string())
}

impl JournalError {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        JournalError::InvalidInput {
            field,
            reason: reason.into(),
        }
    }
}

/// A database written by a newer build ([`agent_schema::pending_steps`]).
impl From<agent_schema::SchemaTooNew> for JournalError {
    fn from(err: agent_schema::SchemaTooNew) -> Self {
        JournalError::SchemaTooNew {
            found: err.found,
            supported: err.supported,
        }
    }
}

/// A failure of the database driver: its message with its causes on one line and a coarse
/// [`kind`](Self::kind). The driver's own error type stays private, so upgrading a driver
/// does not change this crate's API.
#[derive(Debug)]
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

/// For `?` inside this crate; hidden because the driver's type is not part of the API.
#[doc(hidden)]
impl From<sqlx::Error> for JournalError {
    fn from(err: sqlx::Error) -> Self {
        use sqlx::Error as E;
        let kind = match &err {
            E::Io(_) | E::Tls(_) | E::PoolClosed | E::WorkerCrashed => {
                DatabaseErrorKind::Unavailable
            }
            E::PoolTimedOut => DatabaseErrorKind::Timeout,
            E::Configuration(_) => DatabaseErrorKind::Configuration,
            _ => DatabaseErrorKind::Other,
        };
        JournalError::Database(DatabaseError::new(kind, &err))
    }
}

/// For `?` inside this crate; hidden because the driver's type is not part of the API.
#[doc(hidden)]
impl From<rusqlite::Error> for JournalError {
    fn from(err: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode as C;
        let kind = match err.sqlite_error_code() {
            Some(C::DatabaseBusy | C::DatabaseLocked) => DatabaseErrorKind::Timeout,
            Some(C::CannotOpen | C::NotADatabase | C::PermissionDenied) => {
                DatabaseErrorKind::Unavailable
            }
            _ => DatabaseErrorKind::Other,
        };
        JournalError::Database(DatabaseError::new(kind, &err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_errors_become_an_opaque_kind_and_message() {
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            Some("database is locked".into()),
        );
        let JournalError::Database(err) = JournalError::from(busy) else {
            panic!("a driver error maps to Database");
        };
        assert_eq!(err.kind(), DatabaseErrorKind::Timeout);
        assert!(err.to_string().contains("database is locked"), "{err}");

        let JournalError::Database(err) = JournalError::from(sqlx::Error::PoolClosed) else {
            panic!("a driver error maps to Database");
        };
        assert_eq!(err.kind(), DatabaseErrorKind::Unavailable);
        assert!(std::error::Error::source(&err).is_none());
    }
}
