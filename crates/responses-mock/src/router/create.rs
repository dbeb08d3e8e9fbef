//! `POST /v1/responses`: validate, pick the script's reply, store, then answer as JSON or
//! stream it as SSE (with the script's faults).

use std::sync::Arc;
use std::time::Duration;

use agent_responses::types::{CreateResponse, Item, Usage};
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::Value;
use tokio::time::Instant;

use super::replies::{base_headers, error_reply};
use super::state::{AppState, Stored, lock};
use crate::chain::Chain;
use crate::respond::{new_id, response_object, tokens};
use crate::script::{
    Fault, FaultKind, Latency, Rendered, Reply, RequestView, ScriptEndpoint, input_items,
};
use crate::sse;
use crate::validate::{ApiFailure, check_auth, check_input_types};

/// What a valid `POST /v1/responses` gets: a JSON response, or one to stream as SSE.
pub(super) enum Created {
    /// Sent `latency` after the request came.
    Json { response: Value, latency: Duration },
    Stream {
        response: Value,
        fault: Option<Fault>,
        delta_chars: usize,
        text_deltas: bool,
        latency: Latency,
    },
}

pub(super) fn create_inner(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Created, ApiFailure> {
    check_auth(headers, state.api_key.as_deref())?;
    state.record(&Method::POST, "/v1/responses", headers, body);
    let request: CreateResponse = serde_json::from_slice(body)
        .map_err(|e| super::typed::explain(body, &e, super::typed::CREATE_FIELDS))?;
    if request.model.trim().is_empty() {
        return Err(ApiFailure::invalid(
            "Missing required parameter: 'model'.",
            Some("model"),
            Some("missing_required_parameter"),
        ));
    }
    check_input_types(request.input.as_ref())?;
    crate::text_format::check(&request)?;
    crate::function_tools::check(&request)?;
    let (base, mut context) = state.context_of(request.previous_response_id())?;
    context.extend(input_items(request.input.as_ref()));
    state.check(&context)?;
    let body_text = String::from_utf8_lossy(body);
    let view = RequestView {
        endpoint: ScriptEndpoint::Responses,
        body_text: &body_text,
        items: &context,
        stream: request.is_stream(),
        previous_response: request.previous_response_id().is_some(),
        text_format: crate::text_format::format_type(&request),
    };
    let rule = state.pick(&view);
    let latency = state.latency_of(rule.as_ref());
    let (reply, fault) = rule
        .map(|rule| (rule.reply, rule.fault))
        .unwrap_or((Reply::Echo { echo: true }, None));
    let Rendered {
        output,
        status,
        delta_chars,
        text_deltas,
    } = reply
        .render_for(&context)
        .map_err(|error| error_reply(&error))?;
    let output_tokens = tokens(&Value::Array(output.clone()).to_string());
    let usage = Usage::new(tokens(&body_text), output_tokens);
    let id = new_id("resp");
    let response = response_object(&id, &request, &status, output.clone(), Some(usage));
    let output_items: Vec<Item> = output
        .iter()
        .filter_map(|v| serde_json::from_value(v.clone()).ok())
        .collect();
    state.remember_issued(&output_items);
    if request.store() {
        context.extend(output_items);
        lock(&state.store).insert(
            id,
            Stored {
                response: response.clone(),
                context: Chain::after(base.as_ref(), context),
            },
        );
    }
    // A script's own delta size is kept unless it makes more than
    // `MAX_SCRIPTED_DELTAS` deltas; the default one grows for long texts.
    let delta_chars = match delta_chars {
        Some(chars) => sse::scripted_delta_chars(&response, chars),
        None => sse::default_delta_chars(&response, state.delta_chars),
    };
    if request.is_stream() {
        Ok(Created::Stream {
            response,
            fault,
            delta_chars,
            text_deltas,
            latency,
        })
    } else {
        let latency = json_delay(&latency, &response, delta_chars, text_deltas);
        Ok(Created::Json { response, latency })
    }
}

/// When a JSON (non-streamed) reply of `response` is sent: when its last token would have
/// been, streamed (the stream's last event is due then), so both count the tokens of the
/// same text: the text and arguments deltas, not the serialized output around them.
pub(super) fn json_delay(
    latency: &Latency,
    response: &Value,
    delta_chars: usize,
    text_deltas: bool,
) -> Duration {
    if latency.is_none() {
        return Duration::ZERO;
    }
    latency
        .schedule(&sse::events(response, delta_chars, text_deltas))
        .last()
        .copied()
        .unwrap_or_else(|| latency.total(0))
}

pub(super) fn stream_body(
    state: &Arc<AppState>,
    response: &Value,
    fault: Option<Fault>,
    (delta_chars, text_deltas): (usize, bool),
    latency: Latency,
    started: Instant,
) -> Response {
    let events = sse::events(response, delta_chars, text_deltas);
    if fault.is_none() && latency.is_none() {
        // Nothing to interleave: every event is ready, so the stream goes out as one body
        // (one write for the server, one read for the client), as a server with no
        // generation latency between events would send it. Clients still see a valid SSE
        // stream and decode it event by event.
        let mut body = String::new();
        for event in &events {
            body.push_str(&sse::frame(event));
        }
        return sse_response(Body::from(body));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let gate = fault
        .as_ref()
        .and_then(|f| f.gate.as_deref())
        .map(|name| state.gate(name));
    let due = latency.schedule(&events);
    tokio::spawn(async move {
        for (index, event) in events.iter().enumerate() {
            if let Some(at) = due.get(index) {
                tokio::time::sleep_until(crate::latency::deadline(started, *at)).await;
            }
            if let Some(fault) = fault.as_ref().filter(|f| f.after_events == index) {
                match fault.kind {
                    FaultKind::Cut => {
                        // Half of the next frame, then the body ends: the client sees a
                        // stream cut inside an event (an abort could drop buffered frames).
                        let frame = sse::frame(event);
                        let half = frame.len() / 2;
                        let cut = (0..=half)
                            .rev()
                            .find(|i| frame.is_char_boundary(*i))
                            .unwrap_or(0);
                        let _ = tx
                            .send(Ok(Bytes::copy_from_slice(&frame.as_bytes()[..cut])))
                            .await;
                        return;
                    }
                    FaultKind::Stall => {
                        tx.closed().await;
                        return;
                    }
                    FaultKind::KeepAlive => {
                        let every = fault.keep_alive_every();
                        loop {
                            tokio::time::sleep(every).await;
                            let comment = Bytes::from_static(b": keep-alive\n\n");
                            if tx.send(Ok(comment)).await.is_err() {
                                return;
                            }
                        }
                    }
                    FaultKind::Gate => {
                        if let Some(gate) = &gate {
                            gate.notified().await;
                        }
                    }
                    FaultKind::ErrorEvent => {
                        let nested = fault.shape.as_deref() != Some("flat");
                        let frame = sse::frame(&sse::error_event(index as u64, nested));
                        let _ = tx.send(Ok(Bytes::from(frame))).await;
                        return;
                    }
                }
            }
            if tx.send(Ok(Bytes::from(sse::frame(event)))).await.is_err() {
                return;
            }
        }
    });
    sse_response(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ))
}

fn sse_response(body: Body) -> Response {
    base_headers(Response::builder())
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A reply with 400 characters of text (100 tokens) and a call with 40 characters of
    /// arguments (10 tokens), at 1 token a second after a first token at 300 ms.
    #[test]
    fn a_json_reply_waits_for_the_same_tokens_as_the_same_reply_streamed() {
        let latency = Latency {
            first_token_ms: 300,
            tokens_per_second: Some(1.0),
        };
        let response = json!({
            "id": "resp_1", "object": "response", "status": "completed",
            "output": [
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "abcd".repeat(100), "annotations": []}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "scan",
                 "arguments": "{\"a\": 123456789012345678901234567890123}", "status": "completed"}
            ]
        });
        let chars = sse::default_delta_chars(&response, 8);
        let streamed = *latency
            .schedule(&sse::events(&response, chars, true))
            .last()
            .unwrap();
        let json = json_delay(&latency, &response, chars, true);
        assert_eq!(json, streamed);
        assert_eq!(json, Duration::from_millis(300 + 110_000));
        // Without text deltas the stream sends the text in its `.done` events, at once.
        let json = json_delay(&latency, &response, chars, false);
        assert_eq!(
            json,
            *latency
                .schedule(&sse::events(&response, chars, false))
                .last()
                .unwrap()
        );
        assert_eq!(
            json_delay(&Latency::default(), &response, chars, true),
            Duration::ZERO
        );
    }
}
