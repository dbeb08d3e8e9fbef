//! The client's side of `response.steer.pending`: answer the `required_input` stubs from
//! saved tool results and build the one continuation request per parent (without the
//! steering input, which the server already holds).

use std::collections::HashMap;

use serde_json::Value;

use crate::types::{
    CreateResponse, CustomToolCallOutput, FunctionCallOutput, Input, Item, ToolOutput,
};
use crate::ws::events::{ApprovalStub, CallStub, RequiredInput, ResponseCreate, SteerPending};

/// A required input the client has no saved result for, or cannot produce.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FillError {
    /// No saved result for this `call_id`.
    #[error("no saved tool result for call `{0}` (required by response.steer.pending)")]
    MissingResult(String),
    /// A stub this client cannot answer from tool results (e.g. an approval).
    #[error("cannot answer required input of type `{0}` from saved tool results")]
    Unsupported(String),
}

/// Answers `pending.required_input` from `saved` results (`call_id` → output text).
///
/// `function_call_output` and `custom_tool_call_output` stubs become output items; other call
/// kinds become `{type, call_id, output}` items; approvals cannot come from tool results.
pub fn fill_required_input(
    pending: &SteerPending,
    saved: &HashMap<String, String>,
) -> Result<Vec<Item>, FillError> {
    let lookup = |stub: &CallStub| {
        saved
            .get(&stub.call_id)
            .cloned()
            .ok_or_else(|| FillError::MissingResult(stub.call_id.clone()))
    };
    let mut items = Vec::new();
    for stub in &pending.required_input {
        let item = match stub {
            RequiredInput::FunctionCallOutput(s) => {
                Item::FunctionCallOutput(FunctionCallOutput::new(&s.call_id, lookup(s)?, None))
            }
            RequiredInput::CustomToolCallOutput(s) => {
                Item::CustomToolCallOutput(CustomToolCallOutput {
                    id: None,
                    call_id: s.call_id.clone(),
                    output: ToolOutput::Text(lookup(s)?),
                    caller: None,
                    extra: serde_json::Map::new(),
                })
            }
            RequiredInput::ComputerCallOutput(s)
            | RequiredInput::ShellCallOutput(s)
            | RequiredInput::ApplyPatchCallOutput(s)
            | RequiredInput::ToolSearchOutput(s) => {
                let kind = stub.type_name().unwrap_or("output").to_owned();
                Item::Other(
                    serde_json::json!({"type": kind, "call_id": s.call_id, "output": lookup(s)?}),
                )
            }
            RequiredInput::McpApprovalResponse(ApprovalStub {
                approval_request_id,
                ..
            }) => {
                return Err(FillError::Unsupported(format!(
                    "mcp_approval_response ({approval_request_id})"
                )));
            }
            RequiredInput::Other(v) => {
                return Err(FillError::Unsupported(
                    v.get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_owned(),
                ));
            }
        };
        items.push(item);
    }
    Ok(items)
}

/// The continuation after `response.steer.pending`: one `response.create` on the parent's
/// lane with `previous_response_id = parent` and only the filled outputs as input (the
/// accepted steering input is **not** resent; the server prepends it). `template` supplies
/// model, tools and other settings.
pub fn fill_request(
    template: &CreateResponse,
    parent: &str,
    lane: Option<String>,
    pending: &SteerPending,
    saved: &HashMap<String, String>,
) -> Result<ResponseCreate, FillError> {
    let items = fill_required_input(pending, saved)?;
    let mut request = template.clone();
    request.input = Some(Input::Items(items));
    request.previous_response_id = Some(Some(parent.to_owned()));
    request.stream = None;
    Ok(ResponseCreate {
        request,
        stream_id: lane,
        generate: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_uses_saved_results_and_no_steer_input() {
        let pending: SteerPending = serde_json::from_str(
            r#"{"steer":{"id":"s1","previous_response_id":"r1"},"reason":"waiting_for_required_input","required_input":[{"type":"function_call_output","call_id":"c1","name":"scan"}]}"#,
        )
        .unwrap();
        let mut saved = HashMap::new();
        assert_eq!(
            fill_required_input(&pending, &saved),
            Err(FillError::MissingResult("c1".into()))
        );
        saved.insert("c1".to_owned(), "ok".to_owned());
        let template = CreateResponse::new("m", Input::Text("first".into()));
        let create = fill_request(&template, "r1", Some("a".into()), &pending, &saved).unwrap();
        let json: Value =
            serde_json::from_str(&crate::ws::ClientEvent::Create(create).to_json().unwrap())
                .unwrap();
        assert_eq!(json["previous_response_id"], "r1");
        assert_eq!(json["stream_id"], "a");
        assert_eq!(
            json["input"],
            serde_json::json!([{"type":"function_call_output","call_id":"c1","output":"ok"}])
        );
    }
}
