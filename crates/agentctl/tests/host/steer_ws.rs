//! Steers over `--transport ws`: one that arrives while a response streams is sent as
//! `response.steer` (accepted: the successor continues the step; pending: applied at the
//! next boundary), one made while no host runs is applied by `resume`, one after the end is
//! dropped; each exactly once, also when the host is SIGKILLed between request and
//! application.
//!
//! The emulator's WebSocket mode answers a tool-offering request with a call of the first
//! tool (`shell`, refused here by `--approval deny`), and a request with tool outputs with a
//! text; a fresh response holds at its acceptance point for `steer_window` waiting for a steer.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use serde_json::Value;

use crate::host::fresh_db::{self, FreshDb};
use crate::host::*;

/// An emulator whose WebSocket responses wait up to `window` for a steer.
async fn ws_emulator(window: Option<Duration>) -> MockServer {
    let mut config = MockConfig::new(Script::default()).with_api_key(MOCK_API_KEY);
    config.ws.steer_window = window;
    MockServer::start(config).await.unwrap()
}

const WS: &[&str] = &["--transport", "ws", "--approval", "deny"];

fn spawn_run(db: &str, server: &MockServer, ws: &std::path::Path, env: Option<&str>) -> Child {
    let mut cmd = run_cmd(db, server, ws, WS);
    if let Some(n) = env {
        cmd.env("AGENTCTL_TEST_CRASH_AFTER_EVENTS", n);
    }
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the run's journal has a `model.requested` for `step`; returns the run id.
async fn wait_requested(db: &str, step: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "step {step} was never requested");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let o = out(agentctl(db).args(["--json", "runs", "list"]));
        let Some(line) = text(&o.stdout).lines().next().map(str::to_string) else {
            continue;
        };
        let run = serde_json::from_str::<Value>(&line).unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        let events = events(db, &run).await;
        if kinds_of(&events, "model.requested")
            .iter()
            .any(|e| e.payload["step"] == step)
        {
            return run;
        }
    }
}

fn steer(db: &str, run: &str, text: &str, extra: &[&str]) -> std::process::Output {
    out(agentctl(db)
        .args(["--json", "steer", run, text])
        .args(extra))
}

fn applied<'a>(events: &'a [agent_journal::Event], id: &str) -> Vec<&'a agent_journal::Event> {
    kinds_of(events, "steer.applied")
        .into_iter()
        .filter(|e| e.payload["id"] == id)
        .collect()
}

async fn steer_while_streaming(db: FreshDb) {
    let db = db.url();
    let server = ws_emulator(Some(Duration::from_secs(30))).await;
    let (_g, ws) = workspace();
    let child = spawn_run(db, &server, &ws, None);
    // Step 1 (a tool call) holds: the steer is accepted, then pending on the call's output,
    // so the host applies it at the next boundary.
    let run = wait_requested(db, 1).await;
    assert!(
        steer(db, &run, "STEER ONE", &["--id", "one"])
            .status
            .success()
    );
    // Step 2 (a text) holds: the steer is accepted and a successor continues the step.
    wait_requested(db, 2).await;
    let o = steer(db, &run, "STEER TWO", &["--id", "two", "--wait"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let line: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(line["type"], "steer.applied");
    assert_eq!(line["step"], 2);
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));

    let state = show(db, &run);
    let final_text = state["final_text"].as_str().unwrap();
    assert!(
        final_text.contains("steering applied: STEER TWO"),
        "{final_text}"
    );
    let events = events(db, &run).await;
    check_invariants(&events);
    assert_eq!(
        kinds_of(&events, "run.created")[0].payload["transport"],
        "ws"
    );
    let one = applied(&events, "one");
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].payload["step"], 2);
    assert!(one[0].payload.get("via").is_none());
    let two = applied(&events, "two");
    assert_eq!(two.len(), 1);
    assert_eq!(two[0].payload["via"], "response.steer");
    assert_eq!(kinds_of(&events, "steer.dropped").len(), 0);
    // The steered step: the successor's response, its steered parent and the reason.
    let completed = kinds_of(&events, "model.completed");
    let step2 = completed.iter().find(|e| e.payload["step"] == 2).unwrap();
    let steered = &step2.payload["steered"];
    assert_eq!(steered["incomplete_reason"], "steered");
    assert_eq!(steered["steer_ids"], serde_json::json!(["two"]));
    let parent = steered["parent_response_id"].as_str().unwrap();
    assert!(!parent.is_empty());
    assert_ne!(step2.payload["response_id"].as_str().unwrap(), parent);
    assert_eq!(two[0].payload["response_id"], parent);
    // Wire: both steers went out as response.steer; the step-2 request carried STEER ONE as
    // a user message; nothing was requested twice.
    let frames = server.ws_frames();
    let steers: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "response.steer")
        .collect();
    assert_eq!(steers.len(), 2, "{steers:?}");
    assert_eq!(steers[1]["input"], "STEER TWO");
    let creates: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "response.create")
        .collect();
    assert_eq!(creates.len(), 2);
    assert!(creates[1]["input"].to_string().contains("STEER ONE"));
    assert!(!creates[1]["input"].to_string().contains("STEER TWO"));
    assert!(
        creates
            .iter()
            .all(|c| c.get("previous_response_id").is_none())
    );
    // After the end: dropped at once.
    let late = steer(db, &run, "too late", &["--wait"]);
    assert_eq!(late.status.code(), Some(1));
    let line: Value = serde_json::from_slice(&late.stdout).unwrap();
    assert_eq!(line["type"], "steer.dropped");
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: steer_while_streaming);

async fn steer_before_first_step(db: FreshDb) {
    let db = db.url();
    let server = ws_emulator(None).await;
    let (_g, ws) = workspace();
    // The host dies right after run.created: no step was requested.
    let crashed = spawn_run(db, &server, &ws, Some("1")).wait().unwrap();
    assert_eq!(crashed.code(), None, "killed by a signal");
    let run = only_run(db);
    assert!(
        steer(db, &run, "EARLY STEER", &["--id", "early"])
            .status
            .success()
    );
    let resumed = out(&mut resume_cmd(db, &server, &run, &[]));
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    let events = events(db, &run).await;
    check_invariants(&events);
    // Applied once, before the first step the resumed host requested (the kill lands
    // soon after run.created, possibly after step 1 was already journaled).
    let early = applied(&events, "early");
    assert_eq!(early.len(), 1);
    let resumed_at = kinds_of(&events, "run.resumed")[0].seq;
    let first_resumed_step = kinds_of(&events, "model.requested")
        .into_iter()
        .find(|e| e.seq > resumed_at)
        .unwrap();
    assert_eq!(early[0].payload["step"], first_resumed_step.payload["step"]);
    let sent: Vec<String> = server
        .ws_frames()
        .iter()
        .filter(|f| f["type"] == "response.create")
        .map(|f| f["input"].to_string())
        .collect();
    assert_eq!(
        sent.iter().filter(|s| s.contains("EARLY STEER")).count(),
        sent.len()
            - sent
                .iter()
                .take_while(|s| !s.contains("EARLY STEER"))
                .count()
    );
    assert!(sent.last().unwrap().contains("EARLY STEER"));
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: steer_before_first_step);

/// SIGKILL while a steer is on its way to the streaming response: wherever the kill lands,
/// `resume` (on an emulator that does not hold) ends the steer in exactly one application.
async fn steer_survives_sigkill(db: FreshDb) {
    let db = db.url();
    let holding = ws_emulator(Some(Duration::from_secs(30))).await;
    let plain = ws_emulator(None).await;
    let (_g, ws) = workspace();
    let mut child = spawn_run(db, &holding, &ws, None);
    let run = wait_requested(db, 1).await;
    assert!(
        steer(db, &run, "KILLED STEER", &["--id", "k"])
            .status
            .success()
    );
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let resumed = out(&mut resume_cmd(db, &plain, &run, &[]));
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    let events = events(db, &run).await;
    check_invariants(&events);
    assert_eq!(applied(&events, "k").len(), 1);
    assert_eq!(kinds_of(&events, "steer.dropped").len(), 0);
    let sent: String = plain
        .ws_frames()
        .iter()
        .filter(|f| f["type"] == "response.create")
        .map(|f| f["input"].to_string())
        .collect();
    assert!(sent.contains("KILLED STEER"), "{sent}");
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: steer_survives_sigkill);
