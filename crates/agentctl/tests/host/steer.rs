//! Steers from other processes: applied at the next step boundary (also by a later
//! `resume`), dropped once the run has ended, one steer per id.

use std::process::Stdio;

use serde_json::json;

use crate::host::fresh_db::{self, FreshDb};
use crate::host::*;

fn script() -> String {
    json!({"rules": [
        {"when": {"tool_outputs": 0}, "reply": {"items": [call("c_s", "shell", json!({"command": "echo hi"}))]}},
        {"when": {"tool_outputs": 1, "last_user_contains": "STEER"}, "reply": {"items": answer("FINAL: steered")}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: plain")}}
    ]})
    .to_string()
}

async fn steer_is_never_lost(db: FreshDb) {
    let db = db.url();
    let server = emulator(&script()).await;
    let (_g, ws) = workspace();
    // Paused for approval, no host runs: the steer waits in the journal.
    let paused = out(&mut run_cmd(db, &server, &ws, &["--sandbox", "off"]));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    let run = only_run(db);
    let steer = |extra: &[&str]| {
        let mut cmd = agentctl(db);
        cmd.args(["--json", "steer", &run, "STEER: say steered"])
            .args(extra);
        cmd
    };
    let first = out(&mut steer(&["--id", "s1"]));
    assert!(first.status.success(), "{}", text(&first.stderr));
    let line: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(
        line,
        json!({"type": "steer.requested", "run_id": run, "id": "s1"})
    );
    // The same id again is the same steer; with other text it is refused (the text was
    // dropped unsaid while the command said "requested").
    assert!(out(&mut steer(&["--id", "s1"])).status.success());
    let other = out(agentctl(db).args(["steer", &run, "STEER: other", "--id", "s1"]));
    assert_eq!(other.status.code(), Some(2), "{}", text(&other.stderr));
    assert!(
        text(&other.stderr).contains("already requested with other text"),
        "{}",
        text(&other.stderr)
    );
    // Someone waits for its outcome in another process.
    let waiter = steer(&["--id", "s1", "--wait"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        out(agentctl(db).args(["approve", &run, "c_s"]))
            .status
            .success()
    );
    let resumed = out(&mut resume_cmd(db, &server, &run, &[]));
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    assert_eq!(show(db, &run)["final_text"], "FINAL: steered");
    let waited = waiter.wait_with_output().unwrap();
    assert!(waited.status.success());
    let line: serde_json::Value = serde_json::from_slice(&waited.stdout).unwrap();
    assert_eq!(line["type"], "steer.applied");
    assert_eq!(line["step"], 2);
    let events = events(db, &run).await;
    assert_eq!(kinds_of(&events, "steer.requested").len(), 1);
    assert_eq!(kinds_of(&events, "steer.applied").len(), 1);
    check_invariants(&events);
    // The model saw the steer as a user message, after the call's output.
    let last = last_request(&server);
    let input = last["input"].as_array().unwrap();
    let tail = &input[input.len() - 1];
    assert_eq!(tail["role"], "user");
    assert!(tail.to_string().contains("STEER: say steered"));
    // `runs events` shows the steer's life in our own types.
    let lines = out(agentctl(db).args(["runs", "events", &run]));
    let types: Vec<String> = text(&lines.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(types.contains(&"steer.requested".to_string()), "{types:?}");
    assert!(types.contains(&"steer.applied".to_string()), "{types:?}");
    // After the end: dropped at once, exit 1.
    let late = out(&mut steer(&["--wait"]));
    assert_eq!(late.status.code(), Some(1));
    let line: serde_json::Value = serde_json::from_slice(&late.stdout).unwrap();
    assert_eq!(line["type"], "steer.dropped");
    assert!(line["reason"].as_str().unwrap().contains("completed"));
    let empty = out(agentctl(db).args(["steer", &run, "  "]));
    assert_eq!(
        empty.status.code(),
        Some(2),
        "an empty steer is a usage error"
    );
}

/// A steer `--id` the HTTP API would refuse (empty, over 128 characters, a control
/// character) is refused, exit 2, and nothing is journaled: an empty one was taken (and
/// printed as ` requested`), a long one failed as an "invalid dedup key", exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_id_the_api_would_refuse_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("s.db").display());
    let server = emulator(&script()).await;
    let (_g, ws) = workspace();
    let paused = out(&mut run_cmd(&db, &server, &ws, &["--sandbox", "off"]));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    let run = only_run(&db);
    for id in [String::new(), "x".repeat(600), "a\nb".to_string()] {
        let o = out(agentctl(&db).args(["steer", &run, "STEER: hi", "--id", &id]));
        assert_eq!(o.status.code(), Some(2), "{id:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("--id"), "{}", text(&o.stderr));
    }
    assert!(kinds_of(&events(&db, &run).await, "steer.requested").is_empty());
}

/// A step whose boundary applies a steer is compacted like any other when the previous
/// request was over `--compact-at` (the steer's path went straight to the model, so a run
/// steered at every boundary never compacted, and a resume between the steer and the
/// request compacted where the first drive had not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_after_a_steer_is_compacted_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("s.db").display());
    let server = emulator(
        &json!({"rules": [
            {"when": {"input_has_type": "compaction"}, "reply": {"items": answer("FINAL: compacted")}},
            {"when": {"tool_outputs": 0}, "reply": {"items": [call("c_s", "shell", json!({"command": "echo hi"}))]}},
            {"when": {}, "reply": {"items": answer("FINAL: uncompacted")}}
        ]})
        .to_string(),
    )
    .await;
    let (_g, ws) = workspace();
    let paused = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &["--sandbox", "off", "--compact-at", "1"],
    ));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    let run = only_run(&db);
    assert!(
        out(agentctl(&db).args(["steer", &run, "STEER: be brief"]))
            .status
            .success()
    );
    assert!(
        out(agentctl(&db).args(["approve", &run, "c_s"]))
            .status
            .success()
    );
    let resumed = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    assert_eq!(show(&db, &run)["final_text"], "FINAL: compacted");
    let events = events(&db, &run).await;
    assert_eq!(kinds_of(&events, "steer.applied").len(), 1);
    let compacted = kinds_of(&events, "context.compacted");
    assert_eq!(compacted.len(), 1);
    assert_eq!(compacted[0].payload["step"], 2);
    // The steer went into the compaction with the rest of the history.
    assert!(
        compacted[0].payload["output"]
            .to_string()
            .contains("STEER: be brief")
    );
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: steer_is_never_lost);
