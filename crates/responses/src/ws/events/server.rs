//! Server events: one type for every frame the server sends, unknown ones kept verbatim.

use serde_json::{Map, Value};

use super::SteerEvent;
use crate::types::{ResponseEvent, StreamEvent};

/// One server event of a WebSocket session.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// A streaming event as HTTP mode has it, or an unknown event kept verbatim (`StreamEvent::Other`).
    Stream(StreamEvent),
    /// One of the three steering events.
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
