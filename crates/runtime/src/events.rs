//! The journal vocabulary of the runtime: event kinds, payload fields and dedup keys.
//!
//! Invariants the keys enforce in the journal itself (per thread):
//! - `sched:<turn>:<call>`: a call is scheduled at most once (the idempotency record).
//! - `done:<turn>:<call>`: a call has at most one terminal event.
//! - `end:<turn>`: a turn ends at most once (completed, cancelled or interrupted).

/// A turn began on its thread (payload: `turn_id`).
pub const TURN_STARTED: &str = "turn.started";
/// A turn ended normally.
pub const TURN_COMPLETED: &str = "turn.completed";
/// A turn was cancelled; its calls were cancelled with it.
pub const TURN_CANCELLED: &str = "turn.cancelled";
/// Recovery found the turn running after a restart and ended it.
pub const TURN_INTERRUPTED: &str = "turn.interrupted";
/// A steer bumped the turn's revision (payload: `revision`, `text`).
pub const STEER_ACCEPTED: &str = "steer.accepted";
/// A proposal was committed at the turn's current revision.
pub const PROPOSAL_COMMITTED: &str = "proposal.committed";
/// A call was admitted; durable before the tool runs (intent before effect).
pub const TOOL_SCHEDULED: &str = "tool.scheduled";
/// A call left the queue and its tool began running.
pub const TOOL_STARTED: &str = "tool.started";
/// Terminal: the tool returned a value.
pub const TOOL_COMPLETED: &str = "tool.completed";
/// Terminal: the tool reported a failure.
pub const TOOL_FAILED: &str = "tool.failed";
/// Terminal: a deadline expired (`phase` says which).
pub const TOOL_TIMEOUT: &str = "tool.timeout";
/// Terminal: the call was cancelled with its turn.
pub const TOOL_CANCELLED: &str = "tool.cancelled";
/// Terminal: the process that ran the call died; it was not run again.
pub const TOOL_INTERRUPTED: &str = "tool.interrupted";

/// Every terminal kind of a tool call.
pub const TOOL_TERMINALS: [&str; 5] = [
    TOOL_COMPLETED,
    TOOL_FAILED,
    TOOL_TIMEOUT,
    TOOL_CANCELLED,
    TOOL_INTERRUPTED,
];

/// Every kind the runtime writes itself: recovery folds them and `commit` fences one, so
/// [`Runtime::record`](crate::Runtime::record) refuses them.
pub const RUNTIME_KINDS: [&str; 13] = [
    TURN_STARTED,
    TURN_COMPLETED,
    TURN_CANCELLED,
    TURN_INTERRUPTED,
    STEER_ACCEPTED,
    PROPOSAL_COMMITTED,
    TOOL_SCHEDULED,
    TOOL_STARTED,
    TOOL_COMPLETED,
    TOOL_FAILED,
    TOOL_TIMEOUT,
    TOOL_CANCELLED,
    TOOL_INTERRUPTED,
];

/// Every kind that ends a turn.
pub const TURN_ENDS: [&str; 3] = [TURN_COMPLETED, TURN_CANCELLED, TURN_INTERRUPTED];

/// The status a turn has once its journal holds the end event `kind` (one of
/// [`TURN_ENDS`]), or `None` for another kind.
pub(crate) fn end_status(kind: &str) -> Option<crate::RuntimeTurnStatus> {
    use crate::RuntimeTurnStatus as S;
    match kind {
        TURN_COMPLETED => Some(S::Completed),
        TURN_CANCELLED => Some(S::Cancelled),
        TURN_INTERRUPTED => Some(S::Interrupted),
        _ => None,
    }
}

/// The dedup key of a call's `tool.scheduled`: scheduling twice returns the first one.
pub fn scheduled_key(turn: &str, call_id: &str) -> String {
    call_key("sched:", turn, call_id)
}

/// The dedup key of a call's terminal event: a second terminal event is a no-op.
pub fn done_key(turn: &str, call_id: &str) -> String {
    call_key("done:", turn, call_id)
}

fn call_key(prefix: &str, turn: &str, call_id: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + turn.len() + call_id.len() + 1);
    key.push_str(prefix);
    key.push_str(turn);
    key.push(':');
    key.push_str(call_id);
    key
}

/// `tool.scheduled`: everything needed to relaunch or fence the call after a restart.
#[derive(serde::Serialize)]
pub(crate) struct Scheduled<'a> {
    /// The turn that launched the call.
    pub turn_id: &'a str,
    /// The caller's id for the call, unique within the turn (the idempotency key).
    pub call_id: &'a str,
    /// The tool, as registered.
    pub name: &'a str,
    /// The arguments as launched, for a relaunch after a restart.
    pub args: &'a serde_json::Value,
    /// The canonical signature of name and arguments; a relaunch must match it.
    pub signature: &'a str,
    /// The turn revision at launch; a result from an older revision is stale.
    pub revision: u64,
}

/// `tool.started`: the call left the queue.
#[derive(serde::Serialize)]
pub(crate) struct Started<'a> {
    /// The turn that launched the call.
    pub turn_id: &'a str,
    /// The caller's id for the call, unique within the turn (the idempotency key).
    pub call_id: &'a str,
}

/// The dedup key of a turn's ending event: a turn ends at most once.
pub fn end_key(turn: &str) -> String {
    format!("end:{turn}")
}
