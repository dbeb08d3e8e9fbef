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

/// Where a held response waits for a steer: after event `index` of its stream, which is
/// the first text delta or a function call's `output_item.added`, whichever comes first,
/// wherever in the reply that item is (a reasoning item often comes before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Acceptance {
    /// The event after which the response waits.
    pub(super) index: usize,
    /// Whether it waits at a client tool call (the steer must then wait for its output).
    pub(super) is_call: bool,
}

/// The acceptance point of a response streamed as `events`; `None` when it has neither a
/// text delta nor a function call (it is then never held).
pub(super) fn acceptance_point(events: &[Value]) -> Option<Acceptance> {
    events
        .iter()
        .enumerate()
        .find_map(|(index, e)| match e.get("type").and_then(Value::as_str) {
            Some(TEXT_DELTA) => Some(Acceptance {
                index,
                is_call: false,
            }),
            Some("response.output_item.added")
                if e["item"].get("type").and_then(Value::as_str) == Some("function_call") =>
            {
                Some(Acceptance {
                    index,
                    is_call: true,
                })
            }
            _ => None,
        })
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
/// and its output (the items streamed before the message, then the partial message).
pub(super) struct SteeredParent {
    pub(super) events: Vec<Value>,
    pub(super) output: Vec<Value>,
}

/// Ends text response `id` at the text delta `events[at]`: the message it belongs to
/// becomes `incomplete` holding only the text streamed so far (and the parts before it),
/// the items before it stay as streamed, and the response ends `incomplete` with reason
/// `steered`.
pub(super) fn steered_parent(
    id: &str,
    request: &CreateResponse,
    output: &[Value],
    (events, at): (&[Value], usize),
    usage: Usage,
) -> SteeredParent {
    let delta = events.get(at).cloned().unwrap_or(Value::Null);
    let partial_text = delta["delta"].as_str().unwrap_or_default().to_owned();
    let index = delta["output_index"].as_u64().unwrap_or(0);
    let part = delta["content_index"]
        .as_u64()
        .and_then(|p| usize::try_from(p).ok())
        .unwrap_or(0);
    let position = usize::try_from(index).unwrap_or(usize::MAX);
    let mut partial = output.get(position).cloned().unwrap_or(Value::Null);
    let mut content: Vec<Value> = partial["content"]
        .as_array()
        .map(|parts| parts.iter().take(part).cloned().collect())
        .unwrap_or_default();
    content.push(json!({"type": "output_text", "text": partial_text, "annotations": []}));
    partial["status"] = json!("incomplete");
    partial["content"] = Value::Array(content);
    let item_id = partial.get("id").cloned().unwrap_or(Value::Null);
    let at = json!({"item_id": item_id, "output_index": index, "content_index": part});
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
        with(json!({"type": "response.content_part.done", "part": partial["content"][part]}));
    let item_done =
        json!({"type": "response.output_item.done", "output_index": index, "item": partial});
    let mut ended_output: Vec<Value> = output.iter().take(position).cloned().collect();
    ended_output.push(partial);
    let mut ended = response_object(id, request, "incomplete", ended_output.clone(), Some(usage));
    ended["incomplete_details"] = json!({"reason": "steered"});
    let incomplete = json!({"type": "response.incomplete", "response": ended});
    SteeredParent {
        events: vec![done_text, done_part, item_done, incomplete],
        output: ended_output,
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
