//! `drive_turn` against a scripted app-server: this test binary run again as a child with
//! `AGENT_HOST_FAKE_APP_SERVER=1` (a custom harness, so the same executable is both).
//!
//! The child speaks the app-server framing (one JSON message per line) and answers:
//! `initialize` (then a `configWarning`, which arrives before the thread exists),
//! `thread/start`, `turn/start` (prompt `hold`: one delta `partial`, then it waits for
//! `turn/steer` or `turn/interrupt`; prompt `vanish`: it exits; otherwise `hello world`
//! in two deltas and `turn/completed`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::io::{BufRead as _, Write as _};
use std::pin::Pin;

use agent_appserver::{
    AppServerClient, AppServerEvent, ApprovalPolicy, ClientInfo, ClientOptions, ServerCommand,
    StderrTarget, TurnStatus,
};
use agent_host::codex::{DriveError, TurnEvent, TurnReport, TurnRequest, drive_turn};
use agent_journal::Journal;
use serde_json::{Value, json};

const FAKE_ENV: &str = "AGENT_HOST_FAKE_APP_SERVER";

/// One test of this custom harness: a name and the future that runs it.
type Test = (&'static str, fn() -> Pin<Box<dyn Future<Output = ()>>>);

fn main() {
    if std::env::var_os(FAKE_ENV).is_some() {
        fake_app_server();
        return;
    }
    let tests: [Test; 5] = [
        (
            "every_event_is_journaled_in_order_and_the_text_shown",
            || Box::pin(every_event_is_journaled_in_order_and_the_text_shown()),
        ),
        ("the_steer_is_sent_at_the_first_delta", || {
            Box::pin(the_steer_is_sent_at_the_first_delta())
        }),
        ("interrupt_after_ends_the_turn_interrupted", || {
            Box::pin(interrupt_after_ends_the_turn_interrupted())
        }),
        ("the_interrupt_signal_interrupts_the_turn", || {
            Box::pin(the_interrupt_signal_interrupts_the_turn())
        }),
        (
            "a_server_that_exits_mid_turn_is_reported_as_stopped",
            || Box::pin(a_server_that_exits_mid_turn_is_reported_as_stopped()),
        ),
    ];
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(test());
        println!("test {name} ... ok");
    }
}

/// What the observer saw, in order.
#[derive(Default)]
struct Seen {
    kinds: Vec<String>,
    server: Vec<String>,
    text: String,
}

impl Seen {
    fn note(&mut self, event: TurnEvent<'_>) -> Result<(), std::convert::Infallible> {
        let kind = match event {
            TurnEvent::ThreadStarted { .. } => "thread",
            TurnEvent::Server(AppServerEvent::Notification(note)) => {
                self.server.push(format!("codex:{}", note.method));
                "server"
            }
            TurnEvent::Server(AppServerEvent::Request { request, .. }) => {
                self.server
                    .push(format!("codex-request:{}", request.method));
                "server"
            }
            TurnEvent::AgentText(text) => {
                self.text.push_str(text);
                "text"
            }
            TurnEvent::AgentMessageBoundary => "boundary",
            TurnEvent::SteerAccepted { .. } => "steer_accepted",
            TurnEvent::SteerFailed(_) => "steer_failed",
            TurnEvent::InterruptSignalled => "interrupt_signalled",
            TurnEvent::InterruptAccepted => "interrupt_accepted",
            TurnEvent::InterruptFailed(_) => "interrupt_failed",
            TurnEvent::Quiet(_) => "quiet",
            TurnEvent::TurnCompleted(_) => "turn_completed",
        };
        self.kinds.push(kind.to_owned());
        Ok(())
    }
}

fn request(prompt: &str) -> TurnRequest {
    let info = ClientInfo {
        name: "agent_host_test".into(),
        title: None,
        version: "0.0.0".into(),
    };
    TurnRequest::new(info, prompt, std::env::temp_dir())
}

/// Runs `request` against a fresh fake, journaling into `journal`.
async fn drive(
    request: &TurnRequest,
    journal: Option<Journal>,
    interrupt_now: bool,
) -> (
    Result<TurnReport, DriveError<std::convert::Infallible>>,
    Seen,
) {
    let command = ServerCommand::new(std::env::current_exe().unwrap())
        .env(FAKE_ENV, "1")
        .stderr(StderrTarget::Null);
    let (client, mut events) = AppServerClient::spawn(
        &command,
        ClientOptions::default(),
        ApprovalPolicy::default(),
    )
    .unwrap();
    let mut seen = Seen::default();
    // Fires once, counted when the signal's future is actually polled: `select!` may
    // drop an unpolled signal future when another branch is ready first, and a signal
    // counted at creation would then be lost (the test hung about one run in three).
    let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(!interrupt_now));
    let signal = || {
        let fired = std::sync::Arc::clone(&fired);
        async move {
            if fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
        }
    };
    let report = drive_turn(&client, &mut events, request, journal, signal, |e| {
        seen.note(e)
    })
    .await;
    client.close().await;
    (report, seen)
}

async fn every_event_is_journaled_in_order_and_the_text_shown() {
    let journal = Journal::open("memory:").await.unwrap();
    let (report, seen) = drive(&request("say hi"), Some(journal.clone()), false).await;
    let report = report.unwrap();
    assert_eq!(report.thread_id, "thread-1");
    assert_eq!(report.turn.status, TurnStatus::Completed);
    assert_eq!(seen.text, "hello world");
    assert_eq!(seen.kinds.first().map(String::as_str), Some("thread"));
    assert_eq!(
        seen.kinds.last().map(String::as_str),
        Some("turn_completed")
    );
    // The warning sent during `initialize` came before the thread existed; it is
    // journaled under the thread too, first.
    assert_eq!(
        seen.server.first().map(String::as_str),
        Some("codex:configWarning")
    );
    let journaled: Vec<String> = journal
        .replay(&report.thread_id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind.to_string())
        .collect();
    assert_eq!(journaled, seen.server);
    assert!(
        journaled
            .iter()
            .any(|k| k == "codex:item/agentMessage/delta")
    );
    assert_eq!(
        journaled.last().map(String::as_str),
        Some("codex:turn/completed")
    );
    journal.close().await;
}

async fn the_steer_is_sent_at_the_first_delta() {
    let mut req = request("hold on");
    req.steer = Some("go left".into());
    let (report, seen) = drive(&req, None, false).await;
    assert_eq!(report.unwrap().turn.status, TurnStatus::Completed);
    // The text proves the steer reached the server and was applied. Its acceptance is
    // reported from the steer call's own task, which may finish after the turn completed
    // (the fake answers and completes at once), so it is not required to be seen.
    assert_eq!(seen.text, "partialsteered: go left");
    assert!(
        !seen.kinds.iter().any(|k| k == "steer_failed"),
        "{:?}",
        seen.kinds
    );
}

async fn interrupt_after_ends_the_turn_interrupted() {
    for after in [0, 1] {
        let mut req = request("hold on");
        req.interrupt_after = Some(after);
        let (report, seen) = drive(&req, None, false).await;
        assert_eq!(
            report.unwrap().turn.status,
            TurnStatus::Interrupted,
            "{after}"
        );
        assert!(
            !seen.kinds.iter().any(|k| k == "interrupt_failed"),
            "{:?}",
            seen.kinds
        );
    }
}

async fn the_interrupt_signal_interrupts_the_turn() {
    let (report, seen) = drive(&request("hold on"), None, true).await;
    assert_eq!(report.unwrap().turn.status, TurnStatus::Interrupted);
    assert!(
        seen.kinds.iter().any(|k| k == "interrupt_signalled"),
        "{:?}",
        seen.kinds
    );
}

async fn a_server_that_exits_mid_turn_is_reported_as_stopped() {
    let journal = Journal::open("memory:").await.unwrap();
    let (report, seen) = drive(&request("vanish"), Some(journal.clone()), false).await;
    assert!(matches!(report, Err(DriveError::Stopped(_))), "{report:?}");
    // What arrived before the end is on record.
    let journaled = journal.replay("thread-1", 0).await.unwrap();
    assert_eq!(journaled.len(), seen.server.len());
    assert!(!journaled.is_empty());
    journal.close().await;
}

/// The child: a scripted app-server on stdin/stdout (see the module docs).
fn fake_app_server() {
    let mut out = std::io::stdout().lock();
    let mut send = |msg: Value| {
        writeln!(out, "{msg}").unwrap();
        out.flush().unwrap();
    };
    let thread = "thread-1";
    let turn = "turn-1";
    let turn_json =
        |status: &str| json!({"id": turn, "items": [], "status": status, "error": null});
    let note = |method: &str, params: Value| json!({"method": method, "params": params});
    let delta = |text: &str| {
        note(
            "item/agentMessage/delta",
            json!({"threadId": thread, "turnId": turn, "itemId": "msg-1", "delta": text}),
        )
    };
    let completed = |status: &str| {
        note(
            "turn/completed",
            json!({"threadId": thread, "turn": turn_json(status)}),
        )
    };
    for line in std::io::stdin().lock().lines() {
        let msg: Value = serde_json::from_str(&line.unwrap()).unwrap();
        let (Some(method), Some(id)) = (msg["method"].as_str(), msg.get("id")) else {
            continue; // notifications and replies
        };
        let reply = |result: Value| json!({"id": id, "result": result});
        match method {
            "initialize" => {
                send(reply(json!({"userAgent": "fake/0"})));
                send(note("configWarning", json!({"summary": "fake"})));
            }
            "thread/start" => {
                send(reply(
                    json!({"thread": {"id": thread}, "model": "fake-model", "modelProvider": "fake"}),
                ));
            }
            "turn/start" => {
                let prompt = msg.pointer("/params/input/0/text").and_then(Value::as_str);
                send(reply(json!({"turn": turn_json("inProgress")})));
                send(note(
                    "turn/started",
                    json!({"threadId": thread, "turn": turn_json("inProgress")}),
                ));
                let item = json!({"type": "agentMessage", "id": "msg-1", "text": ""});
                send(note(
                    "item/started",
                    json!({"threadId": thread, "turnId": turn, "item": item}),
                ));
                match prompt.unwrap_or("") {
                    p if p.contains("vanish") => std::process::exit(0),
                    p if p.contains("hold") => send(delta("partial")),
                    _ => {
                        send(delta("hello"));
                        send(delta(" world"));
                        send(completed("completed"));
                    }
                }
            }
            "turn/steer" => {
                let text = msg
                    .pointer("/params/input/0/text")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                send(reply(json!({"turnId": turn})));
                send(delta(&format!("steered: {text}")));
                send(completed("completed"));
            }
            "turn/interrupt" => {
                send(reply(json!({})));
                send(completed("interrupted"));
            }
            _ => send(json!({"id": id, "error": {"code": -32600, "message": "unknown method"}})),
        }
    }
}
