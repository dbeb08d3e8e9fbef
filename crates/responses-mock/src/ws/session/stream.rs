//! Streaming one response and, when it is steered at its acceptance point, what follows:
//! the steer waits for a tool call's output, or the text response ends `incomplete` and its
//! automatic successor streams next.

use agent_responses::types::{CreateResponse, Item, Usage};
use agent_responses::ws::events::SteerRequest;
use serde_json::Value;

use super::reply::with_output;
use super::steered::{self, SteeredParent, acceptance_point, accepted_event, is_function_call};
use super::{Job, Served, Session};
use crate::respond::{new_id, response_object, tokens};
use crate::ws::{Entry, FaultPoint};

impl Session {
    /// Streams a response and then any automatic successor it gets.
    pub(super) async fn respond(
        &mut self,
        request: CreateResponse,
        context: Vec<Item>,
        output: Vec<Value>,
        lane: Option<String>,
        hold: bool,
    ) -> Served {
        let mut next = Some(Job {
            request,
            context,
            output,
            lane,
            hold,
        });
        while let Some(job) = next.take() {
            next = self.respond_once(job).await?;
        }
        Ok(())
    }

    /// Streams one response; at its acceptance point (when `hold`) it may be steered.
    /// Returns the automatic successor to stream next, if any.
    async fn respond_once(&mut self, job: Job) -> Served<Option<Job>> {
        let Job {
            request,
            context,
            output,
            lane,
            hold,
        } = job;
        let id = new_id("resp");
        let usage = Usage::new(
            tokens(&serde_json::to_string(&context).unwrap_or_default()),
            tokens(&Value::Array(output.clone()).to_string()),
        );
        let response = response_object(
            &id,
            &request,
            "completed",
            output.clone(),
            Some(usage.clone()),
        );
        let delta_chars = crate::sse::default_delta_chars(&response, self.state.delta_chars);
        let events = crate::sse::events(&response, delta_chars);
        let is_call = is_function_call(&output);
        let hold_after = match (hold, self.options().steer_window) {
            (true, Some(_)) => acceptance_point(&events, is_call),
            _ => None,
        };
        let accepted = self
            .stream_until_steered(&id, &request, &events, lane.as_deref(), hold_after, is_call)
            .await?;
        let Some((steer_id, steer)) = accepted else {
            let full = with_output(context, &output);
            let entry = Entry {
                request,
                context: full,
                status: "completed".into(),
                queued: Vec::new(),
                required: Vec::new(),
                generated: true,
            };
            self.keep(&id, entry);
            return Ok(None);
        };
        if is_call {
            // The parent stopped for a client tool call: the steer waits for its output.
            let required = steered::required_input(&output);
            let full = with_output(context, &output);
            let entry = Entry {
                request,
                context: full,
                status: "completed".into(),
                queued: vec![steer.input.to_items()],
                required: required.clone(),
                generated: true,
            };
            self.keep(&id, entry);
            let pending = steered::pending_event(&steer_id, &id, &required);
            self.send(pending, lane.as_deref()).await?;
            return Ok(None);
        }
        // Text: end the parent at the output boundary reached so far.
        let SteeredParent {
            events: ending,
            partial,
        } = steered::steered_parent(&id, &request, &output, &events, usage);
        for event in ending {
            self.send(event, lane.as_deref()).await?;
        }
        let mut parent_context = context;
        if let Ok(item) = serde_json::from_value::<Item>(partial) {
            parent_context.push(item);
        }
        let entry = Entry {
            request: request.clone(),
            context: parent_context.clone(),
            status: "incomplete".into(),
            queued: Vec::new(),
            required: Vec::new(),
            generated: true,
        };
        self.keep(&id, entry);
        if self.options().fail_successor_creation {
            let failed = steered::successor_failed_event(&steer_id, &id, &steer.input);
            self.send(failed, lane.as_deref()).await?;
            return Ok(None);
        }
        Ok(Some(steered::successor(
            &id,
            request,
            parent_context,
            &steer.input,
            lane,
        )))
    }

    /// Sends `events` in order, waiting for a steer after event `hold_after`. Returns the
    /// accepted steer and its id, if one came. A steered text response stops at the
    /// acceptance point (its ending is built by the caller); a steered tool call streams on.
    async fn stream_until_steered(
        &mut self,
        id: &str,
        request: &CreateResponse,
        events: &[Value],
        lane: Option<&str>,
        hold_after: Option<usize>,
        is_call: bool,
    ) -> Served<Option<(String, SteerRequest)>> {
        let mut accepted: Option<(String, SteerRequest)> = None;
        for (index, event) in events.iter().enumerate() {
            let terminal = index + 1 == events.len();
            if terminal && accepted.is_some() && !is_call {
                break;
            }
            self.send(event.clone(), lane).await?;
            if hold_after == Some(index)
                && let Some(steer) = self.wait_for_steer(id, request).await?
            {
                let steer_id = new_id("steer");
                self.send(accepted_event(&steer_id, id), lane).await?;
                if let Some(action) = self.fault(FaultPoint::AfterSteerAccepted) {
                    return Err(action.into());
                }
                accepted = Some((steer_id, steer));
                if !is_call {
                    break;
                }
            }
        }
        Ok(accepted)
    }
}
