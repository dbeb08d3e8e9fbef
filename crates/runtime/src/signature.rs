//! Canonical call signatures: the same tool and arguments give the same string whatever
//! the key order of the JSON objects.

use serde_json::Value;

/// `[name, args]` as JSON with every object's keys sorted, recursively.
pub fn signature(name: &str, args: &Value) -> String {
    let mut out = String::with_capacity(32);
    out.push('[');
    write_str(&mut out, name);
    out.push(',');
    write_value(&mut out, args);
    out.push(']');
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(out, key);
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_value(out, v);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, v);
            }
            out.push(']');
        }
        Value::String(text) => write_str(out, text),
        other => out.push_str(&other.to_string()),
    }
}

/// `text` as a JSON string literal (as serde_json writes it).
fn write_str(out: &mut String, text: &str) {
    if !text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        // Nothing to escape: the common case of identifiers and plain values.
        out.push('"');
        out.push_str(text);
        out.push('"');
        return;
    }
    match serde_json::to_string(text) {
        Ok(quoted) => out.push_str(&quoted),
        // Serialising a `str` cannot fail; keep the text distinguishable if it ever did.
        Err(_) => out.push_str(&format!("{text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::signature;
    use serde_json::json;

    #[test]
    fn key_order_does_not_matter() {
        let a = signature(
            "t",
            &json!({"a": 1, "b": {"x": [1, {"q": 1, "p": 2}], "y": "z"}}),
        );
        let b = signature(
            "t",
            &json!({"b": {"y": "z", "x": [1, {"p": 2, "q": 1}]}, "a": 1}),
        );
        assert_eq!(a, b);
        assert_ne!(a, signature("u", &json!({"a": 1})));
        assert_ne!(
            signature("t", &json!({"a": 1})),
            signature("t", &json!({"a": 1.5}))
        );
    }

    #[test]
    fn strings_are_json_literals() {
        let args = json!({"k\"ey": "a\\b\nc", "plain": "日本"});
        let sig = signature("t", &args);
        assert_eq!(sig, r#"["t",{"k\"ey":"a\\b\nc","plain":"日本"}]"#);
        // The signature is itself valid JSON that reads back to the same arguments.
        let back: serde_json::Value = serde_json::from_str(&sig).unwrap();
        assert_eq!(back[1], args);
    }
}
