//! Typed journal errors; a driver's failure is the opaque [`DatabaseError`] (shared with
//! the context store through `agent-schema`), so the drivers' types stay out of them.

pub use agent_schema::{DatabaseError, DatabaseErrorKind};

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

    /// The journal's last seq is the largest there is (a database changed outside the
    /// journal): nothing more can be appended. Nothing of the request was written.
    #[error(
        "the journal's seqs are used up (its last event has seq {last}, the largest there is); nothing more can be appended"
    )]
    SeqsExhausted {
        /// The last seq assigned.
        last: i64,
    },

    /// The writer failed; this handle accepts no more appends (reopen the journal to
    /// append again once the cause is gone, e.g. a full disk has room again). The message
    /// is the first failure's.
    ///
    /// The append whose commit failed has an unknown outcome, like a dropped one: it was
    /// not acknowledged, yet it may be found, whole, once the journal is reopened (SQLite
    /// can fail after the commit reached the WAL, e.g. when a full disk keeps it from
    /// growing the `-shm` file). Appends queued after it are never written. A caller that
    /// appends again after reopening needs a dedup key to avoid a second copy.
    #[error("journal writer failed: {0}")]
    WriterFailed(String),

    /// The journal was opened read-only ([`Access::ReadOnly`], or
    /// [`Access::ReadOnlyWhenUnwritable`] on a database it cannot write): it refuses appends
    /// and lease writes.
    ///
    /// [`Access::ReadOnly`]: crate::Access::ReadOnly
    /// [`Access::ReadOnlyWhenUnwritable`]: crate::Access::ReadOnlyWhenUnwritable
    #[error("journal at `{url}` is open read-only: nothing can be appended")]
    ReadOnly {
        /// The URL, passwords masked.
        url: String,
    },

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

    /// Whether the database said it cannot be written ([`DatabaseError::refuses_writes`]).
    pub(crate) fn refuses_writes(&self) -> bool {
        matches!(self, JournalError::Database(db) if db.refuses_writes())
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

/// For `?` inside this crate; hidden because the driver's type is not part of the API.
#[doc(hidden)]
impl From<sqlx::Error> for JournalError {
    fn from(err: sqlx::Error) -> Self {
        match err {
            // The read pool closes only with the journal: closed, as on every backend.
            sqlx::Error::PoolClosed => JournalError::Closed,
            err => JournalError::Database(DatabaseError::from_sqlx(&err)),
        }
    }
}

/// For `?` inside this crate; hidden because the driver's type is not part of the API.
#[doc(hidden)]
impl From<rusqlite::Error> for JournalError {
    fn from(err: rusqlite::Error) -> Self {
        JournalError::Database(DatabaseError::from_rusqlite(&err))
    }
}
