//! Errors of the host.

use agent_journal::JournalError;
use agent_runtime::RuntimeError;

/// Why a host operation could not be done. Tool failures and model errors are not here:
/// they are part of a run (the model is told; the run pauses).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// No run has this id.
    #[error("no run {0} (see `agentctl runs list`)")]
    NotFound(String),
    /// A completed or failed run is not driven again.
    #[error("run {run} is {status}; it cannot be resumed")]
    Ended { run: String, status: &'static str },
    /// Another live process drives the run.
    #[error("run {run} is being driven by {owner}; only one process may drive a run")]
    DrivenElsewhere { run: String, owner: String },
    /// Another host took the run over while this one drove it; this one stopped writing.
    #[error("run {0} was taken over by another process; this one stopped driving it")]
    Superseded(String),
    /// The call has no approval waiting for a decision.
    #[error("{0}")]
    NoPendingApproval(String),
    /// The call's approval was decided already (the first decision wins).
    #[error("call {call_id} was already {decision} by {by}")]
    AlreadyDecided {
        call_id: String,
        decision: &'static str,
        by: String,
    },
    /// The decision named other arguments than the pending call has.
    #[error("the arguments of call {call_id} have sha256 {pending}, not {given}: refused")]
    ArgsMismatch {
        call_id: String,
        pending: String,
        given: String,
    },
    /// The workspace cannot be used.
    #[error("workspace {path}: {reason}")]
    Workspace { path: String, reason: String },
    /// Invalid input from the caller.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}
