//! Request validation with the API's messages and error body
//! (<https://platform.openai.com/docs/guides/error-codes>).
//!
//! Invariants checked over the full context (the `previous_response_id` chain plus `input`):
//! every output refers to an earlier call; every non-async call has an output; outputs of
//! program-made calls echo the call's `caller`; `program` and `compaction` items carry the
//! fingerprint / encrypted content this emulator issued.

use std::collections::{HashMap, HashSet};

use agent_responses::types::{Caller, Input, Item};
use axum::http::HeaderMap;

/// An API error as the emulator sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiFailure {
    /// The HTTP status (for WebSocket mode: the `status` of the `error` event).
    pub status: u16,
    /// The error body's `message`, worded as the API words it.
    pub message: String,
    /// The error body's `type`, e.g. `invalid_request_error`.
    pub kind: String,
    /// The error body's `code`, when the API sends one.
    pub code: Option<String>,
    /// The error body's `param`: the request field at fault.
    pub param: Option<String>,
    /// Extra response headers (lower-case names), e.g. `retry-after`.
    pub headers: Vec<(String, String)>,
}

impl ApiFailure {
    /// A 400 `invalid_request_error`.
    pub fn invalid(message: impl Into<String>, param: Option<&str>, code: Option<&str>) -> Self {
        Self {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error".into(),
            code: code.map(str::to_owned),
            param: param.map(str::to_owned),
            headers: Vec::new(),
        }
    }

    /// The `{"error": {...}}` body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

/// Checks the bearer key: missing or wrong gives 401. `expected = None` accepts any key.
pub fn check_auth(headers: &HeaderMap, expected: Option<&str>) -> Result<(), ApiFailure> {
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let unauthorized = |message: &str, code: Option<&str>| ApiFailure {
        status: 401,
        message: message.to_owned(),
        kind: "invalid_request_error".into(),
        code: code.map(str::to_owned),
        param: None,
        headers: Vec::new(),
    };
    match (given, expected) {
        (None, _) => Err(unauthorized(
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys.",
            None,
        )),
        (Some(given), Some(expected)) if given != expected => Err(unauthorized(
            "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
            Some("invalid_api_key"),
        )),
        (Some(_), _) => Ok(()),
    }
}

/// What the emulator issued, to check that opaque items come back whole.
#[derive(Debug, Default)]
pub struct Issued {
    /// program call_id -> fingerprint.
    pub programs: HashMap<String, String>,
    /// encrypted_content of compaction items.
    pub compactions: HashSet<String>,
}

/// Validates call/output pairing and opaque items over `context`.
pub fn check_context(context: &[Item], issued: &Issued) -> Result<(), ApiFailure> {
    let mut calls: HashMap<&str, (Option<&Caller>, bool)> = HashMap::new();
    let mut answered: HashSet<&str> = HashSet::new();
    for item in context {
        match item {
            Item::FunctionCall(call) => {
                calls.insert(&call.call_id, (call.caller(), call.is_async()));
            }
            Item::CustomToolCall(call) => {
                let is_async = matches!(call.is_async, Some(Some(true)));
                calls.insert(&call.call_id, (None, is_async));
            }
            Item::FunctionCallOutput(out) => {
                let Some((caller, _)) = calls.get(out.call_id.as_str()) else {
                    return Err(ApiFailure::invalid(
                        format!(
                            "No tool call found for function call output with call_id {}.",
                            out.call_id
                        ),
                        Some("input"),
                        None,
                    ));
                };
                if let Some(Caller::Program(_)) = caller
                    && out.caller() != *caller
                {
                    return Err(ApiFailure::invalid(
                        format!(
                            "Function call output for call_id {} must echo the caller of its program-made call.",
                            out.call_id
                        ),
                        Some("input"),
                        None,
                    ));
                }
                answered.insert(&out.call_id);
            }
            Item::CustomToolCallOutput(out) => {
                if !calls.contains_key(out.call_id.as_str()) {
                    return Err(ApiFailure::invalid(
                        format!(
                            "No tool call found for custom tool call output with call_id {}.",
                            out.call_id
                        ),
                        Some("input"),
                        None,
                    ));
                }
                answered.insert(&out.call_id);
            }
            Item::Program(program) => {
                if let Some(fingerprint) = issued.programs.get(&program.call_id)
                    && *fingerprint != program.fingerprint
                {
                    return Err(ApiFailure::invalid(
                        format!(
                            "Program item {} must be round-tripped with its fingerprint.",
                            program.call_id
                        ),
                        Some("input"),
                        None,
                    ));
                }
            }
            Item::Compaction(compaction) => {
                if !issued.compactions.contains(&compaction.encrypted_content)
                    && !crate::sealed::verifies(&compaction.encrypted_content)
                {
                    let id = compaction.id.as_deref().unwrap_or("(no id)");
                    return Err(ApiFailure::invalid(
                        format!("The encrypted content for item {id} could not be verified."),
                        Some("input"),
                        Some("invalid_encrypted_content"),
                    ));
                }
            }
            Item::Message(_) | Item::Reasoning(_) | Item::ProgramOutput(_) | Item::Other(_) => {}
        }
    }
    // Report the first unanswered call in context order, as the API does.
    for item in context {
        let (call_id, is_async) = match item {
            Item::FunctionCall(call) => (call.call_id.as_str(), call.is_async()),
            Item::CustomToolCall(call) => (
                call.call_id.as_str(),
                matches!(call.is_async, Some(Some(true))),
            ),
            _ => continue,
        };
        if !is_async && !answered.contains(call_id) {
            return Err(ApiFailure::invalid(
                format!("No tool output found for function call {call_id}."),
                Some("input"),
                None,
            ));
        }
    }
    Ok(())
}

/// The item types the API takes in `input` (any output item can come back, plus
/// `item_reference` and the steering and configuration items); another is refused.
const INPUT_ITEM_TYPES: &[&str] = &[
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "compaction",
    "program",
    "program_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "file_search_call",
    "web_search_call",
    "computer_call",
    "computer_call_output",
    "tool_search_call",
    "tool_search_output",
    "additional_tools",
    "image_generation_call",
    "code_interpreter_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "item_reference",
    "compaction_trigger",
    "configuration_update",
];

/// Refuses an item of the request's own `input` whose `type` the API does not know (a
/// 400 with `param: "input[N].type"`), or whose `type` is not a string. A text input, or
/// none, has no items to check.
pub fn check_input_types(input: Option<&Input>) -> Result<(), ApiFailure> {
    let Some(Input::Items(items)) = input else {
        return Ok(());
    };
    for (n, item) in items.iter().enumerate() {
        let Item::Other(value) = item else {
            continue;
        };
        let param = format!("input[{n}].type");
        match value.get("type") {
            Some(serde_json::Value::String(kind)) if INPUT_ITEM_TYPES.contains(&kind.as_str()) => {}
            Some(serde_json::Value::String(kind)) => {
                let supported: Vec<String> =
                    INPUT_ITEM_TYPES.iter().map(|t| format!("'{t}'")).collect();
                return Err(ApiFailure::invalid(
                    format!(
                        "Invalid value: '{kind}'. Supported values are: {}.",
                        supported.join(", ")
                    ),
                    Some(&param),
                    Some("invalid_value"),
                ));
            }
            Some(other) => return Err(invalid_type(&param, "a string", other)),
            None => {}
        }
    }
    Ok(())
}

/// `Invalid type for 'param': expected WANT, but got GOT instead.`, as the API words a
/// field of the wrong JSON type (`code: "invalid_type"`).
pub fn invalid_type(param: &str, want: &str, got: &serde_json::Value) -> ApiFailure {
    ApiFailure::invalid(
        format!(
            "Invalid type for '{param}': expected {want}, but got {} instead.",
            json_type(got)
        ),
        Some(param),
        Some("invalid_type"),
    )
}

/// How the API names the type of `value`.
fn json_type(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a decimal",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `previous_response_id` names no stored response.
pub fn previous_not_found(id: &str) -> ApiFailure {
    ApiFailure::invalid(
        format!("Previous response with id '{id}' not found."),
        Some("previous_response_id"),
        Some("previous_response_not_found"),
    )
}
