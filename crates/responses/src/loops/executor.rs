//! The seam through which loops run tools, so a host can journal them (idempotent by call_id).

use std::future::Future;

use crate::types::{FunctionCall, FunctionCallOutput};

/// Why a [`ToolExecutor`] could not answer a call. The loops report it to the model as a
/// failure ([`ToolExecutor::failure_output`]), never as an invented result. (A tool run by
/// `agent-runtime` fails with that crate's own `ToolFailure`; an executor maps it here.)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ExecutorFailure {
    /// What went wrong, as the model will read it.
    pub message: String,
}

impl ExecutorFailure {
    /// A failure with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// Runs tool calls. Implementations decide policy (allowlists, validation, journaling).
pub trait ToolExecutor: Send + Sync {
    /// Runs `name` with JSON `arguments` for `call_id`; `Ok` is the output string.
    fn call(
        &self,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> impl Future<Output = Result<String, ExecutorFailure>> + Send;

    /// The output string that reports `failure` to the model (never an invented result).
    /// The default is `{"ok":false,"error":...}`; tools with an `output_schema` override it.
    fn failure_output(&self, _name: &str, failure: &ExecutorFailure) -> String {
        serde_json::json!({"ok": false, "error": failure.message}).to_string()
    }
}

/// Runs `call` and builds its `function_call_output`, echoing the call's `caller`.
///
/// # Cancel safety
///
/// As cancel safe as the executor's [`call`](ToolExecutor::call): dropping the future drops
/// that call's future, and what that does to a tool already started (stopped, left running,
/// side effects done) is up to the executor. No output is produced.
pub async fn output_for<E: ToolExecutor + ?Sized>(
    executor: &E,
    call: &FunctionCall,
) -> FunctionCallOutput {
    let output = match executor
        .call(&call.call_id, &call.name, &call.arguments)
        .await
    {
        Ok(output) => output,
        Err(failure) => {
            tracing::info!(call_id = %call.call_id, name = %call.name, %failure, "tool failed");
            executor.failure_output(&call.name, &failure)
        }
    };
    let mut out = FunctionCallOutput::new(call.call_id.clone(), output, None);
    out.caller = call.caller.clone();
    out
}
