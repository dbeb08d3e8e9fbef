//! One model call of a step: the request built from the run's history, streamed over
//! HTTP+SSE.
//!
//! Invariant: the request is a pure function of the run state (instructions, the prompt,
//! then every step's output items verbatim, each followed by the outputs of its calls in
//! the order the model made them; a steer applied before step N is a user message just
//! before step N's output; after a compaction: the prompt, the compaction output, the
//! host's frontier note, then the steps after it), so a resumed run sends what the crashed
//! one would have.

use agent_responses::types::{
    CreateResponse, FunctionCallOutput, FunctionTool, Input, Item, MessageItem, StreamEvent, Tool,
};
use agent_responses::{Client, ClientError};
use serde::Deserialize as _;
use serde_json::Value;

use super::state::{CallProgress, RunSpec, RunState, SteerStatus};

/// What the host tells the model after a compaction: where the run stands. A function of
/// the compaction record and the calls made before it (a compaction happens at a step
/// boundary, where every call has its result), so a resumed run writes the same note.
pub(crate) fn frontier_note(state: &RunState, c: &super::state::CompactionRecord) -> String {
    let steps = c.before_step.saturating_sub(1);
    let calls = state.elided.calls
        + state
            .calls
            .iter()
            .filter(|call| call.step < c.before_step)
            .count() as u64;
    let last_steer = state
        .steers
        .iter()
        .rev()
        .find(|s| c.covered_steers.contains(&s.id))
        .map(|s| format!(" The user's latest steer: \"{}\".", s.text))
        .unwrap_or_default();
    format!(
        "[agentctl frontier] The history above was compacted before step {}. Your task is the \
         first user message above. Done so far: {steps} model steps and {calls} tool calls, \
         each with its result; no call is pending.{last_steer}",
        c.before_step
    )
}

/// The request for the next step of `state`.
pub(crate) fn build_request(state: &RunState, spec: &RunSpec) -> Result<CreateResponse, String> {
    // After a compaction, the history before its step is its output, verbatim, between the
    // goal (the prompt, never left to the compaction) and the host's frontier note.
    let (mut items, from_step, covered) = match &state.compaction {
        Some(c) => {
            let mut items = vec![Item::Message(MessageItem::user(spec.prompt.clone()))];
            for raw in &c.output {
                items.push(
                    Item::deserialize(raw)
                        .map_err(|err| format!("unreadable compaction output: {err}"))?,
                );
            }
            items.push(Item::Message(MessageItem::user(frontier_note(state, c))));
            (items, c.before_step, c.covered_steers.as_slice())
        }
        None => (
            vec![Item::Message(MessageItem::user(spec.prompt.clone()))],
            1,
            &[][..],
        ),
    };
    let steers_before = |step: u64| {
        state
            .steers
            .iter()
            .filter(move |s| s.status == SteerStatus::Applied { step } && !covered.contains(&s.id))
            .map(|s| Item::Message(MessageItem::user(s.text.clone())))
    };
    // Calls are kept in the order they were made, so each step's calls are one run of
    // them: walk both lists together (linear in the history, not steps x calls).
    let mut calls = state.calls.iter().peekable();
    for step in state.steps.iter().filter(|s| s.step >= from_step) {
        items.extend(steers_before(step.step));
        for raw in &step.output {
            // Read from the folded value in place: no copy of the history per step.
            let item = Item::deserialize(raw)
                .map_err(|err| format!("step {}: unreadable output item: {err}", step.step))?;
            items.push(item);
        }
        while calls.peek().is_some_and(|c| c.step < step.step) {
            calls.next();
        }
        while let Some(call) = calls.next_if(|c| c.step == step.step) {
            if let CallProgress::Done(output) = &call.progress {
                items.push(Item::FunctionCallOutput(FunctionCallOutput::new(
                    call.call_id.clone(),
                    output.text.clone(),
                    None,
                )));
            }
        }
    }
    items.extend(steers_before(state.step_count() + 1));
    let tools = spec
        .tools
        .iter()
        .map(|t| {
            Tool::Function(FunctionTool::new(
                t.name.clone(),
                t.description.clone(),
                t.parameters.clone(),
            ))
        })
        .collect();
    let mut request = CreateResponse::new(spec.model.clone(), Input::Items(items));
    request.instructions = spec.instructions.clone().map(Some);
    request.tools = Some(tools);
    Ok(request)
}

/// What a streamed call came to.
pub(crate) enum Streamed {
    /// The response in full (completed or incomplete): its output is the step's.
    Response(Box<agent_responses::types::Response>),
    /// The API said no (after the client's retries), or the stream broke.
    Failed(ClientError),
}

/// Streams `body` (a [`CreateResponse`] encoded with `stream: true`), handing text deltas
/// to `on_text`.
pub(crate) async fn stream(
    client: &Client,
    body: bytes::Bytes,
    on_text: &(dyn Fn(&str) + Send + Sync),
) -> Streamed {
    // The text deltas and the final response are all a step uses: the other events (two of
    // them carrying the whole response) are not decoded.
    let mut events = match client.create_stream_encoded(body).await {
        Ok(events) => events.only(|kind| kind == "response.output_text.delta"),
        Err(err) => return Streamed::Failed(err),
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(StreamEvent::OutputTextDelta(delta)) => on_text(&delta.delta),
            Ok(
                StreamEvent::Completed(done)
                | StreamEvent::Incomplete(done)
                | StreamEvent::Failed(done),
            ) => {
                return Streamed::Response(Box::new(done.response));
            }
            Ok(_) => {}
            Err(err) => return Streamed::Failed(err),
        }
    }
    Streamed::Failed(ClientError::StreamEndedEarly)
}

/// Whether another attempt may succeed where this one failed.
pub(crate) fn retryable(err: &ClientError) -> bool {
    match err {
        ClientError::StreamEndedEarly
        | ClientError::StreamIdleTimeout(_)
        | ClientError::Transport(_)
        | ClientError::Connect(_)
        | ClientError::Timeout(_) => true,
        ClientError::Api(api) | ClientError::StreamError(api) => api
            .status
            .is_none_or(|s| s == 408 || s == 409 || s == 429 || s >= 500),
        _ => false,
    }
}

/// The `model.failed` payload fields of an error (the key never appears in them).
pub(crate) fn failure_fields(err: &ClientError) -> Value {
    let api = err.api();
    serde_json::json!({
        "status": api.and_then(|a| a.status),
        "error_type": api.and_then(|a| a.kind.clone()),
        "code": api.and_then(|a| a.code.clone()),
        "message": err.to_string(),
        "retryable": retryable(err),
    })
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
