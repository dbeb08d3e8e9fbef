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

/// `agentctl` with the database in `AGENTCTL_DB` rather than `--db`.
fn agentctl_env_db(db: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_agentctl"));
    cmd.env("AGENTCTL_DB", db)
        .env_remove("OPENAI_BASE_URL")
        .env("OPENAI_API_KEY", agent_responses_mock::MOCK_API_KEY)
        .stdin(std::process::Stdio::null());
    cmd
}

/// The lines of `printed` that suggest an `agentctl` command.
fn suggested(printed: &str) -> Vec<&str> {
    printed
        .lines()
        .filter(|l| l.contains("agentctl approve") || l.contains("agentctl resume"))
        .collect()
}

/// A database from `AGENTCTL_DB` is left to the environment in the commands printed: with a
/// masked password in them, pasting would fail to authenticate.
async fn suggested_commands_leave_an_env_database_to_the_environment(db: &str) {
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call("call_e", "shell", json!({"command": "echo hi"}))]),
        answer("FINAL"),
    ]))
    .await;
    let paused = out(agentctl_env_db(db)
        .args(["run", "--base-url", &server.base_url(), "--workspace"])
        .arg(&ws)
        .args(["--sandbox", "off", "do the task"]));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    let run = only_run(db);
    let shown = out(agentctl_env_db(db).args(["runs", "show", &run]));
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    for printed in [text(&paused.stderr), text(&shown.stdout)] {
        let lines = suggested(&printed);
        assert!(!lines.is_empty(), "{printed}");
        for line in lines {
            assert!(!line.contains("--db"), "{line}");
            assert!(!line.contains("***"), "{line}");
        }
        assert!(!printed.contains("masked"), "{printed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suggested_commands_leave_an_env_sqlite_database_to_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    suggested_commands_leave_an_env_database_to_the_environment(&sqlite_db(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suggested_commands_leave_an_env_postgres_database_to_the_environment() {
    let Some(db) = crate::host::fresh_db::postgres().await else {
        return;
    };
    suggested_commands_leave_an_env_database_to_the_environment(db.url()).await;
}

/// A password given with `--db` on the command line stays masked in the commands printed,
/// and one note says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masked_command_line_password_is_said_once() {
    let Some(db) = crate::host::fresh_db::postgres().await else {
        return;
    };
    let db = db.url();
    // `postgres://user:password@host/...`
    let password = db
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(user_info, _)| user_info.split_once(':'))
        .map(|(_, password)| password.to_string())
        .filter(|p| !p.is_empty());
    let Some(password) = password else {
        return;
    };
    let (paused, run) = paused_on(db, "call_m").await;
    let shown = out(agentctl(db).args(["runs", "show", &run]));
    for (stdout, stderr) in [
        (String::new(), text(&paused.stderr)),
        (text(&shown.stdout), text(&shown.stderr)),
    ] {
        let all = format!("{stdout}{stderr}");
        assert!(!all.contains(&format!(":{password}@")), "{all}");
        let lines = suggested(&all);
        assert!(!lines.is_empty(), "{all}");
        assert!(lines.iter().all(|l| l.contains("--db")), "{all}");
        assert_eq!(
            stderr.matches("--db password is masked").count(),
            1,
            "{stderr}"
        );
        assert!(stderr.trim_end().ends_with("leave --db out"), "{stderr}");
    }
}
