//! What a resumed run's commands are kept from when the world changed since the run was
//! recorded: the database it is resumed from (moved), the home of the user who started it
//! (the resume under another `HOME`), and a sandbox that could not even be probed for a
//! moment (which must not turn the run's sandbox off for good).

use std::path::Path;

use serde_json::json;

use super::host::*;

/// A model whose first step lists the workspace and whose second runs `command`, then
/// answers; a run of it with `--max-steps 1` pauses before the command.
fn paused_before(command: &str) -> String {
    script_by_outputs(&[
        json!([call("c_list", "list_dir", json!({ "path": null }))]),
        json!([call("c_cmd", "shell", json!({ "command": command }))]),
        answer("FINAL: done"),
    ])
}

/// The output the model was sent for the command, as the last request carried it.
fn command_output(server: &agent_responses_mock::MockServer) -> String {
    server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn paused_run(
    db: &str,
    server: &agent_responses_mock::MockServer,
    ws: &Path,
    home: &Path,
) -> String {
    let o =
        out(run_cmd(db, server, ws, &["--approval", "auto", "--max-steps", "1"]).env("HOME", home));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    only_run(db)
}

/// A run recorded with its database elsewhere and resumed from a copy inside its
/// workspace: the database it is driven from is hidden as the one it was recorded in was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_a_run_is_resumed_from_is_hidden() {
    let (dir, ws) = workspace();
    let first = dir.path().join("first.db");
    let moved = ws.join("moved.db");
    let server = emulator(&paused_before(&format!(
        "echo BYTES=$(cat {0} {0}-wal 2>/dev/null | wc -c)",
        moved.display()
    )))
    .await;
    let db = format!("sqlite://{}", first.display());
    let run = paused_run(&db, &server, &ws, dir.path());
    let o = out(agentctl(&db).args(["journal", "threads"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::copy(&first, &moved).unwrap();
    let moved_db = format!("sqlite://{}", moved.display());
    let o =
        out(resume_cmd(&moved_db, &server, &run, &["--max-steps", "5"]).env("HOME", dir.path()));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let sent = command_output(&server);
    assert!(sent.contains("c_cmd"), "{sent}");
    assert!(
        sent.contains("BYTES=0"),
        "the database resumed from could be read: {sent}"
    );
}

/// A run started by a user whose home holds a key, resumed under another `HOME` (sudo,
/// cron, a worker): the first user's credential stores stay hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_starting_users_credentials_stay_hidden_under_another_home() {
    let (dir, ws) = workspace();
    let (home, other) = (dir.path().join("ana"), dir.path().join("other"));
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(home.join(".ssh/id_test"), "PRIVATE-KEY-OF-ANA\n").unwrap();
    let server = emulator(&paused_before(&format!(
        "cat {} || echo REFUSED",
        home.join(".ssh/id_test").display()
    )))
    .await;
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let run = paused_run(&db, &server, &ws, &home);
    let o = out(resume_cmd(&db, &server, &run, &["--max-steps", "5"]).env("HOME", &other));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let sent = command_output(&server);
    assert!(sent.contains("REFUSED"), "{sent}");
    assert!(
        !sent.contains("PRIVATE-KEY-OF-ANA"),
        "the key was read: {sent}"
    );
}

/// A resume where the sandbox cannot even be probed (no temp dir) fails and leaves the
/// run's sandbox as it was; the next resume runs the command sandboxed, unasked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_that_cannot_run_changes_nothing() {
    let (dir, ws) = workspace();
    let elsewhere = tempfile::tempdir().unwrap();
    let outside = elsewhere.path().join("outside");
    let server = emulator(&paused_before(&format!(
        "touch {} 2>/dev/null; echo TOUCHED=$?",
        outside.display()
    )))
    .await;
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let run = paused_run(&db, &server, &ws, dir.path());
    let o = out(resume_cmd(&db, &server, &run, &["--max-steps", "5"])
        .env("HOME", dir.path())
        .env("TMPDIR", dir.path().join("no-such-dir")));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("could not be probed"),
        "{}",
        text(&o.stderr)
    );
    let evs = events(&db, &run).await;
    assert!(
        kinds_of(&evs, "run.sandbox_changed").is_empty(),
        "the sandbox changed"
    );
    let o = out(resume_cmd(&db, &server, &run, &["--max-steps", "5"]).env("HOME", dir.path()));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!outside.exists(), "the command ran unsandboxed");
    assert!(command_output(&server).contains("TOUCHED=1"));
}

/// A workspace replaced by a file since the run paused: the resume says so (exit 2), and
/// the run resumes once the directory is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_replaced_by_a_file_is_named_as_such() {
    let (dir, _) = workspace();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let server = emulator(&paused_before("echo ran")).await;
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let run = paused_run(&db, &server, &ws, dir.path());
    std::fs::rename(&ws, dir.path().join("ws.away")).unwrap();
    std::fs::write(&ws, "a file now").unwrap();
    let o = out(resume_cmd(&db, &server, &run, &["--max-steps", "5"]).env("HOME", dir.path()));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("it is not a directory"),
        "{}",
        text(&o.stderr)
    );
    std::fs::remove_file(&ws).unwrap();
    std::fs::rename(dir.path().join("ws.away"), &ws).unwrap();
    let o = out(resume_cmd(&db, &server, &run, &["--max-steps", "5"]).env("HOME", dir.path()));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}
