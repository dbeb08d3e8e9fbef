//! `text.format` of a request, checked as the API checks it: a `json_schema` format needs a
//! valid name and a schema that is a valid JSON Schema whose root is an object; a `strict`
//! one must follow the strict rules
//! ([`agent_responses::types::text_format::strict_schema_problem`]).
//! A refused format is a 400 `invalid_request_error` with `param: "text.format.schema"` (or
//! `text.format.name`), as the API sends it.

use agent_responses::types::CreateResponse;
use agent_responses::types::text_format::{strict_schema_problem, valid_format_name};
use serde_json::Value;

use crate::validate::ApiFailure;

/// The `type` of the request's `text.format` (`text` when none is given).
pub fn format_type(request: &CreateResponse) -> &str {
    request
        .extra
        .get("text")
        .and_then(|t| t.get("format"))
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("text")
}

/// Refuses a `json_schema` format the API would refuse.
pub fn check(request: &CreateResponse) -> Result<(), ApiFailure> {
    let Some(format) = request.extra.get("text").and_then(|t| t.get("format")) else {
        return Ok(());
    };
    if format.get("type").and_then(Value::as_str) != Some("json_schema") {
        return Ok(());
    }
    let name = format.get("name").and_then(Value::as_str).unwrap_or("");
    if name.is_empty() {
        return Err(ApiFailure::invalid(
            "Missing required parameter: 'text.format.name'.",
            Some("text.format.name"),
            Some("missing_required_parameter"),
        ));
    }
    if !valid_format_name(name) {
        return Err(ApiFailure::invalid(
            format!(
                "Invalid 'text.format.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' and is at most 64 characters, got '{name}'."
            ),
            Some("text.format.name"),
            Some("invalid_value"),
        ));
    }
    let invalid = |why: String| {
        ApiFailure::invalid(
            format!("Invalid schema for response_format '{name}': {why}"),
            Some("text.format.schema"),
            Some("invalid_json_schema"),
        )
    };
    let Some(schema) = format.get("schema").filter(|s| s.is_object()) else {
        return Err(invalid("schema must be a JSON object.".into()));
    };
    if let Err(err) = jsonschema::validator_for(schema) {
        return Err(invalid(format!("{err}.")));
    }
    match schema.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        other => {
            let got = other.map_or_else(|| "None".to_string(), Value::to_string);
            return Err(invalid(format!(
                "schema must be a JSON Schema of 'type: \"object\"', got 'type: {got}'."
            )));
        }
    }
    if format.get("strict").and_then(Value::as_bool) == Some(true)
        && let Some(problem) = strict_schema_problem(schema)
    {
        return Err(invalid(problem));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(format: Value) -> CreateResponse {
        serde_json::from_value(json!({"model": "m", "input": "hi", "text": {"format": format}}))
            .unwrap()
    }

    #[test]
    fn a_valid_strict_schema_passes() {
        let req = request(json!({"type": "json_schema", "name": "out", "strict": true,
            "schema": {"type": "object", "additionalProperties": false,
                       "properties": {"a": {"type": "string"}}, "required": ["a"]}}));
        assert_eq!(check(&req), Ok(()));
        assert_eq!(format_type(&req), "json_schema");
    }

    #[test]
    fn malformed_schemas_are_refused_like_the_api() {
        for (format, expect) in [
            (
                json!({"type": "json_schema", "name": "out", "schema": {"type": "objekt"}}),
                "Invalid schema for response_format 'out'",
            ),
            (
                json!({"type": "json_schema", "name": "out", "schema": {"type": "array"}}),
                "'type: \"object\"'",
            ),
            (
                json!({"type": "json_schema", "name": "out", "strict": true,
                       "schema": {"type": "object", "properties": {"a": {}}}}),
                "'additionalProperties' is required",
            ),
            (
                json!({"type": "json_schema", "name": "out", "schema": 3}),
                "must be a JSON object",
            ),
        ] {
            let err = check(&request(format)).unwrap_err();
            assert_eq!(err.status, 400);
            assert_eq!(err.kind, "invalid_request_error");
            assert_eq!(err.param.as_deref(), Some("text.format.schema"));
            assert_eq!(err.code.as_deref(), Some("invalid_json_schema"));
            assert!(err.message.contains(expect), "{}", err.message);
        }
        let unnamed = check(&request(json!({"type": "json_schema", "schema": {}}))).unwrap_err();
        assert_eq!(unnamed.param.as_deref(), Some("text.format.name"));
    }

    #[test]
    fn other_formats_are_not_checked() {
        assert_eq!(check(&request(json!({"type": "text"}))), Ok(()));
        let plain: CreateResponse = serde_json::from_value(json!({"model": "m"})).unwrap();
        assert_eq!(format_type(&plain), "text");
    }
}
