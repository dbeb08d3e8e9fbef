//! Building response objects: ids, item defaults, request echo, usage.

use std::sync::atomic::{AtomicU64, Ordering};

use agent_responses::types::{CreateResponse, Usage};
use serde_json::{Map, Value, json};

static COUNTER: AtomicU64 = AtomicU64::new(1);

/// A fresh id with the API's prefix (`resp`, `msg`, `fc`, `rs`, `cmp`, `prog`, `req`, ...).
pub(crate) fn new_id(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}_{n:04x}{}", &random[..20])
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Completes an output item the way the API shapes it: id, status, required fields.
pub(crate) fn finish_item(item: &Value) -> Value {
    let Value::Object(map) = item else {
        return item.clone();
    };
    let mut map = map.clone();
    let kind = map
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
        .to_owned();
    map.entry("type")
        .or_insert_with(|| Value::String(kind.clone()));
    let prefix = match kind.as_str() {
        "message" => "msg",
        "function_call" => "fc",
        "reasoning" => "rs",
        "compaction" => "cmp",
        "program" => "prog",
        "program_output" => "progout",
        "custom_tool_call" => "ctc",
        _ => "item",
    };
    map.entry("id")
        .or_insert_with(|| Value::String(new_id(prefix)));
    match kind.as_str() {
        "message" => {
            map.entry("status").or_insert_with(|| json!("completed"));
            map.entry("role").or_insert_with(|| json!("assistant"));
            if let Some(Value::Array(parts)) = map.get_mut("content") {
                for part in parts {
                    if let Value::Object(p) = part
                        && p.get("type").and_then(Value::as_str) == Some("output_text")
                    {
                        p.entry("annotations").or_insert_with(|| json!([]));
                    }
                }
            }
        }
        "function_call" | "custom_tool_call" => {
            map.entry("status").or_insert_with(|| json!("completed"));
            map.entry("call_id")
                .or_insert_with(|| Value::String(new_id("call")));
        }
        "reasoning" => {
            map.entry("summary").or_insert_with(|| json!([]));
            map.entry("encrypted_content")
                .or_insert_with(|| Value::String(format!("enc-{}", new_id("rs"))));
        }
        "program" => {
            map.entry("call_id")
                .or_insert_with(|| Value::String(new_id("call")));
            map.entry("fingerprint")
                .or_insert_with(|| Value::String(new_id("fp")));
        }
        "program_output" => {
            map.entry("status").or_insert_with(|| json!("completed"));
        }
        _ => {}
    }
    Value::Object(map)
}

/// Rough token count: a quarter of the characters, at least 1.
pub(crate) fn tokens(text: &str) -> u64 {
    (text.chars().count() as u64 / 4).max(1)
}

/// A full response object (<https://platform.openai.com/docs/api-reference/responses/object>)
/// echoing the request.
pub(crate) fn response_object(
    id: &str,
    request: &CreateResponse,
    status: &str,
    output: Vec<Value>,
    usage: Option<Usage>,
) -> Value {
    let mut map = Map::new();
    map.insert("id".into(), json!(id));
    map.insert("object".into(), json!("response"));
    map.insert("created_at".into(), json!(now()));
    map.insert("status".into(), json!(status));
    map.insert(
        "completed_at".into(),
        if status == "completed" {
            json!(now())
        } else {
            Value::Null
        },
    );
    map.insert(
        "error".into(),
        if status == "failed" {
            json!({"code": "server_error", "message": "The emulator was scripted to fail this response."})
        } else {
            Value::Null
        },
    );
    map.insert(
        "incomplete_details".into(),
        if status == "incomplete" {
            json!({"reason": "max_output_tokens"})
        } else {
            Value::Null
        },
    );
    map.insert(
        "instructions".into(),
        request.instructions().map_or(Value::Null, |s| json!(s)),
    );
    map.insert(
        "max_output_tokens".into(),
        request
            .extra
            .get("max_output_tokens")
            .cloned()
            .unwrap_or(Value::Null),
    );
    map.insert("model".into(), json!(request.model));
    map.insert("output".into(), Value::Array(output));
    map.insert(
        "parallel_tool_calls".into(),
        request
            .extra
            .get("parallel_tool_calls")
            .cloned()
            .unwrap_or(json!(true)),
    );
    map.insert(
        "previous_response_id".into(),
        request
            .previous_response_id()
            .map_or(Value::Null, |s| json!(s)),
    );
    map.insert(
        "reasoning".into(),
        request
            .extra
            .get("reasoning")
            .cloned()
            .unwrap_or(json!({"effort": null, "summary": null})),
    );
    map.insert("store".into(), json!(request.store()));
    map.insert(
        "temperature".into(),
        request
            .extra
            .get("temperature")
            .cloned()
            .unwrap_or(json!(1.0)),
    );
    map.insert(
        "text".into(),
        request
            .extra
            .get("text")
            .cloned()
            .unwrap_or(json!({"format": {"type": "text"}})),
    );
    map.insert(
        "tool_choice".into(),
        request.tool_choice.clone().unwrap_or(json!("auto")),
    );
    map.insert(
        "tools".into(),
        serde_json::to_value(request.tools.clone().unwrap_or_default()).unwrap_or(json!([])),
    );
    map.insert(
        "top_p".into(),
        request.extra.get("top_p").cloned().unwrap_or(json!(1.0)),
    );
    map.insert(
        "truncation".into(),
        request
            .extra
            .get("truncation")
            .cloned()
            .unwrap_or(json!("disabled")),
    );
    map.insert(
        "usage".into(),
        usage.map_or(Value::Null, |u| {
            serde_json::to_value(u).unwrap_or(Value::Null)
        }),
    );
    map.insert("user".into(), Value::Null);
    map.insert(
        "metadata".into(),
        request.extra.get("metadata").cloned().unwrap_or(json!({})),
    );
    Value::Object(map)
}
