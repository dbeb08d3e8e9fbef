//! The journal vocabulary of the runtime: event kinds, payload fields and dedup keys.
//!
//! Invariants the keys enforce in the journal itself (per thread):
//! - `sched:<turn>:<call>`: a call is scheduled at most once (the idempotency record).
//! - `done:<turn>:<call>`: a call has at most one terminal event.
//! - `end:<turn>`: a turn ends at most once (completed, cancelled or interrupted).

pub const TURN_STARTED: &str = "turn.started";
pub const TURN_COMPLETED: &str = "turn.completed";
pub const TURN_CANCELLED: &str = "turn.cancelled";
pub const TURN_INTERRUPTED: &str = "turn.interrupted";
pub const STEER_ACCEPTED: &str = "steer.accepted";
pub const PROPOSAL_COMMITTED: &str = "proposal.committed";
pub const TOOL_SCHEDULED: &str = "tool.scheduled";
pub const TOOL_STARTED: &str = "tool.started";
pub const TOOL_COMPLETED: &str = "tool.completed";
pub const TOOL_FAILED: &str = "tool.failed";
pub const TOOL_TIMEOUT: &str = "tool.timeout";
pub const TOOL_CANCELLED: &str = "tool.cancelled";
pub const TOOL_INTERRUPTED: &str = "tool.interrupted";

/// Every terminal kind of a tool call.
pub const TOOL_TERMINALS: [&str; 5] = [
    TOOL_COMPLETED,
    TOOL_FAILED,
    TOOL_TIMEOUT,
    TOOL_CANCELLED,
    TOOL_INTERRUPTED,
];

/// Every kind that ends a turn.
pub const TURN_ENDS: [&str; 3] = [TURN_COMPLETED, TURN_CANCELLED, TURN_INTERRUPTED];

pub fn scheduled_key(turn: &str, call_id: &str) -> String {
    call_key("sched:", turn, call_id)
}

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
    pub turn_id: &'a str,
    pub call_id: &'a str,
    pub name: &'a str,
    pub args: &'a serde_json::Value,
    pub signature: &'a str,
    pub revision: u64,
}

/// `tool.started`: the call left the queue.
#[derive(serde::Serialize)]
pub(crate) struct Started<'a> {
    pub turn_id: &'a str,
    pub call_id: &'a str,
}

pub fn end_key(turn: &str) -> String {
    format!("end:{turn}")
}
