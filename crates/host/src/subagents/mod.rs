//! Durable sub-agents: the built-in `spawn_agents` tool.
//!
//! The model asks for one or more child runs, each with its own prompt, optional
//! instructions and a subset of the parent's tools; the call ends when every child has
//! ended, and its result is each child's answer or why it has none (partial results, never
//! all-or-nothing).
//!
//! Invariants:
//! - A child is a run of its own (`run:<child id>`), its `run.created` naming its parent
//!   ([`ParentLink`]). Its id is a function of the parent's id, the call's `call_id` and the
//!   child's index ([`child_run_id`]), and its `run.created` is appended only to an empty
//!   thread, so however often the call runs (a resumed parent runs it again: the tool is
//!   retry-safe) each child is created once, and a child that already ended is not driven
//!   again: its recorded answer is reused.
//! - The parent's journal records each child once (`subagent.spawned`, before the child
//!   exists) and its end once (`subagent.ended`, with its usage, which the parent's fold
//!   adds to its own: children's tokens count against the parent's `--max-tokens`).
//! - A child inherits the parent's workspace, sandbox, approval mode, model, endpoint and
//!   transport; its tools are the parent's or a subset of them (never another); it can
//!   spawn only while its depth is below the tree's `max_depth` (default 1: children
//!   cannot spawn).
//! - Children are driven concurrently: in the parent's process when the parent is (their
//!   approvals asked through the parent's inline decider one at a time, or else decided by
//!   the child's own run id: waited for when the parent waits (`--wait`), otherwise the
//!   child pauses and so does the parent, its call left open for the next resume, see
//!   `hold.rs`), or, when a worker drives the parent (its journal fenced by
//!   a lease), submitted for any worker to claim and followed until they stop. The call's
//!   cancellation (the parent's interrupt) is each in-process child's.
//! - A child's token budget is its share of what the parent had left when the step that
//!   made the call ended (the remainder split evenly among the children of every
//!   `spawn_agents` call of that step, see `share.rs`). Like any run, a child checks its
//!   budget before each step (and after a compaction), so it stops at the first step
//!   boundary past its share: the children of one step together use at most the parent's
//!   remainder plus one step each. A call made with nothing left (the step that made it
//!   went past the budget) spawns nobody: it fails, telling the model why, and the parent
//!   pauses at its next step for a higher `--max-tokens`. A call run again (a resume after
//!   a hold, an interrupt or a crash) continues the children it has, whatever is left; a
//!   resume that raised the parent's budgets raises each continuing child's to its share
//!   of the new remainder, and a child left without room stays paused on its budget.
//! - The call's result is within the tool result cap: each child's answer and error keep
//!   an even part of it, and say where the rest is (the child's own run).

mod hold;
mod share;
mod tool;

use serde::{Deserialize, Serialize};
use serde_json::json;

pub use hold::WaitingChild;
pub(crate) use hold::{ChildHold, detail as waiting_detail};
pub use tool::SpawnAgents;

use crate::RawJson;
use crate::tools::{ApprovalMode, Policy, ToolSpec};

/// The name of the built-in tool.
pub const TOOL_NAME: &str = "spawn_agents";

/// How large a run's tree of sub-agents may grow, and where in it the run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentLimits {
    /// Children one `spawn_agents` call may ask for.
    pub max_children: u32,
    /// Levels below the root run (1: the root's children cannot spawn).
    pub max_depth: u32,
    /// This run's depth (0 for the root).
    #[serde(default)]
    pub depth: u32,
}

impl SubagentLimits {
    /// The depth limit when none is given: children cannot spawn.
    pub const DEFAULT_MAX_DEPTH: u32 = 1;

    /// A root run's limits.
    pub fn new(max_children: u32) -> SubagentLimits {
        SubagentLimits {
            max_children,
            max_depth: Self::DEFAULT_MAX_DEPTH,
            depth: 0,
        }
    }

    /// The limits with another depth limit.
    pub fn max_depth(mut self, max_depth: u32) -> SubagentLimits {
        self.max_depth = max_depth;
        self
    }

    /// Whether a run at this depth is offered `spawn_agents`.
    pub fn can_spawn(&self) -> bool {
        self.max_children > 0 && self.depth < self.max_depth
    }

    /// A child's limits.
    pub fn child(&self) -> SubagentLimits {
        SubagentLimits {
            depth: self.depth.saturating_add(1),
            ..*self
        }
    }
}

/// Where a child run comes from (its `run.created.parent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent run.
    pub run_id: String,
    /// The parent's `spawn_agents` call.
    pub call_id: String,
    /// The child's place in the call's `agents`.
    pub index: u32,
}

/// The id of the `index`-th child of the parent's call `call_id`: a UUIDv7 with the
/// parent's timestamp (so children sort beside their parent) and the rest a digest of the
/// three, so the same call always names the same children.
pub fn child_run_id(parent: &str, call_id: &str, index: u32) -> String {
    use sha2::Digest as _;
    let millis = uuid::Uuid::parse_str(parent)
        .ok()
        .and_then(|u| u.get_timestamp())
        .map_or(0, |t| {
            let (secs, nanos) = t.to_unix();
            secs.saturating_mul(1000)
                .saturating_add(u64::from(nanos / 1_000_000))
        });
    let mut hasher = sha2::Sha256::new();
    for part in [parent.as_bytes(), call_id.as_bytes(), &index.to_be_bytes()] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    let digest = hasher.finalize();
    let mut random = [0u8; 10];
    random.copy_from_slice(&digest[..10]);
    uuid::Builder::from_unix_timestamp_millis(millis, &random)
        .into_uuid()
        .to_string()
}

/// How a run offers `spawn_agents`: retry-safe (creating a child is idempotent, see the
/// module docs), and run without asking (each child's own calls follow their policies)
/// unless the run's `approval` asks for every call.
pub(crate) fn tool_spec(limits: &SubagentLimits, approval: ApprovalMode) -> ToolSpec {
    let parameters = json!({
        "type": "object",
        "properties": {
            "agents": {
                "type": "array",
                "description": format!("the sub-agents to run, at most {}", limits.max_children),
                "items": {
                    "type": "object",
                    "properties": {
                        "prompt": {"type": "string", "description": "the sub-agent's task"},
                        "instructions": {"type": ["string", "null"],
                            "description": "its system instructions (null: none)"},
                        "tools": {"type": ["array", "null"], "items": {"type": "string"},
                            "description": "the names of the tools it may use, a subset of yours (null: all of yours)"}
                    },
                    "required": ["prompt", "instructions", "tools"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["agents"],
        "additionalProperties": false
    });
    ToolSpec {
        name: TOOL_NAME.into(),
        description: "Run sub-agents concurrently, each a run of its own with its own prompt, \
                      and wait for all of them. Returns each one's final answer, or why it \
                      has none."
            .into(),
        parameters: RawJson::from_value(&parameters),
        // Not a side effect of its own: `--approval deny` leaves it to the children's calls.
        policy: approval.apply(Policy::Auto, false),
        retry_safe: true,
        mcp: None,
        strict: true,
    }
}

/// One child as the model asks for it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChildRequest {
    pub(crate) prompt: String,
    #[serde(default)]
    pub(crate) instructions: Option<String>,
    #[serde(default)]
    pub(crate) tools: Option<Vec<String>>,
}

/// The arguments of a `spawn_agents` call.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpawnRequest {
    pub(crate) agents: Vec<ChildRequest>,
}

impl SpawnRequest {
    /// The request in `args`, checked against the parent's limits and tools (`offered`:
    /// the names of the parent's tools).
    pub(crate) fn read(
        args: &serde_json::Value,
        limits: &SubagentLimits,
        offered: &[String],
    ) -> Result<SpawnRequest, String> {
        let request =
            // The runtime says "invalid arguments for `spawn_agents`" in front of it.
            SpawnRequest::deserialize(args).map_err(|err| err.to_string())?;
        if request.agents.is_empty() {
            return Err("`agents` is empty: ask for at least one sub-agent".into());
        }
        if request.agents.len() > limits.max_children as usize {
            return Err(format!(
                "{} sub-agents asked for; at most {} (--max-children)",
                request.agents.len(),
                limits.max_children
            ));
        }
        let child_can_spawn = limits.child().can_spawn();
        for (i, agent) in request.agents.iter().enumerate() {
            if agent.prompt.trim().is_empty() {
                return Err(format!("agents[{i}]: the prompt is empty"));
            }
            for name in agent.tools.iter().flatten() {
                if !offered.contains(name) {
                    return Err(format!(
                        "agents[{i}]: `{name}` is not one of your tools ({}); a sub-agent's tools are a subset of yours",
                        offered.join(", ")
                    ));
                }
                if name == TOOL_NAME && !child_can_spawn {
                    return Err(format!(
                        "agents[{i}]: sub-agents at depth {} cannot spawn (the depth limit is {})",
                        limits.depth + 1,
                        limits.max_depth
                    ));
                }
            }
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests;
