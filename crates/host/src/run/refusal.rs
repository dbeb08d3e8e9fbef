//! Refusals: a model that declines to answer says so in `refusal` content parts of its
//! message (`{"type": "refusal", "refusal": "..."}`) instead of `output_text`.
//!
//! Invariant: a refusal is never dropped. A run's final step that holds one completes with
//! the refusal as its answer text, or, when the run has an output schema, fails saying the
//! model refused (not retried: a refusal is no formatting mistake the errors could fix).

use serde_json::Value;

/// The refusal text of a step's output items (every `refusal` part of its messages, in
/// order, joined by newlines); `None` when the model refused nothing.
pub(crate) fn refusal_text(output: &[Value]) -> Option<String> {
    let parts: Vec<&str> = output
        .iter()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("message"))
        .filter_map(|item| item.get("content").and_then(Value::as_array))
        .flatten()
        .filter(|part| part.get("type").and_then(Value::as_str) == Some("refusal"))
        .filter_map(|part| part.get("refusal").and_then(Value::as_str))
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n"))
}

/// A final answer's text: the message text, then the refusal (a refusal alone is the
/// answer).
pub(crate) fn answer_text(text: String, refusal: Option<&str>) -> String {
    match refusal {
        None => text,
        Some(refusal) if text.is_empty() => refusal.to_string(),
        Some(refusal) => format!("{text}\n{refusal}"),
    }
}

/// Why a run with an output schema fails on a refusal.
pub(crate) fn failure(refusal: &str) -> String {
    format!("the model refused: {refusal}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refusal_parts_are_read_from_messages() {
        let refused = [json!({"type": "message", "role": "assistant", "content": [
            {"type": "refusal", "refusal": "I can't help with that"}]})];
        assert_eq!(
            refusal_text(&refused).as_deref(),
            Some("I can't help with that")
        );
        let answered = [json!({"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "hi"}]})];
        assert_eq!(refusal_text(&answered), None);
        assert_eq!(refusal_text(&[json!({"type": "reasoning"})]), None);
        assert_eq!(answer_text(String::new(), Some("no")), "no");
        assert_eq!(answer_text("a".into(), Some("no")), "a\nno");
        assert_eq!(answer_text("a".into(), None), "a");
        assert_eq!(failure("no"), "the model refused: no");
    }
}
