//! The run's journal vocabulary: event kinds (a public interface: scripts and other hosts
//! read them) and dedup keys.
//!
//! Keys enforce, in the journal itself:
//! - `approval:<call>:<round>`: one decision per approval request (the first one wins);
//! - `approval-req:<call>:<round>`: one request per round;
//! - `steer:<id>` / `steer-end:<id>`: a steer is requested once and ends once (applied
//!   or dropped);
//! - `model:<step>:<attempt>` / `model-done:<step>`: one request record per attempt and one
//!   completion per step;
//! - `refused:<call>`: a call is refused once;
//! - `subagent:<call>:<index>` / `subagent-end:<child>:<seq>` / `subagent-end:<child>:last`:
//!   a `spawn_agents` call's child is spawned once, each end of it (at its seq) recorded in
//!   the parent once, and its last end (completed, or its run failed) once at any seq;
//! - `compacted:<step>`: one compaction before a step;
//! - `output-rejected:<step>`: a step's final answer is rejected once;
//! - [`RUN_END_KEY`](super::events::RUN_END_KEY): a run ends once (completed or failed).
//!
//! Which event carries which key is said once, by its payload type (see [`super::events`]).

/// First event of a run: its spec (prompt, model, tools and policies, budgets, workspace) and driver.
pub const RUN_CREATED: &str = "run.created";
/// A process took the run over (`resume`): its driver and budgets.
pub const RUN_RESUMED: &str = "run.resumed";
/// A resumed run's commands run under another sandbox from here on: from, sandbox, cause
/// (`flag`, `worker_floor`, `unsupported`), the built-in tools' new policies.
pub const RUN_SANDBOX_CHANGED: &str = "run.sandbox_changed";
/// A paused or interrupted run offered to workers again: budgets, by.
pub const RUN_REQUEUED: &str = "run.requeued";
/// Before a model call: step, attempt, sha256 of the request body.
pub const MODEL_REQUESTED: &str = "model.requested";
/// A model response received in full: step, response id, output items verbatim, usage.
/// A step steered while it streamed (`--transport ws`) also has `steered`:
/// `{parent_response_id, parent_status, incomplete_reason ("steered"), parent_output,
/// steer_ids, parent_usage?}` (the steered response's usage, counted in the run's with the
/// successor's); `response_id` and `output` are then the successor's, and each steer in
/// `steer_ids` has its `steer.applied` (at this step, `via: "response.steer"`) in the same
/// append.
pub const MODEL_COMPLETED: &str = "model.completed";
/// A model call failed after the retry policy: step, status, error type/code/message.
pub const MODEL_FAILED: &str = "model.failed";
/// A call waits for a human: call id, tool, arguments and their sha256, reason, round.
pub const APPROVAL_REQUESTED: &str = "approval.requested";
/// A decision on an approval round, from any process; the first one wins.
pub const APPROVAL_DECIDED: &str = "approval.decided";
/// A call the policy refused, or whose tool or arguments were invalid: it never ran.
pub const TOOL_REFUSED: &str = "tool.refused";
/// Another process asked the driving host to interrupt the run.
pub const INTERRUPT_REQUESTED: &str = "interrupt.requested";
/// User input for the run, from any process: id, text.
pub const STEER_REQUESTED: &str = "steer.requested";
/// The driving host gave a steer to the model: id, step, revision; when it was sent while
/// the step's response streamed, also `via: "response.steer"` and the steered `response_id`.
pub const STEER_APPLIED: &str = "steer.applied";
/// A steer that no host will apply (the run ended): id, reason.
pub const STEER_DROPPED: &str = "steer.dropped";
/// The history up to a step was replaced by the compact endpoint's output (verbatim).
pub const CONTEXT_COMPACTED: &str = "context.compacted";
/// A final answer that is not JSON matching the run's output schema: step, retry, errors
/// (sent back to the model before the next step).
pub const OUTPUT_REJECTED: &str = "output.rejected";
/// The run stopped on an interrupt; its running calls were cancelled.
pub const RUN_INTERRUPTED: &str = "run.interrupted";
/// The run paused: budget, approval or model error (reason, detail).
pub const RUN_PAUSED: &str = "run.paused";
/// The run ended with a final answer: text, usage totals.
pub const RUN_COMPLETED: &str = "run.completed";
/// The run ended with an error.
pub const RUN_FAILED: &str = "run.failed";

/// A `spawn_agents` call created a child run: call id, index, child run id, prompt.
pub const SUBAGENT_SPAWNED: &str = "subagent.spawned";
/// A child run ended as its parent sees it: call id, index, child run id, status
/// (`completed`, `failed`, `paused`, `interrupted`), answer or error, usage.
pub const SUBAGENT_ENDED: &str = "subagent.ended";

/// The journal thread of run `id`.
pub fn thread_of(id: &str) -> String {
    format!("run:{id}")
}

/// The run whose journal thread is `thread` ([`thread_of`]'s inverse), if it is a run's.
pub(crate) fn run_of(thread: &str) -> Option<&str> {
    thread.strip_prefix("run:")
}

pub(crate) fn approval_key(call_id: &str, round: u32) -> String {
    format!("approval:{call_id}:{round}")
}

pub(crate) fn approval_request_key(call_id: &str, round: u32) -> String {
    format!("approval-req:{call_id}:{round}")
}

pub(crate) fn refused_key(call_id: &str) -> String {
    format!("refused:{call_id}")
}

pub(crate) fn steer_key(id: &str) -> String {
    format!("steer:{id}")
}

/// One outcome (applied or dropped) per steer.
pub(crate) fn steer_end_key(id: &str) -> String {
    format!("steer-end:{id}")
}

pub(crate) fn compacted_key(step: u64) -> String {
    format!("compacted:{step}")
}

pub(crate) fn output_rejected_key(step: u64) -> String {
    format!("output-rejected:{step}")
}

/// One child per index of a `spawn_agents` call.
pub(crate) fn subagent_key(call_id: &str, index: u32) -> String {
    format!("subagent:{call_id}:{index}")
}

/// A child's end (at its seq `seq`) is recorded in its parent once.
pub(crate) fn subagent_end_key(child: &str, seq: i64) -> String {
    format!("subagent-end:{child}:{seq}")
}

/// A child's last end (it completed, or its run failed) is recorded in its parent once.
pub(crate) fn subagent_last_end_key(child: &str) -> String {
    format!("subagent-end:{child}:last")
}

pub(crate) fn model_key(step: u64, attempt: u32) -> String {
    format!("model:{step}:{attempt}")
}

pub(crate) fn model_done_key(step: u64) -> String {
    format!("model-done:{step}")
}
