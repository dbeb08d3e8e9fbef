//! Client events: what this crate sends over the socket (and the emulator reads back).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::types::{CreateResponse, Item, MessageContent};

/// `response.create` over WebSocket: the HTTP body plus the lane and `generate`.
///
/// Invariant: `request.stream` and `background` are never sent (the socket always streams).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResponseCreate {
    /// The request body, as for `POST /v1/responses`.
    pub request: CreateResponse,
    /// Routing lane; requests on one lane are processed FIFO. 1-256 chars of `[A-Za-z0-9_.-]`.
    pub stream_id: Option<String>,
    /// `false` prepares state only and returns a response id usable as `previous_response_id`.
    pub generate: Option<bool>,
}

/// `input` of `response.steer`: a string, or a non-empty list of user messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SteerInput {
    /// One text, sent as a user message.
    Text(String),
    /// User messages.
    Messages(Vec<Item>),
}

impl SteerInput {
    /// Checks the API's rules for steering input: non-empty text, or a non-empty list of `user` messages.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            SteerInput::Text(text) if text.trim().is_empty() => {
                Err("steering input text is empty".into())
            }
            SteerInput::Text(_) => Ok(()),
            SteerInput::Messages(items) if items.is_empty() => {
                Err("steering input list is empty".into())
            }
            SteerInput::Messages(items) => {
                for item in items {
                    match item {
                        Item::Message(m) if m.role == "user" => {}
                        other => {
                            return Err(format!(
                                "steering input may only hold user messages, found `{}`",
                                other.type_name().unwrap_or("message")
                            ));
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// The input as items (a string becomes one user message).
    pub fn to_items(&self) -> Vec<Item> {
        match self {
            SteerInput::Text(text) => {
                vec![Item::Message(crate::types::MessageItem::user(text.clone()))]
            }
            SteerInput::Messages(items) => items.clone(),
        }
    }

    /// All text of the input, joined with newlines (for logs and emulator replies).
    pub fn text(&self) -> String {
        match self {
            SteerInput::Text(text) => text.clone(),
            SteerInput::Messages(items) => items
                .iter()
                .filter_map(|item| match item {
                    Item::Message(m) => Some(match &m.content {
                        MessageContent::Text(t) => t.clone(),
                        MessageContent::Parts(_) => m.text(),
                    }),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// `response.steer`: only `previous_response_id` and `input` (no `stream_id`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerRequest {
    /// The response to steer; it must still be running (or waiting for input).
    pub previous_response_id: String,
    /// What the user adds.
    pub input: SteerInput,
}

/// A client event.
#[derive(Debug, Clone, PartialEq)]
// Moved once per frame; boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum ClientEvent {
    /// `response.create`: start a response on the connection.
    Create(ResponseCreate),
    /// `response.steer`: add input to a response in progress.
    Steer(SteerRequest),
}

impl ClientEvent {
    /// The JSON text frame for this event.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        let mut map = Map::new();
        match self {
            ClientEvent::Create(create) => {
                map.insert("type".into(), Value::String("response.create".into()));
                if let Some(lane) = &create.stream_id {
                    map.insert("stream_id".into(), Value::String(lane.clone()));
                }
                if let Some(generate) = create.generate {
                    map.insert("generate".into(), Value::Bool(generate));
                }
                if let Value::Object(body) = serde_json::to_value(&create.request)? {
                    for (key, value) in body {
                        if key != "stream" && key != "background" && key != "type" {
                            map.insert(key, value);
                        }
                    }
                }
            }
            ClientEvent::Steer(steer) => {
                map.insert("type".into(), Value::String("response.steer".into()));
                map.insert(
                    "previous_response_id".into(),
                    Value::String(steer.previous_response_id.clone()),
                );
                map.insert("input".into(), serde_json::to_value(&steer.input)?);
            }
        }
        serde_json::to_string(&Value::Object(map))
    }

    /// Parses a client frame (used by the emulator). Unknown `type`s are an error.
    pub fn from_json(text: &str) -> Result<Self, ClientEventError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| ClientEventError::Json(e.to_string()))?;
        let Value::Object(mut map) = value else {
            return Err(ClientEventError::NotAnObject);
        };
        let kind = match map.remove("type") {
            Some(Value::String(kind)) => kind,
            _ => return Err(ClientEventError::MissingType),
        };
        match kind.as_str() {
            "response.create" => {
                let stream_id = match map.remove("stream_id") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s),
                    Some(_) => {
                        return Err(ClientEventError::Field("stream_id must be a string".into()));
                    }
                };
                let generate = match map.remove("generate") {
                    None | Some(Value::Null) => None,
                    Some(Value::Bool(b)) => Some(b),
                    Some(_) => {
                        return Err(ClientEventError::Field("generate must be a boolean".into()));
                    }
                };
                let request: CreateResponse = serde_json::from_value(Value::Object(map))
                    .map_err(|e| ClientEventError::Field(e.to_string()))?;
                Ok(ClientEvent::Create(ResponseCreate {
                    request,
                    stream_id,
                    generate,
                }))
            }
            "response.steer" => {
                if let Some(extra) = map
                    .keys()
                    .find(|k| *k != "previous_response_id" && *k != "input")
                {
                    return Err(ClientEventError::Field(format!(
                        "Unknown parameter: '{extra}'."
                    )));
                }
                let steer: SteerRequest = serde_json::from_value(Value::Object(map))
                    .map_err(|e| ClientEventError::Field(e.to_string()))?;
                Ok(ClientEvent::Steer(steer))
            }
            other => Err(ClientEventError::UnknownType(other.to_owned())),
        }
    }
}

/// A client frame the emulator cannot read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientEventError {
    /// Not JSON at all.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// JSON, but not an object.
    #[error("the event is not a JSON object")]
    NotAnObject,
    /// No `type` field.
    #[error("missing required parameter: 'type'")]
    MissingType,
    /// A `type` that is not a client event.
    #[error("unknown client event type `{0}` (expected response.create or response.steer)")]
    UnknownType(String),
    /// A field with the wrong type or name.
    #[error("{0}")]
    Field(String),
}

/// Whether `id` is a valid `stream_id` (1-256 chars of `[A-Za-z0-9_.-]`).
pub fn valid_stream_id(id: &str) -> bool {
    (1..=256).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}
