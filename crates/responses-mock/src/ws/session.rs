//! One WebSocket connection of the emulator. Frames are handled one at a time, in order.
//!
//! Steer outcomes (`response.steer.failed` codes), checked in this order:
//! `invalid_input` (empty text, or anything but user messages), `response_not_found`
//! (unknown id on this connection and not stored), `steering_not_supported` (the response
//! uses `conversation` or `context_management`), `too_many_pending_steers` (a parent waiting
//! for required input already holds `max_pending_steers` steers; below that the steer is
//! accepted and reported pending at once), `response_already_completed`,
//! `response_not_active` (ended incomplete or failed, or created with `generate: false`),
//! and `successor_creation_failed` (scripted by `fail_successor_creation`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use agent_responses::types::{CreateResponse, Input, Item, Usage};
use agent_responses::ws::events::{ClientEvent, ResponseCreate, SteerRequest, valid_stream_id};
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::stream::SplitSink;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Entry, FaultAction, FaultPoint};
use crate::respond::{finish_item, new_id, response_object, tokens};
use crate::router::AppState;
use crate::validate::{ApiFailure, Issued, check_context, previous_not_found};

/// Why serving stopped.
enum Stop {
    /// The client went away.
    Gone,
    /// Drop the TCP connection without a close frame.
    Drop,
    /// Close with this code and reason.
    Close(u16, String),
}

impl From<FaultAction> for Stop {
    fn from(action: FaultAction) -> Self {
        match action {
            FaultAction::Drop => Stop::Drop,
            FaultAction::Close(code) => Stop::Close(code, "closed by emulator script".into()),
        }
    }
}

type Served<T = ()> = Result<T, Stop>;

/// One response to stream.
struct Job {
    request: CreateResponse,
    context: Vec<Item>,
    output: Vec<Value>,
    lane: Option<String>,
    hold: bool,
}

struct Session {
    sink: SplitSink<WebSocket, Message>,
    frames: mpsc::Receiver<String>,
    backlog: VecDeque<String>,
    state: Arc<AppState>,
    index: usize,
    started: Instant,
    seq: u64,
    creates: usize,
    lanes: HashSet<String>,
    cache: HashMap<String, Entry>,
}

pub(super) async fn run(socket: WebSocket, state: Arc<AppState>, index: usize) {
    let (sink, mut stream) = socket.split();
    let (tx, frames) = mpsc::channel::<String>(64);
    let reader = tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            let text = match message {
                Ok(Message::Text(text)) => text.as_str().to_owned(),
                Ok(Message::Binary(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
                Ok(Message::Ping(_) | Message::Pong(_)) => continue,
                Ok(Message::Close(_)) | Err(_) => break,
            };
            if tx.send(text).await.is_err() {
                break;
            }
        }
    });
    let mut session = Session {
        sink,
        frames,
        backlog: VecDeque::new(),
        state,
        index,
        started: Instant::now(),
        seq: 0,
        creates: 0,
        lanes: HashSet::new(),
        cache: HashMap::new(),
    };
    let stop = session.serve().await;
    reader.abort();
    match stop {
        Stop::Drop => {}
        // The client closed (or its stream failed): complete the closing handshake, so a
        // clean close is seen as one (1000) rather than as a dropped connection (1006).
        Stop::Gone => {
            let _ = tokio::time::timeout(Duration::from_secs(1), session.sink.close()).await;
        }
        Stop::Close(code, reason) => {
            let frame = CloseFrame {
                code,
                reason: reason.into(),
            };
            let _ = session.sink.send(Message::Close(Some(frame))).await;
            let _ = session.sink.close().await;
        }
    }
}

fn lane_of(create: &ResponseCreate) -> Option<String> {
    create.stream_id.clone()
}

fn last_user_text(items: &[Item]) -> String {
    items
        .iter()
        .rev()
        .find_map(|item| match item {
            Item::Message(m) if m.role == "user" => Some(m.text()),
            _ => None,
        })
        .unwrap_or_default()
}

fn tool_outputs(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| match item {
            Item::FunctionCallOutput(o) => Some(o.text()),
            _ => None,
        })
        .collect()
}

fn first_function_tool(request: &CreateResponse) -> Option<String> {
    let tools = serde_json::to_value(request.tools.as_ref()?).ok()?;
    tools.as_array()?.iter().find_map(|t| {
        (t.get("type").and_then(Value::as_str) == Some("function"))
            .then(|| t.get("name").and_then(Value::as_str).map(str::to_owned))
            .flatten()
    })
}

impl Session {
    fn options(&self) -> &super::WsOptions {
        &self.state.ws.options
    }

    fn fault(&self, point: FaultPoint) -> Option<FaultAction> {
        self.options()
            .fault
            .filter(|f| f.connection == self.index && f.point == point)
            .map(|f| f.action)
    }

    async fn send(&mut self, mut event: Value, lane: Option<&str>) -> Served {
        if let Value::Object(map) = &mut event {
            map.insert("sequence_number".into(), json!(self.seq));
            if let Some(lane) = lane {
                map.insert("stream_id".into(), json!(lane));
            }
        }
        self.seq += 1;
        self.sink
            .send(Message::text(event.to_string()))
            .await
            .map_err(|_| Stop::Gone)
    }

    /// The WebSocket `error` event (nested shape with `status`).
    async fn send_error(&mut self, failure: &ApiFailure, lane: Option<&str>) -> Served {
        let event = json!({"type": "error", "status": failure.status, "error": {
            "type": failure.kind, "code": failure.code, "message": failure.message, "param": failure.param,
            "headers": {"x-request-id": new_id("req")}}});
        self.send(event, lane).await
    }

    async fn next_frame(&mut self) -> Option<String> {
        match self.backlog.pop_front() {
            Some(frame) => Some(frame),
            None => self.frames.recv().await,
        }
    }

    async fn serve(&mut self) -> Stop {
        loop {
            let Some(frame) = self.next_frame().await else {
                return Stop::Gone;
            };
            self.state.ws.record(&frame);
            if let Err(stop) = self.handle(&frame).await {
                return stop;
            }
        }
    }

    async fn handle(&mut self, frame: &str) -> Served {
        if self.started.elapsed() >= self.options().connection_lifetime {
            let failure = ApiFailure::invalid(
                "Responses websocket connection limit reached (60 minutes). Create a new websocket connection to continue.",
                None,
                Some("websocket_connection_limit_reached"),
            );
            self.send_error(&failure, None).await?;
            return Err(Stop::Close(
                1000,
                "websocket_connection_limit_reached".into(),
            ));
        }
        match ClientEvent::from_json(frame) {
            Err(err) => {
                let failure = ApiFailure::invalid(
                    format!("Invalid client event: {err}"),
                    None,
                    Some("invalid_request"),
                );
                self.send_error(&failure, None).await
            }
            Ok(ClientEvent::Create(create)) => self.create(create).await,
            Ok(ClientEvent::Steer(steer)) => self.steer_idle(steer).await,
        }
    }

    /// Checks a `response.create`; `Err(failure)` is sent as an error event.
    fn check_create(&mut self, create: &ResponseCreate) -> Result<(), ApiFailure> {
        let request = &create.request;
        if request.stream.is_some() {
            return Err(ApiFailure::invalid(
                "The 'stream' parameter is implicit in WebSocket mode and must not be sent.",
                Some("stream"),
                Some("unknown_parameter"),
            ));
        }
        if request
            .extra
            .get("background")
            .is_some_and(|b| b == &json!(true))
        {
            return Err(ApiFailure::invalid(
                "Background responses are not supported in WebSocket mode.",
                Some("background"),
                Some("unsupported_parameter"),
            ));
        }
        if let Some(lane) = &create.stream_id {
            if !valid_stream_id(lane) {
                return Err(ApiFailure::invalid(
                    format!(
                        "Invalid 'stream_id': '{lane}'. Expected 1-256 characters of [A-Za-z0-9_.-]."
                    ),
                    Some("stream_id"),
                    Some("invalid_value"),
                ));
            }
            if !self.lanes.contains(lane) && self.lanes.len() >= self.options().max_streams {
                return Err(ApiFailure::invalid(
                    "This WebSocket connection has reached its stream limit.",
                    Some("stream_id"),
                    Some("websocket_stream_limit_reached"),
                ));
            }
            self.lanes.insert(lane.clone());
        }
        if request.model.trim().is_empty() {
            return Err(ApiFailure::invalid(
                "Missing required parameter: 'model'.",
                Some("model"),
                Some("missing_required_parameter"),
            ));
        }
        Ok(())
    }

    fn lookup(&self, id: &str) -> Option<Entry> {
        self.cache
            .get(id)
            .cloned()
            .or_else(|| self.state.ws.stored(id))
    }

    fn keep(&mut self, id: &str, entry: Entry) {
        if entry.request.store() {
            self.state.ws.store(id, entry.clone());
        }
        self.cache.insert(id.to_owned(), entry);
    }

    async fn create(&mut self, create: ResponseCreate) -> Served {
        self.creates += 1;
        if self.creates == 1
            && let Some(action) = self.fault(FaultPoint::OnFirstCreate)
        {
            return Err(action.into());
        }
        let lane = lane_of(&create);
        if let Err(failure) = self.check_create(&create) {
            return self.send_error(&failure, lane.as_deref()).await;
        }
        let request = create.request.clone();
        let mut context = Vec::new();
        let mut queued_input: Vec<Item> = Vec::new();
        let mut continuation = false;
        if let Some(parent_id) = request.previous_response_id() {
            let Some(mut parent) = self.lookup(parent_id) else {
                return self
                    .send_error(&previous_not_found(parent_id), lane.as_deref())
                    .await;
            };
            context = parent.context.clone();
            if !parent.required.is_empty() {
                continuation = true;
                for steer in parent.queued.drain(..) {
                    queued_input.extend(steer);
                }
                parent.required.clear();
                let parent_id = parent_id.to_owned();
                self.keep(&parent_id, parent);
            }
        }
        let input = request
            .input
            .as_ref()
            .map(Input::to_items)
            .unwrap_or_default();
        context.extend(queued_input.iter().cloned());
        context.extend(input.iter().cloned());
        if let Err(failure) = check_context(&context, &Issued::default()) {
            return self.send_error(&failure, lane.as_deref()).await;
        }
        if create.generate == Some(false) {
            let id = new_id("resp");
            let response = response_object(
                &id,
                &request,
                "completed",
                Vec::new(),
                Some(Usage::new(1, 0)),
            );
            let mut start = response.clone();
            start["status"] = json!("in_progress");
            start["usage"] = Value::Null;
            self.send(
                json!({"type": "response.created", "response": start}),
                lane.as_deref(),
            )
            .await?;
            self.send(
                json!({"type": "response.completed", "response": response}),
                lane.as_deref(),
            )
            .await?;
            let entry = Entry {
                request,
                context,
                status: "completed".into(),
                queued: Vec::new(),
                required: Vec::new(),
                generated: false,
            };
            self.keep(&id, entry);
            return Ok(());
        }
        let steer_text = if queued_input.is_empty() {
            None
        } else {
            Some(last_user_text(&queued_input))
        };
        let tool_call = first_function_tool(&request)
            .filter(|_| tool_outputs(&input).is_empty() && !continuation);
        let output = match &tool_call {
            Some(name) => {
                let args = json!({"query": last_user_text(&context)}).to_string();
                vec![finish_item(
                    &json!({"type": "function_call", "name": name, "arguments": args}),
                )]
            }
            None => vec![finish_item(&message_json(&reply_text(
                &context,
                steer_text.as_deref(),
            )))],
        };
        let hold = !continuation;
        self.respond(request, context, output, lane, hold).await
    }

    /// Streams a response and then any automatic successor it gets.
    async fn respond(
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
        let is_call = output
            .first()
            .and_then(|o| o.get("type"))
            .and_then(Value::as_str)
            == Some("function_call");
        let hold_after = match (hold, self.options().steer_window, is_call) {
            (true, Some(_), true) => Some(2usize),
            (true, Some(_), false) => events.iter().position(|e| {
                e.get("type").and_then(Value::as_str) == Some("response.output_text.delta")
            }),
            _ => None,
        };
        let mut accepted: Option<(String, SteerRequest)> = None;
        for (index, event) in events.iter().enumerate() {
            let terminal = index + 1 == events.len();
            if terminal && accepted.is_some() && !is_call {
                break;
            }
            self.send(event.clone(), lane.as_deref()).await?;
            if hold_after == Some(index)
                && let Some(steer) = self.wait_for_steer(&id, &request).await?
            {
                let steer_id = new_id("steer");
                let event = json!({"type": "response.steer.accepted",
                    "steer": {"id": steer_id, "previous_response_id": id}});
                self.send(event, lane.as_deref()).await?;
                if let Some(action) = self.fault(FaultPoint::AfterSteerAccepted) {
                    return Err(action.into());
                }
                accepted = Some((steer_id, steer));
                if !is_call {
                    break;
                }
            }
        }
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
        let steer_items = steer.input.to_items();
        if is_call {
            // The parent stopped for a client tool call: the steer waits for its output.
            let required: Vec<Value> = output
                .iter()
                .filter(|o| o.get("type").and_then(Value::as_str) == Some("function_call"))
                .map(|o| json!({"type": "function_call_output", "call_id": o["call_id"], "name": o["name"]}))
                .collect();
            let full = with_output(context, &output);
            let entry = Entry {
                request,
                context: full,
                status: "completed".into(),
                queued: vec![steer_items],
                required: required.clone(),
                generated: true,
            };
            self.keep(&id, entry);
            let pending = json!({"type": "response.steer.pending",
                "steer": {"id": steer_id, "previous_response_id": id},
                "reason": "waiting_for_required_input", "required_input": required});
            self.send(pending, lane.as_deref()).await?;
            return Ok(None);
        }
        // Text: end the parent at the output boundary reached so far.
        let partial_text = events
            .iter()
            .find(|e| e.get("type").and_then(Value::as_str) == Some("response.output_text.delta"))
            .and_then(|e| e.get("delta"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut partial = output.first().cloned().unwrap_or(Value::Null);
        partial["status"] = json!("incomplete");
        partial["content"] =
            json!([{"type": "output_text", "text": partial_text, "annotations": []}]);
        let item_id = partial.get("id").cloned().unwrap_or(Value::Null);
        let at = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
        let with = |extra: Value| {
            let mut e = at.clone();
            if let (Value::Object(e), Value::Object(x)) = (&mut e, extra) {
                e.extend(x);
            }
            e
        };
        let done_text = with(
            json!({"type": "response.output_text.done", "text": partial_text, "logprobs": []}),
        );
        let done_part =
            with(json!({"type": "response.content_part.done", "part": partial["content"][0]}));
        self.send(done_text, lane.as_deref()).await?;
        self.send(done_part, lane.as_deref()).await?;
        self.send(
            json!({"type": "response.output_item.done", "output_index": 0, "item": partial}),
            lane.as_deref(),
        )
        .await?;
        let mut ended = response_object(
            &id,
            &request,
            "incomplete",
            vec![partial.clone()],
            Some(usage),
        );
        ended["incomplete_details"] = json!({"reason": "steered"});
        self.send(
            json!({"type": "response.incomplete", "response": ended}),
            lane.as_deref(),
        )
        .await?;
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
            let failed = json!({"type": "response.steer.failed",
                "steer": {"id": steer_id, "previous_response_id": id, "input": steer.input},
                "error": {"type": "invalid_request_error", "code": "successor_creation_failed",
                          "message": "The steered response's successor could not be created."}});
            self.send(failed, lane.as_deref()).await?;
            return Ok(None);
        }
        // The automatic successor: same settings, queued input prepended, parent = `id`.
        let mut successor_request = request;
        successor_request.previous_response_id = Some(Some(id.clone()));
        successor_request.input = Some(Input::Items(steer_items.clone()));
        let mut successor_context = parent_context;
        successor_context.extend(steer_items);
        let text = reply_text(&successor_context, Some(&steer.input.text()));
        let output = vec![finish_item(&message_json(&text))];
        Ok(Some(Job {
            request: successor_request,
            context: successor_context,
            output,
            lane,
            hold: false,
        }))
    }

    /// Waits at an acceptance point for a steer naming `active`. Steers for other responses
    /// are answered as usual; a refused steer for `active` or any other frame ends the wait
    /// (a frame that is not a steer is handled after this response).
    async fn wait_for_steer(
        &mut self,
        active: &str,
        request: &CreateResponse,
    ) -> Served<Option<SteerRequest>> {
        let Some(window) = self.options().steer_window else {
            return Ok(None);
        };
        // tokio's sleep turns a window too long for an `Instant` into "never".
        let deadline = tokio::time::sleep(window).deadline();
        loop {
            let frame = match self.backlog.pop_front() {
                Some(frame) => frame,
                None => match tokio::time::timeout_at(deadline, self.frames.recv()).await {
                    Ok(Some(frame)) => frame,
                    Ok(None) => return Err(Stop::Gone),
                    Err(_) => return Ok(None),
                },
            };
            let Ok(ClientEvent::Steer(steer)) = ClientEvent::from_json(&frame) else {
                self.backlog.push_front(frame);
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
    async fn steer_idle(&mut self, steer: SteerRequest) -> Served {
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
            let lane = None::<&str>;
            parent.queued.push(steer.input.to_items());
            let required = parent.required.clone();
            self.keep(&parent_id, parent);
            let accepted = json!({"type": "response.steer.accepted", "steer": {"id": steer_id, "previous_response_id": parent_id}});
            self.send(accepted, lane).await?;
            let pending = json!({"type": "response.steer.pending",
                "steer": {"id": steer_id, "previous_response_id": parent_id},
                "reason": "waiting_for_required_input", "required_input": required});
            return self.send(pending, lane).await;
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

const UNSUPPORTED: &str = "Steering is not supported for conversation-bound responses or responses using automatic compaction.";

fn steering_supported(request: &CreateResponse) -> bool {
    !request.extra.contains_key("conversation") && !request.extra.contains_key("context_management")
}

fn message_json(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
}

/// The emulator's deterministic answer: it names the request, tool results and steering.
fn reply_text(context: &[Item], steer: Option<&str>) -> String {
    let original = context
        .iter()
        .find_map(|item| match item {
            Item::Message(m) if m.role == "user" => Some(m.text()),
            _ => None,
        })
        .unwrap_or_default();
    let outputs = tool_outputs(context);
    let mut text = String::new();
    if let Some(steer) = steer {
        text.push_str(&format!("Revised answer (steering applied: {steer}). "));
    }
    if !outputs.is_empty() {
        text.push_str(&format!("Using tool results: {}. ", outputs.join("; ")));
    }
    text.push_str(&format!("Answer to: {original}"));
    text
}

/// The conversation after a completed response: its context followed by its output items.
fn with_output(mut context: Vec<Item>, output: &[Value]) -> Vec<Item> {
    context.extend(
        output
            .iter()
            .filter_map(|v| serde_json::from_value(v.clone()).ok()),
    );
    context
}
