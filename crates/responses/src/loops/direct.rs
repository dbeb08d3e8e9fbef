//! The direct (and PTC) tool loop: stateless, the whole history resent each turn.
//!
//! Invariants: every output item is appended to the history verbatim (reasoning, program,
//! messages, calls); each call_id gets exactly one output, computed once and reused when the
//! model repeats the call_id with the same name/arguments/caller; a repeat with anything
//! else is [`LoopError::CallIdCollision`]; at most `max_turns` model requests.

use std::collections::HashMap;

use super::{LoopConfig, LoopError, ToolExecutor, output_for};
use crate::http::Client;
use crate::types::{CreateResponse, FunctionCall, FunctionCallOutput, Input, Item, Response};

/// Model turns a loop allows by default before it gives up.
pub const MAX_MODEL_TURNS: usize = 12;

/// The end of a direct loop.
#[derive(Debug, Clone)]
pub struct DirectOutcome {
    /// The final response, with the model's answer.
    pub response: Response,
    /// Everything sent and received, in order: the conversation to continue from.
    pub history: Vec<Item>,
    /// Model requests made.
    pub turns: usize,
    /// Tool executions actually run (cached repeats are not counted).
    pub executions: usize,
}

/// Runs the loop until a response has a message and no calls.
///
/// # Cancel safety
///
/// Not cancel safe: dropping the future loses the history, with the responses already
/// created (and billed) and the tool outputs already computed; a request in progress may
/// still create a response on the server. A tool call in progress is dropped as in
/// [`output_for`].
pub async fn run_direct<E: ToolExecutor>(
    client: &Client,
    config: &LoopConfig,
    input: Vec<Item>,
    executor: &E,
) -> Result<DirectOutcome, LoopError> {
    let mut history = input;
    let mut done: HashMap<String, (String, FunctionCallOutput)> = HashMap::new();
    let mut executions = 0;
    for turn in 1..=config.max_turns {
        let mut request = CreateResponse::new(config.model.clone(), Input::Items(history.clone()));
        request.store = Some(Some(false));
        request.tools = Some(config.tools.clone());
        request.instructions = config.instructions.clone().map(Some);
        request.include = Some(vec!["reasoning.encrypted_content".into()]);
        let response = client.create(&request).await?;
        if !response.is_completed() {
            return Err(LoopError::NotCompleted {
                status: response.status.clone().unwrap_or_else(|| "none".into()),
            });
        }
        history.extend(response.output.iter().cloned());
        let calls: Vec<&FunctionCall> = response
            .output
            .iter()
            .filter_map(|item| match item {
                Item::FunctionCall(call) => Some(call),
                _ => None,
            })
            .collect();
        let has_message = response
            .output
            .iter()
            .any(|item| matches!(item, Item::Message(_)));
        if calls.is_empty() && has_message {
            return Ok(DirectOutcome {
                response,
                history,
                turns: turn,
                executions,
            });
        }
        // Serial dispatch is intentional: the application owns execution policy.
        for call in calls {
            let signature = signature(call);
            match done.get(&call.call_id) {
                Some((seen, _)) if *seen != signature => {
                    return Err(LoopError::CallIdCollision {
                        call_id: call.call_id.clone(),
                    });
                }
                Some(_) => {}
                None => {
                    let output = output_for(executor, call).await;
                    executions += 1;
                    done.insert(call.call_id.clone(), (signature, output));
                }
            }
            if let Some((_, output)) = done.get(&call.call_id) {
                history.push(Item::FunctionCallOutput(output.clone()));
            }
        }
    }
    Err(LoopError::TurnBudget(config.max_turns))
}

/// Canonical identity of a call: name, arguments and caller.
fn signature(call: &FunctionCall) -> String {
    let caller = serde_json::to_string(&call.caller()).unwrap_or_default();
    serde_json::to_string(&[call.name.as_str(), call.arguments.as_str(), caller.as_str()])
        .unwrap_or_default()
}
