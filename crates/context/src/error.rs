//! The one error type of this crate.

/// Everything that can go wrong; bad input always maps to a specific variant.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// The URL is not `sqlite://PATH`, `sqlite::memory:`, `sqlite:PATH` or `postgres://...`.
    #[error(
        "unsupported database URL `{0}`: use sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DB"
    )]
    UnsupportedUrl(String),

    /// A unit's tool calls and outputs do not pair up by `call_id`.
    #[error(
        "unit `{unit}` has unpaired tool calls: {}",
        describe_unpaired(calls_without_output, outputs_without_call)
    )]
    UnpairedCalls {
        unit: String,
        calls_without_output: Vec<String>,
        outputs_without_call: Vec<String>,
    },

    /// The same `call_id` appears twice as a call (or twice as an output) in one unit.
    #[error("unit `{unit}`: call_id `{call_id}` appears more than once as {kind}")]
    DuplicateCallId {
        unit: String,
        call_id: String,
        kind: String,
    },

    /// An item is not a JSON object, or a call/output item has no string `call_id`.
    #[error("unit `{unit}`: item {index} is invalid: {reason}")]
    InvalidItem {
        unit: String,
        index: usize,
        reason: &'static str,
    },

    /// A unit must hold at least one item.
    #[error("unit `{unit}` has no items")]
    EmptyUnit { unit: String },

    /// A unit id is unique within its thread.
    #[error("unit `{unit}` already exists in thread `{thread}`")]
    DuplicateUnit { thread: String, unit: String },

    /// `keep_units` is outside `1..=MAX_WINDOW_UNITS`.
    #[error("keep_units must be between 1 and {max}, got {got}")]
    InvalidKeepUnits { got: usize, max: usize },

    /// The search term is empty.
    #[error("search term is empty")]
    EmptyTerm,

    /// The search limit is outside `1..=MAX_SEARCH_LIMIT`.
    #[error("search limit must be between 1 and {max}, got {got}")]
    InvalidLimit { got: usize, max: usize },

    /// A required text field is empty.
    #[error("{field} must not be empty")]
    Empty { field: &'static str },

    /// A field is larger than its documented limit (see [`crate::limits`]).
    #[error("{field} is {got} bytes, the limit is {max}")]
    TooLarge {
        field: &'static str,
        got: usize,
        max: usize,
    },

    /// A unit holds more items than [`crate::limits::MAX_ITEMS_PER_UNIT`].
    #[error("unit `{unit}` has {got} items, the limit is {max}")]
    TooManyItems {
        unit: String,
        got: usize,
        max: usize,
    },

    /// A text field contains U+0000, which PostgreSQL cannot store.
    #[error("{field} contains a NUL character")]
    NulChar { field: &'static str },

    /// `add_evidence` with a source that already exists; evidence is never overwritten.
    #[error(
        "evidence source `{0}` already exists (evidence is immutable; revoke it and add a new source)"
    )]
    DuplicateSource(String),

    /// `revoke` of a source that was never added.
    #[error("unknown evidence source `{0}`")]
    UnknownSource(String),

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
    SchemaTooNew { found: i64, supported: i64 },

    /// The schema could not be created, typically because the database holds other tables
    /// of the same name; nothing of it is kept.
    #[error("cannot create the context schema: {0} (does another program use this database?)")]
    Migration(String),

    /// A stored row could not be decoded (the database was changed by something else).
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),

    /// The database failed (connection, I/O, lock timeout, ...): PostgreSQL.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),

    /// The database failed (I/O, lock timeout, corrupt file, ...): SQLite.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),

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
