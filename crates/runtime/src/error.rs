//! Typed runtime errors.

use agent_journal::JournalError;

/// Everything a runtime operation can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// `start` while the thread already has a running turn.
    #[error("thread `{thread}` already has an active turn ({turn})")]
    TurnActive { thread: String, turn: String },

    /// The turn is not the thread's running turn: it never existed, or it was finished,
    /// cancelled or interrupted, or a newer turn replaced it.
    #[error("stale or inactive turn `{turn}` on thread `{thread}`")]
    TurnNotActive { thread: String, turn: String },

    /// `commit` named a revision other than the turn's current one.
    #[error(
        "proposal predates user update; revalidate first (proposal revision {given}, current revision {current})"
    )]
    StaleRevision { given: u64, current: u64 },

    /// The caller asked about a job of another thread or turn.
    #[error("permission denied: job belongs to another thread or turn")]
    PermissionDenied,

    /// The tool is not in the runtime's allowlist.
    #[error("tool `{0}` is not allowed")]
    ToolNotAllowed(String),

    /// The tool refused the arguments.
    #[error("invalid arguments for `{tool}`: {reason}")]
    InvalidArgs { tool: String, reason: String },

    /// The call id was already used in this turn with another tool or other arguments.
    #[error("call_id `{call_id}` reused with different arguments")]
    CallIdCollision { call_id: String },

    /// Admission control: too many calls are queued or running.
    #[error("runtime overloaded: {in_flight} calls queued or running (limit {limit}); retry later")]
    Overloaded { in_flight: usize, limit: usize },

    /// No call with this id was launched in this turn.
    #[error("unknown call `{call_id}` in turn `{turn}`")]
    UnknownCall { turn: String, call_id: String },

    /// The call is journaled as scheduled but has no result and is not running in this
    /// runtime (another process owns it, or the journal was not recovered).
    #[error("call `{call_id}` is recorded without a result and is not running here; run recovery")]
    Unresolved { call_id: String },

    /// The runtime was closed.
    #[error("runtime is closed")]
    Closed,

    /// A journal event does not have the shape this runtime writes.
    #[error("journal event {seq} ({kind}) is malformed: {reason}")]
    CorruptEvent {
        seq: i64,
        kind: String,
        reason: String,
    },

    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
}
