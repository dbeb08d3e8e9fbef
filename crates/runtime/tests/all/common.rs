//! Test tools: gated, counting, cooperative or not.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_journal::{Event, Journal};
use agent_runtime::{Tool, ToolContext, ToolFailure};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};

/// A tool that announces each start, counts calls, and finishes only when its gate lets
/// it through (one permit per call). A non-cooperative one ignores cancellation.
#[derive(Clone)]
pub struct GateTool {
    pub name: &'static str,
    pub retry_safe: bool,
    pub cooperative: bool,
    pub calls: Arc<AtomicUsize>,
    pub gate: Arc<Semaphore>,
    pub started: mpsc::UnboundedSender<String>,
}

pub struct GateHandle {
    pub calls: Arc<AtomicUsize>,
    pub gate: Arc<Semaphore>,
    pub started: mpsc::UnboundedReceiver<String>,
}

impl GateHandle {
    pub fn open(&self) {
        self.gate.add_permits(1_000_000);
    }
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    /// Waits until the tool announced that `n` more calls have started.
    pub async fn wait_started(&mut self, n: usize) -> Vec<String> {
        let mut ids = Vec::new();
        for _ in 0..n {
            ids.push(self.started.recv().await.unwrap());
        }
        ids
    }
}

impl GateTool {
    pub fn new(name: &'static str, retry_safe: bool, cooperative: bool) -> (GateTool, GateHandle) {
        let (tx, rx) = mpsc::unbounded_channel();
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Semaphore::new(0));
        (
            GateTool {
                name,
                retry_safe,
                cooperative,
                calls: calls.clone(),
                gate: gate.clone(),
                started: tx,
            },
            GateHandle {
                calls,
                gate,
                started: rx,
            },
        )
    }
}

impl Tool for GateTool {
    fn name(&self) -> &str {
        self.name
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        object_args(args)
    }

    fn call(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        let this = self.clone();
        Box::pin(async move {
            let n = this.calls.fetch_add(1, Ordering::SeqCst) + 1;
            let _ = this.started.send(ctx.call_id().to_string());
            if this.cooperative {
                tokio::select! {
                    permit = this.gate.acquire() => { drop(permit); }
                    () = ctx.cancel.cancelled() => return Err(ToolFailure("stopped".into())),
                }
            } else {
                // Ignores cancellation entirely.
                let _ = this.gate.acquire().await;
            }
            Ok(json!({ "tool": this.name, "run": n, "args": args }))
        })
    }

    fn retry_safe(&self) -> bool {
        self.retry_safe
    }
}

/// The test tools' argument check: any object.
fn object_args(args: &Value) -> Result<(), String> {
    if args.is_object() {
        Ok(())
    } else {
        Err("arguments must be an object".into())
    }
}

pub fn kinds(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| &*e.kind).collect()
}

pub fn count(events: &[Event], kind: &str) -> usize {
    events.iter().filter(|e| &*e.kind == kind).count()
}

/// Terminal events for one call.
pub fn terminals_of(events: &[Event], call_id: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| agent_runtime::events::TOOL_TERMINALS.contains(&&*e.kind))
        .filter(|e| e.payload["call_id"] == call_id)
        .map(|e| e.kind.to_string())
        .collect()
}

pub async fn replay(journal: &Journal, thread: &str) -> Vec<Event> {
    journal.replay(thread, 0).await.unwrap()
}

/// A retry-safe tool whose value is as large or as deep as its arguments ask:
/// `{"bytes": N}` returns a string of N bytes, `{"depth": N}` arrays nested N deep.
pub struct SizedTool;

impl Tool for SizedTool {
    fn name(&self) -> &str {
        "sized"
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        object_args(args)
    }

    fn call(
        &self,
        args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        Box::pin(async move {
            if let Some(bytes) = args["bytes"].as_u64() {
                return Ok(Value::String("x".repeat(bytes as usize)));
            }
            if let Some(text) = args["binary"].as_str() {
                // Binary output: NUL characters in a key and a value.
                return Ok(json!({ "out\u{0}": format!("{text}\u{0}end") }));
            }
            if let Some(text) = args["fail_binary"].as_str() {
                return Err(ToolFailure(format!("{text}\u{0}end")));
            }
            let mut value = json!(0);
            for _ in 0..args["depth"].as_u64().unwrap_or(0) {
                value = json!([value]);
            }
            Ok(value)
        })
    }

    fn retry_safe(&self) -> bool {
        true
    }
}
