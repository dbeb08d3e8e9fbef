//! Conversation items: what goes into `input` and comes back in `output`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::tagged::{EmitsTag, Nullable, nullable, tagged_union};

tagged_union! {
    /// One conversation item (an `input`/`output` element of the Responses API). Unknown item types are kept whole.
    pub enum Item untyped = "message" {
        /// A message from the user, the developer or the assistant.
        Message(MessageItem) = "message",
        /// The model asks the client to run a function tool.
        FunctionCall(FunctionCall) = "function_call",
        /// The client's answer to a `function_call`.
        FunctionCallOutput(FunctionCallOutput) = "function_call_output",
        /// The model's reasoning; replayed as is on the next request.
        Reasoning(Reasoning) = "reasoning",
        /// Earlier conversation replaced by an opaque summary; sent back whole.
        Compaction(Compaction) = "compaction",
        /// A program the model wrote (programmatic tool calling).
        Program(Program) = "program",
        /// The result of a `program`.
        ProgramOutput(ProgramOutput) = "program_output",
        /// The model asks the client to run a custom (free-text) tool.
        CustomToolCall(CustomToolCall) = "custom_tool_call",
        /// The client's answer to a `custom_tool_call`.
        CustomToolCallOutput(CustomToolCallOutput) = "custom_tool_call_output",
    }
}

tagged_union! {
    /// A part of a message's content (`input_text`, `output_text`, `refusal`, ...).
    pub enum ContentPart {
        /// Text the client sent.
        InputText(TextPart) = "input_text",
        /// Text the model wrote.
        OutputText(TextPart) = "output_text",
        /// The model declined to answer.
        Refusal(RefusalPart) = "refusal",
        /// Reasoning text, when the model shows it.
        ReasoningText(TextPart) = "reasoning_text",
        /// A summary of the model's reasoning.
        SummaryText(TextPart) = "summary_text",
    }
}

/// The `input_text` and `output_text` parts of `parts`, joined (what a message or a tool's
/// output says; refusals, reasoning and unknown parts are not part of it).
fn joined_text(parts: &[ContentPart]) -> String {
    parts
        .iter()
        .filter_map(|part| match part {
            ContentPart::InputText(p) | ContentPart::OutputText(p) => Some(p.text.as_str()),
            ContentPart::Refusal(_)
            | ContentPart::ReasoningText(_)
            | ContentPart::SummaryText(_)
            | ContentPart::Other(_) => None,
        })
        .collect()
}

tagged_union! {
    /// Who made a tool call: the model directly, or a program (programmatic tool calling).
    pub enum Caller {
        /// The model called the tool itself.
        Direct(Fields) = "direct",
        /// A `program` item called the tool; its output resumes that program.
        Program(ProgramCaller) = "program",
    }
}

/// A struct with no typed fields: everything lives in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fields {
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for Fields {}

/// `{"type":"program","caller_id":...}`: the program item's `call_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgramCaller {
    /// The `call_id` of the `program` item that made the call.
    pub caller_id: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ProgramCaller {}

/// A text-bearing content part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextPart {
    /// The text itself.
    pub text: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for TextPart {}

impl TextPart {
    /// An `output_text` part as the API shapes it (with empty `annotations`).
    pub fn output(text: impl Into<String>) -> Self {
        let mut extra = Map::new();
        extra.insert("annotations".into(), Value::Array(Vec::new()));
        Self {
            text: text.into(),
            extra,
        }
    }
    /// A plain text part (no extra fields).
    pub fn plain(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            extra: Map::new(),
        }
    }
}

/// A refusal content part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefusalPart {
    /// The model's explanation of why it declined.
    pub refusal: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for RefusalPart {}

/// Message content: a bare string or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// The short form: one string.
    Text(String),
    /// A list of typed parts.
    Parts(Vec<ContentPart>),
}

/// A `message` item (input or output). `typed == false` marks the "easy" form without `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageItem {
    /// Whether the item carried `type: "message"`; an easy-form input message is sent back without it.
    #[serde(skip, default = "yes")]
    pub typed: bool,
    /// The server's id; absent on messages the client writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `user`, `developer`, `system` or `assistant`.
    pub role: String,
    /// What the message says.
    pub content: MessageContent,
    /// `in_progress`, `completed` or `incomplete` on output messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
fn yes() -> bool {
    true
}
impl EmitsTag for MessageItem {
    fn emits_tag(&self) -> bool {
        self.typed
    }
    fn mark_untyped(&mut self) {
        self.typed = false;
    }
}

impl MessageItem {
    /// The "easy" user message `{"role":"user","content":text}`.
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            typed: false,
            id: None,
            role: "user".into(),
            content: MessageContent::Text(text.into()),
            status: None,
            extra: Map::new(),
        }
    }

    /// A completed assistant message with one `output_text` part.
    pub fn assistant(id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            typed: true,
            id: Some(id.into()),
            role: "assistant".into(),
            content: MessageContent::Parts(vec![ContentPart::OutputText(TextPart::output(text))]),
            status: Some("completed".into()),
            extra: Map::new(),
        }
    }

    /// All text in this message (`output_text`/`input_text` parts or the bare string), joined.
    pub fn text(&self) -> String {
        match &self.content {
            MessageContent::Text(text) => text.clone(),
            MessageContent::Parts(parts) => joined_text(parts),
        }
    }
}

/// A `function_call` item. `caller` and `async` keep the difference between absent and null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The server's id for the item (distinct from `call_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Pairs a call with its output: the output names the same `call_id`.
    pub call_id: String,
    /// The function to run, as declared in the request's `tools`.
    pub name: String,
    /// The arguments as a JSON text, exactly as the model wrote them.
    pub arguments: String,
    /// `in_progress` while arguments stream, then `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Who made the call; echoed on the output so a program can resume (absent and `null` kept apart).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub caller: Nullable<Caller>,
    /// The wire `async` flag: the model goes on without waiting for this call's output (absent and `null` kept apart).
    #[serde(
        rename = "async",
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub is_async: Nullable<bool>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for FunctionCall {}

impl FunctionCall {
    /// The caller, if one is set (absent and null both give `None`).
    pub fn caller(&self) -> Option<&Caller> {
        self.caller.as_ref().and_then(Option::as_ref)
    }
    /// Whether the model marked this call `async: true`.
    pub fn is_async(&self) -> bool {
        matches!(self.is_async, Some(Some(true)))
    }
}

/// A tool's output: a string or a list of content parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolOutput {
    /// The short form: one string.
    Text(String),
    /// A list of typed parts.
    Parts(Vec<ContentPart>),
}

/// A `function_call_output` item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCallOutput {
    /// The server's id, once the output is part of a response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Pairs a call with its output: the output names the same `call_id`.
    pub call_id: String,
    /// What the tool returned, or the report of its failure.
    pub output: ToolOutput,
    /// Set by the server on stored items.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Who made the call; echoed on the output so a program can resume (absent and `null` kept apart).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub caller: Nullable<Caller>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for FunctionCallOutput {}

impl FunctionCallOutput {
    /// An output for `call_id`; `caller` is echoed when given (required for PTC resumption).
    pub fn new(
        call_id: impl Into<String>,
        output: impl Into<String>,
        caller: Option<Caller>,
    ) -> Self {
        Self {
            id: None,
            call_id: call_id.into(),
            output: ToolOutput::Text(output.into()),
            status: None,
            caller: caller.map(Some),
            extra: Map::new(),
        }
    }
    /// The caller, if one is set.
    pub fn caller(&self) -> Option<&Caller> {
        self.caller.as_ref().and_then(Option::as_ref)
    }
    /// The output as text (parts are joined).
    pub fn text(&self) -> String {
        match &self.output {
            ToolOutput::Text(t) => t.clone(),
            ToolOutput::Parts(parts) => joined_text(parts),
        }
    }
}

/// A `reasoning` item; `encrypted_content` must be replayed untouched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reasoning {
    /// The server's id for the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Summary parts, kept as sent.
    #[serde(default)]
    pub summary: Vec<Value>,
    /// The opaque reasoning state; must be replayed untouched (absent and `null` kept apart).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub encrypted_content: Nullable<String>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for Reasoning {}

/// A `compaction` item: opaque, must be sent back whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    /// The server's id for the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The compacted conversation, opaque to the client.
    pub encrypted_content: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for Compaction {}

/// A `program` item (programmatic tool calling); `fingerprint` must round-trip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// The server's id for the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Pairs a call with its output: the output names the same `call_id`.
    pub call_id: String,
    /// The program's source.
    pub code: String,
    /// Binds the program to the server that issued it; sent back unchanged.
    pub fingerprint: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for Program {}

/// A `program_output` item: the program's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgramOutput {
    /// The server's id for the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Pairs a call with its output: the output names the same `call_id`.
    pub call_id: String,
    /// The program's result, as text.
    pub result: String,
    /// `completed` or `incomplete`, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ProgramOutput {}

/// A `custom_tool_call` item (free-text `input`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomToolCall {
    /// The server's id for the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Pairs a call with its output: the output names the same `call_id`.
    pub call_id: String,
    /// The custom tool to run, as declared in the request's `tools`.
    pub name: String,
    /// The free-text input the model wrote for the tool.
    pub input: String,
    /// Who made the call; echoed on the output so a program can resume (absent and `null` kept apart).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub caller: Nullable<Caller>,
    /// The wire `async` flag: the model goes on without waiting for this call's output (absent and `null` kept apart).
    #[serde(
        rename = "async",
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub is_async: Nullable<bool>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for CustomToolCall {}

/// A `custom_tool_call_output` item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomToolCallOutput {
    /// The server's id, once the output is part of a response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Pairs a call with its output: the output names the same `call_id`.
    pub call_id: String,
    /// What the tool returned, or the report of its failure.
    pub output: ToolOutput,
    /// Who made the call; echoed on the output so a program can resume (absent and `null` kept apart).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub caller: Nullable<Caller>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for CustomToolCallOutput {}

impl Item {
    /// The `call_id` of a call or output item.
    pub fn call_id(&self) -> Option<&str> {
        match self {
            Item::FunctionCall(c) => Some(&c.call_id),
            Item::FunctionCallOutput(o) => Some(&o.call_id),
            Item::CustomToolCall(c) => Some(&c.call_id),
            Item::CustomToolCallOutput(o) => Some(&o.call_id),
            Item::Program(p) => Some(&p.call_id),
            Item::ProgramOutput(p) => Some(&p.call_id),
            Item::Message(_) | Item::Reasoning(_) | Item::Compaction(_) => None,
            Item::Other(v) => v.get("call_id").and_then(Value::as_str),
        }
    }

    /// The item's `id`, if present.
    pub fn id(&self) -> Option<&str> {
        match self {
            Item::Message(m) => m.id.as_deref(),
            Item::FunctionCall(c) => c.id.as_deref(),
            Item::FunctionCallOutput(o) => o.id.as_deref(),
            Item::Reasoning(r) => r.id.as_deref(),
            Item::Compaction(c) => c.id.as_deref(),
            Item::Program(p) => p.id.as_deref(),
            Item::ProgramOutput(p) => p.id.as_deref(),
            Item::CustomToolCall(c) => c.id.as_deref(),
            Item::CustomToolCallOutput(o) => o.id.as_deref(),
            Item::Other(v) => v.get("id").and_then(Value::as_str),
        }
    }
}

impl From<MessageItem> for Item {
    fn from(m: MessageItem) -> Self {
        Item::Message(m)
    }
}
impl From<FunctionCallOutput> for Item {
    fn from(o: FunctionCallOutput) -> Self {
        Item::FunctionCallOutput(o)
    }
}
