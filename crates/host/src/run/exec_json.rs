//! A run's events as the JSON lines `codex exec --json` users already parse.
//!
//! Shapes: `thread.started` (thread_id = run id), `turn.started`, `item.started` /
//! `item.completed` with items `agent_message`, `reasoning`, `command_execution` (shell),
//! `file_change` (write_file), `mcp_tool_call` (MCP tools), `tool_call` (other tools; our
//! own type), `sub_agent` (a child run of `spawn_agents`; our own type), `error`; then
//! `turn.completed` with usage, `turn.failed`, `error`. Our own types, for what Codex has
//! no shape for: `approval.requested`, `approval.decided`, `steer.requested`,
//! `steer.applied`, `steer.dropped`, `run.paused`, `output.rejected`,
//! `run.interrupted`, `interrupt.requested` (documented in `docs/cli-json.md`).
//!
//! Invariant: a pure function of the events (plus what earlier events said about each
//! call), so `runs events` replayed later prints what `run --json` printed live.

use std::collections::HashMap;

use agent_journal::Event;
use serde::Serialize;
use serde_json::Value;

use super::events::{
    ApprovalReason, ModelCompleted, RunEvent, SteerVia, ToolEnded, ToolOutcome, Verdict, text_of,
};
use super::spec::TokenUsage;

/// One line of `--json` output: the shapes of `codex exec --json`, then our own types.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum ExecLine {
    /// The run began or was taken up (`thread_id` = run id).
    #[serde(rename = "thread.started")]
    ThreadStarted {
        /// The run id.
        thread_id: String,
    },
    /// A drive of the run began.
    #[serde(rename = "turn.started")]
    TurnStarted,
    /// An item began (a tool call).
    #[serde(rename = "item.started")]
    ItemStarted {
        /// The item.
        item: ExecItem,
    },
    /// An item ended (a message, reasoning, a tool call's result, a refusal).
    #[serde(rename = "item.completed")]
    ItemCompleted {
        /// The item.
        item: ExecItem,
    },
    /// The run completed, with its usage.
    #[serde(rename = "turn.completed")]
    TurnCompleted {
        /// Tokens of the whole run.
        usage: ExecUsage,
        /// The final answer, for a run with an output schema, as the model wrote it (our
        /// own field; [`RunCompleted::answer`](super::events::RunCompleted::answer)).
        #[serde(skip_serializing_if = "Option::is_none")]
        output: Option<crate::RawJson>,
    },
    /// A final answer did not match the run's output schema; the model is asked again.
    #[serde(rename = "output.rejected")]
    OutputRejected {
        /// The run id.
        run_id: String,
        /// The step of the answer.
        step: u64,
        /// Which retry this is (1 for the first).
        retry: u32,
        /// What is wrong, one message per error.
        errors: Vec<String>,
    },
    /// The run failed.
    #[serde(rename = "turn.failed")]
    TurnFailed {
        /// Why.
        error: ExecError,
    },
    /// A model call failed.
    #[serde(rename = "error")]
    Error {
        /// What went wrong.
        message: String,
    },
    /// A call waits for a human decision.
    #[serde(rename = "approval.requested")]
    ApprovalRequested {
        /// The run id.
        run_id: String,
        /// The call.
        call_id: String,
        /// Its tool.
        tool: String,
        /// Its arguments (JSON text), exactly what will run.
        arguments: String,
        /// Their sha256.
        args_sha256: String,
        /// Why a human is asked.
        reason: ApprovalReason,
        /// The approval round (0, then one more each time the call is asked again).
        round: u32,
    },
    /// A decision was recorded.
    #[serde(rename = "approval.decided")]
    ApprovalDecided {
        /// The run id.
        run_id: String,
        /// The call.
        call_id: String,
        /// `approve` or `deny`.
        decision: Verdict,
        /// Who decided.
        by: Option<String>,
        /// Why.
        reason: Option<String>,
    },
    /// The run paused.
    #[serde(rename = "run.paused")]
    RunPaused {
        /// The run id.
        run_id: String,
        /// Why.
        reason: super::events::PauseReason,
        /// What exactly.
        detail: String,
    },
    /// A steer was requested.
    #[serde(rename = "steer.requested")]
    SteerRequested {
        /// The run id.
        run_id: String,
        /// The steer's id.
        id: String,
        /// Its text.
        text: String,
    },
    /// A steer was given to the model.
    #[serde(rename = "steer.applied")]
    SteerApplied {
        /// The run id.
        run_id: String,
        /// The steer's id.
        id: String,
        /// The step whose request carried it.
        step: u64,
        /// The runtime revision after it.
        revision: u64,
        /// Sent into a streaming response (`--transport ws`).
        #[serde(skip_serializing_if = "Option::is_none")]
        via: Option<SteerVia>,
        /// The response it steered, with `via`.
        #[serde(skip_serializing_if = "Option::is_none")]
        response_id: Option<String>,
    },
    /// A steer no host will apply.
    #[serde(rename = "steer.dropped")]
    SteerDropped {
        /// The run id.
        run_id: String,
        /// The steer's id.
        id: String,
        /// Why.
        reason: String,
    },
    /// The history was compacted.
    #[serde(rename = "context.compacted")]
    ContextCompacted {
        /// The run id.
        run_id: String,
        /// The first step after it.
        step: u64,
        /// How many input items it replaced.
        items_replaced: u64,
    },
    /// Another process asked for an interrupt.
    #[serde(rename = "interrupt.requested")]
    InterruptRequested {
        /// The run id.
        run_id: String,
    },
    /// The run stopped on an interrupt.
    #[serde(rename = "run.interrupted")]
    RunInterrupted {
        /// The run id.
        run_id: String,
        /// The calls that were cancelled.
        cancelled: Vec<String>,
    },
}

/// The usage of `turn.completed`, in `codex exec --json`'s names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ExecUsage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Input tokens served from the cache.
    pub cached_input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Output tokens spent on reasoning.
    pub reasoning_output_tokens: u64,
}

impl From<TokenUsage> for ExecUsage {
    fn from(u: TokenUsage) -> ExecUsage {
        ExecUsage {
            input_tokens: u.input_tokens,
            cached_input_tokens: u.cached_tokens,
            output_tokens: u.output_tokens,
            reasoning_output_tokens: u.reasoning_tokens,
        }
    }
}

/// The error of `turn.failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecError {
    /// What went wrong.
    pub message: String,
}

/// An item of `item.started` / `item.completed`: its id, then its type and fields (the
/// order `codex exec --json` writes them in).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecItem {
    /// `item_N` for messages and reasoning, the call id for calls.
    pub id: String,
    /// Its type and fields.
    #[serde(flatten)]
    pub details: ItemDetails,
}

/// What an item is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ItemDetails {
    /// Text from the model.
    AgentMessage {
        /// The text (a refusal's, after any other).
        text: String,
        /// The model refused (our own field, only when true): the text holds its refusal.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        refusal: bool,
    },
    /// A reasoning summary.
    Reasoning {
        /// The summary's text.
        text: String,
    },
    /// A `shell` call.
    CommandExecution {
        /// The command.
        command: String,
        /// Its output as the model reads it.
        aggregated_output: String,
        /// Its exit code, once known.
        exit_code: Option<i64>,
        /// `in_progress`, `completed`, `failed` or `interrupted`.
        status: &'static str,
        /// The sandbox it ran under (`read-only`, `workspace-write`), or `escalated` for
        /// an approved run outside it; absent when the run is not sandboxed.
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<&'static str>,
    },
    /// A `write_file` call.
    FileChange {
        /// The files changed.
        changes: Vec<FileChangeEntry>,
        /// Its status.
        status: &'static str,
        /// What the tool said.
        output: Option<String>,
    },
    /// A call of an MCP server's tool.
    McpToolCall {
        /// The server.
        server: String,
        /// The server's name for the tool.
        tool: String,
        /// The arguments.
        arguments: Value,
        /// A completed call's result.
        result: Option<McpResult>,
        /// A failed call's error.
        error: Option<ExecError>,
        /// Its status.
        status: &'static str,
    },
    /// A call of another tool (our own type).
    ToolCall {
        /// The tool.
        name: String,
        /// The arguments.
        arguments: Value,
        /// Its status.
        status: &'static str,
        /// What it returned or reported.
        output: Option<String>,
        /// The runtime event that ended it.
        event: Option<&'static str>,
    },
    /// A child run of a `spawn_agents` call (our own type): started when it is spawned,
    /// completed when its parent got its answer or failure.
    SubAgent {
        /// The child run (its own events: `runs events CHILD`).
        run_id: String,
        /// The parent's `spawn_agents` call.
        call_id: String,
        /// Its place in the call's `agents`.
        index: u32,
        /// Its prompt (on `item.started`).
        #[serde(skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        /// `in_progress`, then `completed`, `failed`, `paused` or `interrupted`.
        status: &'static str,
        /// Its final answer, when it completed.
        #[serde(skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
        /// Why it has none, otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A refused call.
    Error {
        /// Why it was refused.
        message: String,
    },
}

/// A file of a `file_change` item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChangeEntry {
    /// The path written.
    pub path: String,
    /// `update`.
    pub kind: &'static str,
}

/// The result of an `mcp_tool_call` item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpResult {
    /// Its content blocks.
    pub content: Vec<McpText>,
    /// Structured content (not kept: always `null`).
    pub structured_content: Option<Value>,
}

/// A text block of an MCP result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpText {
    /// `text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The text.
    pub text: String,
}

/// Converts events to exec JSON lines, remembering what it needs across events.
#[derive(Debug, Default)]
pub struct ExecJson {
    run_id: String,
    calls: HashMap<String, (String, Value)>,
    /// MCP tools by offered name: (server, tool), from `run.created`.
    mcp: HashMap<String, (String, String)>,
    items: u64,
    /// The run's sandbox mode, from `run.created`.
    sandbox: Option<crate::sandbox::Mode>,
}

impl ExecJson {
    /// A converter for run `run_id`.
    pub fn new(run_id: &str) -> ExecJson {
        ExecJson {
            run_id: run_id.to_string(),
            ..ExecJson::default()
        }
    }

    /// A converter that continues after the events `state` was folded from (a resumed run
    /// printed live): it knows every call already made (since the latest checkpoint: every
    /// call before one is answered), so later events of those calls get their proper item
    /// types, and its item ids go on from the run's count.
    pub fn resuming(state: &super::state::RunState) -> ExecJson {
        let mut conv = ExecJson::new(&state.id);
        if let Some(spec) = &state.spec {
            conv.learn_tools(&spec.tools);
            conv.sandbox = Some(spec.sandbox.mode);
        }
        for call in &state.calls {
            let args = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
            conv.calls
                .insert(call.call_id.clone(), (call.name.clone(), args));
        }
        conv.items = state.elided.messages.saturating_add(
            state
                .steps
                .iter()
                .map(super::state::StepRecord::message_items)
                .sum::<u64>(),
        );
        conv
    }

    fn learn_tools(&mut self, tools: &[crate::tools::ToolSpec]) {
        for tool in tools {
            if let Some(origin) = &tool.mcp {
                self.mcp.insert(
                    tool.name.clone(),
                    (origin.server.clone(), origin.tool.clone()),
                );
            }
        }
    }

    fn next_item(&mut self) -> String {
        self.items = self.items.saturating_add(1);
        format!("item_{}", self.items)
    }

    /// The lines for `event` (often none).
    pub fn convert(&mut self, event: &Event) -> Vec<ExecLine> {
        match RunEvent::parse(&event.kind, &event.payload) {
            Ok(Some(parsed)) => self.lines(parsed),
            Ok(None) => Vec::new(),
            Err(err) => {
                tracing::warn!(seq = event.seq, kind = %event.kind, %err, "unreadable run event not shown");
                Vec::new()
            }
        }
    }

    fn lines(&mut self, event: RunEvent<'_>) -> Vec<ExecLine> {
        let run_id = || self.run_id.clone();
        match event {
            RunEvent::Created(created) => {
                self.learn_tools(&created.spec.tools);
                self.sandbox = Some(created.spec.sandbox.mode);
                self.started()
            }
            RunEvent::Resumed(_) => self.started(),
            RunEvent::Requeued(_) => Vec::new(),
            RunEvent::SandboxChanged(changed) => {
                self.sandbox = Some(changed.sandbox.mode);
                Vec::new()
            }
            RunEvent::ModelCompleted(completed) => self.model_items(&completed),
            RunEvent::ModelFailed(failed) => vec![ExecLine::Error {
                message: failed.message,
            }],
            RunEvent::ToolScheduled(scheduled) => vec![ExecLine::ItemStarted {
                item: self.item(&scheduled.call_id, "in_progress", None, None),
            }],
            RunEvent::ToolEnded(ended) => {
                let item = self.ended_item(ended);
                vec![ExecLine::ItemCompleted { item }]
            }
            RunEvent::ToolRefused(refused) => vec![ExecLine::ItemCompleted {
                item: ExecItem {
                    id: refused.call_id,
                    details: ItemDetails::Error {
                        message: refused.message,
                    },
                },
            }],
            RunEvent::ApprovalRequested(r) => vec![ExecLine::ApprovalRequested {
                run_id: run_id(),
                call_id: r.call_id,
                tool: r.tool,
                arguments: r.arguments,
                args_sha256: r.args_sha256,
                reason: r.reason,
                round: r.round,
            }],
            RunEvent::ApprovalDecided(d) => vec![ExecLine::ApprovalDecided {
                run_id: run_id(),
                call_id: d.call_id,
                decision: Verdict::of(d.decision.approve),
                by: d.decision.by,
                reason: d.decision.reason,
            }],
            RunEvent::Paused(p) => vec![ExecLine::RunPaused {
                run_id: run_id(),
                reason: p.reason,
                detail: p.detail,
            }],
            RunEvent::SteerRequested(st) => vec![ExecLine::SteerRequested {
                run_id: run_id(),
                id: st.id,
                text: st.text,
            }],
            RunEvent::SteerApplied(st) => vec![ExecLine::SteerApplied {
                run_id: run_id(),
                id: st.id,
                step: st.step,
                revision: st.revision,
                // Sent while a response streamed (`--transport ws`): which one it steered.
                response_id: st.via.map(|_| st.response_id.unwrap_or_default()),
                via: st.via,
            }],
            RunEvent::SteerDropped(st) => vec![ExecLine::SteerDropped {
                run_id: run_id(),
                id: st.id,
                reason: st.reason,
            }],
            RunEvent::ContextCompacted(c) => vec![ExecLine::ContextCompacted {
                run_id: run_id(),
                step: c.step,
                items_replaced: c.items_replaced,
            }],
            RunEvent::InterruptRequested(_) => {
                vec![ExecLine::InterruptRequested { run_id: run_id() }]
            }
            RunEvent::Interrupted(i) => vec![ExecLine::RunInterrupted {
                run_id: run_id(),
                cancelled: i.cancelled,
            }],
            RunEvent::Completed(c) => vec![ExecLine::TurnCompleted {
                output: c.answer(),
                usage: c.usage.into(),
            }],
            RunEvent::OutputRejected(r) => vec![ExecLine::OutputRejected {
                run_id: run_id(),
                step: r.step,
                retry: r.retry,
                errors: r.errors,
            }],
            RunEvent::Failed(f) => vec![ExecLine::TurnFailed {
                error: ExecError { message: f.error },
            }],
            RunEvent::SubagentSpawned(s) => vec![ExecLine::ItemStarted {
                item: ExecItem {
                    id: format!("{}:{}", s.call_id, s.index),
                    details: ItemDetails::SubAgent {
                        run_id: s.child_run_id,
                        call_id: s.call_id,
                        index: s.index,
                        prompt: Some(s.prompt),
                        status: "in_progress",
                        answer: None,
                        error: None,
                    },
                },
            }],
            RunEvent::SubagentEnded(e) => vec![ExecLine::ItemCompleted {
                item: ExecItem {
                    id: format!("{}:{}", e.call_id, e.index),
                    details: ItemDetails::SubAgent {
                        run_id: e.child_run_id,
                        call_id: e.call_id,
                        index: e.index,
                        prompt: None,
                        status: e.status.as_str(),
                        answer: e.answer,
                        error: e.error,
                    },
                },
            }],
            RunEvent::ModelRequested(_) | RunEvent::ToolStarted(_) => Vec::new(),
        }
    }

    fn started(&self) -> Vec<ExecLine> {
        vec![
            ExecLine::ThreadStarted {
                thread_id: self.run_id.clone(),
            },
            ExecLine::TurnStarted,
        ]
    }

    /// The message and reasoning items of a step; its function calls are remembered for
    /// the items of their results.
    fn model_items(&mut self, completed: &ModelCompleted<'_>) -> Vec<ExecLine> {
        let mut lines = Vec::new();
        for item in completed.output {
            match item.get("type").and_then(Value::as_str) {
                Some("message") => {
                    let item = std::slice::from_ref(item);
                    let refused = super::refusal::refusal_text(item);
                    let text = super::refusal::answer_text(
                        super::model::output_text(item),
                        refused.as_deref(),
                    );
                    let id = self.next_item();
                    lines.push(ExecLine::ItemCompleted {
                        item: ExecItem {
                            id,
                            details: ItemDetails::AgentMessage {
                                text,
                                refusal: refused.is_some(),
                            },
                        },
                    });
                }
                Some("reasoning") => {
                    let text: Vec<&str> = item
                        .get("summary")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s.get("text").and_then(Value::as_str))
                        .collect();
                    let id = self.next_item();
                    lines.push(ExecLine::ItemCompleted {
                        item: ExecItem {
                            id,
                            details: ItemDetails::Reasoning {
                                text: text.join("\n"),
                            },
                        },
                    });
                }
                _ => {
                    if let Some(call) = super::events::FunctionCall::of(item) {
                        let args = serde_json::from_str(call.arguments).unwrap_or(Value::Null);
                        self.calls
                            .insert(call.call_id.to_string(), (call.name.to_string(), args));
                    }
                }
            }
        }
        lines
    }

    fn ended_item(&self, ended: ToolEnded) -> ExecItem {
        let kind = ended.outcome.kind();
        let (status, output) = match ended.outcome {
            ToolOutcome::Completed => ("completed", ended.value.as_ref().map(text_of)),
            ToolOutcome::Interrupted => ("interrupted", None),
            _ => (
                "failed",
                ended
                    .error
                    .as_ref()
                    .map(text_of)
                    .or_else(|| Some(kind.to_string())),
            ),
        };
        self.item(&ended.call_id, status, output, Some(kind))
    }

    fn item(
        &self,
        call_id: &str,
        status: &'static str,
        output: Option<String>,
        kind: Option<&'static str>,
    ) -> ExecItem {
        let (name, args) = self
            .calls
            .get(call_id)
            .cloned()
            .unwrap_or_else(|| (String::new(), Value::Null));
        let arg = |n: &str| {
            args.get(n)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let details = match name.as_str() {
            "shell" => {
                let out = output.unwrap_or_default();
                let exit_code = out
                    .lines()
                    .next()
                    .and_then(|l| l.strip_prefix("Exit code: "))
                    .and_then(|c| c.trim().parse::<i64>().ok());
                let sandbox = match self.sandbox {
                    Some(mode) if mode.is_sandboxed() => {
                        Some(if arg("sandbox_permissions") == crate::tools::ESCALATE {
                            "escalated"
                        } else {
                            mode.as_str()
                        })
                    }
                    _ => None,
                };
                ItemDetails::CommandExecution {
                    command: arg("command"),
                    aggregated_output: out,
                    exit_code,
                    status,
                    sandbox,
                }
            }
            "write_file" => ItemDetails::FileChange {
                changes: vec![FileChangeEntry {
                    path: arg("path"),
                    kind: "update",
                }],
                status,
                output,
            },
            _ if self.mcp.contains_key(&name) => {
                let (server, tool) = self.mcp.get(&name).cloned().unwrap_or_default();
                let (result, error) = match (status, output) {
                    ("completed", Some(text)) => (
                        Some(McpResult {
                            content: vec![McpText { kind: "text", text }],
                            structured_content: None,
                        }),
                        None,
                    ),
                    (_, Some(text)) => (None, Some(ExecError { message: text })),
                    (_, None) => (None, None),
                };
                ItemDetails::McpToolCall {
                    server,
                    tool,
                    arguments: args,
                    result,
                    error,
                    status,
                }
            }
            _ => ItemDetails::ToolCall {
                name,
                arguments: args,
                status,
                output,
                event: kind,
            },
        };
        ExecItem {
            id: call_id.to_string(),
            details,
        }
    }
}
