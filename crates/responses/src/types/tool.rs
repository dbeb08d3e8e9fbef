//! Tool definitions: the `tools` array of a request
//! (<https://platform.openai.com/docs/api-reference/responses/create>).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::item::Fields;
use super::tagged::{EmitsTag, Nullable, nullable, tagged_union};

tagged_union! {
    /// A tool the model may call. Hosted and future tools are kept verbatim in `Other`.
    pub enum ToolDefinition {
        /// A function the client runs, with JSON arguments.
        Function(FunctionTool) = "function",
        /// A tool the client runs, with free-text input.
        Custom(CustomTool) = "custom",
        /// `{"type":"programmatic_tool_calling"}`: lets the model run programs that call tools.
        ProgrammaticToolCalling(Fields) = "programmatic_tool_calling",
    }
}

/// A function tool. `parameters` and `strict` are nullable-but-required on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionTool {
    /// The name the model calls it by; unique among the request's tools.
    pub name: String,
    /// What the tool does, for the model.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub description: Nullable<String>,
    /// The JSON Schema of the arguments.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub parameters: Nullable<Value>,
    /// Whether the model must follow `parameters` exactly.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub strict: Nullable<bool>,
    /// `["direct"]`, `["programmatic"]` or both.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub allowed_callers: Nullable<Vec<String>>,
    /// JSON Schema of the JSON value encoded in this tool's string outputs.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub output_schema: Nullable<Value>,
    /// Async tools let the model keep working before the output arrives.
    #[serde(rename = "async", default, skip_serializing_if = "Option::is_none")]
    pub is_async: Option<bool>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for FunctionTool {}

impl FunctionTool {
    /// A function tool with a parameters schema, `strict` when the schema keeps the API's
    /// strict rules ([`strict_schema_problem`]): the API refuses a whole request whose strict
    /// function breaks one.
    ///
    /// [`strict_schema_problem`]: super::text_format::strict_schema_problem
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        let strict = super::text_format::strict_schema_problem(&parameters).is_none();
        Self {
            name: name.into(),
            description: Some(Some(description.into())),
            parameters: Some(Some(parameters)),
            strict: Some(Some(strict)),
            allowed_callers: None,
            output_schema: None,
            is_async: None,
            extra: Map::new(),
        }
    }
}

/// A custom (free-text input) tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomTool {
    /// The name the model calls it by; unique among the request's tools.
    pub name: String,
    /// The wire `async` flag: the model goes on without waiting for this call's output (absent and `null` kept apart).
    #[serde(rename = "async", default, skip_serializing_if = "Option::is_none")]
    pub is_async: Option<bool>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for CustomTool {}

impl ToolDefinition {
    /// The tool's name, for named tools.
    pub fn name(&self) -> Option<&str> {
        match self {
            ToolDefinition::Function(f) => Some(&f.name),
            ToolDefinition::Custom(c) => Some(&c.name),
            ToolDefinition::ProgrammaticToolCalling(_) => None,
            ToolDefinition::Other(v) => v.get("name").and_then(Value::as_str),
        }
    }
    /// Whether this tool was declared `async: true`.
    pub fn is_async(&self) -> bool {
        match self {
            ToolDefinition::Function(f) => f.is_async == Some(true),
            ToolDefinition::Custom(c) => c.is_async == Some(true),
            ToolDefinition::ProgrammaticToolCalling(_) => false,
            ToolDefinition::Other(v) => v.get("async").and_then(Value::as_bool) == Some(true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_function_is_strict_only_when_its_schema_allows() {
        let closed = json!({"type": "object", "properties": {"n": {"type": "integer"}},
            "required": ["n"], "additionalProperties": false});
        assert_eq!(FunctionTool::new("f", "d", closed).strict, Some(Some(true)));
        let open = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        assert_eq!(FunctionTool::new("f", "d", open).strict, Some(Some(false)));
    }
}
