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

/// Streamed text with a key masked as `***`, also when deltas split it: a tail that could
/// be the start of the key (at most its length less one byte) is held back until the next
/// delta, or the end of the stream ([`flush`](Self::flush)), shows whether it is.
///
/// Invariant: nothing [`push`](Self::push) or `flush` returns holds the key.
#[derive(Debug, Default, Clone)]
pub struct StreamMask {
    key: Option<String>,
    /// Received, not returned yet.
    held: String,
}

impl StreamMask {
    /// A mask of `key` (none: text passes as it is).
    pub fn new(key: Option<String>) -> StreamMask {
        StreamMask {
            key: key.filter(|k| !k.is_empty()),
            held: String::new(),
        }
    }

    /// Takes a delta; returns the text to show now, masked.
    pub fn push(&mut self, delta: &str) -> String {
        self.held.push_str(delta);
        let received = std::mem::take(&mut self.held);
        let Some(key) = self.key.as_deref() else {
            return received;
        };
        let mut masked = mask(received, key);
        let at = held_back_from(&masked, key);
        self.held = masked.split_off(at);
        masked
    }

    /// The stream ended: the text held back (not the key: only a start of one).
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Forgets what was held back (a new stream starts).
    pub fn clear(&mut self) {
        self.held.clear();
    }
}

/// Where the longest tail of `text` that `key` starts with (shorter than `key`) begins;
/// `text.len()` when there is none.
fn held_back_from(text: &str, key: &str) -> usize {
    let longest = key.len().saturating_sub(1);
    (text.len().saturating_sub(longest)..text.len())
        .filter(|at| text.is_char_boundary(*at))
        .find(|at| key.starts_with(&text[*at..]))
        .unwrap_or(text.len())
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
///
/// A string that is itself JSON with escapes (a model's function call arguments, which a
/// tool decodes) is searched decoded too: `\u0073\u006b...` spells the key once decoded.
/// Such a string that holds the key is replaced by its masked JSON (written anew, so its
/// spacing may change); JSON in JSON is searched [`NESTED_DEPTH`] levels deep.
pub(crate) fn scrub(value: &mut Value, key: Option<&str>) {
    scrub_at(value, key, NESTED_DEPTH);
}

/// How many levels of JSON text inside JSON strings [`scrub`] decodes.
const NESTED_DEPTH: u8 = 3;

fn scrub_at(value: &mut Value, key: Option<&str>, depth: u8) {
    match value {
        Value::String(text) => {
            scrub_text(text, key);
            if let Some(key) = key
                && depth > 0
                && text.contains('\\')
                && let Some(masked) = masked_nested(text, key, depth - 1)
            {
                *text = masked;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_at(v, key, depth)),
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
            map.values_mut().for_each(|v| scrub_at(v, key, depth));
        }
        _ => {}
    }
}

/// `text` as JSON with the key masked, when it is JSON (an object or an array) that holds
/// the key once decoded; `None` otherwise (the text stays as it is).
fn masked_nested(text: &str, key: &str, depth: u8) -> Option<String> {
    let trimmed = text.trim_start();
    if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        return None;
    }
    let mut nested: Value = serde_json::from_str(text).ok()?;
    if !holds(&nested, key) {
        return None;
    }
    scrub_at(&mut nested, Some(key), depth);
    serde_json::to_string(&nested).ok()
}

/// Whether a string or key of `value` holds `key`.
fn holds(value: &Value, key: &str) -> bool {
    match value {
        Value::String(text) => text.contains(key),
        Value::Array(items) => items.iter().any(|v| holds(v, key)),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains(key) || holds(v, key)),
        _ => false,
    }
}

/// `text` with NUL replaced by U+FFFD and `key` (when given) masked.
pub(crate) fn scrub_text(text: &mut String, key: Option<&str>) {
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

    /// Arguments that spell the key with JSON escapes (`\u0073...`) are masked once
    /// decoded; other JSON text, and text that is not JSON, is kept as it is.
    #[test]
    fn the_key_spelled_with_escapes_in_nested_json_is_masked() {
        let key = "sk-test-SECRET123";
        let escaped: String = key
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect();
        let arguments = format!("{{\"path\": \"{escaped}.txt\", \"content\": \"x\"}}");
        let decoded: Value = serde_json::from_str(&arguments).unwrap();
        assert_eq!(
            decoded["path"],
            format!("{key}.txt"),
            "the escapes spell the key"
        );
        let mut value = json!({"output": [{"type": "function_call", "arguments": arguments}]});
        scrub(&mut value, Some(key));
        let masked: Value =
            serde_json::from_str(value["output"][0]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(masked, json!({"path": "***.txt", "content": "x"}));
        // Twice nested: a string argument that is JSON with escapes itself.
        let inner = serde_json::to_string(&json!({"k": key}))
            .unwrap()
            .replace(key, &escaped);
        let mut value =
            json!({"arguments": serde_json::to_string(&json!({"json": inner})).unwrap()});
        scrub(&mut value, Some(key));
        assert!(!value.to_string().contains("SECRET"), "{value}");
        // JSON without the key, and text that is not JSON, are not rewritten.
        for text in ["{\"a\":  \"\\u0041\"}", "a \\u0073 b", "[1, \"\\n\"]"] {
            let mut value = json!({"arguments": text});
            scrub(&mut value, Some(key));
            assert_eq!(value["arguments"], text);
        }
    }

    /// What a [`StreamMask`] of `KEY` shows of `deltas`, piece by piece (the last piece is
    /// the flush).
    fn streamed(deltas: &[&str]) -> Vec<String> {
        let mut mask = StreamMask::new(Some(STREAM_KEY.to_owned()));
        let mut pieces: Vec<String> = deltas.iter().map(|d| mask.push(d)).collect();
        pieces.push(mask.flush());
        pieces
    }

    const STREAM_KEY: &str = "sk-test-SECRET123";

    #[test]
    fn a_key_split_across_deltas_is_masked() {
        let pieces = streamed(&["key is sk-test-SEC", "RET123", " done"]);
        assert!(pieces.iter().all(|p| !p.contains("SEC")), "{pieces:?}");
        assert_eq!(pieces.concat(), "key is *** done");
        assert_eq!(pieces[0], "key is ", "only the possible key is held back");
        // Split into single characters, and at the very end of the stream.
        let text = format!("a{STREAM_KEY}b{STREAM_KEY}");
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
        let pieces = streamed(&chars);
        assert!(pieces.iter().all(|p| !p.contains("SEC")), "{pieces:?}");
        assert_eq!(pieces.concat(), "a***b***");
    }

    #[test]
    fn text_that_only_starts_like_the_key_is_shown_at_the_end() {
        assert_eq!(
            streamed(&["ask sk-te", "a question"]).concat(),
            "ask sk-tea question"
        );
        assert_eq!(
            streamed(&["ends with sk-test-SE"]).concat(),
            "ends with sk-test-SE"
        );
        assert_eq!(streamed(&["héllo 数据"]).concat(), "héllo 数据");
        // Without a key nothing is held back.
        let mut none = StreamMask::new(None);
        assert_eq!(none.push("sk-test-SEC"), "sk-test-SEC");
        assert_eq!(none.flush(), "");
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
