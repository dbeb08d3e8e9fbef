//! WebSocket mode wire events (reference section 8.2 and 8.3).
//!
//! Client events: [`ClientEvent::Create`] (`response.create`) and [`ClientEvent::Steer`]
//! (`response.steer`). Server events: every stream event of section 6.2 ([`StreamEvent`],
//! with `stream_id` and the WebSocket `error`'s `status` kept in `extra`), plus the three
//! steering events. Unknown server events are kept verbatim in [`StreamEvent::Other`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::types::tagged::{EmitsTag, tagged_union};
use crate::types::{CreateResponse, Item, MessageContent, ResponseEvent, StreamEvent};

/// `response.create` over WebSocket: the HTTP body plus the lane and `generate`.
///
/// Invariant: `request.stream` and `background` are never sent (the socket always streams).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResponseCreate {
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
    Text(String),
    Messages(Vec<Item>),
}

impl SteerInput {
    /// Checks the reference's rules: non-empty text, or a non-empty list of `user` messages.
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
    pub previous_response_id: String,
    pub input: SteerInput,
}

/// A client event.
#[derive(Debug, Clone, PartialEq)]
// Moved once per frame; boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum ClientEvent {
    Create(ResponseCreate),
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
    #[error("invalid JSON: {0}")]
    Json(String),
    #[error("the event is not a JSON object")]
    NotAnObject,
    #[error("missing required parameter: 'type'")]
    MissingType,
    #[error("unknown client event type `{0}` (expected response.create or response.steer)")]
    UnknownType(String),
    #[error("{0}")]
    Field(String),
}

/// `steer` object of the steering events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerRef {
    /// `None` when the steer was rejected before an id was allocated.
    #[serde(default)]
    pub id: Option<String>,
    pub previous_response_id: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `response.steer.accepted`: the server owns the input; it is queued, not yet applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerAccepted {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    pub steer: SteerRef,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for SteerAccepted {}

/// `response.steer.pending`: the parent stopped for client-owned input; fill `required_input`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerPending {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    pub steer: SteerRef,
    /// Extensible; known: `waiting_for_required_input`.
    pub reason: String,
    #[serde(default)]
    pub required_input: Vec<RequiredInput>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for SteerPending {}

/// `response.steer.failed`: `error.code` says why (see [`SteerFailCode`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerFailed {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    pub steer: SteerRef,
    pub error: SteerError,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for SteerFailed {}

impl SteerFailed {
    /// The failure code, typed (unknown codes kept).
    pub fn code(&self) -> SteerFailCode {
        SteerFailCode::parse(self.error.code.as_deref().unwrap_or(""))
    }
}

/// The `error` object of `response.steer.failed` (`type` is always `invalid_request_error`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerError {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default)]
    pub message: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `response.steer.failed` codes from the reference; the list is extensible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SteerFailCode {
    ResponseNotFound,
    InvalidInput,
    SteeringNotSupported,
    TooManyPendingSteers,
    ResponseAlreadyCompleted,
    ResponseNotActive,
    SuccessorCreationFailed,
    Other(String),
}

impl SteerFailCode {
    /// Every code the reference names, in its order.
    pub const KNOWN: [&'static str; 7] = [
        "response_not_found",
        "invalid_input",
        "steering_not_supported",
        "too_many_pending_steers",
        "response_already_completed",
        "response_not_active",
        "successor_creation_failed",
    ];

    pub fn parse(code: &str) -> Self {
        match code {
            "response_not_found" => Self::ResponseNotFound,
            "invalid_input" => Self::InvalidInput,
            "steering_not_supported" => Self::SteeringNotSupported,
            "too_many_pending_steers" => Self::TooManyPendingSteers,
            "response_already_completed" => Self::ResponseAlreadyCompleted,
            "response_not_active" => Self::ResponseNotActive,
            "successor_creation_failed" => Self::SuccessorCreationFailed,
            other => Self::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::ResponseNotFound => "response_not_found",
            Self::InvalidInput => "invalid_input",
            Self::SteeringNotSupported => "steering_not_supported",
            Self::TooManyPendingSteers => "too_many_pending_steers",
            Self::ResponseAlreadyCompleted => "response_already_completed",
            Self::ResponseNotActive => "response_not_active",
            Self::SuccessorCreationFailed => "successor_creation_failed",
            Self::Other(code) => code,
        }
    }
}

impl std::fmt::Display for SteerFailCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

tagged_union! {
    /// A `required_input` stub of `response.steer.pending`: which output the client must send.
    pub enum RequiredInput {
        FunctionCallOutput(CallStub) = "function_call_output",
        CustomToolCallOutput(CallStub) = "custom_tool_call_output",
        ComputerCallOutput(CallStub) = "computer_call_output",
        ShellCallOutput(CallStub) = "shell_call_output",
        ApplyPatchCallOutput(CallStub) = "apply_patch_call_output",
        ToolSearchOutput(CallStub) = "tool_search_output",
        McpApprovalResponse(ApprovalStub) = "mcp_approval_response",
    }
}

/// A stub naming a tool call by `call_id` (`name` only on `function_call_output`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallStub {
    pub call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for CallStub {}

/// `mcp_approval_response {approval_request_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalStub {
    pub approval_request_id: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ApprovalStub {}

tagged_union! {
    /// The three steering server events.
    pub enum SteerEvent {
        Accepted(SteerAccepted) = "response.steer.accepted",
        Pending(SteerPending) = "response.steer.pending",
        Failed(SteerFailed) = "response.steer.failed",
    }
}

/// One server event of a WebSocket session.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// A section 6.2 stream event, or an unknown event kept verbatim (`StreamEvent::Other`).
    Stream(StreamEvent),
    Steer(SteerEvent),
}

impl ServerEvent {
    /// Parses one text frame. Unknown types become `Stream(StreamEvent::Other)`.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        let value: Value = serde_json::from_str(text)?;
        let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
        if kind.starts_with("response.steer.") {
            Ok(ServerEvent::Steer(serde_json::from_value(value)?))
        } else {
            Ok(ServerEvent::Stream(serde_json::from_value(value)?))
        }
    }

    /// The JSON text frame for this event.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        match self {
            ServerEvent::Stream(e) => serde_json::to_string(e),
            ServerEvent::Steer(e) => serde_json::to_string(e),
        }
    }

    /// The wire `type`.
    pub fn type_name(&self) -> Option<&str> {
        match self {
            ServerEvent::Stream(e) => e.type_name(),
            ServerEvent::Steer(e) => e.type_name(),
        }
    }

    /// The lane the event belongs to (`stream_id`), when the server echoed one.
    pub fn stream_id(&self) -> Option<&str> {
        match self {
            ServerEvent::Stream(e) => stream_extra(e)
                .and_then(|m| m.get("stream_id"))
                .and_then(Value::as_str),
            ServerEvent::Steer(SteerEvent::Accepted(e)) => e.stream_id.as_deref(),
            ServerEvent::Steer(SteerEvent::Pending(e)) => e.stream_id.as_deref(),
            ServerEvent::Steer(SteerEvent::Failed(e)) => e.stream_id.as_deref(),
            ServerEvent::Steer(SteerEvent::Other(v)) => v.get("stream_id").and_then(Value::as_str),
        }
    }

    /// For a WebSocket `error` event: the HTTP-like `status` it carries.
    pub fn error_status(&self) -> Option<u16> {
        match self {
            ServerEvent::Stream(StreamEvent::Error(e)) => e
                .extra
                .get("status")
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok()),
            _ => None,
        }
    }

    /// The lifecycle event's response, for `response.created/.../incomplete`.
    pub fn lifecycle(&self) -> Option<&ResponseEvent> {
        match self {
            ServerEvent::Stream(
                StreamEvent::Created(e)
                | StreamEvent::Queued(e)
                | StreamEvent::InProgress(e)
                | StreamEvent::Completed(e)
                | StreamEvent::Failed(e)
                | StreamEvent::Incomplete(e),
            ) => Some(e),
            _ => None,
        }
    }
}

fn stream_extra(event: &StreamEvent) -> Option<&Map<String, Value>> {
    match event {
        StreamEvent::Created(e)
        | StreamEvent::Queued(e)
        | StreamEvent::InProgress(e)
        | StreamEvent::Completed(e)
        | StreamEvent::Failed(e)
        | StreamEvent::Incomplete(e) => Some(&e.extra),
        StreamEvent::OutputItemAdded(e) | StreamEvent::OutputItemDone(e) => Some(&e.extra),
        StreamEvent::ContentPartAdded(e) | StreamEvent::ContentPartDone(e) => Some(&e.extra),
        StreamEvent::OutputTextDelta(e)
        | StreamEvent::RefusalDelta(e)
        | StreamEvent::FunctionCallArgumentsDelta(e)
        | StreamEvent::CustomToolCallInputDelta(e)
        | StreamEvent::ReasoningSummaryTextDelta(e)
        | StreamEvent::ReasoningTextDelta(e) => Some(&e.extra),
        StreamEvent::OutputTextDone(e)
        | StreamEvent::ReasoningSummaryTextDone(e)
        | StreamEvent::ReasoningTextDone(e) => Some(&e.extra),
        StreamEvent::FunctionCallArgumentsDone(e) => Some(&e.extra),
        StreamEvent::OutputTextAnnotationAdded(e)
        | StreamEvent::RefusalDone(e)
        | StreamEvent::CustomToolCallInputDone(e)
        | StreamEvent::ReasoningSummaryPartAdded(e)
        | StreamEvent::ReasoningSummaryPartDone(e)
        | StreamEvent::CompactionCompacting(e) => Some(&e.extra),
        StreamEvent::Error(e) => Some(&e.extra),
        StreamEvent::Other(Value::Object(map)) => Some(map),
        StreamEvent::Other(_) => None,
    }
}

/// Whether `id` is a valid `stream_id` (1-256 chars of `[A-Za-z0-9_.-]`).
pub fn valid_stream_id(id: &str) -> bool {
    (1..=256).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_frame_has_lane_and_no_stream_flag() {
        let mut request = CreateResponse::new("m", crate::types::Input::Text("hi".into()));
        request.stream = Some(Some(true));
        let event = ClientEvent::Create(ResponseCreate {
            request,
            stream_id: Some("a".into()),
            generate: Some(false),
        });
        let json: Value = serde_json::from_str(&event.to_json().unwrap()).unwrap();
        assert_eq!(json["type"], "response.create");
        assert_eq!(json["stream_id"], "a");
        assert_eq!(json["generate"], false);
        assert!(json.get("stream").is_none());
        let back = ClientEvent::from_json(&json.to_string()).unwrap();
        let ClientEvent::Create(c) = back else {
            panic!()
        };
        assert_eq!(c.stream_id.as_deref(), Some("a"));
        assert_eq!(c.request.model, "m");
    }

    #[test]
    fn steer_frame_round_trips_and_rejects_extra_fields() {
        let event = ClientEvent::Steer(SteerRequest {
            previous_response_id: "resp_1".into(),
            input: SteerInput::Text("two days".into()),
        });
        let text = event.to_json().unwrap();
        assert_eq!(ClientEvent::from_json(&text).unwrap(), event);
        let bad =
            r#"{"type":"response.steer","previous_response_id":"r","input":"x","stream_id":"a"}"#;
        assert!(matches!(
            ClientEvent::from_json(bad),
            Err(ClientEventError::Field(_))
        ));
    }

    #[test]
    fn steer_input_rules() {
        assert!(SteerInput::Text(" ".into()).validate().is_err());
        assert!(SteerInput::Messages(vec![]).validate().is_err());
        let items: Vec<Item> =
            serde_json::from_str(r#"[{"type":"function_call_output","call_id":"c","output":"x"}]"#)
                .unwrap();
        assert!(SteerInput::Messages(items).validate().is_err());
        let items: Vec<Item> =
            serde_json::from_str(r#"[{"role":"user","content":"metric"}]"#).unwrap();
        assert!(SteerInput::Messages(items).validate().is_ok());
    }

    #[test]
    fn server_events_typed_and_unknown_kept() {
        let frames = [
            r#"{"type":"response.steer.accepted","sequence_number":12,"stream_id":"agent_1","steer":{"id":"steer_1","previous_response_id":"resp_active"}}"#,
            r#"{"type":"response.steer.pending","sequence_number":40,"steer":{"id":"steer_1","previous_response_id":"resp_active"},"reason":"waiting_for_required_input","required_input":[{"type":"function_call_output","call_id":"call_7","name":"get_weather"},{"type":"mcp_approval_response","approval_request_id":"a1"},{"type":"new_kind","x":1}]}"#,
            r#"{"type":"response.steer.failed","sequence_number":13,"steer":{"id":null,"previous_response_id":"resp_active","input":"Actually"},"error":{"type":"invalid_request_error","code":"response_already_completed","message":"done"}}"#,
            r#"{"type":"error","status":400,"stream_id":"agent_1","error":{"type":"invalid_request_error","code":"websocket_stream_limit_reached","message":"limit","param":"stream_id","headers":{"x-request-id":"r"}}}"#,
            r#"{"type":"response.brand_new","sequence_number":3,"payload":{"a":[1,2]}}"#,
        ];
        for frame in frames {
            let event = ServerEvent::from_json(frame).unwrap();
            let back: Value = serde_json::from_str(&event.to_json().unwrap()).unwrap();
            let original: Value = serde_json::from_str(frame).unwrap();
            assert_eq!(back, original, "{frame}");
        }
        let pending = ServerEvent::from_json(frames[1]).unwrap();
        let ServerEvent::Steer(SteerEvent::Pending(p)) = pending else {
            panic!()
        };
        assert!(
            matches!(&p.required_input[0], RequiredInput::FunctionCallOutput(s) if s.call_id == "call_7")
        );
        assert!(matches!(&p.required_input[2], RequiredInput::Other(_)));
        let failed = ServerEvent::from_json(frames[2]).unwrap();
        let ServerEvent::Steer(SteerEvent::Failed(f)) = failed else {
            panic!()
        };
        assert_eq!(f.code(), SteerFailCode::ResponseAlreadyCompleted);
        let error = ServerEvent::from_json(frames[3]).unwrap();
        assert_eq!(error.error_status(), Some(400));
        assert_eq!(error.stream_id(), Some("agent_1"));
        assert!(matches!(
            ServerEvent::from_json(frames[4]).unwrap(),
            ServerEvent::Stream(StreamEvent::Other(_))
        ));
    }

    #[test]
    fn stream_ids() {
        assert!(valid_stream_id("agent_1.x-y"));
        assert!(!valid_stream_id(""));
        assert!(!valid_stream_id("a b"));
        assert!(!valid_stream_id(&"a".repeat(257)));
    }
}
