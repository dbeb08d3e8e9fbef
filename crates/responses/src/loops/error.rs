use crate::error::ClientError;

/// Why a tool loop stopped without an answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoopError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("response did not complete: status {status}")]
    NotCompleted { status: String },
    #[error(
        "call ID collision: call_id {call_id} was repeated with different name/arguments/caller"
    )]
    CallIdCollision { call_id: String },
    #[error("reached the turn budget of {0} model turns without a final answer")]
    TurnBudget(usize),
    #[error("expected an async call but {call_id} is not async; check model and API support")]
    NotAsync { call_id: String },
    #[error("duplicate stream call item {call_id}; reconcile before retry")]
    DuplicateStreamCall { call_id: String },
    #[error("stream failed: {event_type}")]
    StreamFailed { event_type: String },
    #[error("no completed response or async call observed")]
    NothingObserved,
    #[error("a tool task stopped before returning: {0}")]
    ToolTask(String),
}
