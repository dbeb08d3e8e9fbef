//! A request's function tools, checked as the API checks them before any model work: a
//! function's `parameters` must be an object schema, and a `strict` function's must keep
//! the strict rules ([`agent_responses::types::text_format::strict_schema_problem`]). The
//! API refuses the whole request (400 `invalid_request_error`,
//! `param: "tools[i].parameters"`), so a client that sends a schema the API would refuse
//! fails here as it would there.

use agent_responses::types::text_format::strict_schema_problem;
use agent_responses::types::{CreateResponse, ToolDefinition};
use serde_json::Value;

use crate::validate::ApiFailure;

/// Refuses the first function tool whose schema the API would refuse.
pub fn check(request: &CreateResponse) -> Result<(), ApiFailure> {
    for (i, tool) in request.tools.iter().flatten().enumerate() {
        let ToolDefinition::Function(function) = tool else {
            continue;
        };
        let Some(Some(parameters)) = &function.parameters else {
            continue;
        };
        let strict = function.strict == Some(Some(true));
        let problem = match parameters.get("type") {
            Some(Value::String(t)) if t == "object" => {
                if strict {
                    strict_schema_problem(parameters)
                } else {
                    None
                }
            }
            // The root rule holds strict or not: `strict_schema_problem` words it.
            _ => strict_schema_problem(parameters),
        };
        if let Some(problem) = problem {
            return Err(ApiFailure::invalid(
                format!("Invalid schema for function '{}': {problem}", function.name),
                Some(&format!("tools[{i}].parameters")),
                Some("invalid_function_parameters"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(tools: Value) -> CreateResponse {
        serde_json::from_value(json!({"model": "m", "input": "hi", "tools": tools})).unwrap()
    }

    fn function(parameters: Value, strict: bool) -> Value {
        json!({"type": "function", "name": "f", "parameters": parameters, "strict": strict})
    }

    #[test]
    fn a_strict_function_must_keep_the_strict_rules() {
        let optional = json!({"type": "object", "properties": {"path": {"type": "string"}},
            "additionalProperties": false});
        let err = check(&request(json!([function(optional.clone(), true)]))).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("tools[0].parameters"));
        assert!(
            err.message.contains("Invalid schema for function 'f'"),
            "{}",
            err.message
        );
        assert!(err.message.contains("Missing 'path'"), "{}", err.message);
        // Not strict, the same schema is taken.
        assert_eq!(check(&request(json!([function(optional, false)]))), Ok(()));
        let required = json!({"type": "object", "properties": {"path": {"type": ["string", "null"]}},
            "required": ["path"], "additionalProperties": false});
        assert_eq!(check(&request(json!([function(required, true)]))), Ok(()));
    }

    #[test]
    fn a_function_takes_only_an_object_schema() {
        for strict in [false, true] {
            let err = check(&request(json!([
                {"type": "custom", "name": "c"},
                function(json!({"type": "null"}), strict)
            ])))
            .unwrap_err();
            assert_eq!(err.param.as_deref(), Some("tools[1].parameters"));
            assert!(
                err.message.contains("'type: \"object\"'"),
                "{}",
                err.message
            );
        }
        assert_eq!(
            check(&request(json!([{"type": "function", "name": "g"}]))),
            Ok(())
        );
    }
}
