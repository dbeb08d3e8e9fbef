//! Stored payloads (JSON text) decoded into `serde_json` values.
//!
//! Every event a replay returns is decoded here, so this is the read path's largest cost
//! after SQLite's row steps. Payloads are written by `serde_json` and are mostly small
//! objects of plain strings and integers; [`Decoder`] parses those shapes directly and
//! hands everything else to `serde_json`.
//!
//! Invariants:
//! - [`Decoder::decode`] returns exactly what [`json::from_str`] returns for the same
//!   text, which for text without `serde_json`'s private keys is what
//!   `serde_json::from_str::<Value>` returns: the same value (keys in the same order, a
//!   repeated key keeping its first position and its last value), or `serde_json`'s own
//!   error. The direct parser only takes what it is sure of; on anything else (an escape,
//!   a number that is not a short plain integer, deep nesting, any syntax error) it gives
//!   up and `serde_json`'s deserializer reads the text, whole or that token alone.
//! - A map is allocated once, for as many entries as its text holds (they are gathered
//!   first); a repeated key leaves one slot unused.
//! - Nothing here panics or recurses past [`MAX_DEPTH`] on any input.

use serde_json::{Map, Number, Value};

use agent_schema::json;

/// Containers nested deeper than this are left to `serde_json` (whose own limit is 127).
const MAX_DEPTH: usize = 64;

/// Integers of at most this many digits fit in an `i64` (and so in a `u64`) with any sign.
const SHORT_DIGITS: usize = 18;

/// Decodes payloads; keeps one scratch buffer across the payloads of a read.
#[derive(Default)]
pub(crate) struct Decoder {
    /// Entries of the objects being parsed, innermost last.
    pairs: Vec<(String, Value)>,
}

impl Decoder {
    /// `text` as a JSON value, exactly as [`json::from_str`] reads it.
    pub(crate) fn decode(&mut self, text: &str) -> serde_json::Result<Value> {
        let mut parser = Parser {
            text,
            at: 0,
            pairs: &mut self.pairs,
        };
        let value = parser.value(0).filter(|_| {
            parser.skip_whitespace();
            parser.at == text.len()
        });
        self.pairs.clear();
        match value {
            Some(value) => Ok(value),
            None => fallback(text),
        }
    }
}

/// Text the direct parser gave up on (rare in payloads `serde_json` wrote); kept out of
/// line so that the common path stays as compact as it is without it.
#[cold]
#[inline(never)]
fn fallback(text: &str) -> serde_json::Result<Value> {
    json::from_str(text)
}

/// One pass over `text`; every method returns `None` where `serde_json` must decide.
struct Parser<'t, 'd> {
    text: &'t str,
    at: usize,
    pairs: &'d mut Vec<(String, Value)>,
}

impl<'t> Parser<'t, '_> {
    fn bytes(&self) -> &'t [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    /// Consumes `byte` (after whitespace) if it comes next.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_whitespace();
        let next = self.peek() == Some(byte);
        if next {
            self.at += 1;
        }
        next
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        self.skip_whitespace();
        match self.peek()? {
            b'{' if depth < MAX_DEPTH => self.object(depth),
            b'[' if depth < MAX_DEPTH => self.array(depth),
            b'"' => self.string().map(Value::String),
            b't' => self.literal("true", Value::Bool(true)),
            b'f' => self.literal("false", Value::Bool(false)),
            b'n' => self.literal("null", Value::Null),
            b'-' | b'0'..=b'9' => self.number().map(Value::Number),
            _ => None,
        }
    }

    fn object(&mut self, depth: usize) -> Option<Value> {
        self.at += 1; // `{`
        let base = self.pairs.len();
        if !self.eat(b'}') {
            loop {
                self.skip_whitespace();
                let key = self.string()?;
                if !self.eat(b':') {
                    return None;
                }
                let value = self.value(depth + 1)?;
                self.pairs.push((key, value));
                if self.eat(b'}') {
                    break;
                }
                if !self.eat(b',') {
                    return None;
                }
            }
        }
        let mut map = Map::with_capacity(self.pairs.len().saturating_sub(base));
        // `insert` keeps a repeated key where it first stood, with the last value, as
        // `serde_json` does.
        for (key, value) in self.pairs.drain(base..) {
            map.insert(key, value);
        }
        Some(Value::Object(map))
    }

    fn array(&mut self, depth: usize) -> Option<Value> {
        self.at += 1; // `[`
        let mut items = Vec::new();
        if !self.eat(b']') {
            loop {
                items.push(self.value(depth + 1)?);
                if self.eat(b']') {
                    break;
                }
                if !self.eat(b',') {
                    return None;
                }
            }
        }
        Some(Value::Array(items))
    }

    fn literal(&mut self, word: &str, value: Value) -> Option<Value> {
        let end = self.at + word.len();
        (self.bytes().get(self.at..end)? == word.as_bytes()).then(|| {
            self.at = end;
            value
        })
    }

    /// A string at `"`. One without escapes is copied as it stands (the text is UTF-8
    /// already); one with escapes is decoded by `serde_json`.
    fn string(&mut self) -> Option<String> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at + 1;
        let mut end = start;
        loop {
            match *self.bytes().get(end)? {
                b'"' => {
                    self.at = end + 1;
                    return self.text.get(start..end).map(str::to_owned);
                }
                b'\\' => return self.escaped_string(),
                // Control characters must be escaped.
                0x00..=0x1f => return None,
                _ => end += 1,
            }
        }
    }

    /// The string at `"` that holds escapes, decoded by `serde_json`.
    fn escaped_string(&mut self) -> Option<String> {
        let open = self.at;
        let mut end = open + 1;
        loop {
            match *self.bytes().get(end)? {
                b'\\' => end += 2,
                b'"' => break,
                _ => end += 1,
            }
        }
        let decoded = serde_json::from_str(self.text.get(open..=end)?).ok()?;
        self.at = end + 1;
        Some(decoded)
    }

    /// A number. A plain integer of up to [`SHORT_DIGITS`] digits is read here; any other
    /// number token is read by `serde_json` (fractions, exponents, long integers).
    fn number(&mut self) -> Option<Number> {
        let start = self.at;
        let negative = self.peek() == Some(b'-');
        let digits_start = start + usize::from(negative);
        let mut end = digits_start;
        while self.bytes().get(end).is_some_and(u8::is_ascii_digit) {
            end += 1;
        }
        let digits = self.bytes().get(digits_start..end)?;
        let plain = !digits.is_empty()
            && digits.len() <= SHORT_DIGITS
            && (digits.len() == 1 || digits.first() != Some(&b'0'))
            && !matches!(self.bytes().get(end), Some(b'.' | b'e' | b'E'));
        if plain {
            let magnitude = digits
                .iter()
                .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
            self.at = end;
            return Some(match (negative, i64::try_from(magnitude)) {
                (false, _) => Number::from(magnitude),
                // `serde_json` reads `-0` as a float.
                (true, _) if magnitude == 0 => Number::from_f64(-0.0)?,
                (true, Ok(magnitude)) => Number::from(-magnitude),
                (true, Err(_)) => return None,
            });
        }
        while matches!(
            self.bytes().get(end),
            Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
        ) {
            end += 1;
        }
        let number = serde_json::from_str(self.text.get(start..end)?).ok()?;
        self.at = end;
        Some(number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_fuzzkit::{config, json_text, json_value, nasty_json};
    use proptest::prelude::*;

    /// `decode(text)` and `serde_json::from_str(text)` agree: equal values with the same
    /// text (key order, `-0.0`), or both errors with the same message. Text with
    /// `serde_json`'s private keys is compared with [`json::from_str`] instead, which
    /// reads their objects as written (`serde_json` does not; see `agent_schema::json`).
    fn agrees(decoder: &mut Decoder, text: &str) -> Result<(), String> {
        let ours = decoder.decode(text).map(|v| (v.to_string(), v));
        let theirs = if text.contains("$serde_json::private::") {
            json::from_str(text)
        } else {
            serde_json::from_str::<Value>(text)
        }
        .map(|v| (v.to_string(), v));
        match (ours, theirs) {
            (Ok(a), Ok(b)) if a == b => Ok(()),
            (Err(a), Err(b)) if a.to_string() == b.to_string() => Ok(()),
            (a, b) => Err(format!("{text:?}: ours {a:?}, the reference {b:?}")),
        }
    }

    #[test]
    fn common_and_awkward_payloads_decode_as_serde_json_does() {
        let mut decoder = Decoder::default();
        let mut texts: Vec<String> = [
            r#"{"call_id":"call-7","revision":3}"#,
            r#" { "a" : [ 1 , -2 , 0 , -0 , 1.5 , 2e3 , true , false , null ] } "#,
            r#"{"a":1,"b":2,"a":3}"#,
            r#"{"$serde_json::private::RawValue":"[1,2]"}"#,
            r#"{"$serde_json::private::RawValue":"{\"k\":1}","x":1}"#,
            r#"{"$serde_json::private::RawValue":3}"#,
            r#"{"x":1,"$serde_json::private::RawValue":"[1]"}"#,
            r#"{"$serde_json::private::Number":"1"}"#,
            r#"{"$serde_json::private::RawValue":"not json"}"#,
            r#"{"$serde_json::private::RawValue":"esc\"aped"}"#,
            r#"[{"$serde_json::private::RawValue":"[1]"},1.5]"#,
            r#"{"k\"ey":"v\\al\u00e9","é":"ü"}"#,
            r#"{"n":999999999999999999,"m":-999999999999999999}"#,
            r#"{"n":9223372036854775807,"m":-9223372036854775808,"o":18446744073709551616}"#,
            r#"[01]"#,
            r#"[-]"#,
            r#"[1,]"#,
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"[tru]"#,
            r#"[nulll]"#,
            r#"[1-2]"#,
            r#"[+1]"#,
            r#"[.5]"#,
            "\"tab\there\"",
            r#""\x""#,
            r#""unterminated"#,
            r#""ends in \"#,
            "{}{}",
            "[]",
            "{}",
            "",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        texts.extend(nasty_json());
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        texts.extend((60..70).chain(125..131).map(deep));
        let private = r#"{"$serde_json::private::RawValue":"[1]"}"#;
        texts.extend([10, 70].map(|n| format!("{}{private}{}", "[".repeat(n), "]".repeat(n))));
        for text in &texts {
            agrees(&mut decoder, text).unwrap();
        }
        // The scratch buffer is left empty by failures part-way through an object too.
        assert!(decoder.pairs.is_empty());
    }

    proptest! {
        #![proptest_config(config(512))]

        #[test]
        fn any_value_decodes_as_serde_json_does(value in json_value(), pretty in any::<bool>()) {
            let text = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                value.to_string()
            };
            agrees(&mut Decoder::default(), &text).map_err(TestCaseError::fail)?;
        }

        #[test]
        fn any_text_decodes_or_fails_as_serde_json_does(text in json_text()) {
            agrees(&mut Decoder::default(), &text).map_err(TestCaseError::fail)?;
        }

        #[test]
        fn one_decoder_serves_many_texts(texts in prop::collection::vec(json_text(), 1..8)) {
            let mut decoder = Decoder::default();
            for text in &texts {
                agrees(&mut decoder, text).map_err(TestCaseError::fail)?;
            }
        }
    }
}
