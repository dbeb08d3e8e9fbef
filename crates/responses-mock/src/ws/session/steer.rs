//! `response.steer` handling: at a response's acceptance point, and at any other time.
//!
//! Steer outcomes (`response.steer.failed` codes), checked in this order:
//! `invalid_input` (empty text, or anything but user messages), `response_not_found`
//! (unknown id on this connection and not stored), `steering_not_supported` (the response
//! uses `conversation` or `context_management`), `too_many_pending_steers` (a parent waiting
//! for required input already holds `max_pending_steers` steers; below that the steer is
//! accepted and reported pending at once), `response_already_completed`,
//! `response_not_active` (ended incomplete or failed, or created with `generate: false`),
//! and `successor_creation_failed` (scripted by `fail_successor_creation`).

use agent_responses::types::CreateResponse;
use agent_responses::ws::events::{ClientEvent, SteerRequest};
use serde_json::json;

use super::steered::{accepted_event, pending_event};
use super::{Served, Session, Stop};
use crate::respond::new_id;

const UNSUPPORTED: &str = "Steering is not supported for conversation-bound responses or responses using automatic compaction.";

/// Whether a response created by `request` may be steered at all.
fn steering_supported(request: &CreateResponse) -> bool {
    !request.extra.contains_key("conversation") && !request.extra.contains_key("context_management")
}

impl Session {
    /// Waits at an acceptance point, up to `window`, for a steer naming `active`. Steers
    /// for other responses are answered as usual; a refused steer for `active` or any other
    /// frame ends the wait (a frame that is not a steer is handled after this response).
    pub(super) async fn wait_for_steer(
        &mut self,
        active: &str,
        request: &CreateResponse,
        window: std::time::Duration,
    ) -> Served<Option<SteerRequest>> {
        // tokio's sleep turns a window too long for an `Instant` into "never".
        let deadline = tokio::time::sleep(window).deadline();
        loop {
            let frame = match self.pending.take() {
                Some(frame) => frame,
                None => match tokio::time::timeout_at(deadline, self.frames.recv()).await {
                    Ok(Some(frame)) => frame,
                    Ok(None) => return Err(Stop::Gone),
                    Err(_) => return Ok(None),
                },
            };
            let Ok(ClientEvent::Steer(steer)) = ClientEvent::from_json(&frame) else {
                self.pending = Some(frame);
                return Ok(None);
            };
            self.state.ws.record(&frame);
            if steer.previous_response_id != active {
                self.steer_idle(steer).await?;
                continue;
            }
            if let Err(reason) = steer.input.validate() {
                self.steer_failed(&steer, None, "invalid_input", &reason)
                    .await?;
                return Ok(None);
            }
            if !steering_supported(request) {
                self.steer_failed(&steer, None, "steering_not_supported", UNSUPPORTED)
                    .await?;
                return Ok(None);
            }
            return Ok(Some(steer));
        }
    }

    async fn steer_failed(
        &mut self,
        steer: &SteerRequest,
        id: Option<String>,
        code: &str,
        message: &str,
    ) -> Served {
        let event = json!({"type": "response.steer.failed",
            "steer": {"id": id, "previous_response_id": steer.previous_response_id, "input": steer.input},
            "error": {"type": "invalid_request_error", "code": code, "message": message}});
        self.send(event, None).await
    }

    /// A steer arriving while no response is at its acceptance point.
    pub(super) async fn steer_idle(&mut self, steer: SteerRequest) -> Served {
        if let Err(reason) = steer.input.validate() {
            return self
                .steer_failed(&steer, None, "invalid_input", &reason)
                .await;
        }
        let parent_id = steer.previous_response_id.clone();
        let Some(mut parent) = self.lookup(&parent_id) else {
            let message = format!("Response with id '{parent_id}' not found.");
            return self
                .steer_failed(&steer, None, "response_not_found", &message)
                .await;
        };
        if !steering_supported(&parent.request) {
            return self
                .steer_failed(&steer, None, "steering_not_supported", UNSUPPORTED)
                .await;
        }
        if !parent.required.is_empty() {
            if parent.queued.len() >= self.options().max_pending_steers {
                let message = format!(
                    "Response '{parent_id}' already has the maximum number of pending steers."
                );
                return self
                    .steer_failed(&steer, None, "too_many_pending_steers", &message)
                    .await;
            }
            let steer_id = new_id("steer");
            parent.queued.push(steer.input.to_items());
            let required = parent.required.clone();
            self.keep(&parent_id, parent);
            self.send(accepted_event(&steer_id, &parent_id), None)
                .await?;
            return self
                .send(pending_event(&steer_id, &parent_id, &required), None)
                .await;
        }
        let (code, message) = match (parent.status.as_str(), parent.generated) {
            ("completed", true) => (
                "response_already_completed",
                format!("Response '{parent_id}' has already completed."),
            ),
            _ => (
                "response_not_active",
                format!("Response '{parent_id}' is not active."),
            ),
        };
        self.steer_failed(&steer, None, code, &message).await
    }
}
