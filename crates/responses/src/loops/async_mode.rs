//! The async tool loop: stream one response, dispatch each async call the moment its
//! `response.output_item.done` arrives (before the stream ends), then send the outputs in a
//! follow-up with `previous_response_id` and `tool_choice: "none"`.

use std::collections::HashSet;
use std::sync::Arc;

use super::{LoopConfig, LoopError, ToolExecutor, output_for};
use crate::http::Client;
use crate::types::{CreateResponse, FunctionCallOutput, Input, Item, Response, StreamEvent};

/// The end of an async run.
#[derive(Debug, Clone)]
pub struct AsyncOutcome {
    /// The streamed response (completed).
    pub first: Response,
    /// The outputs, in dispatch order, as sent in the follow-up.
    pub outputs: Vec<FunctionCallOutput>,
    /// The follow-up response (completed).
    pub follow: Response,
}

/// The dispatched calls' tasks, aborted when the run ends early or its future is dropped
/// (aborting a finished task does nothing).
struct Jobs(Vec<tokio::task::JoinHandle<FunctionCallOutput>>);

impl Drop for Jobs {
    fn drop(&mut self) {
        for job in &self.0 {
            job.abort();
        }
    }
}

/// Runs the async flow; `on_event` sees every stream event (e.g. to print text deltas).
///
/// # Cancel safety
///
/// Not cancel safe. Tool calls already dispatched run in tasks of their own, which dropping
/// the future (or an early error return) aborts at their next await: what a call did before
/// that stays done. Responses already created (and billed), or being created by the request
/// in progress, are lost to the caller.
pub async fn run_async<E, F>(
    client: &Client,
    config: &LoopConfig,
    input: Input,
    executor: Arc<E>,
    mut on_event: F,
) -> Result<AsyncOutcome, LoopError>
where
    E: ToolExecutor + 'static,
    F: FnMut(&StreamEvent),
{
    let mut request = CreateResponse::new(config.model.clone(), input);
    request.tools = Some(config.tools.clone());
    request.instructions = config.instructions.clone().map(Some);
    let mut stream = client.create_stream(&request).await?;
    let mut seen = HashSet::new();
    let mut jobs = Jobs(Vec::new());
    let mut last = None;
    while let Some(event) = stream.next().await {
        let event = event?;
        on_event(&event);
        match event {
            StreamEvent::OutputItemDone(done) => {
                if let Item::FunctionCall(call) = done.item {
                    if !call.is_async() {
                        return Err(LoopError::NotAsync {
                            call_id: call.call_id,
                        });
                    }
                    if !seen.insert(call.call_id.clone()) {
                        return Err(LoopError::DuplicateStreamCall {
                            call_id: call.call_id,
                        });
                    }
                    let executor = Arc::clone(&executor);
                    jobs.0.push(tokio::spawn(async move {
                        output_for(executor.as_ref(), &call).await
                    }));
                }
            }
            StreamEvent::Completed(e) => last = Some(e.response),
            StreamEvent::Failed(_) => {
                return Err(LoopError::StreamFailed {
                    event_type: "response.failed".into(),
                });
            }
            StreamEvent::Incomplete(_) => {
                return Err(LoopError::StreamFailed {
                    event_type: "response.incomplete".into(),
                });
            }
            _ => {}
        }
    }
    let first = match last {
        Some(first) if !jobs.0.is_empty() => first,
        Some(_) => return Err(LoopError::NoAsyncCall),
        None => return Err(LoopError::NothingObserved),
    };
    let mut outputs = Vec::with_capacity(jobs.0.len());
    for job in &mut jobs.0 {
        outputs.push(job.await.map_err(|e| LoopError::ToolTask(e.to_string()))?);
    }
    let mut follow = CreateResponse::new(
        config.model.clone(),
        Input::Items(
            outputs
                .iter()
                .cloned()
                .map(Item::FunctionCallOutput)
                .collect(),
        ),
    );
    follow.tools = Some(config.tools.clone());
    follow.tool_choice = Some(serde_json::Value::String("none".into()));
    follow.instructions = config.instructions.clone().map(Some);
    follow.previous_response_id = Some(Some(first.id.clone()));
    let follow = client.create(&follow).await?;
    if !follow.is_completed() {
        return Err(LoopError::NotCompleted {
            status: follow.status.clone().unwrap_or_else(|| "none".into()),
        });
    }
    Ok(AsyncOutcome {
        first,
        outputs,
        follow,
    })
}
