//! The synthetic demo tools of `agentctl demo runtime` and of this crate's tests: `read_docs`,
//! `run_tests`, `fail`. Behind the `demo` feature, so a library user never sees them.

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::{Tool, ToolContext, ToolFailure, ToolRegistry};

/// The demo allowlist: `read_docs`, `run_tests`, `fail`.
pub fn registry() -> ToolRegistry {
    ToolRegistry::new()
        .with(DemoTool::ReadDocs)
        .with(DemoTool::RunTests)
        .with(DemoTool::Fail)
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

/// The fixture dataset behind the demo `scan` tool: finding rows per module.
pub fn demo_dataset() -> Value {
    json!({
        "api": [{"file": "api.py", "severity": "high", "evidence": "fixture:api:1"}],
        "ui": [{"file": "ui.ts", "severity": "low", "evidence": "fixture:ui:1"}],
    })
}

/// The demo `scan({module})` of `agentctl demo orchestrate`: the module's fixture rows, or `missing fixture: <module>`.
///
/// # Cancel safety
///
/// Cancel safe: it reads a fixture and completes within its first poll.
pub async fn demo_scan(module: String) -> Result<Value, String> {
    demo_dataset()
        .get(&module)
        .cloned()
        .ok_or_else(|| format!("missing fixture: {module}"))
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
        let r = registry();
        assert_eq!(r.names(), ["fail", "read_docs", "run_tests"]);
        assert!(r.get("rm_rf").is_none());
    }
}
