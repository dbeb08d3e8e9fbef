//! Calls whose arguments or id read one way to a human and another to the host.
//!
//! - A key repeated in one object of the arguments: a tool takes the last value (serde's
//!   `Value` keeps it), while a person reading the arguments in an approval prompt or the
//!   console's card sees the first one first, and can approve `echo looks-safe` with a
//!   second `command` a screen further down. Codex's typed arguments refuse a repeated
//!   field too.
//! - A call id that cannot be named in a URL path (`.`, `..`, empty): browsers resolve it
//!   as a dot segment, so the HTTP API's approval route for it cannot be reached.
//!
//! Both are refused to the model before anyone is asked.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// How much of a repeated key the refusal quotes.
const KEY_SHOWN_CHARS: usize = 64;

/// Why the call cannot be put to a human as it stands, if it cannot.
pub(super) fn ambiguity(call_id: &str, arguments: &str) -> Option<String> {
    if matches!(call_id, "" | "." | "..") {
        return Some(format!(
            "the call id {call_id:?} cannot be named where approvals are given; send the call \
             again with another id"
        ));
    }
    let key = repeated_key(arguments)?;
    let shown: String = key.chars().take(KEY_SHOWN_CHARS).collect();
    let cut = if shown.len() < key.len() { "..." } else { "" };
    Some(format!(
        "the arguments hold the key {:?}{cut} twice in one object, so what a person approves \
         could differ from what runs; send the call again with each key once",
        shown
    ))
}

/// The first key some object of JSON `text` holds twice. `None` for text that is not JSON
/// (the tool reports that) or nests deeper than `serde_json` reads.
fn repeated_key(text: &str) -> Option<String> {
    let found = RefCell::new(None);
    let mut reader = serde_json::Deserializer::from_str(text);
    let _ = Check(&found).deserialize(&mut reader);
    found.into_inner()
}

/// Walks a value; on a repeated key, records it and stops with an error.
#[derive(Clone, Copy)]
struct Check<'a>(&'a RefCell<Option<String>>);

impl<'de> DeserializeSeed<'de> for Check<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<(), D::Error> {
        reader.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Check<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while items.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = entries.next_key::<String>()? {
            if seen.contains(&key) {
                *self.0.borrow_mut() = Some(key);
                return Err(de::Error::custom("repeated key"));
            }
            seen.insert(key);
            entries.next_value_seed(self)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_repeated_at_any_depth_is_found_by_its_decoded_name() {
        let long = "k".repeat(100);
        for (text, key) in [
            (r#"{"command":"a","command":"b"}"#, Some("command")),
            (r#"{"command":"a","comm\u0061nd":"b"}"#, Some("command")),
            (r#"{"a":[1,{"x":1,"y":2,"x":3}]}"#, Some("x")),
            (r#"{"a":{"x":1},"b":{"x":2}}"#, None),
            (r#"[{"x":1},{"x":2}]"#, None),
            (r#"{"command":"a"#, None),
            ("not json", None),
            ("", None),
        ] {
            assert_eq!(repeated_key(text).as_deref(), key, "{text}");
        }
        let text = format!(r#"{{"{long}":1,"{long}":2}}"#);
        let why = ambiguity("c1", &text).unwrap();
        assert!(
            why.contains(&format!("{:?}...", "k".repeat(KEY_SHOWN_CHARS))),
            "{why}"
        );
        assert!(ambiguity("c1", r#"{"command":"ls"}"#).is_none());
    }

    #[test]
    fn ids_no_url_path_can_name_are_refused() {
        for id in ["", ".", ".."] {
            assert!(ambiguity(id, "{}").is_some(), "{id:?}");
        }
        for id in ["...", "call_1", "a.b", "./"] {
            assert!(ambiguity(id, "{}").is_none(), "{id:?}");
        }
    }
}
