//! One model call of a step, streamed over HTTP+SSE: what comes back and what the step
//! records of it. The request is [`super::step_request`]'s.

use agent_responses::types::StreamEvent;
use agent_responses::{Client, ClientError};
use serde_json::Value;

use super::events::ModelFailed;
use crate::tools::mask_key;

/// What a streamed call came to.
pub(crate) enum Streamed {
    /// The response in full (completed, incomplete or failed): its output is the step's.
    Response(Box<Final>),
    /// The API said no (after the client's retries), or the stream broke.
    Failed(ClientError),
}

/// What a step records of a finished response, read straight from the terminal event:
/// the output items stay JSON values, as the journal stores them and later requests send
/// them (a typed [`agent_responses::types::Response`] and back cost a sixth of the
/// host's CPU with a hundred runs).
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Final {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) status: Option<String>,
    #[serde(default)]
    pub(crate) output: Vec<Value>,
    #[serde(default)]
    pub(crate) usage: Option<Value>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
    #[serde(default)]
    pub(crate) incomplete_details: Option<Value>,
}

impl Final {
    /// The same fields of a typed response (the WebSocket transport's).
    pub(crate) fn from_response(
        response: &agent_responses::types::Response,
    ) -> Result<Self, ClientError> {
        serde_json::to_value(response)
            .and_then(serde_json::from_value)
            .map_err(|e| ClientError::Decode(e.to_string()))
    }

    /// Whether each output item reads as the typed item it claims to be. An item that
    /// does not would be journaled and sent back at every later step, to be refused each
    /// time; refused here, the attempt fails as undecodable and nothing is recorded.
    fn check_items(&self) -> Result<(), serde_json::Error> {
        use serde::Deserialize as _;
        for item in &self.output {
            agent_responses::types::Item::deserialize(item)?;
        }
        Ok(())
    }

    /// The response's `error` object, when it has one.
    /// Why an `incomplete` response stopped short (`max_output_tokens`, ...); `None` for
    /// any other status.
    pub(crate) fn incomplete_reason(&self) -> Option<String> {
        if self.status.as_deref() != Some("incomplete") {
            return None;
        }
        Some(
            self.incomplete_details
                .as_ref()
                .and_then(|d| d.get("reason"))
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_string(),
        )
    }

    pub(crate) fn error(&self) -> Option<&Value> {
        self.error.as_ref().filter(|e| e.is_object())
    }
}

/// Streams `body` (a request encoded with `stream: true`), handing text deltas
/// to `on_text`.
pub(crate) async fn stream(
    client: &Client,
    body: bytes::Bytes,
    on_text: &(dyn Fn(&str) + Send + Sync),
) -> Streamed {
    #[derive(serde::Deserialize)]
    struct Delta<'a> {
        #[serde(borrow)]
        delta: std::borrow::Cow<'a, str>,
    }
    #[derive(serde::Deserialize)]
    struct Terminal {
        response: Final,
    }
    const TEXT_DELTA: &str = "response.output_text.delta";
    // The text deltas and the final response are all a step uses: the other events (two of
    // them carrying the whole response) are not decoded.
    let mut events = match client.create_stream_encoded(body).await {
        Ok(events) => events.only(|kind| kind == TEXT_DELTA),
        Err(err) => return Streamed::Failed(err),
    };
    let decode_err = |e: serde_json::Error| Streamed::Failed(ClientError::Decode(e.to_string()));
    while let Some(event) = events.next_raw().await {
        let event = match event {
            Ok(event) => event,
            Err(err) => return Streamed::Failed(err),
        };
        match event.kind() {
            TEXT_DELTA => match serde_json::from_str::<Delta<'_>>(event.data()) {
                Ok(delta) => on_text(&delta.delta),
                Err(err) => return decode_err(err),
            },
            kind if StreamEvent::is_terminal_type(kind) => {
                let done = serde_json::from_str::<Terminal>(event.data())
                    .and_then(|done| done.response.check_items().map(|()| done.response));
                return match done {
                    Ok(done) => Streamed::Response(Box::new(done)),
                    Err(err) => decode_err(err),
                };
            }
            _ => {}
        }
    }
    Streamed::Failed(ClientError::StreamEndedEarly)
}

/// The `model.failed` payload fields of an error. The client never quotes the key, but a
/// server (or a proxy) may echo it in its message: masked.
pub(crate) fn failure(step: u64, attempt: u32, err: &ClientError) -> ModelFailed {
    let api = err.api();
    ModelFailed {
        step,
        attempt,
        status: api.and_then(|a| a.status),
        error_type: api.and_then(|a| a.kind.clone()),
        code: api.and_then(|a| a.code.clone()),
        message: mask_key(err.to_string()),
        error: None,
        retryable: err.is_retryable(),
        usage: None,
    }
}

/// The text of a step's assistant messages.
pub(crate) fn output_text(output: &[Value]) -> String {
    let mut text = String::new();
    for item in output {
        if item.get("type").and_then(Value::as_str) != Some("message") {
            continue;
        }
        match item.get("content") {
            Some(Value::String(s)) => text.push_str(s),
            Some(Value::Array(parts)) => {
                for part in parts {
                    if part.get("type").and_then(Value::as_str) == Some("output_text")
                        && let Some(t) = part.get("text").and_then(Value::as_str)
                    {
                        text.push_str(t);
                    }
                }
            }
            _ => {}
        }
    }
    text
}
