//! What a steered response turns into, as pure functions of what was streamed so far.
//!
//! A steered text response ends `incomplete` (`reason: steered`) at the text it had sent,
//! and an automatic successor continues from there with the steering input; a steered
//! function call completes and the steer waits (`response.steer.pending`) for the call's
//! output. These functions build those events and the successor; the session sends them.

use agent_responses::types::{CreateResponse, Input, Item, Usage};
use agent_responses::ws::events::SteerInput;
use serde_json::{Value, json};

use super::Job;
use super::reply::{message_json, reply_text};
use crate::respond::{finish_item, response_object};

const TEXT_DELTA: &str = "response.output_text.delta";

/// Whether the response's output is a client tool call (the steer must then wait for it).
pub(super) fn is_function_call(output: &[Value]) -> bool {
    output
        .first()
        .and_then(|o| o.get("type"))
        .and_then(Value::as_str)
        == Some("function_call")
}

/// The index of the event after which a fresh response waits for a steer: right after a
/// function call's `output_item.added`, or after the first text delta.
pub(super) fn acceptance_point(events: &[Value], is_call: bool) -> Option<usize> {
    if is_call {
        Some(2)
    } else {
        events
            .iter()
            .position(|e| e.get("type").and_then(Value::as_str) == Some(TEXT_DELTA))
    }
}

/// `response.steer.accepted` for the steer `steer_id` on response `parent`.
pub(super) fn accepted_event(steer_id: &str, parent: &str) -> Value {
    json!({"type": "response.steer.accepted",
        "steer": {"id": steer_id, "previous_response_id": parent}})
}

/// `response.steer.pending`: the steer waits until the client sends `required`.
pub(super) fn pending_event(steer_id: &str, parent: &str, required: &[Value]) -> Value {
    json!({"type": "response.steer.pending",
        "steer": {"id": steer_id, "previous_response_id": parent},
        "reason": "waiting_for_required_input", "required_input": required})
}

/// `response.steer.failed` with `successor_creation_failed`: the parent ended, no successor.
pub(super) fn successor_failed_event(steer_id: &str, parent: &str, input: &SteerInput) -> Value {
    json!({"type": "response.steer.failed",
        "steer": {"id": steer_id, "previous_response_id": parent, "input": input},
        "error": {"type": "invalid_request_error", "code": "successor_creation_failed",
                  "message": "The steered response's successor could not be created."}})
}

/// The `required_input` stubs of a steered response that stopped for its tool calls: one
/// `function_call_output` per `function_call` in `output`.
pub(super) fn required_input(output: &[Value]) -> Vec<Value> {
    output
        .iter()
        .filter(|o| o.get("type").and_then(Value::as_str) == Some("function_call"))
        .map(
            |o| json!({"type": "function_call_output", "call_id": o["call_id"], "name": o["name"]}),
        )
        .collect()
}

/// A text response cut short by a steer: the events that end it, in sending order
/// (`output_text.done`, `content_part.done`, `output_item.done`, `response.incomplete`),
/// and its partial message item.
pub(super) struct SteeredParent {
    pub(super) events: Vec<Value>,
    pub(super) partial: Value,
}

/// Ends text response `id` at the first text delta it streamed (`events`): the message
/// item becomes `incomplete` holding only that text, and the response `incomplete` with
/// reason `steered`.
pub(super) fn steered_parent(
    id: &str,
    request: &CreateResponse,
    output: &[Value],
    events: &[Value],
    usage: Usage,
) -> SteeredParent {
    let partial_text = events
        .iter()
        .find(|e| e.get("type").and_then(Value::as_str) == Some(TEXT_DELTA))
        .and_then(|e| e.get("delta"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut partial = output.first().cloned().unwrap_or(Value::Null);
    partial["status"] = json!("incomplete");
    partial["content"] = json!([{"type": "output_text", "text": partial_text, "annotations": []}]);
    let item_id = partial.get("id").cloned().unwrap_or(Value::Null);
    let at = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
    let with = |extra: Value| {
        let mut e = at.clone();
        if let (Value::Object(e), Value::Object(x)) = (&mut e, extra) {
            e.extend(x);
        }
        e
    };
    let done_text =
        with(json!({"type": "response.output_text.done", "text": partial_text, "logprobs": []}));
    let done_part =
        with(json!({"type": "response.content_part.done", "part": partial["content"][0]}));
    let item_done =
        json!({"type": "response.output_item.done", "output_index": 0, "item": partial});
    let mut ended = response_object(
        id,
        request,
        "incomplete",
        vec![partial.clone()],
        Some(usage),
    );
    ended["incomplete_details"] = json!({"reason": "steered"});
    let incomplete = json!({"type": "response.incomplete", "response": ended});
    SteeredParent {
        events: vec![done_text, done_part, item_done, incomplete],
        partial,
    }
}

/// The automatic successor of steered response `parent_id`: the same settings, the queued
/// steering input as its input, and an answer that says the steer was applied (with the
/// parent's latency).
pub(super) fn successor(
    parent_id: &str,
    request: CreateResponse,
    (parent_chain, parent_context): (std::sync::Arc<crate::chain::Chain>, Vec<Item>),
    steer: &SteerInput,
    lane: Option<String>,
    latency: crate::Latency,
) -> Job {
    let steer_items = steer.to_items();
    let mut successor_request = request;
    successor_request.previous_response_id = Some(Some(parent_id.to_owned()));
    successor_request.input = Some(Input::Items(steer_items.clone()));
    let mut successor_context = parent_context;
    successor_context.extend(steer_items);
    let text = reply_text(&successor_context, Some(&steer.text()));
    let output = vec![finish_item(&message_json(&text))];
    Job {
        request: successor_request,
        base: Some(parent_chain),
        context: successor_context,
        output,
        lane,
        status: "completed".into(),
        hold: None,
        fault: None,
        delta_chars: None,
        text_deltas: true,
        latency,
    }
}
