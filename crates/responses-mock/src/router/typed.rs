//! A request body that is JSON but does not fit the request's types, answered as the API
//! answers it: a 400 `invalid_request_error` with `code: "invalid_type"` and `param` naming
//! the field (`Invalid type for 'model': expected a string, but got an integer instead.`).
//! Only a body that is not JSON at all gets "We could not parse the JSON body".

use serde_json::{Map, Value};

use super::replies::parse_failure;
use crate::validate::{ApiFailure, invalid_type};

/// The JSON types a top-level field accepts.
#[derive(Debug, Clone, Copy)]
pub(super) enum Expect {
    /// A string, never `null`.
    String,
    /// A string or `null`.
    NullableString,
    /// A boolean or `null`.
    NullableBool,
    /// `input`: a string, an array of item objects, or `null`.
    Input,
    /// An array of objects, or `null` (`tools`).
    Objects,
    /// An array of strings, or `null` (`include`).
    Strings,
}

/// The fields of `POST /v1/responses` whose type the emulator reads.
pub(super) const CREATE_FIELDS: &[(&str, Expect)] = &[
    ("model", Expect::String),
    ("input", Expect::Input),
    ("instructions", Expect::NullableString),
    ("tools", Expect::Objects),
    ("previous_response_id", Expect::NullableString),
    ("store", Expect::NullableBool),
    ("stream", Expect::NullableBool),
    ("include", Expect::Strings),
];

/// The fields of `POST /v1/responses/compact` whose type the emulator reads.
pub(super) const COMPACT_FIELDS: &[(&str, Expect)] = &[
    ("model", Expect::String),
    ("input", Expect::Input),
    ("previous_response_id", Expect::NullableString),
    ("instructions", Expect::NullableString),
];

/// Why `body` could not be read as a request (`err`, serde's reason): the first field of
/// `fields` with a wrong type, else the body's own problem.
pub(super) fn explain(
    body: &[u8],
    err: &serde_json::Error,
    fields: &[(&str, Expect)],
) -> ApiFailure {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return parse_failure(err);
    };
    let Value::Object(map) = &value else {
        return invalid_type("body", "an object", &value);
    };
    first_wrong(map, fields).unwrap_or_else(|| {
        ApiFailure::invalid(
            format!("Invalid request body: {err}."),
            None,
            Some("invalid_value"),
        )
    })
}

/// The first field of a WebSocket `response.create` frame (the request's fields sit beside
/// `type`) that has the wrong type; `None` for any other frame, or one whose fields fit.
pub(crate) fn create_frame_wrong(frame: &str) -> Option<ApiFailure> {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(frame) else {
        return None;
    };
    if map.get("type").and_then(Value::as_str) != Some("response.create") {
        return None;
    }
    first_wrong(&map, CREATE_FIELDS)
}

fn first_wrong(map: &Map<String, Value>, fields: &[(&str, Expect)]) -> Option<ApiFailure> {
    fields.iter().find_map(|(name, expect)| {
        let value = map.get(*name)?;
        match (expect, value) {
            (Expect::String, Value::String(_))
            | (Expect::NullableString | Expect::Input, Value::String(_) | Value::Null)
            | (Expect::NullableBool, Value::Bool(_) | Value::Null)
            | (Expect::Objects | Expect::Strings, Value::Null) => None,
            (Expect::Input, Value::Array(items)) => items_wrong(name, items, "an object"),
            (Expect::Objects, Value::Array(items)) => items_wrong(name, items, "an object"),
            (Expect::Strings, Value::Array(items)) => items_wrong(name, items, "a string"),
            (Expect::String | Expect::NullableString, _) => {
                Some(invalid_type(name, "a string", value))
            }
            (Expect::NullableBool, _) => Some(invalid_type(name, "a boolean", value)),
            (Expect::Input, _) => Some(invalid_type(
                name,
                "a string or an array of input items",
                value,
            )),
            (Expect::Objects | Expect::Strings, _) => Some(invalid_type(name, "an array", value)),
        }
    })
}

/// The first element of array `name` that is not `want` (`an object` or `a string`), or
/// that is an object the emulator cannot read (`invalid_value`).
fn items_wrong(name: &str, items: &[Value], want: &str) -> Option<ApiFailure> {
    items.iter().enumerate().find_map(|(n, item)| {
        let param = format!("{name}[{n}]");
        match item {
            Value::Object(_) if want == "an object" => {
                let reason = if name == "input" {
                    serde_json::from_value::<agent_responses::types::Item>(item.clone()).err()
                } else {
                    serde_json::from_value::<agent_responses::types::ToolDefinition>(item.clone())
                        .err()
                }?;
                Some(ApiFailure::invalid(
                    format!("Invalid value for '{param}': {reason}."),
                    Some(&param),
                    Some("invalid_value"),
                ))
            }
            Value::String(_) if want == "a string" => None,
            other => Some(invalid_type(&param, want, other)),
        }
    })
}
