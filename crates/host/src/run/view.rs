//! A run as readers show it: the shapes of `runs list --json` / `runs wait --json` lines
//! and of `runs show --json` (also what an HTTP API returns for a run).

use serde::Serialize;

use super::events::ApprovalReason;
use super::spec::{RunStatus, TokenUsage};
use super::state::RunState;

/// A run in one line: what `runs wait` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// `run`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The run id.
    pub run_id: String,
    /// Its status (the one status model).
    pub status: RunStatus,
    /// Model steps recorded.
    pub steps: u64,
    /// Tokens used.
    pub tokens: u64,
    /// Seconds since it was created.
    pub age_seconds: i64,
    /// The first line of its prompt, shortened.
    pub title: String,
}

/// A call waiting for a decision, with what a decision needs to name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingView {
    /// The call.
    pub call_id: String,
    /// Its tool.
    pub tool: String,
    /// Its arguments (JSON text): exactly what will run.
    pub arguments: String,
    /// Why a human is asked.
    pub reason: ApprovalReason,
    /// The sha256 of the arguments (`approve --sha256`).
    pub args_sha256: String,
}

/// A whole run: what `runs show --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunView {
    /// `run.show` (the summary's fields follow it).
    #[serde(flatten)]
    pub summary: RunSummary,
    /// Tokens of all steps.
    pub usage: TokenUsage,
    /// Why it paused, failed or stopped, as last recorded.
    pub detail: Option<String>,
    /// Calls waiting for a decision.
    pub pending_approvals: Vec<PendingView>,
    /// The final answer of a completed run.
    pub final_text: Option<String>,
    /// The final answer parsed, for a completed run with an output schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// The model.
    pub model: Option<String>,
    /// The workspace.
    pub workspace: Option<String>,
    /// The sandbox of its commands (`off` for runs recorded before sandboxes).
    pub sandbox: Option<crate::sandbox::SandboxSpec>,
}

impl RunSummary {
    /// The summary of `state`, whose status is `status`, at `now_ms`.
    pub fn of(state: &RunState, status: RunStatus, now_ms: i64) -> RunSummary {
        RunSummary {
            kind: "run",
            run_id: state.id.clone(),
            status,
            steps: state.step_count(),
            tokens: state.usage.total_tokens,
            age_seconds: (now_ms - state.created_at).max(0) / 1000,
            title: state.title(),
        }
    }
}

impl RunView {
    /// The view of `state`, whose status is `status`, at `now_ms`.
    pub fn of(state: &RunState, status: RunStatus, now_ms: i64) -> RunView {
        let mut summary = RunSummary::of(state, status, now_ms);
        summary.kind = "run.show";
        RunView {
            summary,
            usage: state.usage,
            detail: state.status_detail.clone(),
            pending_approvals: pending(state),
            final_text: state.final_text.clone(),
            output: state.final_output.clone(),
            model: state.spec.as_ref().map(|s| s.model.clone()),
            workspace: state.spec.as_ref().map(|s| s.workspace.clone()),
            sandbox: state.spec.as_ref().map(|s| s.sandbox.clone()),
        }
    }
}

fn pending(state: &RunState) -> Vec<PendingView> {
    state
        .pending_approvals()
        .filter_map(|c| {
            let a = c.pending_approval()?;
            Some(PendingView {
                call_id: c.call_id.clone(),
                tool: c.name.clone(),
                arguments: c.arguments.clone(),
                reason: a.reason,
                args_sha256: a.args_sha256.clone(),
            })
        })
        .collect()
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
