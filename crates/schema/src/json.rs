//! Stored JSON text read back as the `serde_json::Value` it spells, with no key given a
//! meaning.
//!
//! `serde_json::from_str::<Value>` reads an object whose first key is one of its private
//! tokens as something else: with the `raw_value` feature (on in this workspace) an object
//! `{"$serde_json::private::RawValue": "<text>"}` is read as the JSON in `<text>`, or refused
//! when `<text>` is not JSON. Writing such a value gives back the object, so a stored value
//! that holds one (a tool's output, a server's result) read back as another value, or not
//! at all: a journal thread that no longer replayed, a context thread whose window failed.
//! The journal's payloads and the context store's units are read here (the journal's
//! direct payload parser reads the same).
//!
//! Invariant: for text without those keys, [`from_str`] returns what
//! `serde_json::from_str::<Value>` returns, value or error (the same deserializer reads the
//! tokens; only the building of objects differs).
//!
//! ```
//! let text = r#"{"$serde_json::private::RawValue": "[1]"}"#;
//! let value = agent_schema::json::from_str(text).unwrap();
//! assert_eq!(value, serde_json::json!({ "$serde_json::private::RawValue": "[1]" }));
//! ```

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// `text` as one JSON value, each object built from its entries as written.
pub fn from_str(text: &str) -> serde_json::Result<Value> {
    read(serde_json::Deserializer::from_str(text), Literal::LAST_WINS)
}

/// [`from_str`] of bytes (which must be UTF-8, as for `serde_json::from_slice`).
pub fn from_slice(bytes: &[u8]) -> serde_json::Result<Value> {
    read(
        serde_json::Deserializer::from_slice(bytes),
        Literal::LAST_WINS,
    )
}

/// [`from_str`], refusing an object that repeats a key: readers disagree on which of the
/// two values such an object holds (the last for `serde_json`, the first for others, an
/// error for a derived `Deserialize`), so a value checked here must not have one.
pub fn from_str_unique_keys(text: &str) -> serde_json::Result<Value> {
    read(serde_json::Deserializer::from_str(text), Literal::UNIQUE)
}

fn read<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
    literal: Literal,
) -> serde_json::Result<Value> {
    let value = literal.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// The deepest nesting of arrays and objects that [`from_str`] (like `serde_json`) reads
/// back. A `Value` built in memory can be deeper, and serialises without complaint.
pub const MAX_NESTING: usize = 127;

/// Checks that JSON `text` (as a serializer writes it: valid JSON) nests arrays and
/// objects at most [`MAX_NESTING`] deep, so that it reads back; `Err` holds the depth
/// found once it passed the limit. Text too short to nest that deep, or with too few `[`
/// and `{` in all, is not walked (counting them is a tight loop the compiler vectorises).
pub fn check_nesting(text: &str) -> Result<(), usize> {
    if text.len() <= 2 * MAX_NESTING {
        return Ok(());
    }
    // `[` and `{` are the only bytes that read `{` with bit 5 set. Counted per chunk of at
    // most 255 in a `u8`, the loop is vectorised (~0.03 ns per byte here, 25x a filter).
    let opening: usize = text
        .as_bytes()
        .chunks(255)
        .map(|chunk| {
            let count = chunk
                .iter()
                .fold(0u8, |n, &byte| n + u8::from(byte | 0x20 == b'{'));
            usize::from(count)
        })
        .sum();
    if opening <= MAX_NESTING {
        return Ok(());
    }
    let mut depth = 0usize;
    let mut bytes = text.bytes();
    while let Some(byte) = bytes.next() {
        match byte {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(depth);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'"' => {
                // Skip the string: its brackets are text.
                while let Some(byte) = bytes.next() {
                    match byte {
                        b'\\' => {
                            bytes.next();
                        }
                        b'"' => break,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A `Value` read as written by any deserializer (a `&Value` among them), for types that
/// derive `Deserialize` and hold one: `serde_json`'s own `Value` fields read through
/// `serde_json`'s key meanings again, also from a `Value` already read as written.
#[derive(Debug, Clone, PartialEq)]
pub struct AsWritten(pub Value);

impl<'de> serde::Deserialize<'de> for AsWritten {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AsWritten, D::Error> {
        Literal::LAST_WINS.deserialize(d).map(AsWritten)
    }
}

/// For an `Option<Value>` field: `#[serde(default, deserialize_with = "agent_schema::json::option")]`
/// (`null` reads as `None`, as for `Option<Value>`).
pub fn option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    let value: Option<AsWritten> = serde::Deserialize::deserialize(d)?;
    Ok(value.map(|AsWritten(value)| value))
}

/// For a `Vec<Value>` field: `#[serde(default, deserialize_with = "agent_schema::json::list")]`.
pub fn list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Value>, D::Error> {
    let values: Vec<AsWritten> = serde::Deserialize::deserialize(d)?;
    Ok(values.into_iter().map(|AsWritten(value)| value).collect())
}

#[derive(Clone, Copy)]
struct Literal {
    /// Whether a repeated key in an object is an error.
    unique: bool,
}

impl Literal {
    const LAST_WINS: Literal = Literal { unique: false };
    const UNIQUE: Literal = Literal { unique: true };
}

impl<'de> DeserializeSeed<'de> for Literal {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Literal {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut values = Vec::new();
        while let Some(value) = seq.next_element_seed(self)? {
            values.push(value);
        }
        Ok(Value::Array(values))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut values = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if self.unique && values.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key {key:?}"
                )));
            }
            // A repeated key keeps its first position and takes the last value, as
            // `serde_json`'s own maps do.
            values.insert(key, map.next_value_seed(self)?);
        }
        Ok(Value::Object(values))
    }
}

#[cfg(test)]
mod tests {
    use super::from_str;
    use serde_json::{Value, json};

    #[test]
    fn a_repeated_key_is_refused_only_when_asked() {
        let text = r#"{"a": {"b": 1, "b": 2}}"#;
        assert_eq!(from_str(text).unwrap(), json!({"a": {"b": 2}}));
        let err = super::from_str_unique_keys(text).unwrap_err().to_string();
        assert!(err.contains(r#"duplicate key "b""#), "{err}");
        assert_eq!(
            super::from_str_unique_keys(r#"[{"b": 1}, {"b": 2}]"#).unwrap(),
            json!([{"b": 1}, {"b": 2}])
        );
    }

    #[test]
    fn objects_with_serde_json_private_keys_are_read_as_written() {
        let raw = "$serde_json::private::RawValue";
        for (text, value) in [
            (format!(r#"{{"{raw}":"[1]"}}"#), json!({ raw: "[1]" })),
            (format!(r#"{{"{raw}":"no"}}"#), json!({ raw: "no" })),
            (
                format!(r#"[{{"{raw}":1,"a":2}}]"#),
                json!([{ raw: 1, "a": 2 }]),
            ),
        ] {
            assert_eq!(from_str(&text).unwrap(), value, "{text}");
            // What `serde_json` alone does with the same text, which this module exists for.
            assert_ne!(serde_json::from_str::<Value>(&text).ok(), Some(value));
        }
    }

    #[test]
    fn fields_read_through_any_deserializer_are_read_as_written() {
        #[derive(serde::Deserialize)]
        struct Fields {
            #[serde(default, deserialize_with = "super::option")]
            one: Option<Value>,
            #[serde(default, deserialize_with = "super::list")]
            many: Vec<Value>,
            #[serde(default, deserialize_with = "super::option")]
            absent: Option<Value>,
        }
        let odd = json!({ "$serde_json::private::RawValue": "no" });
        let payload = json!({ "one": odd, "many": [null, odd] });
        // From a `Value` (as typed events are read), which `serde_json` alone refuses here.
        let fields = <Fields as serde::Deserialize>::deserialize(&payload).unwrap();
        assert_eq!(fields.one, Some(odd.clone()));
        assert_eq!(fields.many, vec![Value::Null, odd.clone()]);
        assert_eq!(fields.absent, None);
        assert!(<Option<Value> as serde::Deserialize>::deserialize(&payload["one"]).is_err());
        let null = <Fields as serde::Deserialize>::deserialize(&json!({ "one": null })).unwrap();
        assert_eq!(null.one, None);
    }

    #[test]
    fn nesting_that_reads_back_is_what_serde_json_reads() {
        let nested = |levels: usize| (1..levels).fold(json!([]), |inner, _| json!([inner]));
        for levels in [1, 100, super::MAX_NESTING, super::MAX_NESTING + 1, 300] {
            for value in [
                nested(levels),
                json!({ "k": nested(levels), "s": "[[[{{{\\\"" }),
            ] {
                let text = value.to_string();
                let depth = levels + usize::from(value.is_object());
                assert_eq!(
                    super::check_nesting(&text).is_ok(),
                    serde_json::from_str::<Value>(&text).is_ok(),
                    "{depth} levels"
                );
                assert_eq!(super::check_nesting(&text).is_ok(), from_str(&text).is_ok());
            }
        }
        // Many brackets, shallow: walked, and fine.
        let wide = Value::Array(vec![json!([{}]); 300]).to_string();
        assert_eq!(super::check_nesting(&wide), Ok(()));
        // Brackets inside strings do not count, escaped quotes do not end them.
        let text = format!(r#"["{}\"{}"]"#, "[".repeat(300), "{".repeat(300));
        assert_eq!(super::check_nesting(&text), Ok(()));
    }

    #[test]
    fn other_text_reads_as_serde_json_reads_it() {
        for text in [
            r#" {"a" : [null, true, -0, 1.5e3, 18446744073709551616], "a": "\u00e9"} "#,
            "-9223372036854775808",
            "1e400",
            "\"\\ud800\"",
            "[1,",
            "{} x",
            "",
            &"[".repeat(200),
        ] {
            let ours = from_str(text).map_err(|e| e.to_string());
            let theirs = serde_json::from_str::<Value>(text).map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "{text}");
        }
    }
}
