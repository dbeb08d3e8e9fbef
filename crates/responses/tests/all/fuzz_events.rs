//! Fuzz target `events`: decoding what the Responses API sends, past the SSE framing (the
//! `sse` target): stream events in SSE `data` (`decode_frame`), WebSocket server events
//! (`ServerEvent::from_json`), the client frames the emulator reads
//! (`ClientEvent::from_json`), and HTTP error bodies (`ApiError::from_body`).
//!
//! Properties, on JSON-RPC-less JSON (event-shaped objects with fields of any type, JSON
//! soup, deep nesting, lone surrogates, huge numbers), the corpus
//! `fixtures/fuzz/events/*.json`, and the `data` of the recorded emulator streams in
//! `fixtures/fuzz/sse/`:
//! 1. No panic, bounded time, and no amplification: what is written back is at most twice
//!    the input plus a little.
//! 2. Round trips: a decoded stream event serialises to the same JSON value it was read
//!    from (unknown types and fields kept); a decoded server or client event reads back as
//!    itself from its own `to_json`.
//! 3. An HTTP error body gives an `ApiError` whose message is the body's, or at most 500
//!    characters of the raw body.

use std::time::{Duration, Instant};

use agent_fuzzkit::{
    config, corpus, corpus_dir, json_text, json_value, keep_if_failing, nasty_json, within,
};
use agent_responses::ApiError;
use agent_responses::sse::{Decoded, SseFrame, decode_frame};
use agent_responses::ws::{ClientEvent, ServerEvent};
use proptest::prelude::*;
use serde_json::Value;

const TARGET: &str = "events";
const BOUND: Duration = Duration::from_secs(5);

fn check(text: &str) -> Result<(), TestCaseError> {
    let start = Instant::now();
    let original: Option<Value> = serde_json::from_str(text).ok();
    let bound = 2 * text.len() + 64;

    // SSE data.
    let frame = SseFrame {
        event: None,
        data: text.to_owned(),
        id: None,
    };
    if let Ok(Decoded::Event(event)) = decode_frame(&frame) {
        let _ = (
            event.sequence_number(),
            event.is_terminal(),
            event.type_name(),
        );
        let _ = agent_responses::sse::error_detail(&event);
        let back = serde_json::to_string(&event).unwrap();
        prop_assert!(
            back.len() <= bound,
            "{} bytes from {}",
            back.len(),
            text.len()
        );
        prop_assert_eq!(
            Some(without_nulls(serde_json::from_str::<Value>(&back).unwrap())),
            original.clone().map(without_nulls)
        );
    }

    // WebSocket server events.
    if let Ok(event) = ServerEvent::from_json(text) {
        let _ = (
            event.type_name(),
            event.stream_id(),
            event.error_status(),
            event.lifecycle(),
        );
        let back = event.to_json().unwrap();
        prop_assert!(
            back.len() <= bound,
            "{} bytes from {}",
            back.len(),
            text.len()
        );
        if let ServerEvent::Stream(_) = event {
            // Steering events are typed structs (absent optional fields come back as
            // `null`); stream events keep what they were sent verbatim.
            prop_assert_eq!(
                Some(without_nulls(serde_json::from_str::<Value>(&back).unwrap())),
                original.clone().map(without_nulls)
            );
        }
        prop_assert_eq!(ServerEvent::from_json(&back).ok(), Some(event));
    }

    // Client frames (what the emulator reads).
    if let Ok(event) = ClientEvent::from_json(text) {
        let back = event.to_json().unwrap();
        prop_assert!(
            back.len() <= bound,
            "{} bytes from {}",
            back.len(),
            text.len()
        );
        prop_assert_eq!(ClientEvent::from_json(&back), Ok(event));
    }

    // HTTP error bodies.
    let error = ApiError::from_body(400, text.as_bytes(), None);
    let from_body = original
        .as_ref()
        .and_then(|v| v.get("error").unwrap_or(v).get("message"))
        .is_some_and(Value::is_string);
    if !from_body {
        prop_assert!(error.message.chars().count() <= 500);
    }
    prop_assert!(error.to_string().len() <= bound + 1024);
    within(start, BOUND, "decoding")
}

/// `value` with every `null` object member removed: an optional field sent as `null` and
/// one left out mean the same, and a typed event writes it back left out.
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

// ---- generators ----

fn event_type() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(vec![
            "response.created", "response.in_progress", "response.completed",
            "response.failed", "response.incomplete", "response.queued",
            "response.output_item.added", "response.output_item.done",
            "response.content_part.added", "response.output_text.delta",
            "response.output_text.done", "response.function_call_arguments.delta",
            "response.function_call_arguments.done", "response.refusal.done",
            "response.reasoning_summary_text.delta", "response.compaction.compacting", "error",
            "response.steer.accepted", "response.steer.pending", "response.steer.failed",
            "response.steer.", "response.create", "response.steer", "message", "function_call",
        ])
        .prop_map(str::to_owned),
        1 => agent_fuzzkit::json_string(),
    ]
}

fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec![
            "response", "item", "item_id", "output_index", "content_index", "delta", "text",
            "arguments", "sequence_number", "part", "error", "code", "message", "param",
            "status", "stream_id", "steer", "required_input", "input", "model", "generate",
            "previous_response_id", "tools", "id", "output", "call_id", "name", "role",
            "content", "type",
        ])
        .prop_map(str::to_owned),
        1 => agent_fuzzkit::json_string(),
    ]
}

/// An event-shaped object: a known `type`, then known fields holding values of any type,
/// sometimes objects that are themselves event-shaped (a response, an item).
fn event_json() -> impl Strategy<Value = String> {
    let inner = (
        event_type(),
        prop::collection::vec((field(), json_value()), 0..5),
    )
        .prop_map(|(kind, fields)| {
            let mut map: serde_json::Map<String, Value> = fields.into_iter().collect();
            map.insert("type".into(), Value::String(kind));
            Value::Object(map)
        });
    (
        event_type(),
        prop::collection::vec((field(), prop_oneof![json_value(), inner]), 0..8),
    )
        .prop_map(|(kind, fields)| {
            let mut map = serde_json::Map::new();
            map.insert("type".into(), Value::String(kind));
            map.extend(fields);
            Value::Object(map).to_string()
        })
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn event_shaped_json_decodes_and_round_trips(text in event_json()) {
        keep_if_failing("shaped", "json", text.as_bytes(), check(&text))?;
    }

    #[test]
    fn any_json_text_decodes_or_errs(text in json_text()) {
        keep_if_failing("text", "json", text.as_bytes(), check(&text))?;
    }
}

#[test]
fn corpus_replays() {
    for (name, bytes) in corpus(TARGET, 5) {
        check(&String::from_utf8_lossy(&bytes)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // Every `data` line of the recorded emulator streams.
    let sse = corpus_dir("sse");
    let mut lines = 0;
    for entry in std::fs::read_dir(&sse).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("emulator-")
        {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            if let Some(data) = line.strip_prefix("data: ") {
                check(data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                lines += 1;
            }
        }
    }
    assert!(lines > 20, "recorded streams missing in {}", sse.display());
    for text in nasty_json() {
        check(&text).unwrap_or_else(|e| panic!("{text:.40}: {e}"));
    }
}
