//! Whether JSON text reads back as a `serde_json::Value`, checked without building one.
//!
//! Text a caller hands over ([`Payload::raw`](crate::Payload::raw)) is JSON by syntax, but
//! syntax is not enough for replay: a number out of `f64`'s range (`1e400`) or a lone
//! surrogate escape (`"\ud800"`) is valid `RawValue` text that `serde_json` refuses to read
//! as a value, so an acknowledged event would make its thread unreplayable. Reading each
//! token the way a `Value` is read, and keeping nothing, finds both.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Checks that `text` is one JSON value that a replay reads back (`agent_schema::json`, which
/// accepts what `serde_json::from_str::<Value>` accepts, and objects with `serde_json`'s
/// private keys too).
pub(crate) fn check(text: &str) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    Readable.deserialize(&mut de)?;
    de.end()
}

struct Readable;

impl<'de> DeserializeSeed<'de> for Readable {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Readable {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Readable)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Readable)?.is_some() {
            map.next_value_seed(Readable)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn agrees_with_reading_a_value() {
        for text in [
            "1e400",
            "-1e400",
            "\"\\ud800\"",
            "{\"\\udc00\":1}",
            "[1,",
            "{} x",
            "1e-400",
            "123456789012345678901234567890",
            "\"\\ud83d\\ude00\"",
            " {\"a\" : [null, true]} ",
        ] {
            assert_eq!(
                check(text).is_ok(),
                serde_json::from_str::<serde_json::Value>(text).is_ok(),
                "{text}"
            );
        }
    }
}
