//! WebSocket mode at `GET /v1/responses` (<https://developers.openai.com/api/docs/guides/websocket-mode>),
//! deterministic.
//!
//! Semantics (one connection = one session, `session.rs`):
//! - client frames are handled one at a time in arrival order, so requests on a `stream_id`
//!   are FIFO; events echo `stream_id`; `sequence_number` increases over the connection;
//! - what a `response.create` gets: with a script that has rules, exactly what the same
//!   request gets over HTTP with `stream: true` (the same rules, counters, rendering, error
//!   replies and stream faults; a `cut` drops the connection mid-response, a `stall` sends
//!   nothing more); with an empty script, the steering conversation: a fresh request that
//!   offers function tools gets a call of the first one, any other a text that names the
//!   request, the tool results and the steers applied;
//! - steering acceptance point: a response held for steering waits after its first text
//!   delta, or after a function call's `output_item.added`, for a `response.steer` naming
//!   it. Holding is an option, never a default: a scripted reply is held for its rule's
//!   `hold_for_steer_ms`; a fresh response of the steering conversation (not a successor or
//!   continuation) for [`WsOptions::steer_window`] (default: not held);
//! - a steered text response ends `incomplete` (`reason: steered`) at that boundary, then a
//!   successor (`previous_response_id` = parent) is created with the queued input prepended
//!   and completes; a steered function call completes, then `response.steer.pending` lists
//!   the `required_input`; the client's `response.create` on the parent gets the queued
//!   input prepended (the client must not resend it);
//! - every documented `response.steer.failed` code is reachable (see `session.rs`);
//! - protocol errors are `{"type":"error","status":N,"error":{...}}` events;
//! - `store: false` responses live in a connection-local cache only (its most recent 1000,
//!   at most 64 MiB of them, as the server's store keeps them); stored ones are shared by
//!   the server's WebSocket connections; a response's conversation is shared with the one
//!   it continues, not copied;
//! - a client message that breaks the protocol closes the connection with the RFC 6455
//!   code: 1009 over the size limit, 1007 invalid UTF-8 in a text message, 1002 otherwise;
//! - under a `stall` or `keep_alive` fault the session answers nothing more, and drops
//!   every frame the client sends until it goes;
//! - after [`WsOptions::connection_lifetime`] the next client frame gets
//!   `websocket_connection_limit_reached` and the connection closes (1000).

mod session;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_responses::types::{CreateResponse, Item};
use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::bounded::{Recent, RecentMap};
use crate::router::AppState;
use crate::validate::check_auth;

/// Where a scripted connection fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// Right after `response.steer.accepted` was sent (before the successor exists).
    AfterSteerAccepted,
    /// When the first `response.create` of the connection arrives (before any reply).
    OnFirstCreate,
}

/// How the connection ends at a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Drop the TCP connection without a close frame (the client sees 1006).
    Drop,
    /// Send a close frame with this code.
    Close(u16),
}

/// A connection fault on the `connection`-th WebSocket connection (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WsFault {
    /// Which connection (0-based, in accept order).
    pub connection: usize,
    /// When the fault strikes.
    pub point: FaultPoint,
    /// How the connection ends.
    pub action: FaultAction,
}

/// WebSocket endpoint settings.
#[derive(Debug, Clone, PartialEq)]
pub struct WsOptions {
    /// How long a fresh response of the steering conversation (an empty script) waits at
    /// its acceptance point for a steer; `None` (the default) never waits. Scripted replies
    /// are held by their rule's `hold_for_steer_ms` instead.
    pub steer_window: Option<Duration>,
    /// Connection lifetime (the API's is 60 minutes).
    pub connection_lifetime: Duration,
    /// Distinct `stream_id`s per connection before `websocket_stream_limit_reached`.
    pub max_streams: usize,
    /// Steers queued on one parent before `too_many_pending_steers`.
    pub max_pending_steers: usize,
    /// Make every successor creation fail (`successor_creation_failed`).
    pub fail_successor_creation: bool,
    /// A scripted connection fault, if any.
    pub fault: Option<WsFault>,
}

impl Default for WsOptions {
    fn default() -> Self {
        Self {
            steer_window: None,
            connection_lifetime: Duration::from_secs(60 * 60),
            max_streams: 16,
            max_pending_steers: 4,
            fail_successor_creation: false,
            fault: None,
        }
    }
}

/// A response as the WebSocket endpoint keeps it.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub request: CreateResponse,
    /// Everything the response saw plus its output, sharing what it continued.
    pub context: Arc<crate::chain::Chain>,
    /// `completed`, `incomplete`, `failed`.
    pub status: String,
    /// Steering input queued while the response waits for required input.
    pub queued: Vec<Vec<Item>>,
    /// The `required_input` stubs it waits for (empty: not waiting).
    pub required: Vec<Value>,
    pub generated: bool,
}

impl crate::bounded::Weigh for Entry {
    fn weight(&self) -> usize {
        use crate::bounded::json_len;
        json_len(&self.request)
            + self.context.own_bytes()
            + json_len(&self.queued)
            + json_len(&self.required)
    }
}

/// Largest client message, as for an HTTP request body (axum's default limit, 2 MiB); a
/// larger one closes the connection (1009).
const MAX_MESSAGE_BYTES: usize = 2 * 1024 * 1024;

/// State shared by all WebSocket connections of one emulator.
#[derive(Debug, Default)]
pub(crate) struct WsShared {
    pub options: WsOptions,
    connections: AtomicUsize,
    /// `store: true` responses created over WebSocket.
    stored: Mutex<RecentMap<String, Entry>>,
    /// The client frames received, as received (text: parsed only when asked for), the
    /// most recent first-in-first-out, bounded by count and bytes.
    received: Mutex<Recent<Box<str>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl WsShared {
    pub(crate) fn new(options: WsOptions) -> Self {
        Self {
            options,
            ..Self::default()
        }
    }
    pub(crate) fn record(&self, frame: &str) {
        lock(&self.received).push(frame.into());
    }
    pub(crate) fn stored(&self, id: &str) -> Option<Entry> {
        lock(&self.stored).get(id).cloned()
    }
    pub(crate) fn store(&self, id: &str, entry: Entry) {
        lock(&self.stored).insert(id.to_owned(), entry);
    }
}

impl crate::MockServer {
    /// Every WebSocket client frame received so far (parsed JSON; a frame that is not
    /// JSON as a string), across connections: the most recent 1000, at most 32 MiB of
    /// frames together.
    pub fn ws_frames(&self) -> Vec<Value> {
        // Copied out first: the lock is not held while parsing.
        let frames: Vec<Box<str>> = lock(&self.state.ws.received).iter().cloned().collect();
        frames
            .iter()
            .map(|frame| {
                serde_json::from_str(frame).unwrap_or_else(|_| Value::String(frame.to_string()))
            })
            .collect()
    }
    /// How many WebSocket connections were accepted.
    pub fn ws_connections(&self) -> usize {
        self.state.ws.connections.load(Ordering::SeqCst)
    }
}

/// `GET /v1/responses` with an upgrade: checks the bearer key, then runs a session.
pub(crate) async fn upgrade(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let json_failure = |failure: crate::validate::ApiFailure| {
        let status = StatusCode::from_u16(failure.status).unwrap_or(StatusCode::BAD_REQUEST);
        (
            status,
            [("content-type", "application/json")],
            failure.body().to_string(),
        )
            .into_response()
    };
    if let Err(failure) = check_auth(&headers, state.api_key.as_deref()) {
        return json_failure(failure);
    }
    // A GET that is not a WebSocket handshake: the API's JSON error, not axum's plain text.
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => {
            let mut failure = crate::validate::ApiFailure::invalid(
                format!(
                    "Invalid WebSocket upgrade request: {}",
                    rejection.body_text()
                ),
                None,
                None,
            );
            failure.status = rejection.status().as_u16();
            return json_failure(failure);
        }
    };
    let index = state.ws.connections.fetch_add(1, Ordering::SeqCst);
    ws.max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| session::run(socket, state, index))
}
