//! A WebSocket session to `{base}/responses`.
//!
//! One task owns the socket (reads, writes, reconnects); [`WsSession`] is the handle.
//! Invariants:
//! - the bearer key travels only in the upgrade request's `Authorization` header;
//! - a handshake that takes longer than `handshake_timeout` fails;
//! - a frame is sent once: after a drop, nothing in flight is replayed, the session reports
//!   [`SessionEvent::Disconnected`] with how many requests now have an unknown outcome;
//! - reconnects follow [`ReconnectPolicy`] (recoverable close codes only);
//! - [`WsSession::next_event`] fails with [`WsError::RequestTimeout`] when requests are in
//!   flight and no frame came for `request_timeout` (since the last request was sent or
//!   the last frame came): a response that keeps streaming is never cut however long it
//!   takes, one that went silent is. Pings are no frames here.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::error::WsError;
use super::events::{
    ClientEvent, ResponseCreate, ServerEvent, SteerInput, SteerRequest, valid_stream_id,
};
use super::inflight::{InFlight, deadline_after};
use super::reconnect::ReconnectPolicy;
use crate::http::{ApiKey, ClientConfig};

type Socket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// Session settings.
#[derive(Debug, Clone)]
pub struct WsConfig {
    /// e.g. `https://api.openai.com/v1`; `http`→`ws`, `https`→`wss`, `/responses` appended.
    pub base_url: String,
    /// The bearer key, sent on the upgrade request only.
    pub api_key: ApiKey,
    /// Upgrade handshake limit (10 s, as the official Python SDK uses).
    pub handshake_timeout: Duration,
    /// Longest wait for the next frame while a request is in flight (sent, not yet ended).
    pub request_timeout: Duration,
    /// Whether and how a dropped connection is reopened.
    pub reconnect: ReconnectPolicy,
    /// Largest accepted server frame.
    pub max_frame_bytes: usize,
}

impl WsConfig {
    /// Settings for `base_url` with the SDK's timeouts and no reconnecting.
    pub fn new(base_url: impl Into<String>, api_key: ApiKey) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key,
            handshake_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            reconnect: ReconnectPolicy::default(),
            max_frame_bytes: 16 << 20,
        }
    }

    /// Base URL and key of an HTTP client config (`OPENAI_API_KEY`, `--base-url`/`OPENAI_BASE_URL`),
    /// and its stream idle timeout as `request_timeout`: both transports then give up on a
    /// silent model after the same wait.
    pub fn from_client_config(config: &ClientConfig) -> Self {
        let mut ws = Self::new(config.base_url.clone(), config.api_key.clone());
        ws.request_timeout = config.stream_idle_timeout;
        ws
    }

    /// The `ws(s)://.../responses` URL.
    pub fn url(&self) -> Result<String, WsError> {
        websocket_url(&self.base_url)
    }
}

/// `http://h/v1` → `ws://h/v1/responses`, `https` → `wss`; `ws(s)` kept.
pub fn websocket_url(base: &str) -> Result<String, WsError> {
    let base = base.trim().trim_end_matches('/');
    let rest = |prefix: &str| base.strip_prefix(prefix).filter(|r| !r.is_empty());
    let url = if let Some(r) = rest("https://") {
        format!("wss://{r}")
    } else if let Some(r) = rest("http://") {
        format!("ws://{r}")
    } else if rest("wss://").is_some() || rest("ws://").is_some() {
        base.to_owned()
    } else {
        return Err(WsError::InvalidBaseUrl(base.to_owned()));
    };
    let url = format!("{url}/responses");
    // Checked whole, as the HTTP client does: a port out of range would otherwise be
    // dropped by the WebSocket connector, which then dials the scheme's default port.
    match reqwest::Url::parse(&url) {
        Ok(parsed) if parsed.host_str().is_some_and(|h| !h.is_empty()) => Ok(url),
        _ => Err(WsError::InvalidBaseUrl(base.to_owned())),
    }
}

/// What a session reports, in arrival order.
#[derive(Debug, Clone, PartialEq)]
// Moved once per frame; boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum SessionEvent {
    /// A server event, as received.
    Server(ServerEvent),
    /// The connection ended. `in_flight` requests have an unknown outcome and are not
    /// replayed. With `reconnecting`, the session is reopening; otherwise it is closed.
    Disconnected {
        /// The close code, when a close frame came.
        code: Option<u16>,
        /// The close reason or the transport's error.
        reason: String,
        /// Requests sent and not ended when the connection dropped.
        in_flight: usize,
        /// Whether the session is reopening the connection.
        reconnecting: bool,
    },
    /// Reconnected after `attempt` tries; new requests may be sent.
    Reconnected {
        /// Which attempt succeeded (1 for the first).
        attempt: u32,
    },
}

enum Command {
    Send(String, oneshot::Sender<Result<(), WsError>>),
}

enum ActorEvent {
    Frame(String),
    Disconnected {
        code: Option<u16>,
        reason: String,
        reconnecting: bool,
    },
    Reconnected {
        attempt: u32,
    },
}

/// A handle to the session task. Dropping it closes the socket.
#[derive(Debug)]
pub struct WsSession {
    commands: mpsc::Sender<Command>,
    events: mpsc::Receiver<ActorEvent>,
    inflight: InFlight,
    request_timeout: Duration,
    closed: Option<(Option<u16>, String)>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Command::Send")
    }
}
impl std::fmt::Debug for ActorEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ActorEvent")
    }
}

impl WsSession {
    /// Opens the session (handshake limited by `handshake_timeout`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the session task is spawned only once the handshake has finished, so a
    /// future dropped before then leaves nothing running; the connection being opened is
    /// dropped without a close frame.
    pub async fn connect(config: WsConfig) -> Result<Self, WsError> {
        let socket = open(&config).await?;
        let (commands, command_rx) = mpsc::channel(64);
        let (event_tx, events) = mpsc::channel(256);
        let request_timeout = config.request_timeout;
        tokio::spawn(run_actor(config, socket, command_rx, event_tx));
        Ok(Self {
            commands,
            events,
            inflight: InFlight::default(),
            request_timeout,
            closed: None,
        })
    }

    /// Sends `response.create`. The request's deadline starts now.
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting for room in the session task's queue, nothing is sent or
    /// recorded. Once queued, the request is in flight (with its deadline, counted by
    /// [`in_flight`](Self::in_flight)) and the frame goes out even if the future is dropped,
    /// so its `response.created` or `error` answers this request, not a later one.
    pub async fn create(&mut self, create: ResponseCreate) -> Result<(), WsError> {
        if let Some(lane) = &create.stream_id
            && !valid_stream_id(lane)
        {
            return Err(WsError::InvalidStreamId(lane.clone()));
        }
        let lane = create.stream_id.clone();
        let written = self.enqueue(&ClientEvent::Create(create)).await?;
        self.inflight.create_sent(
            lane.clone(),
            deadline_after(Instant::now(), self.request_timeout),
        );
        let result = written.await;
        if result.is_err() {
            // Not written: nothing will answer it.
            self.inflight.create_unsent(&lane);
        }
        result
    }

    /// Sends `response.steer` for the active response `previous_response_id`.
    ///
    /// # Cancel safety
    ///
    /// As for [`send`](Self::send): once queued, the steer is sent even if the future is
    /// dropped; only the returned [`SteerRequest`] is lost (the steer's events still arrive
    /// through [`next_event`](Self::next_event)).
    pub async fn steer(
        &mut self,
        previous_response_id: &str,
        input: SteerInput,
    ) -> Result<SteerRequest, WsError> {
        input.validate().map_err(WsError::InvalidSteer)?;
        if previous_response_id.trim().is_empty() {
            return Err(WsError::InvalidSteer(
                "previous_response_id is empty".into(),
            ));
        }
        let steer = SteerRequest {
            previous_response_id: previous_response_id.to_owned(),
            input,
        };
        self.send(&ClientEvent::Steer(steer.clone())).await?;
        Ok(steer)
    }

    /// Sends any client event as is (no validation).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw the event. Dropped while waiting for room in
    /// the session task's queue (64 frames), nothing is sent; once queued (normally at the
    /// first poll) the session task still writes the whole frame, and the result is lost.
    pub async fn send(&mut self, event: &ClientEvent) -> Result<(), WsError> {
        self.enqueue(event).await?.await
    }

    /// Queues `event` for the session task; the returned future says whether it was
    /// written. Dropped before it returns, nothing was queued (a bounded channel's send).
    async fn enqueue(
        &mut self,
        event: &ClientEvent,
    ) -> Result<impl Future<Output = Result<(), WsError>> + use<>, WsError> {
        if let Some((code, reason)) = &self.closed {
            return Err(WsError::Closed {
                code: *code,
                reason: reason.clone(),
            });
        }
        let text = event
            .to_json()
            .map_err(|e| WsError::Encode(e.to_string()))?;
        let (ack, done) = oneshot::channel();
        self.commands
            .send(Command::Send(text, ack))
            .await
            .map_err(|_| WsError::Closed {
                code: None,
                reason: "session task ended".into(),
            })?;
        Ok(async move {
            done.await.map_err(|_| WsError::Closed {
                code: None,
                reason: "session task ended".into(),
            })?
        })
    }

    /// How many requests are in flight (their outcome would be unknown if the socket dropped).
    pub fn in_flight(&self) -> usize {
        self.inflight.count()
    }

    /// The next event; `Ok(None)` once the session is closed and drained.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits on the session task's queue, so a dropped future loses no
    /// event and the next call returns it. Deadlines are fixed instants: dropping the
    /// future and calling again does not extend them.
    pub async fn next_event(&mut self) -> Result<Option<SessionEvent>, WsError> {
        let received = match self.inflight.deadline() {
            Some(deadline) => match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(received) => received,
                Err(_) => {
                    self.inflight.clear();
                    return Err(WsError::RequestTimeout(self.request_timeout));
                }
            },
            None => self.events.recv().await,
        };
        let Some(event) = received else {
            return Ok(None);
        };
        match event {
            ActorEvent::Frame(text) => {
                // Any frame shows the server is still answering: every wait starts again.
                self.inflight
                    .refresh(deadline_after(Instant::now(), self.request_timeout));
                let event = ServerEvent::from_json(&text).map_err(|e| WsError::Decode {
                    error: e.to_string(),
                    frame_start: text.chars().take(120).collect(),
                })?;
                self.inflight
                    .observe(&event, Instant::now(), self.request_timeout);
                Ok(Some(SessionEvent::Server(event)))
            }
            ActorEvent::Disconnected {
                code,
                reason,
                reconnecting,
            } => {
                let in_flight = self.inflight.count();
                self.inflight.clear();
                if !reconnecting {
                    self.closed = Some((code, reason.clone()));
                }
                Ok(Some(SessionEvent::Disconnected {
                    code,
                    reason,
                    in_flight,
                    reconnecting,
                }))
            }
            ActorEvent::Reconnected { attempt } => Ok(Some(SessionEvent::Reconnected { attempt })),
        }
    }

    /// Closes the socket with a normal close (1000) and ends the session task.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (even unpolled) drops the session, which closes it too: the
    /// session task still closes the connection and ends on its own. Only the wait for it is
    /// given up, and events not yet received are discarded.
    pub async fn close(self) {
        let Self {
            commands,
            mut events,
            ..
        } = self;
        drop(commands);
        while events.recv().await.is_some() {}
    }
}

async fn open(config: &WsConfig) -> Result<Socket, WsError> {
    let url = config.url()?;
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| WsError::InvalidBaseUrl(format!("{url}: {e}")))?;
    let mut bearer = HeaderValue::from_str(&config.api_key.bearer()).map_err(|_| {
        WsError::Connect("the API key contains characters not allowed in a header".into())
    })?;
    bearer.set_sensitive(true);
    request.headers_mut().insert("authorization", bearer);
    let mut ws_config = WebSocketConfig::default();
    ws_config.max_message_size = Some(config.max_frame_bytes);
    ws_config.max_frame_size = Some(config.max_frame_bytes);
    let connect = tokio_tungstenite::connect_async_with_config(request, Some(ws_config), false);
    match tokio::time::timeout(config.handshake_timeout, connect).await {
        Err(_) => Err(WsError::HandshakeTimeout(config.handshake_timeout)),
        Ok(Ok((socket, _response))) => Ok(socket),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            let status = response.status().as_u16();
            let body = response
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            let message = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| {
                    v.pointer("/error/message")
                        .and_then(|m| m.as_str())
                        .map(str::to_owned)
                })
                .unwrap_or_else(|| body.chars().take(300).collect());
            Err(WsError::HandshakeRefused { status, message })
        }
        Ok(Err(err)) => Err(WsError::Connect(err.to_string())),
    }
}

/// Reads until the socket ends; returns the close code (1006 when it ended without one).
async fn pump(
    socket: &mut Socket,
    commands: &mut mpsc::Receiver<Command>,
    events: &mpsc::Sender<ActorEvent>,
) -> Option<(Option<u16>, String)> {
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Send(text, ack)) => {
                    let result = socket.send(Message::text(text)).await.map_err(|e| WsError::Closed {
                        code: None,
                        reason: e.to_string(),
                    });
                    let _ = ack.send(result);
                }
                None => {
                    let _ = socket.close(None).await;
                    return None;
                }
            },
            message = socket.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    if events.send(ActorEvent::Frame(text.as_str().to_owned())).await.is_err() {
                        let _ = socket.close(None).await;
                        return None;
                    }
                }
                Some(Ok(Message::Binary(bytes))) => {
                    let text = String::from_utf8_lossy(&bytes).into_owned();
                    if events.send(ActorEvent::Frame(text)).await.is_err() {
                        return None;
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    return Some(match frame {
                        Some(frame) => (Some(u16::from(frame.code)), frame.reason.as_str().to_owned()),
                        None => (Some(1005), String::new()),
                    });
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Err(err)) => return Some((Some(1006), err.to_string())),
                None => return Some((Some(1006), "connection ended without a close frame".into())),
            },
        }
    }
}

async fn run_actor(
    config: WsConfig,
    mut socket: Socket,
    mut commands: mpsc::Receiver<Command>,
    events: mpsc::Sender<ActorEvent>,
) {
    let mut failed_attempts = 0u32;
    loop {
        let Some((code, reason)) = pump(&mut socket, &mut commands, &events).await else {
            return;
        };
        let close_code = code.unwrap_or(1006);
        let mut reconnecting = config
            .reconnect
            .should_reconnect(close_code, failed_attempts);
        let _ = events
            .send(ActorEvent::Disconnected {
                code,
                reason: reason.clone(),
                reconnecting,
            })
            .await;
        if !reconnecting {
            reject_all(&mut commands, code, &reason).await;
            return;
        }
        loop {
            failed_attempts += 1;
            tokio::time::sleep(
                config
                    .reconnect
                    .delay(failed_attempts, crate::retry::jitter_unit()),
            )
            .await;
            match open(&config).await {
                Ok(new_socket) => {
                    socket = new_socket;
                    let _ = events
                        .send(ActorEvent::Reconnected {
                            attempt: failed_attempts,
                        })
                        .await;
                    failed_attempts = 0;
                    break;
                }
                Err(err) => {
                    tracing::warn!(attempt = failed_attempts, %err, "WebSocket reconnect failed");
                    reconnecting = failed_attempts < config.reconnect.max_retries;
                    if !reconnecting {
                        let reason =
                            format!("gave up reconnecting after {failed_attempts} attempts: {err}");
                        let _ = events
                            .send(ActorEvent::Disconnected {
                                code,
                                reason: reason.clone(),
                                reconnecting: false,
                            })
                            .await;
                        reject_all(&mut commands, code, &reason).await;
                        return;
                    }
                }
            }
        }
    }
}

async fn reject_all(commands: &mut mpsc::Receiver<Command>, code: Option<u16>, reason: &str) {
    commands.close();
    while let Some(Command::Send(_, ack)) = commands.recv().await {
        let _ = ack.send(Err(WsError::Closed {
            code,
            reason: reason.to_owned(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            websocket_url("https://api.openai.com/v1").unwrap(),
            "wss://api.openai.com/v1/responses"
        );
        assert_eq!(
            websocket_url("http://127.0.0.1:9/v1/").unwrap(),
            "ws://127.0.0.1:9/v1/responses"
        );
        assert_eq!(websocket_url("ws://h/v1").unwrap(), "ws://h/v1/responses");
        // A port out of range used to be dropped, and the default port dialled.
        for bad in [
            "http://127.0.0.1:83686/v1",
            "ws://h:99999",
            "https://:443/v1",
        ] {
            assert!(
                matches!(websocket_url(bad), Err(WsError::InvalidBaseUrl(_))),
                "{bad}"
            );
        }
        assert!(websocket_url("ftp://h").is_err());
        assert!(websocket_url("http://").is_err());
    }
}
