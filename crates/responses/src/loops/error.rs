use crate::error::ClientError;

/// Why a tool loop stopped without an answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoopError {
    /// A model request failed (after the client's retries).
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("response did not complete: status {status}")]
    /// The model's response ended in another state than `completed`.
    NotCompleted {
        /// The response's final status, e.g. `incomplete` or `failed`.
        status: String,
    },
    #[error(
        "call ID collision: call_id {call_id} was repeated with different name/arguments/caller"
    )]
    /// The model reused a `call_id` for a different call: answering either would be a guess.
    CallIdCollision {
        /// The repeated id.
        call_id: String,
    },
    #[error("reached the turn budget of {0} model turns without a final answer")]
    /// The model kept calling tools past [`LoopConfig::max_turns`](crate::loops::LoopConfig::max_turns).
    TurnBudget(usize),
    #[error("expected an async call but {call_id} is not async; check model and API support")]
    /// Async mode met a call the model did not mark `async`.
    NotAsync {
        /// The call that was not async.
        call_id: String,
    },
    #[error("duplicate stream call item {call_id}; reconcile before retry")]
    /// The stream delivered the same call item twice; it is not dispatched again.
    DuplicateStreamCall {
        /// The repeated call's id.
        call_id: String,
    },
    #[error("stream failed: {event_type}")]
    /// The stream ended with a failure event instead of a completed response.
    StreamFailed {
        /// The failing event's `type`, e.g. `response.failed`.
        event_type: String,
    },
    #[error("no completed response or async call observed")]
    /// The stream ended without a completed response.
    NothingObserved,
    #[error("the response completed without an async call to wait for")]
    /// The response completed, but the model called no async tool (it answered instead).
    NoAsyncCall,
    #[error("a tool task stopped before returning: {0}")]
    /// A dispatched tool task ended without an output (it panicked or was aborted).
    ToolTask(String),
}
