//! Typed runtime errors.

use agent_journal::JournalError;

/// Everything a runtime operation can refuse or fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// `start` while the thread already has a running turn.
    #[error("thread `{thread}` already has an active turn ({turn})")]
    TurnActive {
        /// The thread asked about.
        thread: String,
        /// Its running turn.
        turn: String,
    },

    /// The turn is not the thread's running turn: it never existed, or it was finished,
    /// cancelled or interrupted, or a newer turn replaced it.
    #[error("stale or inactive turn `{turn}` on thread `{thread}`")]
    TurnNotActive {
        /// The thread asked about.
        thread: String,
        /// The turn named by the caller.
        turn: String,
    },

    /// `commit` named a revision other than the turn's current one.
    #[error(
        "proposal predates user update; revalidate first (proposal revision {given}, current revision {current})"
    )]
    StaleRevision {
        /// The revision the proposal was made under.
        given: u64,
        /// The turn's revision now (bumped by each steer).
        current: u64,
    },

    /// The caller asked about a job of another thread or turn.
    #[error("permission denied: job belongs to another thread or turn")]
    PermissionDenied,

    /// The tool is not in the runtime's allowlist.
    #[error("tool `{0}` is not allowed")]
    ToolNotAllowed(String),

    /// The tool refused the arguments.
    #[error("invalid arguments for `{tool}`: {reason}")]
    InvalidArgs {
        /// The tool called.
        tool: String,
        /// The tool's explanation.
        reason: String,
    },

    /// The call id was already used in this turn with another tool or other arguments.
    #[error("call_id `{call_id}` reused with different arguments")]
    CallIdCollision {
        /// The reused id.
        call_id: String,
    },

    /// Admission control: too many calls are queued or running.
    #[error("runtime overloaded: {in_flight} calls queued or running (limit {limit}); retry later")]
    Overloaded {
        /// Calls queued or running when the launch was refused.
        in_flight: usize,
        /// [`RuntimeOptions::max_in_flight`](crate::RuntimeOptions::max_in_flight).
        limit: usize,
    },

    /// No call with this id was launched in this turn.
    #[error("unknown call `{call_id}` in turn `{turn}`")]
    UnknownCall {
        /// The turn asked about.
        turn: String,
        /// The call id not found in it.
        call_id: String,
    },

    /// The call is journaled as scheduled but has no result and is not running in this
    /// runtime (another process owns it, or the journal was not recovered).
    #[error("call `{call_id}` is recorded without a result and is not running here; run recovery")]
    Unresolved {
        /// The call without a result.
        call_id: String,
    },

    /// [`Runtime::record`](crate::Runtime::record) was given a kind the runtime writes
    /// itself ([`RUNTIME_KINDS`](crate::events::RUNTIME_KINDS)): a turn, steer, commit or
    /// tool event recorded by hand would bypass the revision fence, or could be malformed
    /// and make every later recovery fail.
    #[error("`{0}` is an event kind the runtime writes itself; record a kind of your own")]
    ReservedKind(String),

    /// The runtime was closed.
    #[error("runtime is closed")]
    Closed,

    /// A journal event does not have the shape this runtime writes.
    #[error("journal event {seq} ({kind}) is malformed: {reason}")]
    CorruptEvent {
        /// The event's journal position.
        seq: i64,
        /// The event's kind.
        kind: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
}
