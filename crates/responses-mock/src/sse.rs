//! The event sequence of a streamed response, in the API's order:
//! `created`, `in_progress`, then per item `output_item.added` -> content/argument events ->
//! `output_item.done`, then the terminal event carrying the final response with usage.
//! `sequence_number` starts at 0 and increases by one.

use serde_json::{Value, json};

/// Most deltas the default delta size streams one text in; a longer text gets longer
/// deltas (see [`default_delta_chars`]).
const MAX_DELTAS: usize = 256;

/// Most deltas a script's own delta size streams one text in (see
/// [`scripted_delta_chars`]). Every event is built before the first is sent, so this
/// bounds a response's events whatever the script says: a 1 MB `{{last_user}}` echo in
/// 1-character deltas was a million events and over a GB.
pub const MAX_SCRIPTED_DELTAS: usize = 4096;

/// Splits `text` into deltas of at most `chars` characters (at least one delta).
fn deltas(text: &str, chars: usize) -> Vec<String> {
    let chars = chars.max(1);
    let all: Vec<char> = text.chars().collect();
    if all.is_empty() {
        return vec![String::new()];
    }
    all.chunks(chars).map(|c| c.iter().collect()).collect()
}

/// The characters of the longest text `response` streams as deltas.
fn longest_streamed(response: &Value) -> usize {
    response["output"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|item| {
            let parts = item["content"].as_array().into_iter().flatten();
            let texts = parts.filter_map(|part| part["text"].as_str().or(part["refusal"].as_str()));
            let own = ["arguments", "input", "code"]
                .into_iter()
                .filter_map(|field| item[field].as_str());
            texts.chain(own).map(|text| text.chars().count())
        })
        .max()
        .unwrap_or(0)
}

/// The delta size for a reply whose script does not set one: `base`, or larger when the
/// longest streamed text would need more than `MAX_DELTAS` deltas. Every event is built
/// before the first is sent, so a 2 MB echo in 8-character deltas was 250k events and
/// hundreds of MB.
pub fn default_delta_chars(response: &Value, base: usize) -> usize {
    base.max(1)
        .max(longest_streamed(response).div_ceil(MAX_DELTAS))
}

/// The delta size for a reply whose script sets `chars`: exactly that, unless the longest
/// streamed text would need more than [`MAX_SCRIPTED_DELTAS`] deltas, which it is then
/// streamed in.
pub fn scripted_delta_chars(response: &Value, chars: usize) -> usize {
    chars
        .max(1)
        .max(longest_streamed(response).div_ceil(MAX_SCRIPTED_DELTAS))
}

/// Every event (as JSON) for `response` (the final object) with terminal `status`; without
/// `text_deltas`, no `response.output_text.delta` (the text is in the `.done` events).
pub fn events(response: &Value, delta_chars: usize, text_deltas: bool) -> Vec<Value> {
    let mut out = Vec::new();
    let mut seq = 0u64;
    let mut push = |mut event: Value, out: &mut Vec<Value>| {
        if let Value::Object(map) = &mut event {
            map.insert("sequence_number".into(), json!(seq));
        }
        seq += 1;
        out.push(event);
    };
    let mut start = response.clone();
    if let Value::Object(map) = &mut start {
        map.insert("status".into(), json!("in_progress"));
        map.insert("output".into(), json!([]));
        map.insert("usage".into(), Value::Null);
        map.insert("completed_at".into(), Value::Null);
        map.insert("error".into(), Value::Null);
        map.insert("incomplete_details".into(), Value::Null);
    }
    push(
        json!({"type": "response.created", "response": start}),
        &mut out,
    );
    push(
        json!({"type": "response.in_progress", "response": start}),
        &mut out,
    );
    let items = response
        .get("output")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (index, item) in items.iter().enumerate() {
        let id = item.get("id").cloned().unwrap_or(Value::Null);
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        let mut added = item.clone();
        if let Value::Object(map) = &mut added {
            if map.contains_key("status") {
                map.insert("status".into(), json!("in_progress"));
            }
            match kind {
                "message" => {
                    map.insert("content".into(), json!([]));
                    map.insert("status".into(), json!("in_progress"));
                }
                "function_call" => {
                    map.insert("arguments".into(), json!(""));
                }
                "custom_tool_call" => {
                    map.insert("input".into(), json!(""));
                }
                "reasoning" => {
                    map.insert("summary".into(), json!([]));
                }
                _ => {}
            }
        }
        push(
            json!({"type": "response.output_item.added", "output_index": index, "item": added}),
            &mut out,
        );
        match kind {
            "message" => {
                let parts = item
                    .get("content")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (ci, part) in parts.iter().enumerate() {
                    let ptype = part.get("type").and_then(Value::as_str).unwrap_or("");
                    let mut empty = part.clone();
                    if let Value::Object(p) = &mut empty {
                        if p.contains_key("text") {
                            p.insert("text".into(), json!(""));
                        }
                        if p.contains_key("refusal") {
                            p.insert("refusal".into(), json!(""));
                        }
                    }
                    let base = json!({"item_id": id, "output_index": index, "content_index": ci});
                    let with = |extra: Value| {
                        let mut e = base.clone();
                        if let (Value::Object(e), Value::Object(x)) = (&mut e, extra) {
                            e.extend(x);
                        }
                        e
                    };
                    push(
                        with(json!({"type": "response.content_part.added", "part": empty})),
                        &mut out,
                    );
                    if ptype == "output_text" {
                        let text = part.get("text").and_then(Value::as_str).unwrap_or("");
                        let streamed = if text_deltas {
                            deltas(text, delta_chars)
                        } else {
                            Vec::new()
                        };
                        for d in streamed {
                            push(
                                with(
                                    json!({"type": "response.output_text.delta", "delta": d, "logprobs": []}),
                                ),
                                &mut out,
                            );
                        }
                        push(
                            with(
                                json!({"type": "response.output_text.done", "text": text, "logprobs": []}),
                            ),
                            &mut out,
                        );
                    } else if ptype == "refusal" {
                        let text = part.get("refusal").and_then(Value::as_str).unwrap_or("");
                        for d in deltas(text, delta_chars) {
                            push(
                                with(json!({"type": "response.refusal.delta", "delta": d})),
                                &mut out,
                            );
                        }
                        push(
                            with(json!({"type": "response.refusal.done", "refusal": text})),
                            &mut out,
                        );
                    }
                    push(
                        with(json!({"type": "response.content_part.done", "part": part})),
                        &mut out,
                    );
                }
            }
            "function_call" => {
                let args = item.get("arguments").and_then(Value::as_str).unwrap_or("");
                for d in deltas(args, delta_chars) {
                    push(
                        json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": d}),
                        &mut out,
                    );
                }
                push(
                    json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": index, "arguments": args}),
                    &mut out,
                );
            }
            "custom_tool_call" => {
                let input = item.get("input").and_then(Value::as_str).unwrap_or("");
                for d in deltas(input, delta_chars) {
                    push(
                        json!({"type": "response.custom_tool_call_input.delta", "item_id": id, "output_index": index, "delta": d}),
                        &mut out,
                    );
                }
                push(
                    json!({"type": "response.custom_tool_call_input.done", "item_id": id, "output_index": index, "input": input}),
                    &mut out,
                );
            }
            _ => {}
        }
        push(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
            &mut out,
        );
    }
    let terminal = match response.get("status").and_then(Value::as_str) {
        Some("failed") => "response.failed",
        Some("incomplete") => "response.incomplete",
        _ => "response.completed",
    };
    push(json!({"type": terminal, "response": response}), &mut out);
    out
}

/// One SSE frame: `event: <type>` and one `data:` line.
pub fn frame(event: &Value) -> String {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    format!("event: {kind}\ndata: {event}\n\n")
}

/// An `error` event: `nested` (the real API's shape) or flat (the SDK's typed shape).
pub fn error_event(sequence_number: u64, nested: bool) -> Value {
    if nested {
        json!({"type": "error", "sequence_number": sequence_number,
               "error": {"type": "server_error", "code": "server_error", "message": "The emulator was scripted to fail this stream.", "param": null}})
    } else {
        json!({"type": "error", "sequence_number": sequence_number, "code": "server_error",
               "message": "The emulator was scripted to fail this stream.", "param": null})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_delta_size_grows_only_for_long_texts() {
        let reply = |text: &str| json!({"output": [{"content": [{"text": text}]}]});
        assert_eq!(default_delta_chars(&reply("short"), 8), 8);
        let long = "x".repeat(100_000);
        let chars = default_delta_chars(&reply(&long), 8);
        assert!(deltas(&long, chars).len() <= MAX_DELTAS, "{chars}");
        assert_eq!(deltas(&long, chars).concat(), long);
        assert_eq!(deltas("abcdefghij", 4), ["abcd", "efgh", "ij"]);
    }

    #[test]
    fn a_scripted_delta_size_is_kept_unless_it_makes_too_many_deltas() {
        let reply = |text: &str| json!({"output": [{"content": [{"text": text}]}]});
        assert_eq!(scripted_delta_chars(&reply("short"), 1), 1);
        assert_eq!(scripted_delta_chars(&reply(&"x".repeat(4096)), 1), 1);
        let long = "x".repeat(1_000_000);
        let response = json!({"output": [{"type": "message", "id": "m",
            "content": [{"type": "output_text", "text": long}]}]});
        let chars = scripted_delta_chars(&response, 1);
        let streamed = events(&response, chars, true);
        let count = streamed
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .count();
        assert!(count <= MAX_SCRIPTED_DELTAS, "{count} deltas");
        let text: String = streamed
            .iter()
            .filter_map(|e| e["delta"].as_str())
            .collect();
        assert_eq!(text, long);
        // A refusal counts too.
        let refusal = json!({"output": [{"content": [{"refusal": long}]}]});
        assert!(scripted_delta_chars(&refusal, 1) > 1);
    }

    #[test]
    fn a_reply_without_text_deltas_carries_its_text_in_the_done_events_alone() {
        let response = json!({"id": "resp_1", "status": "completed", "output": [
            {"type": "message", "id": "msg_1", "content": [{"type": "output_text", "text": "the answer"}]}
        ]});
        let kinds = |text_deltas| -> Vec<String> {
            events(&response, 4, text_deltas)
                .iter()
                .map(|e| e["type"].as_str().unwrap_or("").to_string())
                .collect()
        };
        let with = kinds(true);
        assert_eq!(
            with.iter()
                .filter(|k| *k == "response.output_text.delta")
                .count(),
            3
        );
        let without = kinds(false);
        let dropped: Vec<String> = with
            .into_iter()
            .filter(|k| k != "response.output_text.delta")
            .collect();
        assert_eq!(without, dropped);
        let stream = events(&response, 4, false);
        let done = stream
            .iter()
            .find(|e| e["type"] == "response.output_text.done")
            .map(|e| e["text"].clone());
        assert_eq!(done, Some(json!("the answer")));
        // Numbered with no gap where the deltas would have been.
        for (n, event) in stream.iter().enumerate() {
            assert_eq!(event["sequence_number"], json!(n));
        }
    }
}
