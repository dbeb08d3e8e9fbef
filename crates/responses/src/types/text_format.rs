//! `text.format`: structured output (`{"type": "json_schema", "name", "schema", "strict"}`),
//! and the rule for when a schema may be sent `strict`.
//!
//! The API's strict mode takes a subset of JSON Schema: every object schema lists every
//! one of its `properties` in `required` and has `additionalProperties: false`.
//! [`strict_schema_problem`] says which rule a schema breaks, in the API's words, so a
//! client can fall back to `strict: false` and the emulator can refuse what the API refuses.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A `json_schema` text format, as a request's `text.format` carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonSchemaFormat {
    /// Always `json_schema`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The format's name (`^[a-zA-Z0-9_-]{1,64}$`).
    pub name: String,
    /// The JSON Schema of the answer (its root is an object schema).
    pub schema: Value,
    /// Whether the model is held to the schema exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

impl JsonSchemaFormat {
    /// A `json_schema` format named `name`: `strict` when the schema allows it.
    pub fn new(name: impl Into<String>, schema: Value) -> JsonSchemaFormat {
        let strict = strict_schema_problem(&schema).is_none();
        JsonSchemaFormat {
            kind: "json_schema".into(),
            name: name.into(),
            schema,
            strict: Some(strict),
        }
    }
}

/// Whether `name` is a name the API takes for a format: 1 to 64 of `a-zA-Z0-9_-`.
pub fn valid_format_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `schema` made strict where that keeps what it accepts from a generator's point of view:
/// in every closed object (`additionalProperties: false`), each property left out of
/// `required` is added to it when the property's schema accepts `null` (an optional field,
/// as `Option<T>` derives: the model then sends `null` for "absent"). `None` when a
/// property that is not required cannot be `null`, or the result still breaks a rule of
/// [`strict_schema_problem`].
pub fn strict_version(schema: &Value) -> Option<Value> {
    let mut strict = schema.clone();
    require_nullables(&mut strict)?;
    strict_schema_problem(&strict).is_none().then_some(strict)
}

fn require_nullables(schema: &mut Value) -> Option<()> {
    let Some(obj) = schema.as_object_mut() else {
        return Some(());
    };
    if obj.get("additionalProperties") == Some(&Value::Bool(false))
        && let Some(Value::Object(props)) = obj.get("properties")
    {
        let required: Vec<Value> = match obj.get("required") {
            Some(Value::Array(r)) => r.clone(),
            _ => Vec::new(),
        };
        let mut all = required.clone();
        for (key, sub) in props {
            if !required.iter().any(|r| r == key) {
                if !accepts_null(sub) {
                    return None;
                }
                all.push(Value::String(key.clone()));
            }
        }
        obj.insert("required".into(), Value::Array(all));
    }
    for keyword in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(map)) = obj.get_mut(keyword) {
            for sub in map.values_mut() {
                require_nullables(sub)?;
            }
        }
    }
    for keyword in ["items", "anyOf", "allOf", "oneOf", "prefixItems"] {
        match obj.get_mut(keyword) {
            Some(Value::Array(list)) => {
                for sub in list {
                    require_nullables(sub)?;
                }
            }
            Some(one @ Value::Object(_)) => require_nullables(one)?,
            _ => {}
        }
    }
    Some(())
}

/// Whether `schema` says outright that `null` is valid: `"type": "null"` or a type list
/// with it, or an `anyOf`/`oneOf` branch that does (a `$ref` alone is not looked into).
fn accepts_null(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) if t == "null" => return true,
        Some(Value::Array(ts)) if ts.iter().any(|t| t == "null") => return true,
        _ => {}
    }
    ["anyOf", "oneOf"].iter().any(|k| {
        schema
            .get(k)
            .and_then(Value::as_array)
            .is_some_and(|branches| branches.iter().any(accepts_null))
    })
}

/// The first rule of strict mode that `schema` breaks, worded as the API words it
/// (`In context=('properties', 'a'), ...`); `None` when it may be sent `strict`.
///
/// The root must be an object schema (`"type": "object"`), as the API requires of a
/// function's parameters and of a format's schema.
pub fn strict_schema_problem(schema: &Value) -> Option<String> {
    match schema.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        other => {
            let got = other.map_or_else(|| "None".to_string(), Value::to_string);
            return Some(format!(
                "schema must be a JSON Schema of 'type: \"object\"', got 'type: {got}'."
            ));
        }
    }
    let mut context = Vec::new();
    problem_at(schema, &mut context)
}

fn problem_at(schema: &Value, context: &mut Vec<String>) -> Option<String> {
    let obj = schema.as_object()?;
    let is_object = match obj.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => obj.contains_key("properties"),
    };
    let here = || {
        let parts: Vec<String> = context.iter().map(|c| format!("'{c}'")).collect();
        match parts.len() {
            1 => format!("({},)", parts.join(", ")),
            _ => format!("({})", parts.join(", ")),
        }
    };
    if is_object {
        if obj.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Some(format!(
                "In context={}, 'additionalProperties' is required to be supplied and to be false.",
                here()
            ));
        }
        let required: Vec<&str> = match obj.get("required") {
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if let Some(Value::Object(props)) = obj.get("properties")
            && let Some(missing) = props.keys().find(|k| !required.contains(&k.as_str()))
        {
            return Some(format!(
                "In context={}, 'required' is required to be supplied and to be an array including every key in properties. Missing '{missing}'.",
                here()
            ));
        }
    }
    // Subschemas: under properties and $defs by key, under items and the combinators.
    for keyword in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(map)) = obj.get(keyword) {
            for (key, sub) in map {
                context.push(keyword.to_string());
                context.push(key.clone());
                let found = problem_at(sub, context);
                context.truncate(context.len() - 2);
                if found.is_some() {
                    return found;
                }
            }
        }
    }
    for keyword in ["items", "anyOf", "allOf", "oneOf", "prefixItems"] {
        let subs: Vec<&Value> = match obj.get(keyword) {
            Some(Value::Array(list)) => list.iter().collect(),
            Some(one @ Value::Object(_)) => vec![one],
            _ => continue,
        };
        for (i, sub) in subs.into_iter().enumerate() {
            context.push(keyword.to_string());
            context.push(i.to_string());
            let found = problem_at(sub, context);
            context.truncate(context.len() - 2);
            if found.is_some() {
                return found;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_closed_schema_with_every_property_required_is_strict() {
        let schema = json!({"type": "object", "additionalProperties": false,
            "required": ["a", "b"],
            "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {
                "type": "object", "additionalProperties": false, "required": ["c"],
                "properties": {"c": {"type": "integer"}}}}}});
        assert_eq!(strict_schema_problem(&schema), None);
        assert_eq!(JsonSchemaFormat::new("out", schema).strict, Some(true));
    }

    #[test]
    fn optional_fields_of_a_closed_object_become_required_nullables() {
        let schema = json!({"type": "object", "additionalProperties": false,
            "required": ["city"],
            "properties": {"city": {"type": "string"}, "units": {"type": ["string", "null"]},
                "at": {"anyOf": [{"$ref": "#/$defs/When"}, {"type": "null"}]}},
            "$defs": {"When": {"type": "object", "additionalProperties": false,
                "properties": {"day": {"type": ["integer", "null"]}}}}});
        assert!(strict_schema_problem(&schema).is_some());
        let strict = strict_version(&schema).unwrap();
        assert_eq!(strict["required"], json!(["city", "units", "at"]));
        assert_eq!(strict["$defs"]["When"]["required"], json!(["day"]));
        assert_eq!(strict_schema_problem(&strict), None);
        // A field that may be left out but not be null, or an open object: not strict.
        let defaulted = json!({"type": "object", "additionalProperties": false,
            "properties": {"n": {"type": "integer"}}});
        assert_eq!(strict_version(&defaulted), None);
        let open = json!({"type": "object", "properties": {"n": {"type": ["integer", "null"]}}});
        assert_eq!(strict_version(&open), None);
    }

    #[test]
    fn an_open_or_partly_required_object_is_not_strict() {
        let open =
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
        let problem = strict_schema_problem(&open).unwrap_or_default();
        assert!(problem.contains("'additionalProperties'"), "{problem}");
        assert!(problem.contains("context=()"), "{problem}");
        let nested = json!({"type": "object", "additionalProperties": false, "required": ["a"],
            "properties": {"a": {"type": "object", "additionalProperties": false,
                "properties": {"x": {}, "y": {}}, "required": ["x"]}}});
        let problem = strict_schema_problem(&nested).unwrap_or_default();
        assert!(problem.contains("Missing 'y'"), "{problem}");
        assert!(problem.contains("('properties', 'a')"), "{problem}");
        assert_eq!(JsonSchemaFormat::new("out", nested).strict, Some(false));
    }

    #[test]
    fn format_names_follow_the_api() {
        assert!(valid_format_name("answer_v2-x"));
        assert!(!valid_format_name(""));
        assert!(!valid_format_name("has space"));
        assert!(!valid_format_name(&"a".repeat(65)));
    }
}
