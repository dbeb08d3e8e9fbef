//! What no tool output and no child process of a run may carry: the API key and the
//! database URLs (which may hold a password).
//!
//! Invariants: every child a run starts (a `shell` command, an MCP server, the command of
//! `agentctl sandbox`) has the variables of [`HIDDEN_ENV`] removed from its environment;
//! every tool's output (built-in, MCP, Rust) passes [`mask_key`] or [`scrub`] before it
//! reaches the model, the journal or the screen, and so does every event the host writes
//! (`run::events`).

use serde_json::{Map, Value};

/// Variables a command started for a run never sees: the API key and the database URLs.
pub const HIDDEN_ENV: [&str; 3] = ["OPENAI_API_KEY", "AGENTCTL_DB", "AGENTCTL_TEST_PG_URL"];

/// `text` with this process's API key (`OPENAI_API_KEY`, when it has 8 characters or more)
/// replaced by `***`. A command cannot see the key in its own environment, but a file of
/// the workspace (`.env`) or a same-user process (`/proc/PPID/environ`) can hold it.
pub fn mask_key(text: String) -> String {
    match api_key() {
        Some(key) => mask(text, &key),
        None => text,
    }
}

/// This process's API key, when it is long enough to mask (8 characters or more: a shorter
/// one would mask ordinary words).
pub(crate) fn api_key() -> Option<String> {
    std::env::var("OPENAI_API_KEY")
        .ok()
        .filter(|key| key.len() >= 8)
}

/// `text` with every occurrence of `key` replaced by `***`.
pub(crate) fn mask(text: String, key: &str) -> String {
    if text.contains(key) {
        text.replace(key, "***")
    } else {
        text
    }
}

/// Whether a string or key anywhere in `value` holds a NUL character, which the journal
/// refuses (PostgreSQL cannot store it).
pub fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

/// Every string and key of `value` with `key` (when given) replaced by `***` and NUL
/// characters by U+FFFD (the journal cannot store NUL).
pub(crate) fn scrub(value: &mut Value, key: Option<&str>) {
    match value {
        Value::String(text) => scrub_text(text, key),
        Value::Array(items) => items.iter_mut().for_each(|v| scrub(v, key)),
        Value::Object(map) => {
            let dirty_keys = map
                .keys()
                .any(|k| k.contains('\0') || key.is_some_and(|key| k.contains(key)));
            if dirty_keys {
                *map = std::mem::take(map)
                    .into_iter()
                    .map(|(mut k, v)| {
                        scrub_text(&mut k, key);
                        (k, v)
                    })
                    .collect::<Map<String, Value>>();
            }
            map.values_mut().for_each(|v| scrub(v, key));
        }
        _ => {}
    }
}

fn scrub_text(text: &mut String, key: Option<&str>) {
    if text.contains('\0') {
        *text = text.replace('\0', "\u{FFFD}");
    }
    if let Some(key) = key {
        *text = mask(std::mem::take(text), key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nul_and_the_key_leave_every_string_and_key() {
        let key = "sk-test-SECRET123";
        let mut value = json!({
            "detail": format!("bad key {key} here"),
            "items": [{"text": "a\u{0}b"}, 3, null],
            format!("k{key}\u{0}"): "v",
        });
        scrub(&mut value, Some(key));
        assert_eq!(
            value,
            json!({
                "detail": "bad key *** here",
                "items": [{"text": "a\u{FFFD}b"}, 3, null],
                "k***\u{FFFD}": "v",
            })
        );
    }

    #[test]
    fn every_occurrence_of_the_key_is_masked() {
        let key = "sk-test-SECRET123";
        assert_eq!(
            mask(format!("OPENAI_API_KEY={key}\nagain {key}"), key),
            "OPENAI_API_KEY=***\nagain ***"
        );
        assert_eq!(mask("nothing here".into(), key), "nothing here");
    }
}
