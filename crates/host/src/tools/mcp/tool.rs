//! One MCP tool as an [`agent_runtime::Tool`]: journaled and idempotent by `call_id` like
//! the built-ins.
//!
//! Invariants:
//! - Whatever the server does (fails to start, dies mid-call, answers an error or
//!   `isError`), the call ends as a tool failure whose text says what happened; it never
//!   panics and never fails the run.
//! - The model sees the text content verbatim (blocks joined by newlines); other content
//!   blocks and structured content as JSON; at most [`RESULT_CAP`] bytes, with a note.
//!   A server's error text is held to the same cap (and masked the same way).

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::CallToolResult;
use serde_json::Value;

use agent_runtime::{Tool, ToolContext, ToolFailure};

use super::client::{CallError, ServerHandle};

pub use crate::tools::result_cap::RESULT_CAP;
use crate::tools::result_cap::cap;

/// `SERVER__TOOL`: calls `tool` on `server`.
#[derive(Debug, Clone)]
pub(crate) struct McpTool {
    /// The name the model calls it by.
    pub(crate) name: String,
    /// The tool's name on its server.
    pub(crate) remote: String,
    pub(crate) server: Arc<ServerHandle>,
    pub(crate) retry_safe: bool,
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        match args {
            Value::Object(_) => Ok(()),
            _ => Err("arguments must be a JSON object".into()),
        }
    }

    fn retry_safe(&self) -> bool {
        self.retry_safe
    }

    fn call(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        let server = self.server.clone();
        let remote = self.remote.clone();
        Box::pin(async move {
            let Value::Object(args) = args else {
                return Err(ToolFailure("arguments must be a JSON object".into()));
            };
            let name = server.name().to_string();
            match server.call(&remote, args, &ctx.cancel).await {
                Ok(result) if result.is_error == Some(true) => Err(ToolFailure(format!(
                    "MCP tool `{remote}` of server `{name}` reported an error:\n{}",
                    result_text(&result)
                ))),
                Ok(result) => Ok(Value::String(result_text(&result))),
                Err(CallError::Start(reason)) => Err(ToolFailure(format!(
                    "MCP server `{name}` could not be started: {reason}. The call did not run."
                ))),
                Err(CallError::TimedOut(limit)) => Err(ToolFailure(format!(
                    "MCP server `{name}` did not answer the call of `{remote}` within {} s \
                     (its tool_timeout_sec); its effect is unknown. The server was stopped and \
                     the next call starts it again.",
                    limit.as_secs_f64()
                ))),
                Err(CallError::Answered(reason)) => Err(ToolFailure(format!(
                    "MCP server `{name}` answered the call of `{remote}` with an error: {}",
                    server_text(reason)
                ))),
                Err(CallError::Broken(reason)) => Err(ToolFailure(format!(
                    "MCP server `{name}` failed during the call of `{remote}` ({}); its \
                     effect is unknown. The server is restarted for the next call.",
                    server_text(reason)
                ))),
                Err(CallError::Cancelled) => {
                    Err(ToolFailure("Cancelled: the run was interrupted".into()))
                }
            }
        })
    }
}

/// What the model sees of a text that comes from the server (an error it answered, or
/// rmcp's account of what it sent): it may echo what it was given, so it is masked like a
/// result, and capped like one, so one answer can neither fill the journal nor make every
/// later model request too large.
fn server_text(text: String) -> String {
    cap(crate::tools::secrets::mask_key(text))
}

/// What the model sees of a result.
pub(crate) fn result_text(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| {
            let block = serde_json::to_value(block).unwrap_or(Value::Null);
            match (block.get("type").and_then(Value::as_str), block.get("text")) {
                (Some("text"), Some(Value::String(text))) => text.clone(),
                _ => block.to_string(),
            }
        })
        .collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    cap(crate::tools::secrets::mask_key(parts.join("\n")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn text_blocks_verbatim_others_as_json() {
        let result: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [{"type": "text", "text": "a\nb"},
                        {"type": "image", "data": "AA==", "mimeType": "image/png"}]}))
        .unwrap();
        let text = result_text(&result);
        assert!(text.starts_with("a\nb\n{"), "{text}");
        assert!(text.contains("image/png"));
        let structured: CallToolResult = serde_json::from_value(
            serde_json::json!({"content": [], "structuredContent": {"n": 1}}),
        )
        .unwrap();
        assert_eq!(result_text(&structured), "{\"n\":1}");
        let big = cap("é".repeat(RESULT_CAP));
        assert!(big.len() < RESULT_CAP + 100 && big.contains("truncated"));
    }
}
