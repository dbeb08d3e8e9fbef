//! One WebSocket connection of the emulator. Frames are handled one at a time, in order.
//!
//! Here: the connection loop and `response.create`. Streaming a response is in
//! `session/stream.rs`, steer handling in `session/steer.rs`, what a steered response turns
//! into in `session/steered.rs`, and the deterministic answers in `session/reply.rs`.

mod reply;
mod steer;
mod steered;
mod stream;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_responses::types::{CreateResponse, Input, Item, Usage};
use agent_responses::ws::events::{ClientEvent, ResponseCreate, valid_stream_id};
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::stream::SplitSink;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::reply::{first_function_tool, last_user_text, message_json, reply_text};
use super::{Entry, FaultAction, FaultPoint};
use crate::bounded::{MAX_STORED, MAX_STORED_BYTES, RecentMap};
use crate::chain::Chain;
use crate::respond::{finish_item, new_id, response_object};
use crate::router::{AppState, error_reply};
use crate::script::{Fault, Rendered, Reply, RequestView, ScriptEndpoint, tool_outputs};
use crate::validate::{ApiFailure, previous_not_found};

/// Client messages read ahead of the one being handled. With messages of at most 2 MiB this
/// bounds what a client can make a busy session hold (16 MiB); a client sending faster
/// than the session handles is pushed back by TCP.
const READ_AHEAD: usize = 8;

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
    /// The stored conversation `context` starts with (what it continues), shared when the
    /// response is kept.
    base: Option<Arc<Chain>>,
    /// The whole conversation the response answers.
    context: Vec<Item>,
    output: Vec<Value>,
    lane: Option<String>,
    /// The response's final `status` (`completed`, `incomplete`, `failed`).
    status: String,
    /// How long the response waits at its acceptance point for a steer (`None`: never).
    hold: Option<Duration>,
    /// A scripted stream fault.
    fault: Option<Fault>,
    /// Characters per delta, when the script says.
    delta_chars: Option<usize>,
    /// Whether the text is streamed as deltas (the script's `text_deltas`).
    text_deltas: bool,
    /// How long the response takes to start and to stream.
    latency: crate::Latency,
}

struct Session {
    sink: SplitSink<WebSocket, Message>,
    frames: mpsc::Receiver<String>,
    /// A frame read while waiting for a steer that was not one: handled next. At most one,
    /// by construction (frames a stalled response never answers are dropped, not kept).
    pending: Option<String>,
    state: Arc<AppState>,
    index: usize,
    started: Instant,
    seq: u64,
    creates: usize,
    lanes: HashSet<String>,
    /// This connection's responses (`store: false` ones live only here), the most recent
    /// [`MAX_STORED`] up to [`MAX_STORED_BYTES`], as the server's store keeps them.
    cache: RecentMap<String, Entry>,
}

/// Why the client's stream ended, when it broke the protocol: the close code it earns.
type ProtocolFailure = Arc<Mutex<Option<(u16, &'static str)>>>;

/// The close code a client's read error earns (RFC 6455 section 7.4.1): a message over
/// the size limit 1009, a text message that is not UTF-8 1007, any other protocol
/// violation (an unmasked frame, a reserved opcode, a stray continuation) 1002. `None`:
/// the connection just ended. axum hides tungstenite's error type, so its text is read.
fn protocol_close(err: &axum::Error) -> Option<(u16, &'static str)> {
    let text = err.to_string();
    if text.starts_with("Space limit exceeded") {
        Some((1009, "message too big"))
    } else if text.starts_with("UTF-8 encoding error") {
        Some((1007, "invalid UTF-8 in a text message"))
    } else if text.starts_with("WebSocket protocol error")
        && !text.contains("without closing handshake")
    {
        Some((1002, "protocol error"))
    } else {
        None
    }
}

pub(super) async fn run(socket: WebSocket, state: Arc<AppState>, index: usize) {
    let (sink, mut stream) = socket.split();
    let (tx, frames) = mpsc::channel::<String>(READ_AHEAD);
    let failure = ProtocolFailure::default();
    let failed = Arc::clone(&failure);
    let reader = tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            let text = match message {
                Ok(Message::Text(text)) => text.as_str().to_owned(),
                Ok(Message::Binary(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
                Ok(Message::Ping(_) | Message::Pong(_)) => continue,
                Ok(Message::Close(_)) => break,
                Err(err) => {
                    // Set before `tx` is dropped, so the session sees it once the frames end.
                    *failed
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = protocol_close(&err);
                    break;
                }
            };
            if tx.send(text).await.is_err() {
                break;
            }
        }
    });
    let mut session = Session {
        sink,
        frames,
        pending: None,
        state,
        index,
        started: Instant::now(),
        seq: 0,
        creates: 0,
        lanes: HashSet::new(),
        cache: RecentMap::new(MAX_STORED, MAX_STORED_BYTES),
    };
    let mut stop = session.serve().await;
    reader.abort();
    if let Stop::Gone = stop
        && let Some((code, reason)) = *failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        stop = Stop::Close(code, reason.into());
    }
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

    /// Pings every `fault.every_ms` and nothing else until the client goes; its frames go
    /// unanswered, as under `stall`.
    async fn keep_alive<T>(&mut self, fault: &crate::script::Fault) -> Served<T> {
        let mut ticks = tokio::time::interval(fault.keep_alive_every());
        ticks.tick().await;
        loop {
            tokio::select! {
                frame = self.frames.recv() => if frame.is_none() {
                    return Err(Stop::Gone);
                },
                _ = ticks.tick() => {
                    if self.sink.send(Message::Ping(Default::default())).await.is_err() {
                        return Err(Stop::Gone);
                    }
                }
            }
        }
    }

    /// The WebSocket `error` event (nested shape with `status`).
    async fn send_error(&mut self, failure: &ApiFailure, lane: Option<&str>) -> Served {
        let event = json!({"type": "error", "status": failure.status, "error": {
            "type": failure.kind, "code": failure.code, "message": failure.message, "param": failure.param,
            "headers": {"x-request-id": new_id("req")}}});
        self.send(event, lane).await
    }

    /// Sends nothing more and answers nothing more until the client goes (a `stall`): the
    /// session ends then, so every frame the client sends meanwhile is dropped as it comes,
    /// never kept.
    async fn stall<T>(&mut self) -> Served<T> {
        while self.frames.recv().await.is_some() {}
        Err(Stop::Gone)
    }

    async fn next_frame(&mut self) -> Option<String> {
        match self.pending.take() {
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
                // A create whose field has the wrong type is named as the HTTP endpoint
                // names it (`invalid_type`, `param`); anything else is not a client event.
                let failure = crate::router::create_frame_wrong(frame).unwrap_or_else(|| {
                    ApiFailure::invalid(
                        format!("Invalid client event: {err}"),
                        None,
                        Some("invalid_request"),
                    )
                });
                self.send_error(&failure, None).await
            }
            Ok(ClientEvent::Create(create)) => self.create(create, frame).await,
            Ok(ClientEvent::Steer(steer)) => self.steer_idle(steer).await,
        }
    }

    /// Checks a `response.create`; `Err(failure)` is sent as an error event.
    fn check_create(&mut self, create: &ResponseCreate) -> Result<(), ApiFailure> {
        let request = &create.request;
        crate::validate::check_input_types(request.input.as_ref())?;
        crate::text_format::check(request)?;
        crate::function_tools::check(request)?;
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

    /// A `response.create` (`frame` is its text, what a rule's `body_contains` reads).
    async fn create(&mut self, create: ResponseCreate, frame: &str) -> Served {
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
        let mut base = None;
        let mut queued_input: Vec<Item> = Vec::new();
        let mut continuation = false;
        if let Some(parent_id) = request.previous_response_id() {
            let Some(mut parent) = self.lookup(parent_id) else {
                return self
                    .send_error(&previous_not_found(parent_id), lane.as_deref())
                    .await;
            };
            context = parent.context.to_vec();
            base = Some(Arc::clone(&parent.context));
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
        if let Err(failure) = self.state.check(&context) {
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
                context: Chain::after(base.as_ref(), context),
                status: "completed".into(),
                queued: Vec::new(),
                required: Vec::new(),
                generated: false,
            };
            self.keep(&id, entry);
            return Ok(());
        }
        if !self.state.script.rules.is_empty() {
            return self
                .create_scripted(request, (base, context), lane, frame)
                .await;
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
        let hold = if continuation {
            None
        } else {
            self.options().steer_window
        };
        self.respond(Job {
            request,
            base,
            context,
            output,
            lane,
            status: "completed".into(),
            hold,
            fault: None,
            delta_chars: None,
            text_deltas: true,
            latency: self.state.latency_of(None),
        })
        .await
    }

    /// Answers a `response.create` from the script, as HTTP answers the same request with
    /// `stream: true`: the first matching rule that is not used up (shared counters), its
    /// items rendered, its error as an `error` event, its fault in the stream; no match
    /// echoes. The reply is held for a steer only if its rule says so.
    async fn create_scripted(
        &mut self,
        request: CreateResponse,
        (base, context): (Option<Arc<Chain>>, Vec<Item>),
        lane: Option<String>,
        frame: &str,
    ) -> Served {
        let view = RequestView {
            endpoint: ScriptEndpoint::Responses,
            body_text: frame,
            items: &context,
            stream: true,
            previous_response: request.previous_response_id().is_some(),
            text_format: crate::text_format::format_type(&request),
        };
        let rule = self.state.pick(&view);
        let latency = self.state.latency_of(rule.as_ref());
        let (reply, fault, hold) = match rule {
            Some(rule) => (
                rule.reply,
                rule.fault,
                rule.hold_for_steer_ms.map(Duration::from_millis),
            ),
            None => (Reply::Echo { echo: true }, None, None),
        };
        let Rendered {
            output,
            status,
            delta_chars,
            text_deltas,
        } = match reply.render_for(&context) {
            Ok(rendered) => rendered,
            Err(error) => return self.send_error(&error_reply(&error), lane.as_deref()).await,
        };
        let issued: Vec<Item> = output
            .iter()
            .filter_map(|v| serde_json::from_value(v.clone()).ok())
            .collect();
        self.state.remember_issued(&issued);
        self.respond(Job {
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
        })
        .await
    }
}
