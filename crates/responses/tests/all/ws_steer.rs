//! WebSocket mode and steering over a real WebSocket on 127.0.0.1, against the emulator.

use std::collections::HashMap;
use std::time::Duration;

use agent_responses::ApiKey;
use agent_responses::types::{CreateResponse, Input, Item, StreamEvent};
use agent_responses::ws::events::SteerError;
use agent_responses::ws::{
    ClientEvent, ReconnectPolicy, ResponseCreate, ServerEvent, SessionEvent, SteerEvent,
    SteerFailCode, SteerInput, SteerRequest, SteerTracker, SteerUpdate, WsConfig, WsError,
    WsSession, fill_request,
};
use agent_responses_mock::ws::{FaultAction, FaultPoint, WsFault, WsOptions};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use serde_json::{Value, json};

const PLAN: &str = "为面试练习设计一个任务管理工具，列出功能和交付计划。";
const STEER: &str = "新增约束：一个人两天完成，只保留最小功能。";

async fn server(options: WsOptions) -> MockServer {
    let mut config = MockConfig::new(Script::default()).with_api_key(MOCK_API_KEY);
    config.ws = options;
    MockServer::start(config).await.unwrap()
}

/// Options where a fresh response waits (generously) for a steer at its acceptance point.
fn steerable() -> WsOptions {
    WsOptions {
        steer_window: Some(Duration::from_secs(60)),
        ..WsOptions::default()
    }
}

fn no_hold() -> WsOptions {
    WsOptions {
        steer_window: None,
        ..WsOptions::default()
    }
}

fn config(server: &MockServer) -> WsConfig {
    WsConfig::new(server.base_url(), ApiKey::new(MOCK_API_KEY).unwrap())
}

async fn connect(server: &MockServer) -> WsSession {
    WsSession::connect(config(server)).await.unwrap()
}

fn plan(lane: Option<&str>) -> ResponseCreate {
    ResponseCreate {
        request: CreateResponse::new("gpt-6-astra", Input::Text(PLAN.into())),
        stream_id: lane.map(str::to_owned),
        generate: None,
    }
}

fn with_tool(mut create: ResponseCreate) -> ResponseCreate {
    create.request.tools = Some(
        serde_json::from_value(
            json!([{"type": "function", "name": "scan", "description": "scan the repo",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]),
        )
        .unwrap(),
    );
    create
}

async fn next_server(session: &mut WsSession) -> ServerEvent {
    match session.next_event().await.unwrap() {
        Some(SessionEvent::Server(event)) => event,
        other => panic!("expected a server event, got {other:?}"),
    }
}

/// Reads events until `stop` holds, feeding the tracker; returns events and updates.
async fn until(
    session: &mut WsSession,
    tracker: &mut SteerTracker,
    stop: impl Fn(&SessionEvent) -> bool,
) -> (Vec<SessionEvent>, Vec<SteerUpdate>) {
    let mut events = Vec::new();
    let mut updates = Vec::new();
    loop {
        let event = session
            .next_event()
            .await
            .unwrap()
            .expect("session ended early");
        updates.extend(tracker.observe(&event));
        let done = stop(&event);
        events.push(event);
        if done {
            return (events, updates);
        }
    }
}

fn is_type(event: &SessionEvent, kind: &str) -> bool {
    matches!(event, SessionEvent::Server(e) if e.type_name() == Some(kind))
}

fn created_id(event: &ServerEvent) -> Option<String> {
    match event {
        ServerEvent::Stream(StreamEvent::Created(e)) => Some(e.response.id.clone()),
        _ => None,
    }
}

async fn created(session: &mut WsSession) -> String {
    loop {
        if let Some(id) = created_id(&next_server(session).await) {
            return id;
        }
    }
}

async fn steer(session: &mut WsSession, tracker: &mut SteerTracker, parent: &str, text: &str) {
    let request = session
        .steer(parent, SteerInput::Text(text.into()))
        .await
        .unwrap();
    tracker.sent(request);
}

fn completed_text(events: &[SessionEvent]) -> String {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            SessionEvent::Server(ServerEvent::Stream(StreamEvent::Completed(c))) => {
                Some(c.response.output_text())
            }
            _ => None,
        })
        .unwrap()
}

async fn steer_failure(session: &mut WsSession) -> (SteerFailCode, SteerError) {
    loop {
        if let ServerEvent::Steer(SteerEvent::Failed(f)) = next_server(session).await {
            return (f.code(), f.error);
        }
    }
}

async fn drain_until_completed(session: &mut WsSession) -> String {
    loop {
        if let ServerEvent::Stream(StreamEvent::Completed(c)) = next_server(session).await {
            return c.response.id;
        }
    }
}

#[tokio::test]
async fn accepted_then_parent_steered_then_successor_commits() {
    let server = server(steerable()).await;
    let mut session = connect(&server).await;
    let mut tracker = SteerTracker::new();
    session.create(plan(Some("agent_1"))).await.unwrap();
    let first = next_server(&mut session).await;
    assert_eq!(first.stream_id(), Some("agent_1"));
    let parent = created_id(&first).unwrap();
    tracker.observe(&SessionEvent::Server(first));
    steer(&mut session, &mut tracker, &parent, STEER).await;
    let (events, updates) = until(&mut session, &mut tracker, |e| {
        is_type(e, "response.completed")
    })
    .await;
    let successor = match &updates[..] {
        [
            SteerUpdate::Accepted { parent: p1, .. },
            SteerUpdate::ParentSteered { parent: p2 },
            SteerUpdate::Committed {
                parent: p3,
                successor,
                ..
            },
        ] => {
            assert!(p1 == &parent && p2 == &parent && p3 == &parent);
            successor.clone()
        }
        other => panic!("unexpected updates {other:?}"),
    };
    assert_ne!(successor, parent);
    // Accepted comes before the parent's end, and the commit point before the successor completes.
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Server(s) => s.type_name(),
            _ => None,
        })
        .collect();
    let pos = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
    assert!(pos("response.steer.accepted") < pos("response.incomplete"));
    assert!(pos("response.incomplete") < pos("response.created"));
    let text = completed_text(&events);
    assert!(text.contains(STEER), "{text}");
    assert!(
        events
            .iter()
            .all(|e| matches!(e, SessionEvent::Server(s) if s.stream_id() == Some("agent_1")))
    );
    assert_eq!(session.in_flight(), 0);
    assert!(!tracker.has_open_steers());
}

#[tokio::test]
async fn accepted_then_pending_then_filled_from_saved_results() {
    let server = server(steerable()).await;
    let mut session = connect(&server).await;
    let mut tracker = SteerTracker::new();
    let create = with_tool(plan(Some("lane_a")));
    let template = create.request.clone();
    session.create(create).await.unwrap();
    let first = next_server(&mut session).await;
    let parent = created_id(&first).unwrap();
    tracker.observe(&SessionEvent::Server(first));
    steer(&mut session, &mut tracker, &parent, STEER).await;
    let (events, updates) = until(&mut session, &mut tracker, |e| {
        is_type(e, "response.steer.pending")
    })
    .await;
    // The parent completed with its tool call; pending arrived after response.completed.
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Server(s) => s.type_name(),
            _ => None,
        })
        .collect();
    assert!(
        kinds.iter().position(|k| *k == "response.completed")
            < kinds.iter().position(|k| *k == "response.steer.pending")
    );
    let call_id = events
        .iter()
        .find_map(|e| match e {
            SessionEvent::Server(ServerEvent::Stream(StreamEvent::OutputItemDone(d))) => {
                d.item.call_id().map(str::to_owned)
            }
            _ => None,
        })
        .unwrap();
    let SteerUpdate::Pending {
        parent: pending_parent,
        lane,
        event,
        ..
    } = updates.last().unwrap().clone()
    else {
        panic!("{updates:?}")
    };
    assert_eq!(pending_parent, parent);
    assert_eq!(lane.as_deref(), Some("lane_a"));
    assert!(matches!(updates[0], SteerUpdate::Accepted { .. }));
    // The tool ran once; its saved result answers the stub.
    let saved = HashMap::from([(call_id.clone(), "3 modules, 12 TODOs".to_owned())]);
    let fill = fill_request(&template, &parent, lane, &event, &saved).unwrap();
    session.create(fill).await.unwrap();
    let (events, updates) = until(&mut session, &mut tracker, |e| {
        is_type(e, "response.completed")
    })
    .await;
    assert!(
        matches!(&updates[..], [SteerUpdate::Committed { parent: p, .. }] if p == &parent),
        "{updates:?}"
    );
    let text = completed_text(&events);
    assert!(
        text.contains("3 modules, 12 TODOs") && text.contains(STEER),
        "{text}"
    );
    // The continuation did not resend the steering input and kept the lane and parent.
    let frames = server.ws_frames();
    let last = frames.last().unwrap();
    assert_eq!(last["type"], "response.create");
    assert_eq!(last["previous_response_id"], json!(parent));
    assert_eq!(last["stream_id"], "lane_a");
    assert!(!last.to_string().contains(STEER));
    assert_eq!(
        last["input"],
        json!([{"type": "function_call_output", "call_id": call_id, "output": "3 modules, 12 TODOs"}])
    );
}

#[tokio::test]
async fn failed_invalid_input_and_response_not_found() {
    let server = server(no_hold()).await;
    let mut session = connect(&server).await;
    // Client-side validation refuses empty steering input before sending.
    assert!(matches!(
        session.steer("resp_x", SteerInput::Messages(vec![])).await,
        Err(WsError::InvalidSteer(_))
    ));
    // Sent anyway (raw), the server refuses it with invalid_input.
    let bad: Vec<Item> = serde_json::from_value(
        json!([{"type": "function_call_output", "call_id": "c", "output": "x"}]),
    )
    .unwrap();
    let raw = ClientEvent::Steer(SteerRequest {
        previous_response_id: "resp_x".into(),
        input: SteerInput::Messages(bad),
    });
    session.send(&raw).await.unwrap();
    let (code, error) = steer_failure(&mut session).await;
    assert_eq!(code, SteerFailCode::InvalidInput);
    assert_eq!(error.kind.as_deref(), Some("invalid_request_error"));
    session
        .steer("resp_missing", SteerInput::Text("x".into()))
        .await
        .unwrap();
    assert_eq!(
        steer_failure(&mut session).await.0,
        SteerFailCode::ResponseNotFound
    );
}

#[tokio::test]
async fn failed_steering_not_supported_for_automatic_compaction() {
    let server = server(steerable()).await;
    let mut session = connect(&server).await;
    let mut create = plan(None);
    create.request.extra.insert(
        "context_management".into(),
        json!([{"type": "compaction", "compact_threshold": 1000}]),
    );
    session.create(create).await.unwrap();
    let parent = created(&mut session).await;
    session
        .steer(&parent, SteerInput::Text(STEER.into()))
        .await
        .unwrap();
    assert_eq!(
        steer_failure(&mut session).await.0,
        SteerFailCode::SteeringNotSupported
    );
    drain_until_completed(&mut session).await;
}

#[tokio::test]
async fn failed_response_already_completed_and_not_active() {
    let server = server(no_hold()).await;
    let mut session = connect(&server).await;
    session.create(plan(None)).await.unwrap();
    let done = drain_until_completed(&mut session).await;
    session
        .steer(&done, SteerInput::Text(STEER.into()))
        .await
        .unwrap();
    assert_eq!(
        steer_failure(&mut session).await.0,
        SteerFailCode::ResponseAlreadyCompleted
    );
    // generate:false prepares state only; it never runs, so it is not active.
    let mut prepared = plan(None);
    prepared.generate = Some(false);
    session.create(prepared).await.unwrap();
    let id = drain_until_completed(&mut session).await;
    session
        .steer(&id, SteerInput::Text(STEER.into()))
        .await
        .unwrap();
    assert_eq!(
        steer_failure(&mut session).await.0,
        SteerFailCode::ResponseNotActive
    );
}

#[tokio::test]
async fn failed_response_not_active_after_it_was_steered() {
    let server = server(steerable()).await;
    let mut session = connect(&server).await;
    session.create(plan(None)).await.unwrap();
    let parent = created(&mut session).await;
    session
        .steer(&parent, SteerInput::Text(STEER.into()))
        .await
        .unwrap();
    drain_until_completed(&mut session).await;
    session
        .steer(&parent, SteerInput::Text("again".into()))
        .await
        .unwrap();
    assert_eq!(
        steer_failure(&mut session).await.0,
        SteerFailCode::ResponseNotActive
    );
}

#[tokio::test]
async fn failed_too_many_pending_steers() {
    let server = server(WsOptions {
        max_pending_steers: 1,
        ..steerable()
    })
    .await;
    let mut session = connect(&server).await;
    session.create(with_tool(plan(None))).await.unwrap();
    let parent = created(&mut session).await;
    session
        .steer(&parent, SteerInput::Text(STEER.into()))
        .await
        .unwrap();
    loop {
        if matches!(
            next_server(&mut session).await,
            ServerEvent::Steer(SteerEvent::Pending(_))
        ) {
            break;
        }
    }
    session
        .steer(&parent, SteerInput::Text("one more".into()))
        .await
        .unwrap();
    assert_eq!(
        steer_failure(&mut session).await.0,
        SteerFailCode::TooManyPendingSteers
    );
}

#[tokio::test]
async fn failed_successor_creation() {
    let server = server(WsOptions {
        fail_successor_creation: true,
        ..steerable()
    })
    .await;
    let mut session = connect(&server).await;
    let mut tracker = SteerTracker::new();
    session.create(plan(None)).await.unwrap();
    let parent = created(&mut session).await;
    steer(&mut session, &mut tracker, &parent, STEER).await;
    let (_, updates) = until(&mut session, &mut tracker, |e| {
        is_type(e, "response.steer.failed")
    })
    .await;
    assert!(matches!(
        updates.last(),
        Some(SteerUpdate::Failed {
            code: SteerFailCode::SuccessorCreationFailed,
            ..
        })
    ));
    assert_eq!(session.in_flight(), 0);
}

#[test]
fn every_reference_code_is_typed() {
    for code in SteerFailCode::KNOWN {
        let parsed = SteerFailCode::parse(code);
        assert!(!matches!(parsed, SteerFailCode::Other(_)), "{code}");
        assert_eq!(parsed.as_str(), code);
    }
}

#[tokio::test]
async fn error_events_carry_status_stream_limit_and_missing_parent() {
    let server = server(WsOptions {
        max_streams: 1,
        ..no_hold()
    })
    .await;
    let mut session = connect(&server).await;
    session.create(plan(Some("a"))).await.unwrap();
    drain_until_completed(&mut session).await;
    session.create(plan(Some("b"))).await.unwrap();
    let event = next_server(&mut session).await;
    assert_eq!(event.error_status(), Some(400));
    assert_eq!(event.stream_id(), Some("b"));
    let ServerEvent::Stream(StreamEvent::Error(e)) = &event else {
        panic!("{event:?}")
    };
    let detail = e.detail();
    assert_eq!(
        detail.code.as_deref(),
        Some("websocket_stream_limit_reached")
    );
    assert_eq!(detail.param.as_deref(), Some("stream_id"));
    assert!(e.error.as_ref().unwrap().get("headers").is_some());
    assert_eq!(session.in_flight(), 0);
}

#[tokio::test]
async fn store_false_parents_live_in_the_connection_cache_only() {
    let server = server(no_hold()).await;
    let mut first = connect(&server).await;
    let mut unstored = plan(None);
    unstored.request.store = Some(Some(false));
    first.create(unstored).await.unwrap();
    let local = drain_until_completed(&mut first).await;
    first.create(plan(None)).await.unwrap();
    let stored = drain_until_completed(&mut first).await;
    let follow = |parent: &str| {
        let mut c = plan(None);
        c.request.previous_response_id = Some(Some(parent.to_owned()));
        c
    };
    // Same connection: both parents are found.
    first.create(follow(&local)).await.unwrap();
    drain_until_completed(&mut first).await;
    // Another connection: only the stored one.
    let mut second = connect(&server).await;
    second.create(follow(&stored)).await.unwrap();
    drain_until_completed(&mut second).await;
    second.create(follow(&local)).await.unwrap();
    let event = next_server(&mut second).await;
    let ServerEvent::Stream(StreamEvent::Error(e)) = &event else {
        panic!("{event:?}")
    };
    assert_eq!(
        e.detail().code.as_deref(),
        Some("previous_response_not_found")
    );
    assert_eq!(event.error_status(), Some(400));
}

#[tokio::test]
async fn connection_lifetime_limit_closes_the_connection() {
    let server = server(WsOptions {
        connection_lifetime: Duration::ZERO,
        ..no_hold()
    })
    .await;
    let mut cfg = config(&server);
    cfg.reconnect = ReconnectPolicy {
        initial_delay: Duration::from_millis(1),
        ..ReconnectPolicy::sdk()
    };
    let mut session = WsSession::connect(cfg).await.unwrap();
    session.create(plan(None)).await.unwrap();
    let event = next_server(&mut session).await;
    let ServerEvent::Stream(StreamEvent::Error(e)) = &event else {
        panic!("{event:?}")
    };
    assert_eq!(
        e.detail().code.as_deref(),
        Some("websocket_connection_limit_reached")
    );
    // 1000 is not a recoverable close code: no reconnect, the session is closed.
    match session.next_event().await.unwrap() {
        Some(SessionEvent::Disconnected {
            code: Some(1000),
            reconnecting: false,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        session.create(plan(None)).await,
        Err(WsError::Closed { .. })
    ));
    assert_eq!(server.ws_connections(), 1);
}

#[tokio::test]
async fn lost_connection_after_accept_leaves_the_outcome_unknown() {
    let fault = WsFault {
        connection: 0,
        point: FaultPoint::AfterSteerAccepted,
        action: FaultAction::Drop,
    };
    let server = server(WsOptions {
        fault: Some(fault),
        ..steerable()
    })
    .await;
    let mut session = connect(&server).await;
    let mut tracker = SteerTracker::new();
    session.create(plan(None)).await.unwrap();
    let first = next_server(&mut session).await;
    let parent = created_id(&first).unwrap();
    tracker.observe(&SessionEvent::Server(first));
    steer(&mut session, &mut tracker, &parent, STEER).await;
    let (events, updates) = until(&mut session, &mut tracker, |e| {
        matches!(e, SessionEvent::Disconnected { .. })
    })
    .await;
    match events.last().unwrap() {
        SessionEvent::Disconnected {
            code: Some(1006),
            in_flight: 1,
            reconnecting: false,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(&updates[..], [SteerUpdate::Accepted { .. }, SteerUpdate::OutcomeUnknown { parent: p, .. }] if p == &parent)
    );
    assert!(matches!(session.next_event().await, Ok(None)));
}

#[tokio::test]
async fn reconnects_on_a_recoverable_close_without_replaying_the_request() {
    let fault = WsFault {
        connection: 0,
        point: FaultPoint::OnFirstCreate,
        action: FaultAction::Close(1012),
    };
    let server = server(WsOptions {
        fault: Some(fault),
        ..no_hold()
    })
    .await;
    let mut cfg = config(&server);
    cfg.reconnect = ReconnectPolicy {
        initial_delay: Duration::from_millis(1),
        ..ReconnectPolicy::sdk()
    };
    let mut session = WsSession::connect(cfg).await.unwrap();
    session.create(plan(Some("a"))).await.unwrap();
    match session.next_event().await.unwrap() {
        Some(SessionEvent::Disconnected {
            code: Some(1012),
            in_flight: 1,
            reconnecting: true,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        session.next_event().await.unwrap(),
        Some(SessionEvent::Reconnected { attempt: 1 })
    ));
    assert_eq!(session.in_flight(), 0);
    // The lost request was not replayed: the new connection is idle until we send again.
    let mut fresh = plan(Some("a"));
    fresh.request.input = Some(Input::Text("second request".into()));
    session.create(fresh).await.unwrap();
    let first = next_server(&mut session).await;
    assert!(created_id(&first).is_some());
    drain_until_completed(&mut session).await;
    let creates: Vec<Value> = server
        .ws_frames()
        .into_iter()
        .filter(|f| f["type"] == "response.create")
        .collect();
    assert_eq!(creates.len(), 2);
    assert_eq!(creates[0]["input"], PLAN);
    assert_eq!(creates[1]["input"], "second request");
    assert_eq!(server.ws_connections(), 2);
}

#[tokio::test]
async fn unrecoverable_close_is_not_retried() {
    let fault = WsFault {
        connection: 0,
        point: FaultPoint::OnFirstCreate,
        action: FaultAction::Close(1008),
    };
    let server = server(WsOptions {
        fault: Some(fault),
        ..no_hold()
    })
    .await;
    let mut cfg = config(&server);
    cfg.reconnect = ReconnectPolicy {
        initial_delay: Duration::from_millis(1),
        ..ReconnectPolicy::sdk()
    };
    let mut session = WsSession::connect(cfg).await.unwrap();
    session.create(plan(None)).await.unwrap();
    match session.next_event().await.unwrap() {
        Some(SessionEvent::Disconnected {
            code: Some(1008),
            in_flight: 1,
            reconnecting: false,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(server.ws_connections(), 1);
}

#[tokio::test]
async fn wrong_key_is_refused_at_the_handshake_without_echoing_it() {
    let server = server(no_hold()).await;
    let cfg = WsConfig::new(
        server.base_url(),
        ApiKey::new("sk-wrong-secret-123").unwrap(),
    );
    let err = WsSession::connect(cfg).await.unwrap_err();
    assert!(
        matches!(err, WsError::HandshakeRefused { status: 401, .. }),
        "{err}"
    );
    assert!(!err.to_string().contains("sk-wrong-secret-123"));
}

#[tokio::test]
async fn handshake_timeout_and_request_timeout() {
    // A listener that accepts TCP but never answers the upgrade.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            kept.push(socket);
        }
    });
    let mut cfg = WsConfig::new(format!("http://{addr}/v1"), ApiKey::new("k").unwrap());
    cfg.handshake_timeout = Duration::from_millis(50);
    assert!(matches!(
        WsSession::connect(cfg).await,
        Err(WsError::HandshakeTimeout(_))
    ));
    hold.abort();

    // A WebSocket server that accepts requests and never answers them.
    let mute = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = mute.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = mute.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        use futures::StreamExt;
        while let Some(Ok(_)) = ws.next().await {}
    });
    let mut cfg = WsConfig::new(format!("http://{addr}/v1"), ApiKey::new("k").unwrap());
    cfg.request_timeout = Duration::from_millis(50);
    let mut session = WsSession::connect(cfg).await.unwrap();
    session.create(plan(None)).await.unwrap();
    assert!(matches!(
        session.next_event().await,
        Err(WsError::RequestTimeout(_))
    ));
    server.abort();
}

/// A session to an emulator playing `script` (no steer holds), whose requests time out
/// after `request_timeout` without a frame.
async fn scripted_session(script: Value, request_timeout: Duration) -> (MockServer, WsSession) {
    let script: Script = serde_json::from_value(script).unwrap();
    let mut config = MockConfig::new(script).with_api_key(MOCK_API_KEY);
    config.ws = no_hold();
    let server = MockServer::start(config).await.unwrap();
    let mut cfg = self::config(&server);
    cfg.request_timeout = request_timeout;
    let session = WsSession::connect(cfg).await.unwrap();
    (server, session)
}

#[tokio::test]
async fn a_response_that_keeps_streaming_outlives_the_request_timeout() {
    // 48 deltas 25 ms apart (1.2 s in all) against a 300 ms request timeout.
    let (_server, mut session) = scripted_session(
        json!({"latency": {"first_token_ms": 100, "tokens_per_second": 40},
            "rules": [{"reply": {"delta_chars": 4, "items": [{"type": "message",
            "content": [{"type": "output_text", "text": "x".repeat(192)}]}]}}]}),
        Duration::from_millis(300),
    )
    .await;
    let started = std::time::Instant::now();
    session.create(plan(None)).await.unwrap();
    let completed = loop {
        if let ServerEvent::Stream(StreamEvent::Completed(e)) = next_server(&mut session).await {
            break e.response;
        }
    };
    assert_eq!(completed.output_text(), "x".repeat(192));
    assert!(
        started.elapsed() > Duration::from_millis(600),
        "the reply was not slow"
    );
}

#[tokio::test]
async fn pings_do_not_hold_a_silent_request_open() {
    let (_server, mut session) = scripted_session(
        json!({"rules": [{"reply": {"items": [{"type": "message",
            "content": [{"type": "output_text", "text": "one two three four"}]}]},
            "fault": {"after_events": 2, "kind": "keep_alive", "every_ms": 20}}]}),
        Duration::from_millis(300),
    )
    .await;
    session.create(plan(None)).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match session.next_event().await {
                Ok(Some(SessionEvent::Server(_))) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("pings held the request open past its timeout");
    assert!(
        matches!(ended, Err(WsError::RequestTimeout(_))),
        "{ended:?}"
    );
}

#[tokio::test]
async fn requests_on_one_lane_are_fifo_and_protocol_errors_are_events() {
    let server = server(no_hold()).await;
    let mut session = connect(&server).await;
    let mut second = plan(Some("lane"));
    second.request.input = Some(Input::Text("second".into()));
    session.create(plan(Some("lane"))).await.unwrap();
    session.create(second).await.unwrap();
    assert_eq!(session.in_flight(), 2);
    let mut order = Vec::new();
    while order.len() < 4 {
        let event = next_server(&mut session).await;
        match &event {
            ServerEvent::Stream(StreamEvent::Created(e)) => {
                order.push(format!("created {}", e.response.id))
            }
            ServerEvent::Stream(StreamEvent::Completed(e)) => {
                order.push(format!("completed {}", e.response.id))
            }
            _ => {}
        }
    }
    let id = |s: &str| s.split(' ').nth(1).unwrap().to_owned();
    assert_eq!(id(&order[0]), id(&order[1]));
    assert!(order[0].starts_with("created") && order[1].starts_with("completed"));
    assert_eq!(id(&order[2]), id(&order[3]));
    assert_ne!(id(&order[0]), id(&order[2]));
    assert_eq!(session.in_flight(), 0);
    // `stream` must not be sent in WebSocket mode (the client never does; send it raw).
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
    let url = agent_responses::ws::websocket_url(&server.base_url()).unwrap();
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {MOCK_API_KEY}").parse().unwrap(),
    );
    let (mut raw, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let frame = json!({"type": "response.create", "model": "m", "input": "x", "stream": true});
    raw.send(Message::text(frame.to_string())).await.unwrap();
    let Some(Ok(Message::Text(reply))) = raw.next().await else {
        panic!("no reply")
    };
    let reply: Value = serde_json::from_str(reply.as_str()).unwrap();
    assert_eq!(reply["type"], "error");
    assert_eq!(reply["status"], 400);
    assert_eq!(reply["error"]["param"], "stream");
}

#[tokio::test]
async fn a_create_dropped_once_queued_is_still_in_flight_and_answered() {
    let server = server(no_hold()).await;
    let mut session = connect(&server).await;
    {
        let create = session.create(plan(Some("lane")));
        futures::pin_mut!(create);
        // The first poll queues the frame; the future is then dropped, its result unread.
        let _ = futures::poll!(&mut create);
    }
    assert_eq!(
        session.in_flight(),
        1,
        "a queued create is tracked though its future is gone"
    );
    loop {
        if let ServerEvent::Stream(StreamEvent::Completed(_)) = next_server(&mut session).await {
            break;
        }
    }
    assert_eq!(session.in_flight(), 0);
    // A later create on the same lane gets its own answer.
    session.create(plan(Some("lane"))).await.unwrap();
    assert_eq!(session.in_flight(), 1);
    loop {
        if let ServerEvent::Stream(StreamEvent::Completed(_)) = next_server(&mut session).await {
            break;
        }
    }
    assert_eq!(session.in_flight(), 0);
}

/// Issue 37, item 15: the WebSocket mode plays scripts as HTTP does.
mod scripted {
    use futures::{SinkExt as _, StreamExt as _};
    use serde_json::{Value, json};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

    use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};

    type Socket = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;

    async fn emulator(script: Value) -> MockServer {
        let script: Script = serde_json::from_value(script).unwrap();
        MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
            .await
            .unwrap()
    }

    /// A raw WebSocket to the emulator's `GET /v1/responses`.
    async fn socket(server: &MockServer) -> Socket {
        let mut request = format!("ws://{}/v1/responses", server.addr())
            .into_client_request()
            .unwrap();
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {MOCK_API_KEY}").parse().unwrap(),
        );
        tokio_tungstenite::connect_async(request).await.unwrap().0
    }

    async fn send(ws: &mut Socket, event: Value) {
        ws.send(Message::text(event.to_string())).await.unwrap();
    }

    /// The next event, or `None` when the connection ended (closed or dropped).
    async fn next(ws: &mut Socket) -> Option<Value> {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => return Some(serde_json::from_str(&text).unwrap()),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                _ => return None,
            }
        }
    }

    /// Events up to and including the first whose type ends with one of `ends`.
    async fn until(ws: &mut Socket, ends: &[&str]) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let event = next(ws).await.expect("the connection ended");
            let kind = event["type"].as_str().unwrap_or_default().to_owned();
            events.push(event);
            if ends.contains(&kind.as_str()) {
                return events;
            }
        }
    }

    const TERMINAL: &[&str] = &[
        "response.completed",
        "response.incomplete",
        "response.failed",
        "error",
    ];

    fn tools() -> Value {
        json!([
            {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
            {"type": "function", "name": "list_dir", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
            {"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
        ])
    }

    fn create(input: Value, previous: Option<&str>) -> Value {
        let mut create = json!({"type": "response.create", "model": "gpt-test", "input": input, "tools": tools()});
        if let Some(previous) = previous {
            create["previous_response_id"] = json!(previous);
        }
        create
    }

    /// The final response of a stream's events.
    fn final_response(events: &[Value]) -> &Value {
        &events.last().unwrap()["response"]
    }

    /// The output items without what is generated per response (ids, and the opaque
    /// reasoning content made from them), for comparing transports.
    fn shapes(response: &Value) -> Vec<Value> {
        response["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| {
                let mut item = item.clone();
                if let Some(map) = item.as_object_mut() {
                    map.remove("id");
                    map.remove("encrypted_content");
                }
                item
            })
            .collect()
    }

    /// The built-in `run` story over WebSocket: each step is the rule's reply (not "the
    /// first tool offered, with a `query`"), the same as over HTTP, and no reply waits for a
    /// steer: a steer sent once a reply started is refused as already completed.
    #[tokio::test]
    async fn the_websocket_mode_plays_a_script_step_by_step_as_http_does() {
        let story = agent_responses_mock::builtin_fixture("run").unwrap();
        let script: Value = serde_json::from_str(story).unwrap();
        let ws_server = emulator(script.clone()).await;
        let mut ws = socket(&ws_server).await;
        send(&mut ws, create(json!("look around"), None)).await;
        let first = until(&mut ws, TERMINAL).await;
        let response = final_response(&first);
        assert_eq!(response["status"], "completed", "{first:?}");
        let call = &response["output"][1];
        assert_eq!(
            (&call["type"], &call["name"], &call["arguments"]),
            (
                &json!("function_call"),
                &json!("list_dir"),
                &json!("{\"path\":\".\"}")
            ),
            "{response}"
        );
        let id = response["id"].as_str().unwrap().to_owned();
        // Not held: the reply went out whole before this steer was read.
        send(
            &mut ws,
            json!({"type": "response.steer", "previous_response_id": id, "input": "also count files"}),
        )
        .await;
        let refused = until(
            &mut ws,
            &["response.steer.failed", "response.steer.accepted"],
        )
        .await;
        assert_eq!(
            refused.last().unwrap()["error"]["code"],
            "response_already_completed",
            "{refused:?}"
        );
        let output = json!([{"type": "function_call_output", "call_id": "call_list", "output": "README.md"}]);
        send(&mut ws, create(output, Some(&id))).await;
        let second = until(&mut ws, TERMINAL).await;
        let ws_step2 = shapes(final_response(&second));
        assert_eq!(ws_step2[0]["name"], "read_file", "{ws_step2:?}");

        // The same two requests over HTTP get the same items.
        let http_server = emulator(script).await;
        let client = reqwest::Client::new();
        let post = |body: Value| {
            client
                .post(format!("{}/responses", http_server.base_url()))
                .bearer_auth(MOCK_API_KEY)
                .json(&body)
                .send()
        };
        let mut body = json!({"model": "gpt-test", "input": "look around", "tools": tools()});
        let http1: Value = post(body.clone()).await.unwrap().json().await.unwrap();
        assert_eq!(shapes(&http1), shapes(response));
        body["input"] = json!([{"type": "function_call_output", "call_id": "call_list", "output": "README.md"}]);
        body["previous_response_id"] = http1["id"].clone();
        let http2: Value = post(body).await.unwrap().json().await.unwrap();
        assert_eq!(shapes(&http2), ws_step2);
    }

    /// A script's error reply is an `error` event with its status and message; its `cut`
    /// fault drops the connection mid-response (no close frame), as a cut body over HTTP.
    #[tokio::test]
    async fn scripted_errors_and_cuts_reach_a_websocket_client() {
        let server = emulator(json!({"rules": [
            {"when": {"last_user_contains": "refuse"}, "reply": {"error": {"status": 429, "message": "slow down", "headers": {"retry-after": "1"}}}},
            {"when": {"last_user_contains": "cut"}, "reply": {"items": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "one two three four five six seven"}]}]},
             "fault": {"after_events": 4, "kind": "cut"}}
        ]}))
        .await;
        let mut ws = socket(&server).await;
        send(&mut ws, create(json!("refuse this"), None)).await;
        let error = next(&mut ws).await.unwrap();
        assert_eq!(
            (&error["type"], &error["status"], &error["error"]["message"]),
            (&json!("error"), &json!(429), &json!("slow down")),
            "{error}"
        );
        send(&mut ws, create(json!("cut this"), None)).await;
        let mut seen = 0;
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => {
                    let event: Value = serde_json::from_str(&text).unwrap();
                    assert!(
                        !TERMINAL.contains(&event["type"].as_str().unwrap()),
                        "{event}"
                    );
                    seen += 1;
                }
                Some(Ok(Message::Close(frame))) => panic!("a close frame: {frame:?}"),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            }
        }
        assert_eq!(seen, 4, "events before the cut");
    }

    /// Holding a reply for a steer is the rule's option: held, a steer sent after the reply
    /// started is accepted at its acceptance point.
    #[tokio::test]
    async fn a_rule_can_hold_its_reply_for_a_steer() {
        let server = emulator(json!({"rules": [
            {"when": {"has_tool_outputs": false}, "hold_for_steer_ms": 600000,
             "reply": {"items": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a long plan for {{last_user}}"}]}]}}
        ]}))
        .await;
        let mut ws = socket(&server).await;
        send(&mut ws, create(json!("plan it"), None)).await;
        let started = until(&mut ws, &["response.output_text.delta"]).await;
        let id = started[0]["response"]["id"].as_str().unwrap().to_owned();
        send(
            &mut ws,
            json!({"type": "response.steer", "previous_response_id": id, "input": "two days only"}),
        )
        .await;
        let steered = until(
            &mut ws,
            &["response.steer.accepted", "response.steer.failed"],
        )
        .await;
        assert_eq!(
            steered.last().unwrap()["type"],
            "response.steer.accepted",
            "{steered:?}"
        );
        let rest = until(&mut ws, &["response.completed"]).await;
        assert!(
            rest.iter().any(|e| e["type"] == "response.incomplete"),
            "the held parent ends incomplete (steered): {rest:?}"
        );
    }
}
