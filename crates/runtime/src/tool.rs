//! The [`Tool`] trait, the allowlist [`ToolRegistry`] and the synthetic demo tools.

use foldhash::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::runtime::JobKey;

/// What a tool call knows about where it runs.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The call: its thread, turn and call id (shared with the runtime, not copied).
    pub key: Arc<JobKey>,
    /// The turn revision the call was launched under.
    pub revision: u64,
    /// Fired when the turn is cancelled or the run deadline expires. A tool should stop
    /// soon after; one that does not is dropped after the runtime's grace period.
    pub cancel: CancellationToken,
}

impl ToolContext {
    /// The thread of the call.
    pub fn thread(&self) -> &str {
        &self.key.thread
    }

    /// The turn of the call.
    pub fn turn(&self) -> &str {
        &self.key.turn
    }

    /// The call's id within its turn.
    pub fn call_id(&self) -> &str {
        &self.key.call_id
    }
}

/// A tool failure, reported as `ok: false` with this message (never as a result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolFailure(pub String);

/// A callable tool. Implementations must not block the async executor.
pub trait Tool: Send + Sync + 'static {
    /// The name models and hosts call it by; unique within a registry.
    fn name(&self) -> &str;

    /// Checks the arguments before anything is journaled; `Err` is the reason.
    fn validate(&self, args: &Value) -> Result<(), String>;

    /// Runs the tool. The future must be `'static` (clone what it needs from `self`).
    fn call(&self, args: Value, ctx: ToolContext)
    -> BoxFuture<'static, Result<Value, ToolFailure>>;

    /// True when running the call twice is harmless (read-only or idempotent). Recovery
    /// re-runs such calls instead of marking them interrupted, and the runtime does not
    /// wait for `tool.started` to be durable before running them.
    fn retry_safe(&self) -> bool {
        false
    }
}

/// The allowlist: only registered tools can be launched.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: HashMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.tools.keys().collect();
        names.sort();
        f.debug_struct("ToolRegistry")
            .field("tools", &names)
            .finish()
    }
}

impl ToolRegistry {
    /// An empty allowlist.
    pub fn new() -> Self {
        Self::default()
    }

    /// The synthetic demo tools: `read_docs`, `run_tests`, `fail`.
    pub fn demo() -> Self {
        Self::new()
            .with(DemoTool::ReadDocs)
            .with(DemoTool::RunTests)
            .with(DemoTool::Fail)
    }

    /// Adds (or replaces) a tool.
    pub fn with(mut self, tool: impl Tool) -> Self {
        self.tools.insert(tool.name().to_string(), Arc::new(tool));
        self
    }

    /// Adds (or replaces) a shared tool.
    pub fn with_arc(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.insert(tool.name().to_string(), tool);
        self
    }

    /// The tool called `name`, if allowed.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Allowed tool names, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tools.keys().cloned().collect();
        names.sort();
        names
    }
}

/// Longest `delay` the demo tools accept, in seconds.
pub const MAX_DEMO_DELAY_SECS: f64 = 2.0;
/// `delay` when the argument is absent, in seconds.
pub const DEFAULT_DEMO_DELAY_SECS: f64 = 0.01;

/// The synthetic demo tools. Each waits `delay` seconds (a number, not a bool, within
/// 0..=2; default 0.01) and returns a fixture, or fails (`fail`). They honour cancellation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoTool {
    /// Read-only, so safe to retry.
    ReadDocs,
    /// Pretends to run the tests.
    RunTests,
    /// Always fails, to exercise the failure path.
    Fail,
}

impl DemoTool {
    fn delay(args: &Value) -> Result<Duration, String> {
        let Some(obj) = args.as_object() else {
            return Err("arguments must be a JSON object".into());
        };
        match obj.get("delay") {
            None => Ok(Duration::from_secs_f64(DEFAULT_DEMO_DELAY_SECS)),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(d) if d.is_finite() && (0.0..=MAX_DEMO_DELAY_SECS).contains(&d) => {
                    Ok(Duration::from_secs_f64(d))
                }
                _ => Err(format!(
                    "invalid delay {n}: must be within 0..={MAX_DEMO_DELAY_SECS} seconds"
                )),
            },
            Some(other) => Err(format!(
                "invalid delay {other}: must be a number of seconds"
            )),
        }
    }
}

impl Tool for DemoTool {
    fn name(&self) -> &str {
        match self {
            DemoTool::ReadDocs => "read_docs",
            DemoTool::RunTests => "run_tests",
            DemoTool::Fail => "fail",
        }
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        DemoTool::delay(args).map(|_| ())
    }

    fn call(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        let tool = *self;
        Box::pin(async move {
            let delay = DemoTool::delay(&args).map_err(ToolFailure)?;
            if !delay.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = ctx.cancel.cancelled() => return Err(ToolFailure("cancelled".into())),
                }
            }
            match tool {
                DemoTool::Fail => Err(ToolFailure("synthetic tool error".into())),
                DemoTool::ReadDocs | DemoTool::RunTests => Ok(json!({
                    "source": "synthetic fixture",
                    "tool": tool.name(),
                    "revision": ctx.revision,
                })),
            }
        })
    }

    fn retry_safe(&self) -> bool {
        match self {
            DemoTool::ReadDocs => true,
            DemoTool::RunTests | DemoTool::Fail => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_delay_rules() {
        let t = DemoTool::ReadDocs;
        assert!(t.validate(&json!({})).is_ok());
        assert!(t.validate(&json!({"delay": 0})).is_ok());
        assert!(t.validate(&json!({"delay": 2})).is_ok());
        assert!(t.validate(&json!({"delay": 0.5})).is_ok());
        assert!(t.validate(&json!({"delay": true})).is_err());
        assert!(t.validate(&json!({"delay": "1"})).is_err());
        assert!(t.validate(&json!({"delay": -0.1})).is_err());
        assert!(t.validate(&json!({"delay": 2.01})).is_err());
        assert!(t.validate(&json!([1])).is_err());
        assert!(t.validate(&json!(null)).is_err());
    }

    #[test]
    fn registry_is_an_allowlist() {
        let r = ToolRegistry::demo();
        assert_eq!(r.names(), ["fail", "read_docs", "run_tests"]);
        assert!(r.get("rm_rf").is_none());
    }
}
