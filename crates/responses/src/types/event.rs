//! Stream events (<https://platform.openai.com/docs/api-reference/responses-streaming>). Unknown event types are kept in `Other`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::item::{ContentPart, Item};
use super::response::Response;
use super::tagged::{EmitsTag, tagged_union};

tagged_union! {
    /// One server-sent event of a streamed response.
    pub enum StreamEvent {
        /// The response exists; the first event of every stream.
        Created(ResponseEvent) = "response.created",
        /// The response waits for capacity before it starts.
        Queued(ResponseEvent) = "response.queued",
        /// The model is generating.
        InProgress(ResponseEvent) = "response.in_progress",
        /// The response finished normally; carries the whole response.
        Completed(ResponseEvent) = "response.completed",
        /// The response failed; `response.error` says why.
        Failed(ResponseEvent) = "response.failed",
        /// The response stopped early (`incomplete_details` says why, e.g. `steered`).
        Incomplete(ResponseEvent) = "response.incomplete",
        /// A new output item begins.
        OutputItemAdded(OutputItemEvent) = "response.output_item.added",
        /// An output item is final: the point where a tool call can be dispatched.
        OutputItemDone(OutputItemEvent) = "response.output_item.done",
        /// A content part of a message begins.
        ContentPartAdded(ContentPartEvent) = "response.content_part.added",
        /// A content part of a message is final.
        ContentPartDone(ContentPartEvent) = "response.content_part.done",
        /// More text of an `output_text` part.
        OutputTextDelta(DeltaEvent) = "response.output_text.delta",
        /// The full text of an `output_text` part.
        OutputTextDone(TextDoneEvent) = "response.output_text.done",
        /// An annotation (citation) on output text.
        OutputTextAnnotationAdded(ItemScopedEvent) = "response.output_text.annotation.added",
        /// More of a refusal.
        RefusalDelta(DeltaEvent) = "response.refusal.delta",
        /// The full refusal.
        RefusalDone(ItemScopedEvent) = "response.refusal.done",
        /// More of a function call's arguments.
        FunctionCallArgumentsDelta(DeltaEvent) = "response.function_call_arguments.delta",
        /// A function call's complete arguments.
        FunctionCallArgumentsDone(ArgumentsDoneEvent) = "response.function_call_arguments.done",
        /// More of a custom tool call's input.
        CustomToolCallInputDelta(DeltaEvent) = "response.custom_tool_call_input.delta",
        /// A custom tool call's complete input.
        CustomToolCallInputDone(ItemScopedEvent) = "response.custom_tool_call_input.done",
        /// A reasoning summary part begins.
        ReasoningSummaryPartAdded(ItemScopedEvent) = "response.reasoning_summary_part.added",
        /// A reasoning summary part is final.
        ReasoningSummaryPartDone(ItemScopedEvent) = "response.reasoning_summary_part.done",
        /// More reasoning summary text.
        ReasoningSummaryTextDelta(DeltaEvent) = "response.reasoning_summary_text.delta",
        /// The full reasoning summary text.
        ReasoningSummaryTextDone(TextDoneEvent) = "response.reasoning_summary_text.done",
        /// More reasoning text.
        ReasoningTextDelta(DeltaEvent) = "response.reasoning_text.delta",
        /// The full reasoning text.
        ReasoningTextDone(TextDoneEvent) = "response.reasoning_text.done",
        /// The server is compacting the conversation.
        CompactionCompacting(ItemScopedEvent) = "response.compaction.compacting",
        /// The stream failed; the last event (see [`crate::sse::error_detail`]).
        Error(ErrorEvent) = "error",
    }
}

/// Lifecycle events carrying the whole response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseEvent {
    /// Position in the stream; increases by one per event.
    pub sequence_number: u64,
    /// The response as it stands at this event.
    pub response: Response,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ResponseEvent {}

/// `response.output_item.added` / `.done`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputItemEvent {
    /// Position in the stream; increases by one per event.
    pub sequence_number: u64,
    /// Where the item sits in `response.output`.
    pub output_index: u64,
    /// The item (partial on `added`, final on `done`).
    pub item: Item,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for OutputItemEvent {}

/// `response.content_part.added` / `.done`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPartEvent {
    /// Position in the stream; increases by one per event.
    pub sequence_number: u64,
    /// The id of the message the part belongs to.
    pub item_id: String,
    /// Where that message sits in `response.output`.
    pub output_index: u64,
    /// Where the part sits in the message's `content`.
    pub content_index: u64,
    /// The part (empty on `added`, final on `done`).
    pub part: ContentPart,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ContentPartEvent {}

/// Every `*.delta` event; `content_index` / `summary_index` / `logprobs` stay in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeltaEvent {
    /// Position in the stream; increases by one per event.
    pub sequence_number: u64,
    /// The id of the item the text belongs to.
    pub item_id: String,
    /// Where that item sits in `response.output`.
    pub output_index: u64,
    /// The new text; concatenated in order they give the whole.
    pub delta: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for DeltaEvent {}

/// `*.text.done` events carrying the full `text`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextDoneEvent {
    /// Position in the stream; increases by one per event.
    pub sequence_number: u64,
    /// The id of the item the text belongs to.
    pub item_id: String,
    /// Where that item sits in `response.output`.
    pub output_index: u64,
    /// The whole text, equal to the concatenated deltas.
    pub text: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for TextDoneEvent {}

/// `response.function_call_arguments.done`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArgumentsDoneEvent {
    /// Position in the stream; increases by one per event.
    pub sequence_number: u64,
    /// The id of the function call item.
    pub item_id: String,
    /// Where that item sits in `response.output`.
    pub output_index: u64,
    /// The complete arguments as JSON text.
    pub arguments: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ArgumentsDoneEvent {}

/// Other events scoped to one output item; their payload stays in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemScopedEvent {
    /// Position in the stream; increases by one per event.
    pub sequence_number: u64,
    /// The id of the item the event is about.
    pub item_id: String,
    /// Where that item sits in `response.output`.
    pub output_index: u64,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ItemScopedEvent {}

/// The `error` event, in either shape: flat (`code`/`message`/`param` at the top, as typed by
/// the SDK) or nested (`error: {type, code, message, param}`, as the real API sends).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEvent {
    /// Position in the stream; increases by one per event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<u64>,
    /// The nested `error` object, kept as sent (see [`ErrorEvent::detail`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ErrorEvent {}

/// The nested `error` object of an error event (also the result of [`ErrorEvent::detail`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// The error class, e.g. `server_error` or `invalid_request_error`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A machine-readable code, when the server gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What went wrong, for people.
    #[serde(default)]
    pub message: String,
    /// The request parameter at fault, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// Fields not named here, kept and sent back verbatim.
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

    /// Whether an event of wire type `kind` ends the stream (as [`is_terminal`](Self::is_terminal)).
    pub fn is_terminal_type(kind: &str) -> bool {
        matches!(
            kind,
            "response.completed" | "response.failed" | "response.incomplete" | "error"
        )
    }

    /// Whether this event ends the stream (`completed`, `failed`, `incomplete`, `error`).
    pub fn is_terminal(&self) -> bool {
        self.type_name().is_some_and(Self::is_terminal_type)
    }
}
