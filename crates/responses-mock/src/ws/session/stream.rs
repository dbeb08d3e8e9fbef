//! Streaming one response and, when it is steered at its acceptance point, what follows:
//! the steer waits for a tool call's output, or the text response ends `incomplete` and its
//! automatic successor streams next.

use agent_responses::types::{CreateResponse, Item, Usage};
use agent_responses::ws::events::SteerRequest;
use serde_json::Value;

use super::reply::with_output;
use super::steered::{self, SteeredParent, acceptance_point, accepted_event};
use super::{Job, Served, Session, Stop};
use crate::chain::Chain;
use crate::respond::{new_id, response_object, tokens};
use crate::script::{Fault, FaultKind};
use crate::validate::ApiFailure;
use crate::ws::{Entry, FaultPoint};
use std::sync::Arc;
use std::time::Duration;

impl Session {
    /// Streams a response and then any automatic successor it gets.
    pub(super) async fn respond(&mut self, job: Job) -> Served {
        let mut next = Some(job);
        while let Some(job) = next.take() {
            next = self.respond_once(job).await?;
        }
        Ok(())
    }

    /// Streams one response; at its acceptance point (when held) it may be steered.
    /// Returns the automatic successor to stream next, if any.
    async fn respond_once(&mut self, job: Job) -> Served<Option<Job>> {
        let Job {
            request,
            base,
            context,
            output,
            lane,
            status,
            hold,
            fault,
            delta_chars,
            text_deltas,
            latency,
        } = job;
        let started = tokio::time::Instant::now();
        let id = new_id("resp");
        let usage = Usage::new(
            tokens(&serde_json::to_string(&context).unwrap_or_default()),
            tokens(&Value::Array(output.clone()).to_string()),
        );
        let response = response_object(&id, &request, &status, output.clone(), Some(usage.clone()));
        // A script's own delta size is kept unless it makes more than
        // `MAX_SCRIPTED_DELTAS` deltas; the default one grows for long texts.
        let delta_chars = match delta_chars {
            Some(chars) => crate::sse::scripted_delta_chars(&response, chars),
            None => crate::sse::default_delta_chars(&response, self.state.delta_chars),
        };
        let events = crate::sse::events(&response, delta_chars, text_deltas);
        let point = hold.and_then(|window| Some((acceptance_point(&events)?, window)));
        let is_call = point.is_some_and(|(p, _)| p.is_call);
        let hold = point.map(|(p, window)| (p.index, window));
        let streamed = self
            .stream_until_steered(
                &id,
                &request,
                &events,
                lane.as_deref(),
                Plan {
                    hold,
                    fault: fault.as_ref(),
                    is_call,
                    due: latency.schedule(&events),
                    started,
                },
            )
            .await?;
        let accepted = match streamed {
            Streamed::Ended(accepted) => accepted,
            // A scripted `error` event ended it: nothing to keep.
            Streamed::Failed => return Ok(None),
        };
        let Some((steer_id, steer)) = accepted else {
            let full = with_output(context, &output);
            let entry = Entry {
                request,
                context: Chain::after(base.as_ref(), full),
                status,
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
                context: Chain::after(base.as_ref(), full),
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
        let at = hold.map_or(0, |(index, _)| index);
        let SteeredParent {
            events: ending,
            output: ended,
        } = steered::steered_parent(&id, &request, &output, (&events, at), usage);
        for event in ending {
            self.send(event, lane.as_deref()).await?;
        }
        let mut parent_context = context;
        parent_context.extend(
            ended
                .into_iter()
                .filter_map(|item| serde_json::from_value::<Item>(item).ok()),
        );
        let parent_chain = Chain::after(base.as_ref(), parent_context.clone());
        let entry = Entry {
            request: request.clone(),
            context: Arc::clone(&parent_chain),
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
            (parent_chain, parent_context),
            &steer.input,
            lane,
            latency,
        )))
    }

    /// Sends `events` in order, applying the plan's fault before event `after_events`
    /// and waiting for a steer after the event the plan holds at. Returns the accepted
    /// steer and its id, if one came. A steered text response stops at the acceptance point
    /// (its ending is built by the caller); a steered tool call streams on.
    async fn stream_until_steered(
        &mut self,
        id: &str,
        request: &CreateResponse,
        events: &[Value],
        lane: Option<&str>,
        plan: Plan<'_>,
    ) -> Served<Streamed> {
        let Plan {
            hold,
            fault,
            is_call,
            due,
            started,
        } = plan;
        let mut accepted: Option<(String, SteerRequest)> = None;
        for (index, event) in events.iter().enumerate() {
            let terminal = index + 1 == events.len();
            if terminal && accepted.is_some() && !is_call {
                break;
            }
            if let Some(at) = due.get(index) {
                tokio::time::sleep_until(crate::latency::deadline(started, *at)).await;
            }
            if let Some(fault) = fault.filter(|f| f.after_events == index) {
                match fault.kind {
                    // The connection breaks mid-response (no close frame): what a cut
                    // body is over HTTP.
                    FaultKind::Cut => return Err(Stop::Drop),
                    FaultKind::Stall => return self.stall().await,
                    FaultKind::KeepAlive => return self.keep_alive(fault).await,
                    FaultKind::Gate => {
                        if let Some(name) = fault.gate.as_deref() {
                            self.state.gate(name).notified().await;
                        }
                    }
                    FaultKind::ErrorEvent if fault.shape.as_deref() == Some("flat") => {
                        // The SDK's typed shape, as over HTTP: `code` and `message` at the
                        // top (the sequence number is the connection's, set by `send`).
                        self.send(crate::sse::error_event(0, false), lane).await?;
                        return Ok(Streamed::Failed);
                    }
                    FaultKind::ErrorEvent => {
                        let failure = ApiFailure {
                            status: 500,
                            message: "The emulator was scripted to fail this stream.".into(),
                            kind: "server_error".into(),
                            code: Some("server_error".into()),
                            param: None,
                            headers: Vec::new(),
                        };
                        self.send_error(&failure, lane).await?;
                        return Ok(Streamed::Failed);
                    }
                }
            }
            self.send(event.clone(), lane).await?;
            if let Some((at, window)) = hold
                && at == index
                && let Some(steer) = self.wait_for_steer(id, request, window).await?
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
        Ok(Streamed::Ended(accepted))
    }
}

/// How one response is streamed: where it waits for a steer and for how long (the event
/// index and the window), its scripted fault, whether it is a tool call, and when each
/// event is due (its latency) from `started`.
struct Plan<'a> {
    hold: Option<(usize, Duration)>,
    fault: Option<&'a Fault>,
    is_call: bool,
    due: Vec<Duration>,
    started: tokio::time::Instant,
}

/// How streaming one response ended.
enum Streamed {
    /// Every event was sent (or, steered, up to the acceptance point); the steer accepted.
    Ended(Option<(String, SteerRequest)>),
    /// A scripted `error` event ended the response.
    Failed,
}
