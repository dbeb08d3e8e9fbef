//! A run's events as the JSON lines `codex exec --json` users already parse.
//!
//! Shapes: `thread.started` (thread_id = run id), `turn.started`, `item.started` /
//! `item.completed` with items `agent_message`, `reasoning`, `command_execution` (shell),
//! `file_change` (write_file), `mcp_tool_call` (MCP tools), `tool_call` (other tools; our
//! own type), `error`; then
//! `turn.completed` with usage, `turn.failed`, `error`. Our own types, for what Codex has
//! no shape for: `approval.requested`, `approval.decided`, `steer.requested`,
//! `steer.applied`, `steer.dropped`, `run.paused`,
//! `run.interrupted`, `interrupt.requested` (documented in `docs/cli-json.md`).
//!
//! Invariant: a pure function of the events (plus what earlier events said about each
//! call), so `runs events` replayed later prints what `run --json` printed live.

use std::collections::HashMap;

use agent_journal::Event;
use agent_runtime::events as rt;
use serde_json::{Value, json};

use super::kinds as k;

/// Converts events to exec JSON lines, remembering what it needs across events.
#[derive(Debug, Default)]
pub struct ExecJson {
    run_id: String,
    calls: HashMap<String, (String, Value)>,
    /// MCP tools by offered name: (server, tool), from `run.created`.
    mcp: HashMap<String, (String, String)>,
    items: u64,
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
        }
        for call in &state.calls {
            let args = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
            conv.calls
                .insert(call.call_id.clone(), (call.name.clone(), args));
        }
        conv.items = state.elided.messages
            + state
                .steps
                .iter()
                .map(super::state::StepRecord::message_items)
                .sum::<u64>();
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
        self.items += 1;
        format!("item_{}", self.items)
    }

    /// The lines for `event` (often none).
    pub fn convert(&mut self, event: &Event) -> Vec<Value> {
        let p = &event.payload;
        let s = |name: &str| {
            p.get(name)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        match &*event.kind {
            k::RUN_CREATED => {
                if let Some(tools) = p
                    .get("tools")
                    .cloned()
                    .and_then(|t| serde_json::from_value::<Vec<crate::tools::ToolSpec>>(t).ok())
                {
                    self.learn_tools(&tools);
                }
                vec![
                    json!({"type": "thread.started", "thread_id": self.run_id}),
                    json!({"type": "turn.started"}),
                ]
            }
            k::RUN_RESUMED => vec![
                json!({"type": "thread.started", "thread_id": self.run_id}),
                json!({"type": "turn.started"}),
            ],
            k::MODEL_COMPLETED => {
                let mut lines = Vec::new();
                for item in p
                    .get("output")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    match item.get("type").and_then(Value::as_str) {
                        Some("message") => {
                            let text = super::model::output_text(std::slice::from_ref(item));
                            let id = self.next_item();
                            lines.push(json!({"type": "item.completed",
                                "item": {"id": id, "type": "agent_message", "text": text}}));
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
                            lines.push(json!({"type": "item.completed",
                                "item": {"id": id, "type": "reasoning", "text": text.join("\n")}}));
                        }
                        Some("function_call") => {
                            let call_id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                            let name = item.get("name").and_then(Value::as_str).unwrap_or("");
                            let args = item
                                .get("arguments")
                                .and_then(Value::as_str)
                                .and_then(|a| serde_json::from_str(a).ok())
                                .unwrap_or(Value::Null);
                            self.calls
                                .insert(call_id.to_string(), (name.to_string(), args));
                        }
                        _ => {}
                    }
                }
                lines
            }
            k::MODEL_FAILED => vec![json!({"type": "error", "message": s("message")})],
            rt::TOOL_SCHEDULED => {
                let call_id = s("call_id");
                vec![
                    json!({"type": "item.started", "item": self.item(&call_id, "in_progress", None, None)}),
                ]
            }
            kind if rt::TOOL_TERMINALS.contains(&kind) => {
                let call_id = s("call_id");
                let (status, output) = match kind {
                    rt::TOOL_COMPLETED => ("completed", p.get("value").map(text_of)),
                    rt::TOOL_INTERRUPTED => ("interrupted", None),
                    _ => (
                        "failed",
                        p.get("error").map(text_of).or(Some(kind.to_string())),
                    ),
                };
                vec![
                    json!({"type": "item.completed", "item": self.item(&call_id, status, output, Some(kind))}),
                ]
            }
            k::TOOL_REFUSED => vec![json!({"type": "item.completed",
                "item": {"id": s("call_id"), "type": "error", "message": s("message")}})],
            k::APPROVAL_REQUESTED => {
                vec![json!({"type": "approval.requested", "run_id": self.run_id,
                "call_id": s("call_id"), "tool": s("tool"), "arguments": s("arguments"),
                "args_sha256": s("args_sha256"), "reason": s("reason")})]
            }
            k::APPROVAL_DECIDED => vec![json!({"type": "approval.decided", "run_id": self.run_id,
                "call_id": s("call_id"), "decision": s("decision"), "by": p.get("by"),
                "reason": p.get("reason")})],
            k::RUN_PAUSED => vec![json!({"type": "run.paused", "run_id": self.run_id,
                "reason": s("reason"), "detail": s("detail")})],
            k::STEER_REQUESTED => vec![json!({"type": "steer.requested",
                "run_id": self.run_id, "id": s("id"), "text": s("text")})],
            k::STEER_APPLIED => {
                let mut line = json!({"type": "steer.applied",
                    "run_id": self.run_id, "id": s("id"), "step": p.get("step"),
                    "revision": p.get("revision")});
                // Sent while a response streamed (`--transport ws`): which one it steered.
                if let (Some(obj), Some(via)) = (line.as_object_mut(), p.get("via")) {
                    obj.insert("via".into(), via.clone());
                    obj.insert(
                        "response_id".into(),
                        p.get("response_id").cloned().unwrap_or_default(),
                    );
                }
                vec![line]
            }
            k::STEER_DROPPED => vec![json!({"type": "steer.dropped",
                "run_id": self.run_id, "id": s("id"), "reason": s("reason")})],
            k::CONTEXT_COMPACTED => vec![json!({"type": "context.compacted",
                "run_id": self.run_id, "step": p.get("step"),
                "items_replaced": p.get("items_replaced")})],
            k::INTERRUPT_REQUESTED => {
                vec![json!({"type": "interrupt.requested", "run_id": self.run_id})]
            }
            k::RUN_INTERRUPTED => vec![json!({"type": "run.interrupted", "run_id": self.run_id,
                "cancelled": p.get("cancelled")})],
            k::RUN_COMPLETED => {
                let u = p.get("usage").cloned().unwrap_or(Value::Null);
                let n = |name: &str| u.get(name).and_then(Value::as_u64).unwrap_or(0);
                vec![json!({"type": "turn.completed", "usage": {
                    "input_tokens": n("input_tokens"), "cached_input_tokens": n("cached_tokens"),
                    "output_tokens": n("output_tokens"), "reasoning_output_tokens": n("reasoning_tokens")}})]
            }
            k::RUN_FAILED => vec![json!({"type": "turn.failed", "error": {"message": s("error")}})],
            _ => Vec::new(),
        }
    }

    fn item(
        &self,
        call_id: &str,
        status: &str,
        output: Option<String>,
        kind: Option<&str>,
    ) -> Value {
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
        match name.as_str() {
            "shell" => {
                let out = output.unwrap_or_default();
                let exit_code = out
                    .lines()
                    .next()
                    .and_then(|l| l.strip_prefix("Exit code: "))
                    .and_then(|c| c.trim().parse::<i64>().ok());
                json!({"id": call_id, "type": "command_execution", "command": arg("command"),
                    "aggregated_output": out, "exit_code": exit_code, "status": status})
            }
            "write_file" => json!({"id": call_id, "type": "file_change",
                "changes": [{"path": arg("path"), "kind": "update"}], "status": status,
                "output": output}),
            _ if self.mcp.contains_key(&name) => {
                let (server, tool) = self.mcp.get(&name).cloned().unwrap_or_default();
                let (result, error) = match (status, output) {
                    ("completed", Some(text)) => (
                        json!({"content": [{"type": "text", "text": text}], "structured_content": null}),
                        Value::Null,
                    ),
                    (_, Some(text)) => (Value::Null, json!({"message": text})),
                    (_, None) => (Value::Null, Value::Null),
                };
                json!({"id": call_id, "type": "mcp_tool_call", "server": server, "tool": tool,
                    "arguments": args, "result": result, "error": error, "status": status})
            }
            _ => json!({"id": call_id, "type": "tool_call", "name": name, "arguments": args,
                "status": status, "output": output, "event": kind}),
        }
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
