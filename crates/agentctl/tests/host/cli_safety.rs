//! What the CLI prints for people: exit statuses of mistaken ids, commands that are safe to
//! paste, and text from the model or a tool that cannot drive the terminal.

use serde_json::json;

use crate::host::*;

fn sqlite_db(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("safety.db").display())
}

/// A run paused on `call_id` (a `shell` call under `--sandbox off`); returns the run's
/// output and id.
async fn paused_on(db: &str, call_id: &str) -> (std::process::Output, String) {
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call(call_id, "shell", json!({"command": "echo hi"}))]),
        answer("FINAL"),
    ]))
    .await;
    let paused = out(&mut run_cmd(db, &server, &ws, &["--sandbox", "off"]));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    (paused, only_run(db))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_on_an_unknown_call_is_a_usage_error_naming_the_pending_ones() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let (_, run) = paused_on(&db, "call_real").await;
    for verb in ["approve", "deny"] {
        let o = out(agentctl(&db).args([verb, &run, "call_9"]));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{verb}: {err}");
        assert!(err.contains("no call call_9"), "{err}");
        assert!(
            err.contains("call_real"),
            "the pending call is named: {err}"
        );
    }
    // The real one is still pending and decidable.
    let ok = out(agentctl(&db).args(["deny", &run, "call_real"]));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
}

#[test]
fn a_run_id_too_long_for_the_journal_is_an_unknown_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let long = "r".repeat(300);
    for args in [
        vec!["runs", "show", &long],
        vec!["runs", "wait", &long],
        vec!["runs", "events", &long],
        vec!["runs", "search", &long, "term"],
        vec!["approve", &long, "c1"],
        vec!["deny", &long, "c1"],
        vec!["steer", &long, "hi"],
        vec!["interrupt", &long],
        vec!["resume", &long],
    ] {
        let o = out(agentctl(&db).args(&args));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{:?}: {err}", &args[..2]);
        assert!(err.contains(&format!("no run {long}")), "{err}");
        assert!(!err.contains("invalid thread"), "{err}");
    }
    // An unknown id of ordinary length searched for is the same usage error.
    let o = out(agentctl(&db).args(["runs", "search", "nosuch", "term"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}
