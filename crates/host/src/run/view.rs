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
    /// The approval round: 0, then one more each time the call is asked again (after a
    /// crash cut it off); `approve --round` decides only this one.
    pub round: u32,
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
    /// The final answer of a completed run with an output schema, as the model wrote it
    /// (see [`RunState::final_output`](crate::run::RunState::final_output)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<crate::RawJson>,
    /// The output schema's name and retries, for a run with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<SchemaView>,
    /// The model.
    pub model: Option<String>,
    /// The workspace.
    pub workspace: Option<String>,
    /// The sandbox of its commands (`off` for runs recorded before sandboxes).
    pub sandbox: Option<crate::sandbox::SandboxSpec>,
    /// The run that spawned it, for a sub-agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The sub-agents it spawned (see [`ChildView::of_run`]; empty unless the reader
    /// loaded them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildView>,
}

/// A run's output schema, as `runs show` reports it (the schema itself is in
/// `run.created`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaView {
    /// The name it is sent under.
    pub name: String,
    /// How many times a non-matching answer may be sent back.
    pub retries: u32,
    /// How many of those were used.
    pub retries_used: u64,
}

/// A sub-agent of a run, as `runs show PARENT` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChildView {
    /// The child run (approve, deny, steer and interrupt it by this id).
    pub run_id: String,
    /// The parent's `spawn_agents` call.
    pub call_id: String,
    /// Its place in the call's `agents`.
    pub index: u32,
    /// Its status (the one status model).
    pub status: RunStatus,
    /// Its calls waiting for a decision.
    pub pending_approvals: Vec<PendingView>,
    /// The first line of its prompt, shortened.
    pub title: String,
}

impl ChildView {
    /// The children of `parent`, each folded from its own thread, with its lease.
    ///
    /// # Cancel safety
    /// Read-only: a dropped future leaves nothing behind.
    pub async fn of_run(
        journal: &agent_journal::Journal,
        parent: &RunState,
    ) -> Result<Vec<ChildView>, crate::error::HostError> {
        let mut out = Vec::with_capacity(parent.children.len());
        for child in &parent.children {
            let state = match super::load(journal, &child.run_id).await {
                Ok(state) => state,
                // Spawned, not yet created (or the creation was cut off): nothing to show.
                Err(crate::error::HostError::NotFound(_)) => continue,
                Err(err) => return Err(err),
            };
            let status = super::table::status_with_lease(journal, &state).await?;
            out.push(ChildView {
                run_id: child.run_id.clone(),
                call_id: child.call_id.clone(),
                index: child.index,
                status,
                pending_approvals: pending(&state),
                title: state.title(),
            });
        }
        Ok(out)
    }
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
            age_seconds: age_seconds(state.created_at, now_ms),
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
            output_schema: state
                .spec
                .as_ref()
                .and_then(|s| s.output.as_ref())
                .map(|o| SchemaView {
                    name: o.name.clone(),
                    retries: o.retries,
                    retries_used: state.output_retries_used(),
                }),
            model: state.spec.as_ref().map(|s| s.model.clone()),
            workspace: state.spec.as_ref().map(|s| s.workspace.clone()),
            sandbox: state.spec.as_ref().map(|s| s.sandbox.clone()),
            parent: state
                .spec
                .as_ref()
                .and_then(|s| s.parent.as_ref())
                .map(|p| p.run_id.clone()),
            children: Vec::new(),
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
                round: a.round,
            })
        })
        .collect()
}

/// Whole seconds from `created_at` to `now_ms` (both Unix ms), 0 for a time in the future.
/// A journal edited by hand or written elsewhere may record any time at all: the
/// difference saturates instead of overflowing.
pub fn age_seconds(created_at: i64, now_ms: i64) -> i64 {
    now_ms.saturating_sub(created_at).max(0) / 1000
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::kinds;
    use crate::run::test_events::ev;

    /// A run whose creation a hand-edited journal dates at the extremes of time.
    #[test]
    fn a_creation_time_at_the_extremes_gives_an_age_not_a_panic() {
        let mut created = ev(1, kinds::RUN_CREATED, serde_json::json!({}));
        for (at, age) in [
            (i64::MIN, i64::MAX / 1000),
            (i64::MAX, 0),
            (-1, 1_700_000_000),
        ] {
            created.at = at;
            let state = RunState::from_events("r", std::slice::from_ref(&created));
            let view = RunView::of(&state, RunStatus::Failed, 1_700_000_000_000);
            assert_eq!(view.summary.age_seconds, age, "created at {at}");
        }
    }
}
