//! The run's journal vocabulary: event kinds (a public interface: scripts and other hosts
//! read them) and dedup keys.
//!
//! Keys enforce, in the journal itself:
//! - `approval:<call>:<round>`: one decision per approval request (the first one wins);
//! - `approval-req:<call>:<round>`: one request per round;
//! - `steer:<id>` / `steer-end:<id>`: a steer is requested once and ends once (applied
//!   or dropped);
//! - `model:<step>:<attempt>` / `model-done:<step>`: one request record per attempt and one
//!   completion per step.

pub const RUN_CREATED: &str = "run.created";
pub const RUN_RESUMED: &str = "run.resumed";
pub const MODEL_REQUESTED: &str = "model.requested";
pub const MODEL_COMPLETED: &str = "model.completed";
pub const MODEL_FAILED: &str = "model.failed";
pub const APPROVAL_REQUESTED: &str = "approval.requested";
pub const APPROVAL_DECIDED: &str = "approval.decided";
/// A call the policy refused, or whose tool or arguments were invalid: it never ran.
pub const TOOL_REFUSED: &str = "tool.refused";
pub const INTERRUPT_REQUESTED: &str = "interrupt.requested";
pub const STEER_REQUESTED: &str = "steer.requested";
pub const STEER_APPLIED: &str = "steer.applied";
pub const STEER_DROPPED: &str = "steer.dropped";
pub const RUN_INTERRUPTED: &str = "run.interrupted";
pub const RUN_PAUSED: &str = "run.paused";
pub const RUN_COMPLETED: &str = "run.completed";
pub const RUN_FAILED: &str = "run.failed";

/// The journal thread of run `id`.
pub fn thread_of(id: &str) -> String {
    format!("run:{id}")
}

pub(crate) fn approval_key(call_id: &str, round: u32) -> String {
    format!("approval:{call_id}:{round}")
}

pub(crate) fn approval_request_key(call_id: &str, round: u32) -> String {
    format!("approval-req:{call_id}:{round}")
}

pub(crate) fn steer_key(id: &str) -> String {
    format!("steer:{id}")
}

/// One outcome (applied or dropped) per steer.
pub(crate) fn steer_end_key(id: &str) -> String {
    format!("steer-end:{id}")
}

pub(crate) fn model_key(step: u64, attempt: u32) -> String {
    format!("model:{step}:{attempt}")
}

pub(crate) fn model_done_key(step: u64) -> String {
    format!("model-done:{step}")
}

/// The sha256 of `bytes`, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}
