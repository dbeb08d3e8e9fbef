//! What no event of a run may carry, whatever wrote its text: the API key (a model error
//! that quotes the request's headers, a tool that prints it), and NUL characters (which the
//! journal refuses, so an event holding one would fail the run on every resume).
//!
//! Invariant: every host event passes [`clean`] on its way to the journal; the key is
//! replaced by `***` and a NUL by U+FFFD in every string and key of the payload. Text with
//! neither (nearly all of it) is checked by one substring search each and kept as it is.

use agent_journal::Payload;

use crate::tools::secrets::{api_key, api_key_in_json, scrub};

/// `payload` without the API key and without NUL characters.
pub(crate) fn clean(payload: Payload) -> Payload {
    let dirty = match payload.as_text() {
        // A NUL can only be in JSON text as the escape `\u0000`. The key can be spelled
        // with escapes in JSON text inside a string (a function call's arguments), which
        // reads `\\u` in the payload's text.
        Some(text) => {
            text.contains("u0000")
                || api_key_in_json().is_some_and(|k| text.contains(k) || text.contains("\\\\u"))
        }
        None => true,
    };
    if !dirty {
        return payload;
    }
    match payload.to_value() {
        Some(mut value) => {
            scrub(&mut value, api_key());
            Payload::from(value)
        }
        // Text that does not parse: the append refuses it as it is.
        None => payload,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn clean_text_is_kept_as_it_is() {
        let payload = Payload::encode(&json!({"a": "plain", "n": 1})).unwrap();
        let cleaned = clean(payload.clone());
        assert_eq!(cleaned.as_text(), payload.as_text());
        // A NUL is replaced; the text that only spells its escape is not.
        let cleaned = clean(Payload::encode(&json!({"a": "x\u{0}", "b": "\\u0000"})).unwrap());
        assert_eq!(
            cleaned.to_value().unwrap(),
            json!({"a": "x\u{FFFD}", "b": "\\u0000"})
        );
    }
}
