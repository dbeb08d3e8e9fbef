//! `POST /v1/responses/compact`: the scripted reply, or by default the user messages kept
//! and everything else replaced by one opaque `compaction` item ([`crate::sealed`]); sent
//! once the rule's latency (or the script's, or `mock serve`'s) has passed, as a JSON
//! reply of the same tokens would be.

use agent_responses::types::{CompactRequest, Item, Usage};
use axum::http::{HeaderMap, Method};
use serde_json::{Value, json};

use super::replies::error_reply;
use super::state::{AppState, lock};
use crate::respond::{finish_item, new_id, tokens};
use crate::script::{Reply, RequestView, ScriptEndpoint, input_items, render, tool_output_total};
use crate::validate::{ApiFailure, check_auth, check_context, check_input_types};

pub(super) fn compact_inner(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Value, std::time::Duration), ApiFailure> {
    check_auth(headers, state.api_key.as_deref())?;
    state.record(&Method::POST, "/v1/responses/compact", headers, body);
    let request: CompactRequest = serde_json::from_slice(body)
        .map_err(|e| super::typed::explain(body, &e, super::typed::COMPACT_FIELDS))?;
    if request.model.trim().is_empty() {
        return Err(ApiFailure::invalid(
            "Missing required parameter: 'model'.",
            Some("model"),
            Some("missing_required_parameter"),
        ));
    }
    check_input_types(request.input.as_ref())?;
    let previous = request
        .previous_response_id
        .as_ref()
        .and_then(|v| v.as_deref());
    let (_, mut context) = state.context_of(previous)?;
    context.extend(input_items(request.input.as_ref()));
    check_context(&context, &lock(&state.issued))?;
    let body_text = String::from_utf8_lossy(body);
    let view = RequestView {
        endpoint: ScriptEndpoint::Compact,
        body_text: &body_text,
        items: &context,
        stream: false,
        previous_response: previous.is_some(),
        text_format: "text",
    };
    let rule = state.pick(&view);
    let latency = state.latency_of(rule.as_ref());
    let scripted = rule.map(|rule| (rule.reply, rule.fault));
    let output: Vec<Value> = match scripted {
        Some((Reply::Error { error }, _)) => return Err(error_reply(&error.rendered(&context))),
        Some((Reply::Items { items, .. }, _)) => items
            .iter()
            .map(|i| finish_item(&render(i, &context)))
            .collect(),
        // A structured answer is no compaction: compacted as by default.
        Some((Reply::Json { .. } | Reply::Echo { .. }, _)) | None => {
            let mut out: Vec<Value> = context
                .iter()
                .filter_map(|item| match item {
                    Item::Message(m) if m.role == "user" => Some(json!({
                        "id": new_id("msg"), "type": "message", "status": "completed", "role": "user",
                        "content": [{"type": "input_text", "text": m.text()}]})),
                    _ => None,
                })
                .collect();
            out.push(json!({"id": new_id("cmp"), "type": "compaction",
                            "encrypted_content": crate::sealed::seal(tool_output_total(&context))}));
            out
        }
    };
    {
        let mut issued = lock(&state.issued);
        for item in &output {
            if item.get("type").and_then(Value::as_str) == Some("compaction")
                && let Some(content) = item.get("encrypted_content").and_then(Value::as_str)
            {
                issued.compactions.insert(content.to_owned());
            }
        }
    }
    let output_tokens = tokens(&Value::Array(output.clone()).to_string());
    let usage = Usage::new(tokens(&body_text), output_tokens);
    let answer = json!({
        "id": new_id("resp"),
        "object": "response.compaction",
        "created_at": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "output": output,
        "usage": usage,
    });
    Ok((answer, latency.total(output_tokens)))
}
