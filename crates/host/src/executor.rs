//! A [`ToolExecutor`] for the Responses tool loops that runs every model tool call through
//! the durable [`Runtime`].
//!
//! Invariants:
//! - The model's `call_id` is the runtime's call id, so every call is journaled
//!   (`tool.scheduled` before it runs, exactly one terminal event) and idempotent: the same
//!   `call_id` with the same tool and arguments returns the recorded result without running
//!   the tool again, also from a new [`Runtime`] recovered from the same journal; the same
//!   `call_id` with other arguments is a failure (never a second run).
//! - Only tools in the runtime's allowlist run, with the runtime's argument validation.
//! - The output is what the runtime recorded: a completed call's value (a JSON string value
//!   is passed as the string itself, anything else as its JSON text); every other outcome
//!   (failed, timeout, cancelled, interrupted) and every refusal (unknown tool, invalid
//!   arguments, a turn that is not running) is an [`ExecutorFailure`], never an invented result.

use agent_responses::loops::{ExecutorFailure, ToolExecutor};
use agent_runtime::{CallStatus, DeadlinePhase, Deadlines, Runtime, ToolResult};
use serde_json::Value;

/// Runs Responses tool calls as runtime jobs of one turn (see the module docs).
#[derive(Debug, Clone)]
pub struct RuntimeExecutor {
    runtime: Runtime,
    thread: String,
    turn: String,
    deadlines: Option<Deadlines>,
}

impl RuntimeExecutor {
    /// Calls run in `turn` of `thread` (started with [`Runtime::start`]) with the runtime's
    /// default deadlines.
    pub fn new(runtime: Runtime, thread: impl Into<String>, turn: impl Into<String>) -> Self {
        RuntimeExecutor {
            runtime,
            thread: thread.into(),
            turn: turn.into(),
            deadlines: None,
        }
    }

    /// Calls run with `deadlines` instead of the runtime's defaults.
    pub fn with_deadlines(mut self, deadlines: Deadlines) -> Self {
        self.deadlines = Some(deadlines);
        self
    }

    /// The thread calls run in.
    pub fn thread(&self) -> &str {
        &self.thread
    }

    /// The turn calls run in.
    pub fn turn(&self) -> &str {
        &self.turn
    }

    /// The runtime calls run on.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Launches the call (or finds the recorded one) and waits for its result.
    ///
    /// # Cancel safety
    /// Dropping the future never runs a call twice: once launched, the job runs to its
    /// terminal event on the runtime's own task, and calling again with the same `call_id`
    /// waits for (or reads) that same result.
    pub async fn run(
        &self,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> Result<ToolResult, ExecutorFailure> {
        let args: Value = serde_json::from_str(arguments)
            .map_err(|err| ExecutorFailure::new(format!("invalid arguments: {err}")))?;
        let launched = match self.deadlines {
            Some(deadlines) => {
                self.runtime
                    .launch_with(&self.thread, &self.turn, call_id, name, args, deadlines)
                    .await
            }
            None => {
                self.runtime
                    .launch(&self.thread, &self.turn, call_id, name, args)
                    .await
            }
        };
        let key = launched.map_err(|err| ExecutorFailure::new(err.to_string()))?;
        self.runtime
            .result(&self.thread, &self.turn, &key)
            .await
            .map_err(|err| ExecutorFailure::new(err.to_string()))
    }
}

impl ToolExecutor for RuntimeExecutor {
    /// # Cancel safety
    /// As [`RuntimeExecutor::run`].
    async fn call(
        &self,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> Result<String, ExecutorFailure> {
        let result = self.run(call_id, name, arguments).await?;
        if result.stale {
            tracing::info!(%call_id, revision = result.revision, "tool result predates a steer");
        }
        output_of(result)
    }
}

/// The model-facing output of a runtime result (see the module docs).
pub fn output_of(result: ToolResult) -> Result<String, ExecutorFailure> {
    match result.status {
        CallStatus::Completed => Ok(match result.value {
            Some(Value::String(text)) => text,
            Some(value) => value.to_string(),
            None => Value::Null.to_string(),
        }),
        CallStatus::Failed => Err(ExecutorFailure::new(
            result.error.unwrap_or_else(|| "the tool failed".into()),
        )),
        CallStatus::Timeout => Err(ExecutorFailure::new(match result.phase {
            Some(DeadlinePhase::Queue) => "timed out waiting to start; the tool did not run",
            Some(DeadlinePhase::Run) | None => "timed out while running",
        })),
        CallStatus::Cancelled => Err(ExecutorFailure::new("cancelled")),
        CallStatus::Interrupted => Err(ExecutorFailure::new(if result.started {
            "interrupted: the process stopped while the tool ran; it is not run again"
        } else {
            "interrupted before the tool started"
        })),
    }
}
