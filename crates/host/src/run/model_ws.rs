//! One model call of a step over the Responses WebSocket mode (`--transport ws`), with
//! steers sent while the response streams.
//!
//! Invariants:
//! - The request is the same pure function of the run state as over HTTP
//!   ([`super::step_request::encode_sized`]); nothing relies on server-side state
//!   (no `previous_response_id` is ever sent), so a retried or resumed step needs only the
//!   journal.
//! - A steer pending in the journal while the step's response is active (created, not yet
//!   ended) is sent once as `response.steer`. It counts as applied *in this step* only at the
//!   commit point: the successor's `response.created`. The step's output is then the
//!   successor's; the parent (ended `incomplete`, reason `steered`, or `completed` with an
//!   automatic successor) is reported in [`Steered`] for the journal.
//! - Every other outcome of a sent steer (`pending`, `failed`, a dropped connection) leaves
//!   it pending in the journal: the step's result carries no trace of it, and the driver
//!   applies it at the next step boundary, as over HTTP. Because no server state is reused,
//!   a steer the server queued on an abandoned parent never reaches the model.
//! - A steered parent whose successor never comes is a retryable failure of the attempt.

use std::collections::HashSet;

use agent_journal::Journal;
use agent_responses::types::{Response, StreamEvent};
use agent_responses::ws::{
    ResponseCreate, ServerEvent, SessionEvent, SteerInput, SteerState, SteerTracker, SteerUpdate,
    WsConfig, WsError, WsSession,
};
use agent_responses::{ApiError, Client, ClientError};
use futures::StreamExt as _;
use serde::Deserialize as _;
use serde_json::Value;

use super::events::{self, SteerRequested};
use super::kinds as k;
use super::model::Streamed;
use super::state::RunState;

/// A step whose response was steered while it streamed: the parent it replaced and the
/// journal ids of the steers the successor carries.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Steered {
    /// The response that was steered.
    pub parent_response_id: String,
    /// The parent's status (`incomplete` for a steered text response).
    pub parent_status: Option<String>,
    /// The parent's `incomplete_details.reason` (`steered`), if any.
    pub incomplete_reason: Option<String>,
    /// The parent's output items, verbatim (partial when it was cut by the steer).
    pub parent_output: Vec<Value>,
    /// The parent's `usage`, verbatim, when it had one: what the steered response cost,
    /// counted in the run's usage beside the successor's.
    pub parent_usage: Option<Value>,
    /// `(journal id, text)` of each steer the successor carries, in the order sent.
    pub steers: Vec<(String, String)>,
}

/// Where to see steers requested while the step streams.
pub(crate) struct SteerSource<'a> {
    /// The run's journal.
    pub journal: &'a Journal,
    /// The run's thread.
    pub thread: &'a str,
    /// The run as folded when the request was recorded.
    pub state: &'a RunState,
}

/// Streams `request` over a WebSocket session to `client`'s endpoint, sending steers from
/// `steers` as they arrive (see the module docs). Text deltas go to `on_text`.
pub(crate) async fn stream(
    client: &Client,
    request: &agent_responses::types::CreateResponse,
    steers: SteerSource<'_>,
    on_text: &(dyn Fn(&str) + Send + Sync),
) -> (Streamed, Option<Steered>) {
    let config = WsConfig::from_client_config(client.config());
    let mut session = match WsSession::connect(config).await {
        Ok(session) => session,
        Err(err) => return (Streamed::Failed(client_error(err)), None),
    };
    let mut create = request.clone();
    create.stream = None;
    let sent = session
        .create(ResponseCreate {
            request: create,
            stream_id: None,
            generate: None,
        })
        .await;
    if let Err(err) = sent {
        return (Streamed::Failed(client_error(err)), None);
    }
    let mut step = WsStep::new(steers.state);
    let mut tail = steers.journal.tail(steers.thread, steers.state.last_seq);
    let mut tail_open = true;
    let result = loop {
        let event = tokio::select! {
            event = session.next_event() => event,
            next = tail.next(), if tail_open => {
                match next {
                    Some(Ok(event)) if &*event.kind == k::STEER_REQUESTED => {
                        step.requested(&event.payload);
                    }
                    Some(Ok(_)) => {}
                    // The journal is read again at the step boundary; only live steering
                    // is lost here.
                    Some(Err(err)) => {
                        tracing::warn!(error = %err, "cannot follow the run's steers during the response");
                        tail_open = false;
                    }
                    None => tail_open = false,
                }
                if let Err(err) = step.send_steers(&mut session).await {
                    break Streamed::Failed(client_error(err));
                }
                continue;
            }
        };
        let event = match event {
            Ok(Some(event)) => event,
            Ok(None) => break Streamed::Failed(ClientError::StreamEndedEarly),
            Err(err) => break Streamed::Failed(client_error(err)),
        };
        if let Some(done) = step.observe(&event, on_text) {
            break done;
        }
        if let Err(err) = step.send_steers(&mut session).await {
            break Streamed::Failed(client_error(err));
        }
    };
    drop(tail);
    session.close().await;
    let steered = match &result {
        Streamed::Response(_) => step.steered(),
        Streamed::Failed(_) => None,
    };
    (result, steered)
}

/// The steering bookkeeping of one attempt.
struct WsStep {
    tracker: SteerTracker,
    /// Journal ids already known (queued, sent, or not pending when the attempt began).
    known: HashSet<String>,
    /// Steers waiting for an active response: `(journal id, text)`.
    queue: Vec<(String, String)>,
    /// Steers sent, aligned with `tracker.steers()`.
    sent: Vec<(String, String)>,
    /// The response now streaming for the step, and whether it has ended.
    active: Option<String>,
    ended: bool,
    /// The parent replaced by a committed successor, and the steers that replaced it.
    parent: Option<Response>,
    committed: Vec<(String, String)>,
    /// A parent that completed while a steer was accepted: kept in case no successor comes.
    completed_parent: Option<Response>,
}

impl WsStep {
    fn new(state: &RunState) -> WsStep {
        let known = state
            .steers
            .iter()
            .filter(|s| s.status != super::state::SteerStatus::Pending)
            .map(|s| s.id.clone())
            .collect();
        let mut step = WsStep {
            tracker: SteerTracker::new(),
            known,
            queue: Vec::new(),
            sent: Vec::new(),
            active: None,
            ended: false,
            parent: None,
            committed: Vec::new(),
            completed_parent: None,
        };
        for steer in state.pending_steers() {
            step.queue(steer.id.clone(), steer.text.clone());
        }
        step
    }

    fn queue(&mut self, id: String, text: String) {
        if !id.is_empty() && !text.trim().is_empty() && self.known.insert(id.clone()) {
            self.queue.push((id, text));
        }
    }

    /// A `steer.requested` payload seen on the thread.
    fn requested(&mut self, payload: &Value) {
        match SteerRequested::deserialize(payload) {
            Ok(steer) => self.queue(steer.id, steer.text),
            Err(err) => tracing::warn!(%err, "unreadable steer.requested skipped"),
        }
    }

    /// Sends the queued steers when a response is active.
    async fn send_steers(&mut self, session: &mut WsSession) -> Result<(), WsError> {
        let Some(active) = self.active.clone().filter(|_| !self.ended) else {
            return Ok(());
        };
        for (id, text) in std::mem::take(&mut self.queue) {
            let request = session
                .steer(&active, SteerInput::Text(text.clone()))
                .await?;
            self.tracker.sent(request);
            self.sent.push((id, text));
        }
        Ok(())
    }

    /// Folds one session event in; `Some` when the step's result is known.
    fn observe(
        &mut self,
        event: &SessionEvent,
        on_text: &(dyn Fn(&str) + Send + Sync),
    ) -> Option<Streamed> {
        for update in self.tracker.observe(event) {
            match update {
                SteerUpdate::Committed {
                    steer_ids,
                    successor,
                    ..
                } => {
                    for (i, tracked) in self.tracker.steers().iter().enumerate() {
                        if tracked.id.as_ref().is_some_and(|id| steer_ids.contains(id))
                            && let Some(sent) = self.sent.get(i)
                            && !self.committed.contains(sent)
                        {
                            self.committed.push(sent.clone());
                        }
                    }
                    if self.parent.is_none() {
                        self.parent = self.completed_parent.take();
                    }
                    self.active = Some(successor);
                    self.ended = false;
                }
                // `Pending`: the parent stopped for its tool calls; the steer waits for the
                // next boundary, and the completed parent is the step's answer.
                SteerUpdate::Pending { parent, .. }
                | SteerUpdate::Failed { parent, .. }
                | SteerUpdate::OutcomeUnknown { parent, .. } => {
                    let open = self.open_on(&parent);
                    if let Some(done) = self.completed_parent.take_if(|r| r.id == parent && !open) {
                        return Some(final_of(&done));
                    }
                    if self.steered_parent_is(&parent) && !open && self.committed.is_empty() {
                        return Some(Streamed::Failed(ClientError::Transport(format!(
                            "the steered response {parent} got no successor"
                        ))));
                    }
                }
                SteerUpdate::Accepted { .. }
                | SteerUpdate::ParentSteered { .. }
                | SteerUpdate::ParentCompleted { .. } => {}
            }
        }
        match event {
            SessionEvent::Server(ServerEvent::Stream(stream)) => self.stream_event(stream, on_text),
            SessionEvent::Server(ServerEvent::Steer(_)) | SessionEvent::Reconnected { .. } => None,
            SessionEvent::Disconnected { code, reason, .. } => {
                Some(Streamed::Failed(ClientError::Transport(format!(
                    "the WebSocket closed during the response (code {}{}{})",
                    code.map_or_else(|| "none".to_string(), |c| c.to_string()),
                    if reason.is_empty() { "" } else { ": " },
                    reason
                ))))
            }
        }
    }

    fn stream_event(
        &mut self,
        event: &StreamEvent,
        on_text: &(dyn Fn(&str) + Send + Sync),
    ) -> Option<Streamed> {
        match event {
            StreamEvent::Created(e) => {
                if self.active.is_none() {
                    self.active = Some(e.response.id.clone());
                }
                None
            }
            StreamEvent::OutputTextDelta(delta) => {
                on_text(&delta.delta);
                None
            }
            StreamEvent::Completed(e) | StreamEvent::Incomplete(e) | StreamEvent::Failed(e) => {
                if self.active.as_deref() != Some(e.response.id.as_str()) {
                    return None;
                }
                self.ended = true;
                let open = self.open_on(&e.response.id);
                if incomplete_reason(&e.response).as_deref() == Some("steered") {
                    self.parent = Some(e.response.clone());
                    if !open {
                        return Some(Streamed::Failed(ClientError::Transport(format!(
                            "the steered response {} got no successor",
                            e.response.id
                        ))));
                    }
                    return None;
                }
                if open && e.response.status.as_deref() == Some("completed") {
                    // A steer sent to it is unanswered or accepted: an automatic successor,
                    // `response.steer.pending` or `response.steer.failed` follows.
                    self.completed_parent = Some(e.response.clone());
                    return None;
                }
                Some(final_of(&e.response))
            }
            StreamEvent::Error(e) => {
                let d = e.detail();
                Some(Streamed::Failed(ClientError::StreamError(Box::new(
                    ApiError {
                        status: e
                            .extra
                            .get("status")
                            .and_then(Value::as_u64)
                            .and_then(|s| u16::try_from(s).ok()),
                        kind: d.kind,
                        code: d.code,
                        param: d.param,
                        message: d.message,
                        request_id: None,
                        retry_after: None,
                        retries_taken: 0,
                        should_retry: None,
                    },
                ))))
            }
            _ => None,
        }
    }

    /// Whether a steer sent to `parent` is still unanswered or accepted (not yet committed,
    /// pending, failed or lost).
    fn open_on(&self, parent: &str) -> bool {
        self.tracker.steers().iter().any(|s| {
            s.parent == parent && matches!(s.state, SteerState::Sent | SteerState::Accepted)
        })
    }

    fn steered_parent_is(&self, id: &str) -> bool {
        self.parent.as_ref().is_some_and(|p| p.id == id)
    }

    /// What the journal records about the steering of a step that ended with a response.
    fn steered(self) -> Option<Steered> {
        let parent = self.parent?;
        if self.committed.is_empty() {
            return None;
        }
        let parent_output = parent
            .output
            .iter()
            .filter_map(|item| serde_json::to_value(item).ok())
            .collect();
        let parent_usage = parent
            .usage
            .as_ref()
            .and_then(Option::as_ref)
            .and_then(|usage| serde_json::to_value(usage).ok());
        Some(Steered {
            parent_usage,
            incomplete_reason: incomplete_reason(&parent),
            parent_status: parent.status.clone(),
            parent_response_id: parent.id,
            parent_output,
            steers: self.committed,
        })
    }
}

/// The `steered` field of a steered step's `model.completed`.
pub(crate) fn steered_payload(steered: &Steered) -> events::Steered {
    events::Steered {
        parent_response_id: steered.parent_response_id.clone(),
        parent_status: steered.parent_status.clone(),
        incomplete_reason: steered.incomplete_reason.clone(),
        parent_output: steered.parent_output.clone(),
        parent_usage: steered.parent_usage.clone(),
        steer_ids: steered.steers.iter().map(|(id, _)| id.clone()).collect(),
    }
}

/// What the step records of a finished response.
fn final_of(response: &Response) -> Streamed {
    match super::model::Final::from_response(response) {
        Ok(done) => Streamed::Response(Box::new(done)),
        Err(err) => Streamed::Failed(err),
    }
}

fn incomplete_reason(response: &Response) -> Option<String> {
    response
        .incomplete_details
        .as_ref()
        .and_then(Option::as_ref)
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// A WebSocket failure in the client's terms, so the step's retry policy treats both
/// transports alike (connection problems retry, refusals do not).
fn client_error(err: WsError) -> ClientError {
    match err {
        WsError::HandshakeRefused { status, message } => ClientError::Api(Box::new(ApiError {
            status: Some(status),
            kind: None,
            code: None,
            param: None,
            message,
            request_id: None,
            retry_after: None,
            retries_taken: 0,
            should_retry: None,
        })),
        WsError::HandshakeTimeout(_) | WsError::Connect(_) => ClientError::Connect(err.to_string()),
        WsError::Closed { .. } => ClientError::Transport(err.to_string()),
        // Nothing came for that long: what an idle HTTP stream is.
        WsError::RequestTimeout(after) => ClientError::StreamIdleTimeout(after),
        WsError::MissingApiKey => ClientError::MissingApiKey,
        WsError::InvalidBaseUrl(url) => ClientError::InvalidBaseUrl(url),
        other => ClientError::Decode(other.to_string()),
    }
}
