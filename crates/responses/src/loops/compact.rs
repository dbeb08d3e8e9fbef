//! Compaction: one turn, `POST /responses/compact` over the history, then a follow-up whose
//! input is the compacted output, whole and in order, plus the new user message.

use super::{LoopConfig, LoopError};
use crate::http::Client;
use crate::types::{
    CompactRequest, CompactedResponse, CreateResponse, Input, Item, MessageItem, Response,
};

/// Every step of a compaction run.
#[derive(Debug, Clone)]
pub struct CompactOutcome {
    /// The response to the first prompt.
    pub first: Response,
    /// The compaction of that conversation.
    pub compacted: CompactedResponse,
    /// Exactly what the follow-up sent as `input`.
    pub follow_input: Vec<Item>,
    /// The response to the follow-up, built on the compacted items only.
    pub follow: Response,
}

/// Runs first turn, compaction and follow-up.
///
/// # Cancel safety
///
/// Not cancel safe: dropping the future loses whatever of the first response, the
/// compaction and the follow-up was already made (and billed); the request in progress
/// may still complete on the server, as for [`Client::create`].
pub async fn run_compact(
    client: &Client,
    config: &LoopConfig,
    history: Vec<Item>,
    next_user_message: &str,
) -> Result<CompactOutcome, LoopError> {
    let mut history = history;
    let mut first = CreateResponse::new(config.model.clone(), Input::Items(history.clone()));
    first.store = Some(Some(false));
    first.include = Some(vec!["reasoning.encrypted_content".into()]);
    first.instructions = config.instructions.clone().map(Some);
    let first = client.create(&first).await?;
    completed(&first)?;
    history.extend(first.output.iter().cloned());
    let compact = CompactRequest {
        model: config.model.clone(),
        input: Some(Input::Items(history)),
        ..CompactRequest::default()
    };
    let compacted = client.compact(&compact).await?;
    // Never extract just encrypted_content or prune the compact endpoint's output.
    let mut follow_input = compacted.output.clone();
    follow_input.push(Item::Message(MessageItem::user(next_user_message)));
    let mut follow = CreateResponse::new(config.model.clone(), Input::Items(follow_input.clone()));
    follow.store = Some(Some(false));
    follow.instructions = config.instructions.clone().map(Some);
    let follow = client.create(&follow).await?;
    completed(&follow)?;
    Ok(CompactOutcome {
        first,
        compacted,
        follow_input,
        follow,
    })
}

fn completed(response: &Response) -> Result<(), LoopError> {
    if response.is_completed() {
        Ok(())
    } else {
        Err(LoopError::NotCompleted {
            status: response.status.clone().unwrap_or_else(|| "none".into()),
        })
    }
}
