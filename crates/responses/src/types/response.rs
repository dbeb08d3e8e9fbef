//! The `Response` object and the compaction result (<https://platform.openai.com/docs/api-reference/responses/object>,
//! <https://developers.openai.com/api/reference/resources/responses/methods/compact>).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::item::{ContentPart, Item, MessageContent};
use super::tagged::{Nullable, nullable};

/// A response. `error`, `incomplete_details` and `usage` keep the difference between null and absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The response's id; `previous_response_id` of a follow-up names it.
    pub id: String,
    /// `completed`, `incomplete`, `failed`, `in_progress` or `queued`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The items the model produced, in order.
    #[serde(default)]
    pub output: Vec<Item>,
    /// Why the response failed, when `status` is `failed`.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub error: Nullable<ResponseError>,
    /// Why the response stopped early, when `status` is `incomplete` (e.g. `{"reason":"steered"}`).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub incomplete_details: Nullable<Value>,
    /// Tokens used; absent on responses still in progress.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub usage: Nullable<Usage>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Response {
    /// Whether `status == "completed"`.
    pub fn is_completed(&self) -> bool {
        self.status.as_deref() == Some("completed")
    }
    /// Concatenation of every `output_text` part of every message (the SDK's `output_text`).
    pub fn output_text(&self) -> String {
        self.message_lines().join("")
    }
    /// One line per `output_text` part, and `REFUSAL: ...` per refusal, as `agentctl api` prints them.
    pub fn message_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for item in &self.output {
            let Item::Message(m) = item else { continue };
            match &m.content {
                MessageContent::Text(t) => lines.push(t.clone()),
                MessageContent::Parts(parts) => {
                    for part in parts {
                        match part {
                            ContentPart::OutputText(p) => lines.push(p.text.clone()),
                            ContentPart::Refusal(r) => {
                                lines.push(format!("REFUSAL: {}", r.refusal))
                            }
                            ContentPart::InputText(_)
                            | ContentPart::ReasoningText(_)
                            | ContentPart::SummaryText(_)
                            | ContentPart::Other(_) => {}
                        }
                    }
                }
            }
        }
        lines
    }
    /// The response's error, when set.
    pub fn error(&self) -> Option<&ResponseError> {
        self.error.as_ref().and_then(Option::as_ref)
    }
}

/// `Response.error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseError {
    /// A machine-readable reason, e.g. `server_error`.
    #[serde(default)]
    pub code: Option<String>,
    /// What went wrong, for people.
    #[serde(default)]
    pub message: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Token usage; details objects are kept in `extra`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens the model read (the whole context).
    pub input_tokens: u64,
    /// Tokens the model wrote.
    pub output_tokens: u64,
    /// `input_tokens + output_tokens`.
    pub total_tokens: u64,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Usage {
    /// Usage with the full detail objects the SDK 3.57 requires.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        let mut extra = Map::new();
        extra.insert(
            "input_tokens_details".into(),
            serde_json::json!({"cached_tokens": 0, "cache_write_tokens": 0}),
        );
        extra.insert(
            "output_tokens_details".into(),
            serde_json::json!({"reasoning_tokens": 0}),
        );
        Self {
            input_tokens,
            output_tokens,
            total_tokens: input_tokens + output_tokens,
            extra,
        }
    }
}

/// `POST /responses/compact` result (`object: "response.compaction"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactedResponse {
    /// The compaction's id.
    pub id: String,
    /// The items that replace the compacted conversation; sent back whole as the next input.
    #[serde(default)]
    pub output: Vec<Item>,
    /// Tokens the compaction used.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub usage: Nullable<Usage>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
