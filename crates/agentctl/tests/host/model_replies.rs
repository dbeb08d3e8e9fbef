//! Model replies the host cannot use as sent, and what they cost: a call whose `call_id` is
//! too long for the journal's keys or whose kind the run never offered fails the run
//! cleanly, before the response is journaled (and a run that journaled one before fails on
//! `resume`, saying why); a steered WebSocket response's tokens count; a server's
//! `x-should-retry: false` is not retried by the host either.

use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_journal::{Journal, NewEvent};
use serde_json::{Value, json};

use crate::host::*;

fn sqlite(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("j.db").display())
}

/// A `call_id` the journal's dedup keys cannot carry (the runtime's key is
/// `sched:<turn>:<call_id>`, 39 bytes besides it, so 480 bytes make 519 of 512).
fn long_call_id() -> String {
    format!("call_{}", "x".repeat(475))
}

/// A call of `list_dir` with `call_id`, then an answer once it has an output.
fn list_dir_script(call_id: &str) -> String {
    let call = json!({"type": "function_call", "call_id": call_id, "name": "list_dir",
                      "arguments": r#"{"path":"."}"#});
    script_by_outputs(&[json!([call]), answer("done")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_id_too_long_to_journal_fails_the_run_before_it_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(&dir);
    let server = emulator(&list_dir_script(&long_call_id())).await;
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(&db, &server, &ws, &["--approval", "auto"]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let stderr = text(&o.stderr);
    assert!(
        stderr.contains("call_id is 480 bytes long, more than the 473"),
        "{stderr}"
    );
    assert!(!stderr.contains("invalid dedup key"), "{stderr}");
    let run = only_run(&db);
    assert_eq!(show(&db, &run)["status"], "failed");
    let events = events(&db, &run).await;
    assert!(
        kinds_of(&events, "model.completed").is_empty(),
        "not recorded"
    );
    assert!(kinds_of(&events, "tool.scheduled").is_empty());
    // A resume of a failed run is refused as such (exit 2), not retried into the same error.
    let o = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

/// The longest `call_id` the keys can carry is accepted: the bound is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_call_id_the_journal_keys_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(&dir);
    let call_id = format!("call_{}", "y".repeat(473 - 5));
    let server = emulator(&list_dir_script(&call_id)).await;
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(&db, &server, &ws, &["--approval", "auto"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().last(), Some("done"));
}

/// A journal written before the check (a step holding such a call, recorded, its call
/// never scheduled, the run interrupted): `resume` fails the run, saying why, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_step_with_a_call_id_too_long_fails_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(&dir);
    let long = long_call_id();
    // A run that stops after its first step is recorded: `list_dir` waits for a decision.
    let server = emulator(&list_dir_script("c1")).await;
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(&db, &server, &ws, &["--approval", "ask"]));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let run = only_run(&db);
    // Its journal as an older host would have left it with the long call id: the step's
    // call, and nothing after the step.
    let journal = Journal::open(&db).await.unwrap();
    let thread = format!("run:{run}");
    let stored = journal.replay(&thread, 0).await.unwrap();
    let other = tempfile::tempdir().unwrap();
    let copy_db = sqlite(&other);
    let copy = Journal::open(&copy_db).await.unwrap();
    for e in &stored {
        let mut payload = e.payload.clone();
        if &*e.kind == "model.completed" {
            payload["output"][0]["call_id"] = json!(long);
        }
        if matches!(&*e.kind, "approval.requested" | "run.paused") {
            continue;
        }
        copy.append(copied(&thread, e, payload)).await.unwrap();
    }
    copy.append(NewEvent::new(
        &thread,
        "run.interrupted",
        json!({"cancelled": []}),
    ))
    .await
    .unwrap();
    copy.close().await;
    journal.close().await;
    let o = out(&mut resume_cmd(&copy_db, &server, &run, &[]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let stderr = text(&o.stderr);
    assert!(
        stderr.contains("call_id is 480 bytes long") && stderr.contains("in step 1"),
        "{stderr}"
    );
    assert!(!stderr.contains("invalid dedup key"), "{stderr}");
    assert_eq!(show(&copy_db, &run)["status"], "failed");
    let o = out(&mut resume_cmd(&copy_db, &server, &run, &[]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

/// Calls of kinds the run never offered, as the API sends them.
fn foreign_calls() -> Vec<Value> {
    vec![
        json!({"type": "custom_tool_call", "call_id": "c1", "name": "list_dir", "input": "."}),
        json!({"type": "local_shell_call", "call_id": "c1",
               "action": {"type": "exec", "command": ["ls"], "env": {}}}),
        json!({"type": "computer_call", "call_id": "c1", "action": {"type": "screenshot"},
               "pending_safety_checks": []}),
        json!({"type": "mcp_call", "server_label": "s", "name": "t", "arguments": "{}"}),
        json!({"type": "mcp_approval_request", "server_label": "s", "name": "t",
               "arguments": "{}"}),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_of_a_kind_never_offered_fails_the_run() {
    for item in foreign_calls() {
        let kind = item["type"].as_str().unwrap().to_string();
        for schema in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let db = sqlite(&dir);
            // Reasoning and a message beside it, as a model sends them.
            let items = json!([
                {"type": "reasoning", "summary": []},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "{\"n\": 1}"}]},
                item.clone(),
            ]);
            let server = emulator(&script_by_outputs(&[items])).await;
            let (_g, ws) = workspace();
            let mut cmd = run_cmd(&db, &server, &ws, &["--approval", "auto"]);
            if schema {
                let path = dir.path().join("s.json");
                std::fs::write(
                    &path,
                    r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#,
                )
                .unwrap();
                cmd.arg("--output-schema").arg(path);
            }
            let o = out(&mut cmd);
            assert_eq!(o.status.code(), Some(1), "{kind}: {}", text(&o.stderr));
            let stderr = text(&o.stderr);
            assert!(
                stderr.contains(&format!("the model made a `{kind}` item")),
                "{stderr}"
            );
            let run = only_run(&db);
            let events = events(&db, &run).await;
            assert_eq!(kinds_of(&events, "model.requested").len(), 1, "{kind}");
            assert!(kinds_of(&events, "model.completed").is_empty(), "{kind}");
            assert_eq!(show(&db, &run)["status"], "failed", "{kind}");
        }
    }
}

/// A journal an older host left with such a step (paused `model_rejected`, as the API
/// refused the next request): `resume` fails the run instead of asking again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_call_of_a_kind_never_offered_fails_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(&dir);
    let server = emulator(&script_by_outputs(&[answer("{\"n\": 1}")])).await;
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(&db, &server, &ws, &["--approval", "auto"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = only_run(&db);
    let journal = Journal::open(&db).await.unwrap();
    let thread = format!("run:{run}");
    let stored = journal.replay(&thread, 0).await.unwrap();
    journal.close().await;
    let other = tempfile::tempdir().unwrap();
    let copy_db = sqlite(&other);
    let copy = Journal::open(&copy_db).await.unwrap();
    for e in &stored {
        let mut payload = e.payload.clone();
        if &*e.kind == "model.completed" {
            payload["output"]
                .as_array_mut()
                .unwrap()
                .push(foreign_calls()[0].clone());
        }
        if &*e.kind == "run.completed" {
            break;
        }
        copy.append(copied(&thread, e, payload)).await.unwrap();
    }
    copy.append(NewEvent::new(
        &thread,
        "run.paused",
        json!({"reason": "model_rejected", "detail": "No tool output found for function call c1"}),
    ))
    .await
    .unwrap();
    copy.close().await;
    let before = server.requests().len();
    let o = out(&mut resume_cmd(&copy_db, &server, &run, &[]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let stderr = text(&o.stderr);
    assert!(
        stderr.contains("the model made a `custom_tool_call` item"),
        "{stderr}"
    );
    assert_eq!(server.requests().len(), before, "nothing asked again");
    assert_eq!(show(&copy_db, &run)["status"], "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_says_do_not_retry_is_not_asked_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(&dir);
    let script = json!({"rules": [{"when": {}, "reply": {"error": {
        "status": 503, "headers": {"x-should-retry": "false"},
        "message": "overloaded, do not retry", "type": "server_error"}}}]});
    let server = emulator(&script.to_string()).await;
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(&db, &server, &ws, &["--approval", "auto"]));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let stderr = text(&o.stderr);
    assert!(!stderr.contains("trying again"), "{stderr}");
    assert_eq!(server.requests().len(), 1, "one request, by nobody again");
    let run = only_run(&db);
    let events = events(&db, &run).await;
    assert_eq!(kinds_of(&events, "model.requested").len(), 1);
    let failed = kinds_of(&events, "model.failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].payload["retryable"], false);
    let paused = kinds_of(&events, "run.paused");
    assert_eq!(paused[0].payload["reason"], "model_error");
}

/// The text a WebSocket reply streams, long enough to be steered mid-way.
const LONG: &str = "a long answer that streams slowly enough for a steer to reach it in time";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steered_websocket_response_counts_in_the_run_usage() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(&dir);
    let script = json!({"rules": [{"when": {}, "reply": {"items": answer(LONG)},
        "hold_for_steer_ms": 30000}]});
    let server = emulator(&script.to_string()).await;
    let (_g, ws) = workspace();
    let child = run_cmd(
        &db,
        &server,
        &ws,
        &["--transport", "ws", "--approval", "auto"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Once step 1 is asked for, its reply holds for the steer.
    let deadline = Instant::now() + Duration::from_secs(60);
    let run = loop {
        assert!(Instant::now() < deadline, "step 1 was never requested");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let o = out(agentctl(&db).args(["--json", "runs", "list"]));
        let Some(line) = text(&o.stdout).lines().next().map(str::to_string) else {
            continue;
        };
        let run = serde_json::from_str::<Value>(&line).unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        if !kinds_of(&events(&db, &run).await, "model.requested").is_empty() {
            break run;
        }
    };
    let o = out(agentctl(&db).args(["--json", "steer", &run, "be brief", "--id", "s1", "--wait"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));

    let events = events(&db, &run).await;
    let completed = kinds_of(&events, "model.completed");
    assert_eq!(completed.len(), 1);
    let step = &completed[0].payload;
    assert_eq!(step["steered"]["incomplete_reason"], "steered");
    let successor = step["usage"]["total_tokens"].as_u64().unwrap();
    let parent = step["steered"]["parent_usage"]["total_tokens"]
        .as_u64()
        .unwrap();
    assert!(parent > 0 && successor > 0, "{step}");
    let total = successor + parent;
    let ended = kinds_of(&events, "run.completed");
    assert_eq!(ended[0].payload["usage"]["total_tokens"], total);
    assert_eq!(show(&db, &run)["usage"]["total_tokens"], total);
}

/// Event `e` to append again to `thread` with `payload`, its dedup key kept.
fn copied(thread: &str, e: &agent_journal::Event, payload: serde_json::Value) -> NewEvent {
    let event = NewEvent::new(thread, &*e.kind, payload);
    match &e.dedup_key {
        Some(key) => event.with_dedup_key(key.clone()),
        None => event,
    }
}
