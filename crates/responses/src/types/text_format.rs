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

/// The first rule of strict mode that `schema` breaks, worded as the API words it
/// (`In context=('properties', 'a'), ...`); `None` when it may be sent `strict`.
pub fn strict_schema_problem(schema: &Value) -> Option<String> {
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
