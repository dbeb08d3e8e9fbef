//! The emulator's deterministic answers over WebSocket: what a response says is computed
//! from the conversation alone, so a test can predict every word of it.

use agent_responses::types::{CreateResponse, Item};
use serde_json::{Value, json};

/// The text of the last user message in `items` (empty when there is none).
pub(super) fn last_user_text(items: &[Item]) -> String {
    items
        .iter()
        .rev()
        .find_map(|item| match item {
            Item::Message(m) if m.role == "user" => Some(m.text()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The first function tool the request offers: the one a fresh response calls.
pub(super) fn first_function_tool(request: &CreateResponse) -> Option<String> {
    let tools = serde_json::to_value(request.tools.as_ref()?).ok()?;
    tools.as_array()?.iter().find_map(|t| {
        (t.get("type").and_then(Value::as_str) == Some("function"))
            .then(|| t.get("name").and_then(Value::as_str).map(str::to_owned))
            .flatten()
    })
}

/// An assistant message item holding `text`, before ids and status are filled in.
pub(super) fn message_json(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
}

/// The emulator's deterministic answer: it names the request, tool results and steering.
pub(super) fn reply_text(context: &[Item], steer: Option<&str>) -> String {
    let original = context
        .iter()
        .find_map(|item| match item {
            Item::Message(m) if m.role == "user" => Some(m.text()),
            _ => None,
        })
        .unwrap_or_default();
    let outputs = crate::script::tool_outputs(context);
    let mut text = String::new();
    if let Some(steer) = steer {
        text.push_str(&format!("Revised answer (steering applied: {steer}). "));
    }
    if !outputs.is_empty() {
        text.push_str(&format!("Using tool results: {}. ", outputs.join("; ")));
    }
    text.push_str(&format!("Answer to: {original}"));
    text
}

/// The conversation after a completed response: its context followed by its output items.
pub(super) fn with_output(mut context: Vec<Item>, output: &[Value]) -> Vec<Item> {
    context.extend(
        output
            .iter()
            .filter_map(|v| serde_json::from_value(v.clone()).ok()),
    );
    context
}
