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
        Some(key) => mask(text, key),
        None => text,
    }
}

/// This process's API key, when it is long enough to mask (8 characters or more: a shorter
/// one would mask ordinary words). Read once: every event and tool output asks for it, and
/// the environment of a running process does not change it (`OPENAI_API_KEY` is read once
/// by the client too).
pub fn api_key() -> Option<&'static str> {
    static KEY: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|key| key.len() >= 8)
    })
    .as_deref()
}

/// [`api_key`] as it appears inside JSON text: itself, unless it has characters JSON
/// escapes.
pub(crate) fn api_key_in_json() -> Option<&'static str> {
    static NEEDLE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    NEEDLE
        .get_or_init(|| {
            let quoted = serde_json::to_string(api_key()?).ok()?;
            Some(quoted[1..quoted.len() - 1].to_string())
        })
        .as_deref()
}

/// `text` with every occurrence of `key` replaced by `***`.
pub(crate) fn mask(text: String, key: &str) -> String {
    if text.contains(key) {
        text.replace(key, "***")
    } else {
        text
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
