//! Stream events (reference section 6.2). Unknown event types are kept in `Other`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::item::{ContentPart, Item};
use super::response::Response;
use super::tagged::{EmitsTag, tagged_union};

tagged_union! {
    /// One server-sent event of a streamed response.
    pub enum StreamEvent {
        Created(ResponseEvent) = "response.created",
        Queued(ResponseEvent) = "response.queued",
        InProgress(ResponseEvent) = "response.in_progress",
        Completed(ResponseEvent) = "response.completed",
        Failed(ResponseEvent) = "response.failed",
        Incomplete(ResponseEvent) = "response.incomplete",
        OutputItemAdded(OutputItemEvent) = "response.output_item.added",
        OutputItemDone(OutputItemEvent) = "response.output_item.done",
        ContentPartAdded(ContentPartEvent) = "response.content_part.added",
        ContentPartDone(ContentPartEvent) = "response.content_part.done",
        OutputTextDelta(DeltaEvent) = "response.output_text.delta",
        OutputTextDone(TextDoneEvent) = "response.output_text.done",
        OutputTextAnnotationAdded(ItemScopedEvent) = "response.output_text.annotation.added",
        RefusalDelta(DeltaEvent) = "response.refusal.delta",
        RefusalDone(ItemScopedEvent) = "response.refusal.done",
        FunctionCallArgumentsDelta(DeltaEvent) = "response.function_call_arguments.delta",
        FunctionCallArgumentsDone(ArgumentsDoneEvent) = "response.function_call_arguments.done",
        CustomToolCallInputDelta(DeltaEvent) = "response.custom_tool_call_input.delta",
        CustomToolCallInputDone(ItemScopedEvent) = "response.custom_tool_call_input.done",
        ReasoningSummaryPartAdded(ItemScopedEvent) = "response.reasoning_summary_part.added",
        ReasoningSummaryPartDone(ItemScopedEvent) = "response.reasoning_summary_part.done",
        ReasoningSummaryTextDelta(DeltaEvent) = "response.reasoning_summary_text.delta",
        ReasoningSummaryTextDone(TextDoneEvent) = "response.reasoning_summary_text.done",
        ReasoningTextDelta(DeltaEvent) = "response.reasoning_text.delta",
        ReasoningTextDone(TextDoneEvent) = "response.reasoning_text.done",
        CompactionCompacting(ItemScopedEvent) = "response.compaction.compacting",
        Error(ErrorEvent) = "error",
    }
}

/// Lifecycle events carrying the whole response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseEvent {
    pub sequence_number: u64,
    pub response: Response,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ResponseEvent {}

/// `response.output_item.added` / `.done`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputItemEvent {
    pub sequence_number: u64,
    pub output_index: u64,
    pub item: Item,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for OutputItemEvent {}

/// `response.content_part.added` / `.done`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPartEvent {
    pub sequence_number: u64,
    pub item_id: String,
    pub output_index: u64,
    pub content_index: u64,
    pub part: ContentPart,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ContentPartEvent {}

/// Every `*.delta` event; `content_index` / `summary_index` / `logprobs` stay in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeltaEvent {
    pub sequence_number: u64,
    pub item_id: String,
    pub output_index: u64,
    pub delta: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for DeltaEvent {}

/// `*.text.done` events carrying the full `text`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextDoneEvent {
    pub sequence_number: u64,
    pub item_id: String,
    pub output_index: u64,
    pub text: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for TextDoneEvent {}

/// `response.function_call_arguments.done`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArgumentsDoneEvent {
    pub sequence_number: u64,
    pub item_id: String,
    pub output_index: u64,
    pub arguments: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ArgumentsDoneEvent {}

/// Other events scoped to one output item; their payload stays in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemScopedEvent {
    pub sequence_number: u64,
    pub item_id: String,
    pub output_index: u64,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ItemScopedEvent {}

/// The `error` event, in either shape: flat (`code`/`message`/`param` at the top, as typed by
/// the SDK) or nested (`error: {type, code, message, param}`, as the real API sends).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEvent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<u64>,
    /// The nested `error` object, kept as sent (see [`ErrorEvent::detail`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ErrorEvent {}

/// The nested `error` object of an error event (also the result of [`ErrorEvent::detail`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ErrorDetail {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ErrorEvent {
    /// The error's fields, whichever shape the event had.
    pub fn detail(&self) -> ErrorDetail {
        let text = |source: Option<&Value>, key: &str| {
            source
                .and_then(|s| s.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        if let Some(nested) = self.error.as_ref().filter(|e| e.is_object()) {
            return ErrorDetail {
                kind: text(Some(nested), "type"),
                code: text(Some(nested), "code"),
                message: text(Some(nested), "message").unwrap_or_default(),
                param: text(Some(nested), "param"),
                extra: Map::new(),
            };
        }
        let flat = |key: &str| {
            self.extra
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        ErrorDetail {
            kind: None,
            code: flat("code"),
            message: flat("message").unwrap_or_default(),
            param: flat("param"),
            extra: Map::new(),
        }
    }
}

impl StreamEvent {
    /// The event's `sequence_number` (`None` for unknown events without one).
    pub fn sequence_number(&self) -> Option<u64> {
        match self {
            StreamEvent::Created(e)
            | StreamEvent::Queued(e)
            | StreamEvent::InProgress(e)
            | StreamEvent::Completed(e)
            | StreamEvent::Failed(e)
            | StreamEvent::Incomplete(e) => Some(e.sequence_number),
            StreamEvent::OutputItemAdded(e) | StreamEvent::OutputItemDone(e) => {
                Some(e.sequence_number)
            }
            StreamEvent::ContentPartAdded(e) | StreamEvent::ContentPartDone(e) => {
                Some(e.sequence_number)
            }
            StreamEvent::OutputTextDelta(e)
            | StreamEvent::RefusalDelta(e)
            | StreamEvent::FunctionCallArgumentsDelta(e)
            | StreamEvent::CustomToolCallInputDelta(e)
            | StreamEvent::ReasoningSummaryTextDelta(e)
            | StreamEvent::ReasoningTextDelta(e) => Some(e.sequence_number),
            StreamEvent::OutputTextDone(e)
            | StreamEvent::ReasoningSummaryTextDone(e)
            | StreamEvent::ReasoningTextDone(e) => Some(e.sequence_number),
            StreamEvent::FunctionCallArgumentsDone(e) => Some(e.sequence_number),
            StreamEvent::OutputTextAnnotationAdded(e)
            | StreamEvent::RefusalDone(e)
            | StreamEvent::CustomToolCallInputDone(e)
            | StreamEvent::ReasoningSummaryPartAdded(e)
            | StreamEvent::ReasoningSummaryPartDone(e)
            | StreamEvent::CompactionCompacting(e) => Some(e.sequence_number),
            StreamEvent::Error(e) => e.sequence_number,
            StreamEvent::Other(v) => v.get("sequence_number").and_then(Value::as_u64),
        }
    }

    /// Whether this event ends the stream (`completed`, `failed`, `incomplete`, `error`).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            StreamEvent::Completed(_)
                | StreamEvent::Failed(_)
                | StreamEvent::Incomplete(_)
                | StreamEvent::Error(_)
        )
    }
}
