//! The client against the in-tree fake app-server (`appserver-test-fake`): real child
//! processes and pipes, one test per contract and error path.

use std::time::Duration;

use agent_appserver::{
    AppServerClient, AppServerError, AppServerEvent, ApprovalDecision, ApprovalPolicy, ClientInfo,
    ClientOptions, ConnectionLost, Events, METHOD_NOT_FOUND, ServerCommand, StderrTarget,
    ThreadStartParams, Turn, TurnNotification, TurnStartParams, TurnStatus, UserInput,
};
use serde_json::{Value, json};

/// Guards against a hang turning into a stuck test run; not a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn fake() -> ServerCommand {
    ServerCommand::new(env!("CARGO_BIN_EXE_appserver-test-fake")).stderr(StderrTarget::Null)
}

fn info() -> ClientInfo {
    ClientInfo {
        name: "agentctl_tests".into(),
        title: Some("agentctl tests".into()),
        version: "0.0.0".into(),
    }
}

async fn start(options: ClientOptions, policy: ApprovalPolicy) -> (AppServerClient, Events) {
    let (client, events) = AppServerClient::spawn(&fake(), options, policy).unwrap();
    let init = client.initialize(info()).await.unwrap();
    assert_eq!(init.platform_os.as_deref(), Some("linux"));
    assert_eq!(
        init.keys,
        ["codexHome", "platformFamily", "platformOs", "userAgent"]
    );
    (client, events)
}

async fn thread(client: &AppServerClient) -> String {
    client
        .thread_start(&ThreadStartParams::default())
        .await
        .unwrap()
        .thread
        .id
}

async fn turn(client: &AppServerClient, thread_id: &str, text: &str) -> Turn {
    let params = TurnStartParams {
        thread_id: thread_id.into(),
        input: vec![UserInput::text(text)],
        ..TurnStartParams::default()
    };
    let turn = client.turn_start(&params).await.unwrap().turn;
    assert_eq!(turn.status, TurnStatus::InProgress);
    turn
}

/// Reads events until `turn/completed`; returns everything seen, the agent text and the turn.
async fn until_completed(events: &mut Events) -> (Vec<AppServerEvent>, String, Turn) {
    let mut seen = Vec::new();
    let mut text = String::new();
    loop {
        let event = tokio::time::timeout(HANG_GUARD, events.recv())
            .await
            .expect("hang guard")
            .expect("stream ended before turn/completed");
        if let AppServerEvent::Notification(note) = &event {
            match TurnNotification::parse(note).unwrap() {
                Some(TurnNotification::AgentMessageDelta { delta, .. }) => text.push_str(&delta),
                Some(TurnNotification::TurnCompleted { turn, .. }) => {
                    seen.push(event);
                    return (seen, text, turn);
                }
                _ => {}
            }
        }
        seen.push(event);
    }
}

fn lost(err: AppServerError) -> ConnectionLost {
    match err {
        AppServerError::ConnectionLost(reason) => reason,
        other => panic!("expected a connection loss, got {other:?}"),
    }
}

#[tokio::test]
async fn a_plain_turn_streams_typed_notifications_and_completes() {
    let (client, mut events) = start(ClientOptions::default(), ApprovalPolicy::default()).await;
    let thread_id = thread(&client).await;
    let started = turn(&client, &thread_id, "say hi").await;
    let (seen, text, done) = until_completed(&mut events).await;
    assert_eq!(text, "hello world");
    assert_eq!(done.id, started.id);
    assert_eq!(done.status, TurnStatus::Completed);
    let methods: Vec<&str> = seen
        .iter()
        .filter_map(|e| match e {
            AppServerEvent::Notification(n) => Some(n.method.as_str()),
            AppServerEvent::Request { .. } => None,
        })
        .collect();
    assert_eq!(
        methods,
        [
            "configWarning",
            "thread/started",
            "turn/started",
            "item/started",
            "item/completed",
            "item/started",
            "item/agentMessage/delta",
            "item/agentMessage/delta",
            "item/completed",
            "turn/completed"
        ]
    );
    let outcome = client.close().await;
    assert!(!outcome.killed);
}

#[tokio::test]
async fn requests_before_the_handshake_get_the_servers_error() {
    let (client, _events) =
        AppServerClient::spawn(&fake(), ClientOptions::default(), ApprovalPolicy::default())
            .unwrap();
    let err = client
        .thread_start(&ThreadStartParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, AppServerError::Rpc { code: -32600, ref message, .. } if message == "Not initialized"),
        "{err:?}"
    );
    client.initialize(info()).await.unwrap();
    let again = client.initialize(info()).await.unwrap_err();
    assert!(matches!(again, AppServerError::Rpc { code: -32600, .. }));
    client.close().await;
}

#[tokio::test]
async fn a_crash_mid_call_fails_every_pending_call_and_every_later_one() {
    let (client, mut events) = start(ClientOptions::default(), ApprovalPolicy::default()).await;
    // `join!` polls in order, so the ignored call is registered and queued for writing
    // before the crash request: both are pending when the server dies. (A spawned task
    // could be scheduled after the crash and then fail on the closed pipe instead.)
    let (other, crashed) = tokio::join!(
        client.call("fake/ignore", None),
        client.call("fake/crash", None)
    );
    assert_eq!(lost(crashed.unwrap_err()), ConnectionLost::EndOfStream);
    assert_eq!(lost(other.unwrap_err()), ConnectionLost::EndOfStream);
    let later = client.call("fake/echo", Some(json!({}))).await.unwrap_err();
    assert_eq!(lost(later), ConnectionLost::EndOfStream);
    assert_eq!(client.pending_calls(), 0);
    // The queue ends after the events sent before the crash.
    while events.recv().await.is_some() {}
    assert_eq!(events.end_reason(), Some(ConnectionLost::EndOfStream));
    let outcome = client.close().await;
    assert_eq!(outcome.status.and_then(|s| s.code()), Some(3));
}

#[tokio::test]
async fn a_malformed_line_is_a_typed_error_for_every_waiter() {
    let (client, _events) = start(ClientOptions::default(), ApprovalPolicy::default()).await;
    let err = client.call("fake/malformed", None).await.unwrap_err();
    let reason = lost(err);
    assert!(
        matches!(reason, ConnectionLost::MalformedLine { ref excerpt, .. } if excerpt.starts_with("{this is not json")),
        "{reason:?}"
    );
    let later = client.call("fake/echo", None).await.unwrap_err();
    assert_eq!(lost(later), reason);
    client.close().await;
}

#[tokio::test]
async fn an_oversized_line_is_a_typed_error() {
    let options = ClientOptions {
        max_line_bytes: 1024,
        ..ClientOptions::default()
    };
    let (client, _events) = start(options, ApprovalPolicy::default()).await;
    // A line just under the limit passes.
    let ok = client
        .call("fake/oversized", Some(json!({"bytes": 900})))
        .await
        .unwrap();
    assert_eq!(ok["filler"].as_str().map(str::len), Some(900));
    let err = client
        .call("fake/oversized", Some(json!({"bytes": 100_000})))
        .await
        .unwrap_err();
    assert_eq!(lost(err), ConnectionLost::LineTooLong { limit: 1024 });
    client.close().await;
}

#[tokio::test]
async fn a_server_request_with_an_unknown_method_is_refused() {
    let (client, mut events) = start(ClientOptions::default(), ApprovalPolicy::default()).await;
    let answer = client
        .call(
            "fake/ask",
            Some(json!({"method": "item/tool/requestUserInput"})),
        )
        .await
        .unwrap();
    // The server saw a JSON-RPC error with the same id it sent.
    assert_eq!(answer["reply"]["id"], json!(0));
    assert_eq!(answer["reply"]["error"]["code"], json!(METHOD_NOT_FOUND));
    assert!(answer["reply"].get("result").is_none());
    // And the consumer sees the request and the refusal.
    loop {
        match events.recv().await.unwrap() {
            AppServerEvent::Request { request, reply } => {
                assert_eq!(request.method, "item/tool/requestUserInput");
                assert_eq!(reply.unwrap_err().code, METHOD_NOT_FOUND);
                break;
            }
            AppServerEvent::Notification(_) => {}
        }
    }
    client.close().await;
}

#[tokio::test]
async fn approvals_are_declined_by_default() {
    let (client, mut events) = start(ClientOptions::default(), ApprovalPolicy::default()).await;
    let thread_id = thread(&client).await;
    turn(&client, &thread_id, "please exec something").await;
    let (seen, text, done) = until_completed(&mut events).await;
    assert_eq!(text, "decision: decline");
    assert_eq!(done.status, TurnStatus::Completed);
    let approval = seen
        .iter()
        .find_map(|e| match e {
            AppServerEvent::Request { request, reply } => Some((request, reply)),
            AppServerEvent::Notification(_) => None,
        })
        .unwrap();
    assert_eq!(approval.0.method, agent_appserver::COMMAND_APPROVAL);
    assert_eq!(
        approval.1.as_ref().unwrap(),
        &json!({"decision": "decline"})
    );
    let declined = seen.iter().any(|e| match e {
        AppServerEvent::Notification(n) => match TurnNotification::parse(n).unwrap() {
            Some(TurnNotification::ItemCompleted { item, .. }) => {
                item.kind == "commandExecution" && item.status.as_deref() == Some("declined")
            }
            _ => false,
        },
        AppServerEvent::Request { .. } => false,
    });
    assert!(declined);
    // File changes are declined too.
    let answer = client
        .call(
            "fake/ask",
            Some(json!({"method": agent_appserver::FILE_CHANGE_APPROVAL})),
        )
        .await
        .unwrap();
    assert_eq!(answer["reply"]["result"], json!({"decision": "decline"}));
    client.close().await;
}

#[tokio::test]
async fn approvals_follow_the_policy() {
    let policy = ApprovalPolicy::uniform(ApprovalDecision::Accept);
    let (client, mut events) = start(ClientOptions::default(), policy).await;
    let thread_id = thread(&client).await;
    turn(&client, &thread_id, "exec it").await;
    let (_, text, _) = until_completed(&mut events).await;
    assert_eq!(text, "decision: accept");
    client.close().await;
}

#[tokio::test]
async fn a_notification_flood_past_the_queue_size_loses_nothing() {
    let options = ClientOptions {
        event_capacity: 4,
        ..ClientOptions::default()
    };
    let (client, mut events) = start(options, ApprovalPolicy::default()).await;
    const COUNT: u64 = 5_000;
    let consumer = tokio::spawn(async move {
        let mut next = 0u64;
        while let Some(event) = events.recv().await {
            if let AppServerEvent::Notification(note) = event
                && note.method == "fake/seq"
            {
                assert_eq!(note.params["n"], json!(next), "out of order or lost");
                next += 1;
                if next == COUNT {
                    break;
                }
            }
        }
        next
    });
    let answer = client
        .call("fake/flood", Some(json!({"count": COUNT})))
        .await
        .unwrap();
    assert_eq!(answer["count"], json!(COUNT));
    assert_eq!(consumer.await.unwrap(), COUNT);
    client.close().await;
}

#[tokio::test]
async fn close_is_bounded_when_nobody_reads_a_full_queue() {
    let options = ClientOptions {
        event_capacity: 2,
        ..ClientOptions::default()
    };
    let (client, mut events) = start(options, ApprovalPolicy::default()).await;
    let flood = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .call("fake/flood", Some(json!({"count": 100_000})))
                .await
        }
    });
    // Take one flood event: the reader is now pushing into a queue nobody drains.
    loop {
        if let Some(AppServerEvent::Notification(n)) = events.recv().await
            && n.method == "fake/seq"
        {
            break;
        }
    }
    tokio::time::timeout(HANG_GUARD, client.close())
        .await
        .expect("close must not hang on a full queue");
    let err = flood.await.unwrap().unwrap_err();
    assert_eq!(lost(err), ConnectionLost::ClosedByClient);
    // What was queued is still delivered, then the queue ends.
    while events.recv().await.is_some() {}
    assert_eq!(events.end_reason(), Some(ConnectionLost::ClosedByClient));
}

#[tokio::test]
async fn a_call_that_is_never_answered_times_out_and_leaves_no_waiter() {
    let (client, _events) = start(ClientOptions::default(), ApprovalPolicy::default()).await;
    let err = client
        .call_with_timeout("fake/ignore", None, Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(
        matches!(err, AppServerError::Timeout { ref method, .. } if method == "fake/ignore"),
        "{err:?}"
    );
    assert_eq!(client.pending_calls(), 0);
    // The connection is still fine.
    let echoed = client
        .call("fake/echo", Some(json!({"a": 1})))
        .await
        .unwrap();
    assert_eq!(echoed, json!({"a": 1}));
    client.close().await;
}

#[tokio::test]
async fn a_dropped_call_leaves_no_waiter() {
    let (client, _events) = start(ClientOptions::default(), ApprovalPolicy::default()).await;
    // Dropped unpolled, and dropped while waiting for an answer that never comes.
    drop(client.call("fake/ignore", None));
    for _ in 0..3 {
        let call = client.call("fake/ignore", None);
        let waited = tokio::time::timeout(Duration::from_millis(50), call).await;
        assert!(waited.is_err(), "fake/ignore is never answered");
    }
    assert_eq!(client.pending_calls(), 0);
    let echoed = client
        .call("fake/echo", Some(json!({"b": 2})))
        .await
        .unwrap();
    assert_eq!(echoed, json!({"b": 2}));
    client.close().await;
}

#[tokio::test]
async fn the_default_timeout_applies_to_every_call() {
    let options = ClientOptions {
        call_timeout: Duration::from_millis(100),
        ..ClientOptions::default()
    };
    let (client, _events) = start(options, ApprovalPolicy::default()).await;
    let err = client.call("fake/ignore", None).await.unwrap_err();
    assert!(matches!(err, AppServerError::Timeout { .. }), "{err:?}");
    client.close().await;
}

#[tokio::test]
async fn steer_needs_the_active_turn_id() {
    let (client, mut events) = start(ClientOptions::default(), ApprovalPolicy::default()).await;
    let thread_id = thread(&client).await;
    let started = turn(&client, &thread_id, "hold on").await;
    let wrong = client
        .turn_steer(&thread_id, "turn-wrong", vec![UserInput::text("x")])
        .await
        .unwrap_err();
    assert!(
        matches!(wrong, AppServerError::Rpc { code: -32600, ref message, .. } if message.contains("expected active turn id")),
        "{wrong:?}"
    );
    let steered = client
        .turn_steer(&thread_id, &started.id, vec![UserInput::text("also bye")])
        .await
        .unwrap();
    assert_eq!(steered.turn_id, started.id);
    let (_, text, done) = until_completed(&mut events).await;
    assert_eq!(text, "partialsteered: also bye");
    assert_eq!(done.status, TurnStatus::Completed);
    client.close().await;
}

#[tokio::test]
async fn interrupt_ends_the_turn_as_interrupted() {
    let (client, mut events) = start(ClientOptions::default(), ApprovalPolicy::default()).await;
    let thread_id = thread(&client).await;
    let started = turn(&client, &thread_id, "hold it").await;
    client
        .turn_interrupt(&thread_id, &started.id)
        .await
        .unwrap();
    let (_, text, done) = until_completed(&mut events).await;
    assert_eq!(text, "partial");
    assert_eq!(done.status, TurnStatus::Interrupted);
    client.close().await;
}

#[tokio::test]
async fn close_kills_a_server_that_ignores_sigterm() {
    // `trap '' TERM` makes SIGTERM ignored, and that survives `exec`. The `ready`
    // notification says the trap is in place.
    let command = ServerCommand::new("sh").args([
        "-c",
        r#"trap '' TERM; echo '{"method":"ready"}'; exec sleep 1000"#,
    ]);
    let options = ClientOptions {
        close_grace: Duration::from_millis(200),
        ..ClientOptions::default()
    };
    let (client, mut events) =
        AppServerClient::spawn(&command, options, ApprovalPolicy::default()).unwrap();
    assert!(
        matches!(events.recv().await, Some(AppServerEvent::Notification(n)) if n.method == "ready")
    );
    let pending = tokio::spawn({
        let client = client.clone();
        async move { client.call("initialize", Some(Value::Null)).await }
    });
    let outcome = client.close().await;
    assert!(outcome.killed);
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(outcome.status.and_then(|s| s.signal()), Some(9));
    }
    assert_eq!(
        lost(pending.await.unwrap().unwrap_err()),
        ConnectionLost::ClosedByClient
    );
    // Closing twice returns the same outcome; calls after close fail at once.
    assert_eq!(client.close().await, outcome);
    let later = client.call("x", None).await.unwrap_err();
    assert_eq!(lost(later), ConnectionLost::ClosedByClient);
}

/// The server leads a process group of its own: a terminal's Ctrl-C, sent to the terminal's
/// foreground group, reaches the client alone (it killed `codex app-server` mid-turn).
#[cfg(unix)]
#[tokio::test]
async fn the_server_runs_in_a_process_group_of_its_own() {
    let command =
        ServerCommand::new("sh").args(["-c", r#"echo '{"method":"ready"}'; exec sleep 1000"#]);
    let (client, mut events) = AppServerClient::spawn(
        &command,
        ClientOptions::default(),
        ApprovalPolicy::default(),
    )
    .unwrap();
    assert!(matches!(
        events.recv().await,
        Some(AppServerEvent::Notification(_))
    ));
    let pid = client.pid().unwrap();
    let out = std::process::Command::new("ps")
        .args(["-o", "pgid=", "-p", &pid.to_string()])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), pid.to_string());
    client.close().await;
}

/// A server that is a wrapper (npm's `codex` is a Node script starting the native binary)
/// is stopped with what it started: the kill after the grace period goes to the group.
#[cfg(unix)]
#[tokio::test]
async fn close_kills_what_a_wrapper_server_started() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild.pid");
    let script = format!(
        r#"trap '' TERM; sh -c 'echo $$ > {}; exec sleep 1000' & echo '{{"method":"ready"}}'; wait"#,
        pid_file.display()
    );
    let command = ServerCommand::new("sh").args(["-c", &script]);
    let options = ClientOptions {
        close_grace: Duration::from_millis(200),
        ..ClientOptions::default()
    };
    let (client, mut events) =
        AppServerClient::spawn(&command, options, ApprovalPolicy::default()).unwrap();
    assert!(matches!(
        events.recv().await,
        Some(AppServerEvent::Notification(_))
    ));
    let start = std::time::Instant::now();
    let grandchild = loop {
        if let Ok(pid) = std::fs::read_to_string(&pid_file)
            && !pid.trim().is_empty()
        {
            break pid.trim().to_owned();
        }
        assert!(start.elapsed() < HANG_GUARD, "the grandchild never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let outcome = client.close().await;
    assert!(outcome.killed);
    let start = std::time::Instant::now();
    loop {
        let alive = std::process::Command::new("kill")
            .args(["-0", &grandchild])
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success();
        if !alive {
            break;
        }
        if start.elapsed() > Duration::from_secs(5) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &grandchild])
                .status();
            panic!("the process the server started outlived close");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_missing_binary_is_reported_as_not_found() {
    let command = ServerCommand::codex("/nonexistent/codex-binary");
    let err = AppServerClient::spawn(
        &command,
        ClientOptions::default(),
        ApprovalPolicy::default(),
    )
    .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
}

#[tokio::test]
async fn output_that_is_json_but_not_json_rpc_is_a_typed_error() {
    let command = ServerCommand::new("sh").args(["-c", "echo '[1,2,3]'; exec cat > /dev/null"]);
    let (client, mut events) = AppServerClient::spawn(
        &command,
        ClientOptions::default(),
        ApprovalPolicy::default(),
    )
    .unwrap();
    assert!(events.recv().await.is_none());
    assert!(matches!(
        events.end_reason(),
        Some(ConnectionLost::NotJsonRpc { .. })
    ));
    let err = client.call("initialize", None).await.unwrap_err();
    assert!(matches!(lost(err), ConnectionLost::NotJsonRpc { .. }));
    client.close().await;
}
