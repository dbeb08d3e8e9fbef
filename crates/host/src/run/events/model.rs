//! Events of a step's model call: requested (before), completed (the response in full),
//! failed (after the retry policy gave up).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::HostEvent;
use crate::run::kinds as k;

/// `model.requested`: an attempt of a step is about to be sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRequested {
    /// The step, from 1.
    pub step: u64,
    /// The attempt of that step, from 1.
    #[serde(default)]
    pub attempt: u32,
    /// The model asked.
    #[serde(default)]
    pub model: String,
    /// The sha256 of the request body.
    #[serde(default)]
    pub request_sha256: String,
}

impl HostEvent for ModelRequested {
    const KIND: &'static str = k::MODEL_REQUESTED;
    fn dedup_key(&self) -> Option<String> {
        Some(k::model_key(self.step, self.attempt))
    }
}

/// `model.completed`: a step's response in full, its output items verbatim.
///
/// Borrowed: written from the response the driver holds, read from the event the journal
/// returned, so neither copies the output (a run's largest payload).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelCompleted<'a> {
    /// The step, from 1.
    pub step: u64,
    /// The attempt that answered.
    pub attempt: u32,
    /// The response's id.
    pub response_id: Cow<'a, str>,
    /// The response's status (`completed`, `incomplete`).
    pub status: Option<Cow<'a, str>>,
    /// The response's `usage`, verbatim (`Value::Null` when it had none).
    pub usage: &'a Value,
    /// The output items, verbatim.
    pub output: &'a [Value],
    /// How the step was steered while it streamed (`--transport ws`), if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steered: Option<Steered>,
    /// Why the response stopped short, when its status is `incomplete`
    /// (`max_output_tokens`, `content_filter`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete_reason: Option<Cow<'a, str>>,
}

impl HostEvent for ModelCompleted<'_> {
    const KIND: &'static str = k::MODEL_COMPLETED;
    fn dedup_key(&self) -> Option<String> {
        Some(k::model_done_key(self.step))
    }
}

/// The fields of `model.completed` that are not borrowed from the payload.
#[derive(Deserialize)]
struct CompletedHead<'a> {
    step: u64,
    #[serde(default)]
    attempt: u32,
    #[serde(default, borrow)]
    response_id: Cow<'a, str>,
    #[serde(default, borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(default)]
    steered: Option<Steered>,
    #[serde(default, borrow)]
    incomplete_reason: Option<Cow<'a, str>>,
}

impl<'a> ModelCompleted<'a> {
    /// Reads the payload of a `model.completed` event, borrowing its output.
    pub fn read(payload: &'a Value) -> Result<ModelCompleted<'a>, serde_json::Error> {
        static NULL: Value = Value::Null;
        let head = CompletedHead::deserialize(payload)?;
        let output = match payload.get("output") {
            Some(Value::Array(items)) => items.as_slice(),
            None | Some(Value::Null) => &[],
            Some(_) => {
                return Err(serde::de::Error::custom("`output` is not an array"));
            }
        };
        Ok(ModelCompleted {
            step: head.step,
            attempt: head.attempt,
            response_id: head.response_id,
            status: head.status,
            usage: payload.get("usage").unwrap_or(&NULL),
            output,
            steered: head.steered,
            incomplete_reason: head.incomplete_reason,
        })
    }

    /// The text of the model's refusal in this step's messages, if it refused (a refusal
    /// is not streamed as text: a reader shows it from here).
    pub fn refusal(&self) -> Option<String> {
        crate::run::refusal::refusal_text(self.output)
    }

    /// This step's text as the run's answer would be: its messages' `output_text`, then
    /// its refusal on a line of its own (a refusal alone is the text), as the host builds
    /// the final answer.
    pub fn answer_text(&self) -> String {
        let refusal = self.refusal();
        crate::run::refusal::answer_text(
            crate::run::model::output_text(self.output),
            refusal.as_deref(),
        )
    }

    /// The function calls among the output items, in order.
    pub fn function_calls(&self) -> impl Iterator<Item = FunctionCall<'a>> + 'a {
        self.output.iter().filter_map(FunctionCall::of)
    }
}

/// A `function_call` output item, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionCall<'a> {
    /// The model's call id (`""` when it gave none).
    pub call_id: &'a str,
    /// The tool.
    pub name: &'a str,
    /// The arguments, as JSON text.
    pub arguments: &'a str,
}

impl<'a> FunctionCall<'a> {
    /// `item` when it is a `function_call`.
    pub fn of(item: &'a Value) -> Option<FunctionCall<'a>> {
        if item.get("type").and_then(Value::as_str) != Some("function_call") {
            return None;
        }
        let field = |name: &str| item.get(name).and_then(Value::as_str).unwrap_or("");
        Some(FunctionCall {
            call_id: field("call_id"),
            name: field("name"),
            arguments: field("arguments"),
        })
    }

    /// The type of an output item that asks the host for an answer it cannot give: a call of
    /// another kind than `function_call` (every `*_call`: `custom_tool_call`,
    /// `local_shell_call`, `computer_call`, `mcp_call`, ...) or an `mcp_approval_request`. The
    /// host offers function tools only, so such an item calls a tool the run never offered;
    /// left unanswered, the next request is refused for its missing output (and without a next
    /// request the run would end on an empty answer). Messages, reasoning, compaction items and
    /// any other item that is not a call are not answered and need not be.
    pub fn unanswerable_type(item: &Value) -> Option<&str> {
        let kind = item.get("type").and_then(Value::as_str)?;
        let call = kind.ends_with("_call") || kind == "mcp_approval_request";
        (call && kind != "function_call").then_some(kind)
    }
}

/// The `steered` field of a step steered while it streamed: the response that was steered
/// (its output verbatim) and the steers its successor carries. The event's `response_id`
/// and `output` are the successor's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Steered {
    /// The steered (parent) response's id.
    pub parent_response_id: String,
    /// Its final status.
    #[serde(default)]
    pub parent_status: Option<String>,
    /// Its `incomplete_details.reason` (`steered`).
    #[serde(default)]
    pub incomplete_reason: Option<String>,
    /// Its output items, verbatim.
    #[serde(default, deserialize_with = "agent_schema::json::list")]
    pub parent_output: Vec<Value>,
    /// Its `usage`, verbatim: the steered response was paid for too, and counts in the
    /// run's usage and budgets beside the successor's (the event's `usage`). Absent when it
    /// had none, and in journals written before it was recorded.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "agent_schema::json::option"
    )]
    pub parent_usage: Option<Value>,
    /// The steers the successor carries, each with its `steer.applied` in the same append.
    #[serde(default)]
    pub steer_ids: Vec<String>,
}

/// `model.failed`: a step's model call failed after its retries (or the response failed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFailed {
    /// The step, from 1.
    #[serde(default)]
    pub step: u64,
    /// The attempt that failed.
    #[serde(default)]
    pub attempt: u32,
    /// The HTTP status, when the API answered with one.
    #[serde(default)]
    pub status: Option<u16>,
    /// The API's error type.
    #[serde(default)]
    pub error_type: Option<String>,
    /// The API's error code.
    #[serde(default)]
    pub code: Option<String>,
    /// What went wrong, for a person.
    #[serde(default)]
    pub message: String,
    /// A failed response's `error` object, verbatim.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "agent_schema::json::option"
    )]
    pub error: Option<Value>,
    /// Whether the retry policy counted it as worth retrying.
    #[serde(default)]
    pub retryable: bool,
    /// What the failed response cost (its `usage`, verbatim), when it answered at all: a
    /// response too large to journal is paid for, and counted in the run's usage.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "agent_schema::json::option"
    )]
    pub usage: Option<Value>,
}

impl HostEvent for ModelFailed {
    const KIND: &'static str = k::MODEL_FAILED;
}
