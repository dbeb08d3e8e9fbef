//! JSON the host keeps to pass on, not to read: a run's output items (sent back in every
//! later request) and its tools' schemas.
//!
//! Kept as its text, not as a [`Value`] tree: a `function_call` item is ~150 bytes of text
//! against ~1 KiB as a tree (a map per object, an allocation per key and string), and a run
//! keeps every item of its history for as long as it is driven. Written into a request, the
//! text goes out verbatim, so the bytes sent are those recorded.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON value held as its (compact) text; always valid JSON.
#[derive(Clone)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// The compact text of `value`.
    pub fn from_value(value: &Value) -> RawJson {
        // Cannot fail: a `Value`'s keys are strings and its numbers finite. `null` stands
        // in rather than a panic.
        serde_json::value::to_raw_value(value)
            .map(RawJson)
            .unwrap_or_else(|_| RawJson(RawValue::NULL.to_owned()))
    }

    /// `text`, which must be one JSON value, with the whitespace between its tokens
    /// removed and every token as written: a number keeps all its digits, where a
    /// [`Value`] would round it to an `f64`. `None` when `text` is not JSON.
    pub fn compacted(text: &str) -> Option<RawJson> {
        // Checked as written first: dropping the space in `1 2` would make it `12`.
        serde_json::from_str::<&RawValue>(text).ok()?;
        let mut out = String::with_capacity(text.len());
        let (mut in_string, mut escaped) = (false, false);
        for c in text.chars() {
            if in_string {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => in_string = false,
                    _ => {}
                }
            } else if matches!(c, ' ' | '\t' | '\n' | '\r') {
                continue;
            } else if c == '"' {
                in_string = true;
            }
            out.push(c);
        }
        RawValue::from_string(out).ok().map(RawJson)
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The value as a tree, for a reader that walks it.
    ///
    /// Fails only past serde_json's nesting limit (128 levels), which a tree built in
    /// memory can exceed although its text cannot be parsed back. Objects are read as
    /// written, also those `serde_json` alone would read as something else
    /// (`agent_schema::json`), so this gives back what [`RawJson::from_value`] was given.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        agent_schema::json::from_str(self.get())
    }

    /// The string field `name` of an object (`None` for anything else), read without
    /// building the tree: the object's fields are borrowed as text, only the one asked for
    /// is parsed.
    pub fn str_field(&self, name: &str) -> Option<String> {
        let fields: BTreeMap<Cow<'_, str>, &RawValue> = serde_json::from_str(self.get()).ok()?;
        serde_json::from_str(fields.get(name)?.get()).ok()
    }

    /// An item's `type`.
    pub fn item_type(&self) -> Option<String> {
        self.str_field("type")
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

/// Equal when the texts are: values built the same way (one serializer, keys in their
/// order) compare as their trees would.
impl PartialEq for RawJson {
    fn eq(&self, other: &RawJson) -> bool {
        self.get() == other.get()
    }
}

impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawJson, D::Error> {
        Box::<RawValue>::deserialize(d).map(RawJson)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_text_is_the_compact_serialization_and_reads_back_as_the_value() {
        let item = json!({"type": "function_call", "call_id": "c\"1", "arguments": "{\"a\":1}",
                          "nested": {"type": "inner"}, "n": [1, 2]});
        let raw = RawJson::from_value(&item);
        assert_eq!(raw.get(), serde_json::to_string(&item).unwrap());
        assert_eq!(raw.to_value().unwrap(), item);
        assert_eq!(serde_json::to_string(&raw).unwrap(), raw.get());
        let back: RawJson = serde_json::from_value(item.clone()).unwrap();
        assert_eq!(back, raw);
        // An object `serde_json` alone would read as the JSON its string holds, or refuse.
        for held in ["[1]", "not json"] {
            let odd = json!({"type": "message", "data": {"$serde_json::private::RawValue": held}});
            assert_eq!(RawJson::from_value(&odd).to_value().unwrap(), odd);
        }
    }

    #[test]
    fn compacting_drops_the_space_between_tokens_and_keeps_each_token_as_written() {
        let text = " {\n  \"n\": 12345678901234567890123 ,\t\"s\": \"a \\\" b\\\\\",\r\n \"z\": -0,\"x\": [ 1.50 , \"\\u0000\" ] }\n";
        let raw = RawJson::compacted(text).unwrap();
        assert_eq!(
            raw.get(),
            r#"{"n":12345678901234567890123,"s":"a \" b\\","z":-0,"x":[1.50,"\u0000"]}"#
        );
        assert!(RawJson::compacted("{\"a\": }").is_none());
        assert!(RawJson::compacted("1 2").is_none());
    }

    #[test]
    fn a_string_field_is_read_at_the_top_level_only() {
        let raw = RawJson::from_value(&json!({"nested": {"type": "inner"}, "n": 1,
                                              "type": "function_call", "call_id": "c\\1"}));
        assert_eq!(raw.item_type().as_deref(), Some("function_call"));
        assert_eq!(raw.str_field("call_id").as_deref(), Some("c\\1"));
        assert_eq!(raw.str_field("n"), None);
        assert_eq!(raw.str_field("missing"), None);
        for other in [
            json!([{"type": "x"}]),
            json!("type"),
            json!(null),
            json!(1.5),
        ] {
            assert_eq!(RawJson::from_value(&other).item_type(), None);
        }
    }
}
