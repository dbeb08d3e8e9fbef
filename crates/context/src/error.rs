//! The one error type of this crate; a driver's failure is the opaque [`DatabaseError`]
//! (shared with the journal through `agent-schema`), so the drivers' types stay out of it.
//!
//! Invariant: no message of this module holds a database password. URLs are stored already
//! redacted ([`agent_redact`]), and a driver error raised while opening a store is redacted
//! against the URL it was opened with ([`ContextError::redacted_for`]).

pub use agent_schema::{DatabaseError, DatabaseErrorKind};

/// Everything that can go wrong; bad input always maps to a specific variant.
///
/// Non-exhaustive: new failure kinds may be added without a breaking change, so a `match`
/// needs a `_` arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContextError {
    /// The URL is not `sqlite://PATH`, `sqlite::memory:`, `sqlite:PATH` or `postgres://...`.
    /// The URL is shown with its passwords masked.
    #[error(
        "unsupported database URL `{0}`: use sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DB"
    )]
    UnsupportedUrl(String),

    /// A `postgres://` URL the driver cannot read (a bad port, an unknown `sslmode`...).
    /// The URL is shown with its passwords masked.
    #[error("invalid database URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL, passwords masked.
        url: String,
        /// What is wrong with it, passwords masked.
        reason: String,
    },

    /// The database cannot hold what the store keeps (a PostgreSQL database whose encoding
    /// is neither UTF8 nor SQL_ASCII).
    #[error("the database cannot hold the context store: {0}")]
    Unsuitable(String),

    /// A unit's tool calls and outputs do not pair up by `call_id`.
    #[error(
        "unit `{unit}` has unpaired tool calls: {}",
        describe_unpaired(calls_without_output, outputs_without_call)
    )]
    UnpairedCalls {
        /// The unit's id.
        unit: String,
        /// Call ids that have no output.
        calls_without_output: Vec<String>,
        /// Call ids of outputs that have no call.
        outputs_without_call: Vec<String>,
    },

    /// The same `call_id` appears twice as a call (or twice as an output) in one unit.
    #[error("unit `{unit}`: call_id `{call_id}` appears more than once as {kind}")]
    DuplicateCallId {
        /// The unit's id.
        unit: String,
        /// The repeated call id.
        call_id: String,
        /// What it repeats as (call or output).
        kind: String,
    },

    /// An item is not a JSON object, or a call/output item has no string `call_id`.
    #[error("unit `{unit}`: item {index} is invalid: {reason}")]
    InvalidItem {
        /// The unit's id.
        unit: String,
        /// The item's index in the unit.
        index: usize,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A unit must hold at least one item.
    #[error("unit `{unit}` has no items")]
    EmptyUnit {
        /// The unit's id.
        unit: String,
    },

    /// A unit id is unique within its thread.
    #[error("unit `{unit}` already exists in thread `{thread}`")]
    DuplicateUnit {
        /// The thread.
        thread: String,
        /// The unit's id.
        unit: String,
    },

    /// `keep_units` is outside `1..=MAX_WINDOW_UNITS`.
    #[error("keep_units must be between 1 and {max}, got {got}")]
    InvalidKeepUnits {
        /// The value given.
        got: usize,
        /// The largest value allowed.
        max: usize,
    },

    /// The search term is empty.
    #[error("search term is empty")]
    EmptyTerm,

    /// The search limit is outside `1..=MAX_SEARCH_LIMIT`.
    #[error("search limit must be between 1 and {max}, got {got}")]
    InvalidLimit {
        /// The value given.
        got: usize,
        /// The largest value allowed.
        max: usize,
    },

    /// A required text field is empty.
    #[error("{field} must not be empty")]
    Empty {
        /// The field.
        field: &'static str,
    },

    /// A field is larger than its documented limit (see [`crate::limits`]).
    #[error("{field} is {got} bytes, the limit is {max}")]
    TooLarge {
        /// The field.
        field: &'static str,
        /// The value given.
        got: usize,
        /// The largest value allowed.
        max: usize,
    },

    /// A unit holds more items than [`crate::limits::MAX_ITEMS_PER_UNIT`].
    #[error("unit `{unit}` has {got} items, the limit is {max}")]
    TooManyItems {
        /// The unit's id.
        unit: String,
        /// The value given.
        got: usize,
        /// The largest value allowed.
        max: usize,
    },

    /// A text field contains U+0000, which PostgreSQL cannot store.
    #[error("{field} contains a NUL character")]
    NulChar {
        /// The field.
        field: &'static str,
    },

    /// `add_evidence` with a source that already exists; evidence is never overwritten.
    #[error(
        "evidence source `{0}` already exists (evidence is immutable; revoke it and add a new source)"
    )]
    DuplicateSource(String),

    /// `revoke` of a source that was never added.
    #[error("unknown evidence source `{0}`")]
    UnknownSource(String),

    /// Evidence observed before 1970 or more than [`MAX_FUTURE_SKEW_SECS`] after this
    /// machine's clock (`now`, Unix seconds). The newest observation wins for good, so a
    /// time in the far future would pin its value forever.
    #[error(
        "observed time {observed} is not between 0 and a day from now ({now} is now, in Unix seconds)"
    )]
    ObservedOutOfRange {
        /// The observed time given (Unix seconds).
        observed: i64,
        /// This machine's clock (Unix seconds).
        now: i64,
    },

    /// `recall` with a negative `max_age`.
    #[error("max_age must not be negative, got {0}")]
    NegativeMaxAge(i64),

    /// A thread reached the most units one thread can hold (2^32 - 1).
    #[error("thread `{0}` cannot hold more units")]
    ThreadFull(String),

    /// The store reached the most threads it can hold (2^31 - 1).
    #[error("the store cannot hold more threads")]
    TooManyThreads,

    /// The database was written by a newer version of this crate.
    #[error("context schema version {found} is newer than this build supports ({supported})")]
    SchemaTooNew {
        /// The version recorded in the database.
        found: i64,
        /// The last version this build knows.
        supported: i64,
    },

    /// The schema could not be created, typically because the database holds other tables
    /// of the same name; nothing of it is kept.
    #[error("cannot create the context schema: {0} (does another program use this database?)")]
    Migration(String),

    /// A stored row could not be decoded (the database was changed by something else).
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),

    /// The database failed (connection, I/O, lock timeout, ...), on either backend.
    #[error("database error: {0}")]
    Database(DatabaseError),

    /// A write to a store opened read-only (`sqlite://PATH?mode=ro`, or
    /// [`Access::ReadOnlyWhenUnwritable`](crate::Access::ReadOnlyWhenUnwritable) on a file
    /// it could not write). Nothing was written.
    #[error("the context store was opened read-only: nothing was written")]
    ReadOnly,

    /// A store opened read-only whose file holds no context schema, or an older one: a
    /// read-only store applies no schema step.
    #[error(
        "its context schema is {found}, this build reads version {supported}, and a read-only store applies no schema step (open it once read-write)"
    )]
    SchemaNotReadable {
        /// What the file holds ("version N", or "missing").
        found: String,
        /// The version this build reads.
        supported: i64,
    },

    /// The store was closed ([`close`](crate::ContextStore::close)) or its SQLite worker is gone.
    #[error("the context store is closed")]
    Closed,

    /// The SQLite worker thread or a read task could not run.
    #[error("SQLite worker: {0}")]
    Worker(String),
}

fn describe_unpaired(calls: &[String], outputs: &[String]) -> String {
    let mut parts = Vec::new();
    if !calls.is_empty() {
        parts.push(format!("call_id {} without output", calls.join(", ")));
    }
    if !outputs.is_empty() {
        parts.push(format!(
            "output for call_id {} without call",
            outputs.join(", ")
        ));
    }
    parts.join("; ")
}

/// How far ahead of this machine's clock an observation may be: a day of clock skew.
pub const MAX_FUTURE_SKEW_SECS: i64 = 24 * 3600;

/// For `?` inside this crate; hidden because the driver's type is not part of the API.
#[doc(hidden)]
impl From<sqlx::Error> for ContextError {
    fn from(err: sqlx::Error) -> Self {
        ContextError::Database(DatabaseError::from_sqlx(&err))
    }
}

/// For `?` inside this crate; hidden because the driver's type is not part of the API.
#[doc(hidden)]
impl From<rusqlite::Error> for ContextError {
    fn from(err: rusqlite::Error) -> Self {
        ContextError::Database(DatabaseError::from_rusqlite(&err))
    }
}

/// A database written by a newer build ([`agent_schema::pending_steps`]).
impl From<agent_schema::SchemaTooNew> for ContextError {
    fn from(err: agent_schema::SchemaTooNew) -> Self {
        ContextError::SchemaTooNew {
            found: err.found,
            supported: err.supported,
        }
    }
}

impl ContextError {
    /// This error with every password of `url` masked wherever its message quotes it; for
    /// errors raised while opening `url`, whose driver messages may quote the URL.
    pub(crate) fn redacted_for(self, url: &str) -> Self {
        match self {
            ContextError::Database(err) => {
                ContextError::Database(err.map_message(|m| agent_redact::redact_in(m, url)))
            }
            ContextError::Migration(message) => {
                ContextError::Migration(agent_redact::redact_in(&message, url))
            }
            other => other,
        }
    }

    /// Whether the store refused what it was given (bad or conflicting input: a name, a
    /// term, items, a limit, a source, a time), rather than failed to do it.
    pub fn is_input_refused(&self) -> bool {
        matches!(
            self,
            ContextError::UnsupportedUrl(_)
                | ContextError::InvalidUrl { .. }
                | ContextError::UnpairedCalls { .. }
                | ContextError::DuplicateCallId { .. }
                | ContextError::InvalidItem { .. }
                | ContextError::EmptyUnit { .. }
                | ContextError::DuplicateUnit { .. }
                | ContextError::InvalidKeepUnits { .. }
                | ContextError::EmptyTerm
                | ContextError::InvalidLimit { .. }
                | ContextError::Empty { .. }
                | ContextError::TooLarge { .. }
                | ContextError::TooManyItems { .. }
                | ContextError::NulChar { .. }
                | ContextError::DuplicateSource(_)
                | ContextError::UnknownSource(_)
                | ContextError::ObservedOutOfRange { .. }
                | ContextError::NegativeMaxAge(_)
        )
    }

    /// The kind of database failure behind this error, if it is one.
    pub(crate) fn database_kind(&self) -> Option<DatabaseErrorKind> {
        match self {
            ContextError::Database(err) => Some(err.kind()),
            _ => None,
        }
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = ContextError> = std::result::Result<T, E>;

/// True when `err` is a unique or primary-key constraint violation (SQLite).
pub(crate) fn is_sqlite_unique_violation(err: &rusqlite::Error) -> bool {
    const UNIQUE: std::ffi::c_int = rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE;
    const PRIMARY_KEY: std::ffi::c_int = rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY;
    matches!(
        err,
        rusqlite::Error::SqliteFailure(e, _)
            if e.extended_code == UNIQUE || e.extended_code == PRIMARY_KEY
    )
}

/// True when `err` is a unique-constraint violation.
pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
}
