//! Request bodies for `POST /responses` and `POST /responses/compact`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::item::{Item, MessageItem};
use super::tagged::{Nullable, nullable};
use super::tool::ToolDefinition;

/// `input`: a bare string (one user message) or a list of items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Input {
    /// One user message, as a bare string.
    Text(String),
    /// Any items: messages, tool outputs, replayed output items.
    Items(Vec<Item>),
}

impl Input {
    /// The input as items (a bare string becomes one "easy" user message).
    pub fn to_items(&self) -> Vec<Item> {
        match self {
            Input::Text(text) => vec![Item::Message(MessageItem::user(text.clone()))],
            Input::Items(items) => items.clone(),
        }
    }
}

/// `POST /v1/responses` body (<https://platform.openai.com/docs/api-reference/responses/create>). Fields not typed here live in `extra`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CreateResponse {
    /// The model slug; required by the API.
    #[serde(default)]
    pub model: String,
    /// The new input of this request (after `previous_response_id`'s conversation, if any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Input>,
    /// System-level instructions; not carried over by `previous_response_id`.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub instructions: Nullable<String>,
    /// The tools the model may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolDefinition>>,
    /// `"none"`, `"auto"`, `"required"` or an object; kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// The response this one continues; its conversation is prepended server-side.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub previous_response_id: Nullable<String>,
    /// Whether the server keeps the response (needed for `previous_response_id` over HTTP).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub store: Nullable<bool>,
    /// `true` for an SSE stream; use `Client::create_stream` for those.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub stream: Nullable<bool>,
    /// Extra output to include, e.g. `reasoning.encrypted_content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<String>>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CreateResponse {
    /// A request for `model` with `input`.
    pub fn new(model: impl Into<String>, input: Input) -> Self {
        Self {
            model: model.into(),
            input: Some(input),
            ..Self::default()
        }
    }
    /// `previous_response_id`, if set.
    pub fn previous_response_id(&self) -> Option<&str> {
        self.previous_response_id
            .as_ref()
            .and_then(|v| v.as_deref())
    }
    /// `store` (the API defaults it to true).
    pub fn store(&self) -> bool {
        !matches!(self.store, Some(Some(false)))
    }
    /// Whether `stream: true` was asked for.
    pub fn is_stream(&self) -> bool {
        matches!(self.stream, Some(Some(true)))
    }
    /// `instructions`, if set.
    pub fn instructions(&self) -> Option<&str> {
        self.instructions.as_ref().and_then(|v| v.as_deref())
    }
}

/// `POST /v1/responses/compact` body
/// (<https://developers.openai.com/api/reference/resources/responses/methods/compact>).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CompactRequest {
    /// The model slug; required by the API.
    #[serde(default)]
    pub model: String,
    /// The conversation to compact (after `previous_response_id`'s, if any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Input>,
    /// The response whose conversation is compacted.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub previous_response_id: Nullable<String>,
    /// Instructions for the compaction.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub instructions: Nullable<String>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
