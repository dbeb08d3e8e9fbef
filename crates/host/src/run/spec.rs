//! What a run is given and what it uses: the spec `run.created` records, budgets, usage,
//! and the run's status.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tools::mcp::McpServerRecord;
use crate::tools::{ApprovalMode, ToolSpec};

/// What `run.created` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The user's task.
    pub prompt: String,
    /// The Responses API model.
    pub model: String,
    #[serde(default)]
    /// System instructions, if any.
    pub instructions: Option<String>,
    /// The canonical workspace directory.
    pub workspace: String,
    /// The tools offered to the model, with the policy in force.
    pub tools: Vec<ToolSpec>,
    /// The MCP servers the run's tools come from (`resume` needs each one configured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerRecord>,
    /// The run-wide override of tool policies.
    pub approval: ApprovalMode,
    /// The sandbox of its commands; `resume` keeps it. Absent in runs recorded before
    /// sandboxes: those ran `off`.
    #[serde(default)]
    pub sandbox: crate::sandbox::SandboxSpec,
    /// The budgets the run started with.
    pub budgets: Budgets,
    /// How model calls travel; `resume` keeps it.
    #[serde(default)]
    pub transport: Transport,
    /// Where the model was reached (never a key); `resume` reuses it when given no
    /// endpoint.
    #[serde(default)]
    pub endpoint: Option<super::endpoint::Endpoint>,
    /// Compact the history (`POST /responses/compact`) before a step when the previous
    /// step's request used at least this many input tokens; `None`: never.
    #[serde(default)]
    pub compact_at: Option<u64>,
    /// Created by `submit` for a worker to drive (its lease `run:<id>` is in the runs
    /// table), not driven by the process that created it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub submitted: bool,
    /// The JSON Schema the final answer must match, if any (`--output-schema`); `resume`
    /// keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<super::output::OutputSchema>,
    /// For a child run (a sub-agent): its parent and the call that spawned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<crate::subagents::ParentLink>,
    /// The sub-agent limits of the run's tree, and its depth in it; `None`: it cannot
    /// spawn (and is no child).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<crate::subagents::SubagentLimits>,
}

impl RunSpec {
    /// The offered tool named `name`, if any.
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The spec with `strict` kept only on tools whose schema keeps the API's strict
    /// rules. Runs recorded before the built-ins' schemas were made strict mark `shell`,
    /// `read_file` and `list_dir` strict with optional properties, which the API refuses
    /// (the whole request): such a run resumes with them sent not strict.
    pub(crate) fn with_strict_rules_kept(mut self) -> RunSpec {
        for tool in &mut self.tools {
            if tool.strict {
                tool.strict = tool.parameters.to_value().is_ok_and(|schema| {
                    agent_responses::types::text_format::strict_schema_problem(&schema).is_none()
                });
            }
        }
        self
    }
}

/// How a run's model calls travel (`run.created.transport`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// HTTP + SSE (the default).
    #[default]
    Http,
    /// The Responses WebSocket mode: a steer that arrives while a response streams is
    /// sent into it as `response.steer`.
    Ws,
}

impl Transport {
    /// The word recorded and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Ws => "ws",
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Limits that pause a run when reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budgets {
    /// Model steps in total.
    pub max_steps: u64,
    /// Tokens (input + output) in total, if limited.
    #[serde(default)]
    pub max_tokens: Option<u64>,
}

/// Token usage. A count missing from a journaled usage (another version's, or a journal
/// edited by hand) reads as 0: without the default a `run.completed` lacking one was
/// skipped whole, and its run read as still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenUsage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Input tokens served from the cache.
    pub cached_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Output tokens spent on reasoning.
    pub reasoning_tokens: u64,
    /// Input plus output.
    pub total_tokens: u64,
}

impl TokenUsage {
    /// Usage from a response's `usage` object (missing details count as zero).
    pub fn from_api(usage: &Value) -> TokenUsage {
        let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
        let input = n(usage.get("input_tokens"));
        let output = n(usage.get("output_tokens"));
        TokenUsage {
            input_tokens: input,
            cached_tokens: n(usage.pointer("/input_tokens_details/cached_tokens")),
            output_tokens: output,
            reasoning_tokens: n(usage.pointer("/output_tokens_details/reasoning_tokens")),
            total_tokens: usage
                .get("total_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(input.saturating_add(output)),
        }
    }

    /// What `self` used beyond `earlier` (a later total of the same run).
    pub(crate) fn since(&self, earlier: &TokenUsage) -> TokenUsage {
        TokenUsage {
            input_tokens: self.input_tokens.saturating_sub(earlier.input_tokens),
            cached_tokens: self.cached_tokens.saturating_sub(earlier.cached_tokens),
            output_tokens: self.output_tokens.saturating_sub(earlier.output_tokens),
            reasoning_tokens: self
                .reasoning_tokens
                .saturating_sub(earlier.reasoning_tokens),
            total_tokens: self.total_tokens.saturating_sub(earlier.total_tokens),
        }
    }

    /// Adds `other`, stopping at `u64::MAX`: a server's count is read as sent, and a sum
    /// that wrapped would turn a huge usage into a small one (and panic in a debug build).
    pub(crate) fn add(&mut self, other: &TokenUsage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
    }
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Submitted, waiting for a worker to claim it.
    Queued,
    /// A host drives it (or did, until it crashed).
    Running,
    /// One or more calls wait for a human decision (`approve` / `deny`), whether a host
    /// waits with the run or the run paused for them. Never recorded: a reader derives it
    /// (see `RunState::status`).
    Waiting,
    /// Waiting for a decision, a higher budget or a retry.
    Paused,
    /// Stopped by an interrupt.
    Interrupted,
    /// Ended with a final answer.
    Completed,
    /// Ended with an error.
    Failed,
}

impl RunStatus {
    /// Completed and failed runs never run again.
    pub fn is_final(self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Failed)
    }

    /// Every status, in the order a run can reach them.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Paused,
        RunStatus::Interrupted,
        RunStatus::Completed,
        RunStatus::Failed,
    ];

    /// The status named `word` (as [`as_str`](Self::as_str) spells it).
    pub fn parse(word: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|s| s.as_str() == word)
    }

    /// The name used in output and `--status`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Paused => "paused",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_sums_stop_at_the_largest_count() {
        let huge = TokenUsage::from_api(
            &serde_json::json!({"input_tokens": u64::MAX, "output_tokens": 5}),
        );
        assert_eq!(huge.total_tokens, u64::MAX);
        let mut total = TokenUsage::default();
        total.add(&huge);
        total.add(&TokenUsage::from_api(
            &serde_json::json!({"input_tokens": 10, "output_tokens": 5}),
        ));
        assert_eq!(total.input_tokens, u64::MAX);
        assert_eq!(total.total_tokens, u64::MAX);
    }
}
