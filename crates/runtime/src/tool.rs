//! The [`Tool`] trait and the allowlist [`ToolRegistry`].

use foldhash::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
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

/// The failure message of a tool that panicked, with the panic's message when it has one.
pub(crate) fn panicked(panic: &(dyn std::any::Any + Send)) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    match message {
        Some(message) => format!("the tool panicked: {message}"),
        None => "the tool panicked".to_string(),
    }
}

/// `tool.validate(args)`, a panic in the check refusing the arguments.
pub(crate) fn check_args(tool: &dyn Tool, args: &Value) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tool.validate(args)))
        .unwrap_or_else(|panic| Err(panicked(&*panic)))
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
