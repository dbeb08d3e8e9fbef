//! A run's life: the built-in story on a fresh home, budgets, Ctrl-C, resume.

use std::process::{Output, Stdio};

use serde_json::{Value, json};

use crate::host::fresh_db::{self, FreshDb};
use crate::host::*;

#[test]
fn mock_story_on_a_fresh_home() {
    let home = tempfile::tempdir().unwrap();
    let cmd = |args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_agentctl"));
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", home.path())
            .args(args)
            .stdin(Stdio::null());
        c.output().unwrap()
    };
    let o = cmd(&["run", "--mock", "look around and summarise"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    for tool in ["list_dir", "read_file", "shell", "write_file"] {
        assert!(
            stdout.contains(&format!("-> {tool}")),
            "{tool} in: {stdout}"
        );
    }
    assert!(stdout.contains("Done: I listed the workspace"), "{stdout}");
    let listed = cmd(&["--json", "runs", "list"]);
    let line: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(line["status"], "completed");
    assert_eq!(line["steps"], 5);
    let run = line["run_id"].as_str().unwrap();
    // The story's commands ran sandboxed, without asking and without a fallback: its
    // workspace lies in the state dir, which the sandbox hides around it.
    assert!(!text(&o.stderr).contains("warning"), "{}", text(&o.stderr));
    let shown: Value =
        serde_json::from_slice(&cmd(&["--json", "runs", "show", run]).stdout).unwrap();
    assert_eq!(shown["sandbox"]["mode"], "workspace-write", "{shown}");
    assert_eq!(shown["sandbox"]["network"], false, "{shown}");
    // The run's database is hidden from its commands by name, wherever it lives.
    let hidden: Vec<&str> = shown["sandbox"]["deny_read"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        hidden.len() == 4
            && hidden[0].ends_with("agentctl/agentctl.db")
            && hidden[1].ends_with(".db-wal"),
        "{shown}"
    );
    // The starting user's home, whose credential stores stay hidden whoever resumes.
    assert_eq!(
        shown["sandbox"]["home"],
        home.path().to_str().unwrap(),
        "{shown}"
    );
    assert_eq!(
        shown["sandbox"].as_object().unwrap().len(),
        4,
        "nothing else recorded: {shown}"
    );
    let shown = cmd(&["runs", "show", run]);
    assert!(
        text(&shown.stdout).contains("status    completed"),
        "{}",
        text(&shown.stdout)
    );
    let lines: Vec<Value> = text(&cmd(&["runs", "events", run]).stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[0],
        json!({"type": "thread.started", "thread_id": run})
    );
    assert!(lines.iter().all(|l| l["type"].is_string()));
    assert!(
        lines
            .iter()
            .any(|l| l["item"]["type"] == "command_execution" && l["item"]["exit_code"] == 0)
    );
    assert!(lines.iter().any(|l| l["item"]["type"] == "file_change"));
    assert_eq!(lines.last().unwrap()["type"], "turn.completed");
    // --json on run prints the same lines live.
    // A second run, with the database now there to hide: still sandboxed, no fallback,
    // and its command still runs.
    let live = cmd(&["--json", "run", "--mock", "again"]);
    assert_eq!(live.status.code(), Some(0));
    assert!(
        !text(&live.stderr).contains("warning"),
        "{}",
        text(&live.stderr)
    );
    let live: Vec<Value> = text(&live.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        live.iter().any(|l| l["item"]["type"] == "command_execution"
            && l["item"]["exit_code"] == 0
            && l["item"]["sandbox"] == "workspace-write"),
        "{live:?}"
    );
    assert_eq!(live[0]["type"], "thread.started");
    assert_eq!(live.last().unwrap()["type"], "turn.completed");
    let summary = std::fs::read_dir(home.path().join(".local/share/agentctl/workspaces"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|d| d.path().join("SUMMARY.md").exists())
        .count();
    assert_eq!(summary, 2);
}

/// The built-in story with its history compacted before every step: the emulator's story
/// goes on where it was (its compactions stand for the outputs they replaced), so the run
/// ends as it does uncompacted. It failed at step 2: the story started over and reissued
/// `call_list`, a call id from before the compaction.
#[test]
fn mock_story_compacted_at_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("c.db").display());
    let (_g, ws) = workspace();
    std::fs::write(ws.join("README.md"), "# A workspace\n").unwrap();
    let o = out(agentctl(&db)
        .args(["run", "--mock", "--compact-at", "1", "--workspace"])
        .arg(&ws)
        .arg("look around and summarise"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    for tool in ["list_dir", "read_file", "shell", "write_file"] {
        assert_eq!(stdout.matches(&format!("-> {tool}")).count(), 1, "{stdout}");
    }
    assert!(stdout.contains("Done: I listed the workspace"), "{stdout}");
    let run = only_run(&db);
    let events = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(events(&db, &run));
    assert_eq!(
        kinds_of(&events, "context.compacted").len(),
        4,
        "compacted before steps 2-5"
    );
    assert_eq!(show(&db, &run)["steps"], 5);
}

/// The command a budget pause prints to continue is one `resume` takes: it raises the
/// budget that ran out (it said `agentctl resume RUN`, which is refused, exit 2, without a
/// higher budget).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_pause_prints_a_resume_that_is_taken() {
    let (_g, ws) = workspace();
    for (budget, flag) in [
        ("--max-steps", "--max-steps"),
        ("--max-tokens", "--max-tokens"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("b.db").display());
        let server = emulator(&script_by_outputs(&[
            json!([call("c1", "list_dir", json!({}))]),
            json!([call("c2", "list_dir", json!({}))]),
            answer("FINAL: budget"),
        ]))
        .await;
        let o = out(&mut run_cmd(&db, &server, &ws, &[budget, "1"]));
        assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
        let stderr = text(&o.stderr);
        let printed = stderr
            .lines()
            .find_map(|l| l.strip_prefix("continue with: "))
            .unwrap_or_else(|| panic!("{stderr}"));
        let rest = printed
            .strip_prefix(&format!("agentctl --db {db} "))
            .unwrap_or_else(|| panic!("{printed}"));
        let words: Vec<&str> = rest.split(' ').collect();
        assert_eq!(words[..3], ["resume", &only_run(&db), flag], "{printed}");
        let again = out(agentctl(&db).args(&words));
        assert_ne!(
            again.status.code(),
            Some(2),
            "{printed}: {}",
            text(&again.stderr)
        );
        assert!(
            !kinds_of(&events(&db, &only_run(&db)).await, "run.resumed").is_empty(),
            "{printed}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_pause_then_resume_with_more() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("b.db").display());
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call("c1", "list_dir", json!({}))]),
        json!([call("c2", "list_dir", json!({}))]),
        answer("FINAL: budget"),
    ]))
    .await;
    let o = out(&mut run_cmd(&db, &server, &ws, &["--max-steps", "1"]));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let run = only_run(&db);
    let shown = show(&db, &run);
    assert_eq!(shown["status"], "paused");
    assert_eq!(shown["detail"], "max_steps");
    // Without a higher budget it would pause again at once: refused, nothing claimed.
    let again = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(again.status.code(), Some(2), "{}", text(&again.stderr));
    assert!(
        text(&again.stderr).contains("--max-steps above 1"),
        "{}",
        text(&again.stderr)
    );
    assert!(kinds_of(&events(&db, &run).await, "run.resumed").is_empty());
    // An unknown run id is bad input too.
    for args in [
        &["resume", "no-such-run"][..],
        &["runs", "show", "no-such-run"],
        &["approve", "no-such-run", "c1"],
        &["steer", "no-such-run", "hello"],
        &["interrupt", "no-such-run"],
    ] {
        let o = out(agentctl(&db).args(args));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("no-such-run"),
            "{}",
            text(&o.stderr)
        );
    }
    // No --base-url: the run goes back to the endpoint it was started with.
    let o = out(agentctl(&db).args(["resume", &run, "--max-steps", "10"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(show(&db, &run)["final_text"], "FINAL: budget");
    let events = events(&db, &run).await;
    check_invariants(&events);
    assert_eq!(kinds_of(&events, "model.completed").len(), 3);
    let done = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(
        done.status.code(),
        Some(2),
        "resuming a completed run is a usage error"
    );
    assert!(
        text(&done.stderr).contains("is completed"),
        "{}",
        text(&done.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_tool_then_resume_finishes() {
    signal_cancels_the_tool_then_resume_finishes("-INT").await;
}

/// A supervisor's SIGTERM (systemd, Kubernetes, a CI runner) is an interrupt, not a crash:
/// the running call is cancelled and journaled, so `resume` does not ask about it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cancels_the_tool_as_ctrl_c_does() {
    signal_cancels_the_tool_then_resume_finishes("-TERM").await;
}

/// A closed terminal (an ssh session that dropped) sends SIGHUP: an interrupt too, not a
/// crash that leaves the call for a human to judge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_cancels_the_tool_as_ctrl_c_does() {
    signal_cancels_the_tool_then_resume_finishes("-HUP").await;
}

async fn signal_cancels_the_tool_then_resume_finishes(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("i.db").display());
    let (_g, ws) = workspace();
    let server = emulator(&long_shell_script()).await;
    let child = spawn_long_shell(&db, &server, &ws, &["--approval", "auto"]).await;
    std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{signal}: {}", text(&o.stderr));
    assert!(text(&o.stderr).contains(" resume "), "{}", text(&o.stderr));
    assert!(!ws.join("finished").exists());
    let run = only_run(&db);
    let events = events(&db, &run).await;
    assert_eq!(kinds_of(&events, "tool.cancelled").len(), 1);
    assert_eq!(kinds_of(&events, "run.interrupted").len(), 1);
    assert_eq!(show(&db, &run)["status"], "interrupted");
    let o = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        !ws.join("finished").exists(),
        "a cancelled call is not run again"
    );
    check_invariants(&events_after(&db, &run).await);
}

async fn events_after(db: &str, run: &str) -> Vec<agent_journal::Event> {
    events(db, run).await
}

/// A 429 that asks to come back later than the client waits (`Retry-After` past its
/// limit) is not retried here, but it is no refusal either: the run pauses as after a
/// model error (exit 3, `model_error`), and `resume` asks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_asking_for_a_long_wait_pauses_as_a_model_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("busy.db").display());
    let (_g, ws) = workspace();
    let script = json!({"rules": [
        {"when": {"tool_outputs": 0}, "times": 1,
         "reply": {"error": {"status": 429, "headers": {"retry-after": "99999"}, "message": "busy for a day", "type": "rate_limit_error"}}},
        {"when": {"tool_outputs": 0}, "reply": {"items": answer("FINAL: later")}}
    ]});
    let server = emulator(&script.to_string()).await;
    let o = out(&mut run_cmd(&db, &server, &ws, &[]));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let run = only_run(&db);
    let shown = show(&db, &run);
    assert_eq!(shown["status"], "paused");
    assert_eq!(shown["detail"], "model_error");
    let done = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_error_pauses_the_run_and_resume_retries_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("m.db").display());
    let (_g, ws) = workspace();
    // The first request is refused (400: not retried, by the client or the host); later
    // ones answer.
    let script = json!({"rules": [
        {"when": {"tool_outputs": 0}, "times": 1,
         "reply": {"error": {"status": 400, "message": "Invalid 'input': scripted refusal", "type": "invalid_request_error", "code": "scripted"}}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [call("c1", "list_dir", json!({}))]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: after the error")}}
    ]});
    let server = emulator(&script.to_string()).await;
    let o = out(&mut run_cmd(&db, &server, &ws, &[]));
    // A refusal no retry can fix fails the step: exit 1 with the API's message.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("scripted refusal"),
        "{}",
        text(&o.stderr)
    );
    let run = only_run(&db);
    let shown = show(&db, &run);
    assert_eq!(shown["status"], "paused");
    assert_eq!(shown["detail"], "model_rejected");
    let requests = server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/responses"))
        .count();
    assert_eq!(requests, 1, "a 400 is sent once");
    let failed = events(&db, &run).await;
    let failure = kinds_of(&failed, "model.failed");
    assert_eq!(failure.len(), 1);
    assert_eq!(failure[0].payload["status"], 400);
    assert_eq!(failure[0].payload["code"], "scripted");
    assert_eq!(failure[0].payload["retryable"], false);
    let o = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let events = events(&db, &run).await;
    check_invariants(&events);
    let attempts: Vec<u64> = kinds_of(&events, "model.requested")
        .iter()
        .filter(|e| e.payload["step"] == 1)
        .map(|e| e.payload["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(
        attempts,
        vec![1, 2],
        "step 1 is requested again as attempt 2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_output_item_is_not_recorded_and_the_run_pauses() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("u.db").display());
    let (_g, ws) = workspace();
    // A function call whose arguments are not a string: recorded, it would be sent back
    // (and refused) at every later step.
    let script = json!({"rules": [
        {"when": {"tool_outputs": 0}, "times": 1, "reply": {"items": [
            {"type": "function_call", "call_id": "c1", "name": "list_dir", "arguments": 5}]}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [call("c1", "list_dir", json!({}))]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: after the bad item")}}
    ]});
    let server = emulator(&script.to_string()).await;
    let o = out(&mut run_cmd(&db, &server, &ws, &[]));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let run = only_run(&db);
    assert_eq!(show(&db, &run)["detail"], "model_error");
    let paused = events(&db, &run).await;
    assert!(kinds_of(&paused, "model.completed").is_empty());
    assert_eq!(kinds_of(&paused, "model.failed").len(), 1);
    let o = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(show(&db, &run)["final_text"], "FINAL: after the bad item");
    check_invariants(&events(&db, &run).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_from_another_process_cancels_the_running_tool() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("x.db").display());
    let (_g, ws) = workspace();
    let server = emulator(&long_shell_script()).await;
    let child = spawn_long_shell(&db, &server, &ws, &["--approval", "auto", "--json"]).await;
    let run = only_run(&db);
    let asked = out(agentctl(&db).args(["interrupt", &run]));
    assert!(asked.status.success(), "{}", text(&asked.stderr));
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o.stderr));
    let lines: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines.iter().any(|l| l["type"] == "run.interrupted"),
        "{lines:?}"
    );
    let events = events(&db, &run).await;
    check_invariants(&events);
    assert_eq!(kinds_of(&events, "interrupt.requested").len(), 1);
    assert_eq!(kinds_of(&events, "tool.cancelled").len(), 1);
    assert!(!ws.join("finished").exists());
    assert_eq!(show(&db, &run)["status"], "interrupted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_call_id_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("d.db").display());
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call("c1", "list_dir", json!({}))]),
        json!([call("c1", "list_dir", json!({}))]),
        answer("FINAL: never"),
    ]))
    .await;
    let o = out(&mut run_cmd(&db, &server, &ws, &[]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("reused the call_id c1"),
        "{}",
        text(&o.stderr)
    );
    let run = only_run(&db);
    assert_eq!(show(&db, &run)["status"], "failed");
    let again = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert!(
        text(&again.stderr).contains("is failed"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(
        server.requests().len(),
        2,
        "no model call after the failure"
    );
}

/// An `agentctl run` (auto-approving) whose `shell` command, `touch started; sleep 60;
/// touch finished`, has started: the emulator, kept for the run's life, and the host.
async fn a_host_in_a_long_command(
    db: &str,
    ws: &std::path::Path,
) -> (agent_responses_mock::MockServer, std::process::Child) {
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c_long",
            "shell",
            json!({"command": "touch started; sleep 60; touch finished"})
        )]),
        answer("FINAL"),
    ]))
    .await;
    let child = spawn_long_shell(db, &server, ws, &["--approval", "auto"]).await;
    (server, child)
}

/// A `kill -9` of the host takes its command down, and a `runs wait` on the run (one
/// started before, one after) ends with `interrupted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_host_takes_its_shell_command_down() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("k.db").display());
    let (_g, ws) = workspace();
    let (_server, mut child) = a_host_in_a_long_command(&db, &ws).await;
    let in_ws = ws.canonicalize().unwrap();
    assert!(
        !processes_in(&in_ws).is_empty(),
        "the command is not running in its workspace"
    );
    // A waiter from another terminal, started while the run runs.
    let run = only_run(&db);
    let waiter = agentctl(&db)
        .args(["runs", "wait", &run])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    // The driver is gone: the run shows `interrupted`, and the wait ends there.
    let waited = waiter.wait_with_output().unwrap();
    assert_eq!(waited.status.code(), Some(130), "{}", text(&waited.stdout));
    assert!(
        text(&waited.stdout).contains("interrupted"),
        "{}",
        text(&waited.stdout)
    );
    let again = out(agentctl(&db).args(["runs", "wait", &run, "--timeout", "30"]));
    assert_eq!(again.status.code(), Some(130), "{}", text(&again.stderr));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let left = processes_in(&in_ws);
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the command outlived its host: {left:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!ws.join("finished").exists());
}

/// A `kill -9` of the host ends its command at once, not after a poll of a second: a
/// `resume` that records the call interrupted (and a human who approves running it again)
/// can come within that second, and the first copy must not still be at work. The host is
/// killed right after the command starts, when a one-second poll begun with the command
/// has most of its second left; the bound leaves room for a loaded machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_hosts_command_ends_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("k.db").display());
    let (_g, ws) = workspace();
    let (_server, mut child) = a_host_in_a_long_command(&db, &ws).await;
    let in_ws = ws.canonicalize().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = std::time::Instant::now();
    while !processes_in(&in_ws).is_empty() {
        assert!(
            killed.elapsed() < std::time::Duration::from_secs(10),
            "the command outlived its host"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let took = killed.elapsed();
    assert!(
        took < std::time::Duration::from_millis(600),
        "the command ran {took:?} after its host died"
    );
}

/// Two compactions in one run: read, compact, list, compact, answer. The frontier note
/// names the step it was written before, which is what the script keys on.
fn compaction_script() -> String {
    json!({"rules": [
        {"when": {"input_has_type": "compaction", "last_user_contains": "before step 3"},
         "reply": {"items": answer("FINAL: from the compacted history")}},
        {"when": {"input_has_type": "compaction", "last_user_contains": "before step 2", "tool_outputs": 0},
         "reply": {"items": [call("c2", "list_dir", json!({}))]}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [call("c1", "read_file", json!({"path": "notes.txt"}))]}}
    ]})
    .to_string()
}

/// Every request after a compaction: the goal first, then the compaction output verbatim,
/// then the frontier note, and nothing of the history it replaced.
fn check_compacted_requests(
    server: &agent_responses_mock::MockServer,
    events: &[agent_journal::Event],
) {
    let compacted = kinds_of(events, "context.compacted");
    assert_eq!(
        compacted
            .iter()
            .map(|e| e.payload["step"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![2, 3]
    );
    let requests: Vec<Value> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/responses"))
        .map(|r| r.body)
        .collect();
    for c in &compacted {
        let step = c.payload["step"].as_u64().unwrap();
        let output = c.payload["output"].as_array().unwrap();
        let note = format!("compacted before step {step}");
        let req = requests
            .iter()
            .find(|r| r.to_string().contains(&note))
            .unwrap_or_else(|| panic!("no request after the compaction before step {step}"));
        let input = req["input"].as_array().unwrap();
        // A user message's text: a string, or the first text part.
        let text_of = |item: &Value| {
            item["content"]
                .as_str()
                .or_else(|| item["content"][0]["text"].as_str())
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(input[0]["role"], "user");
        assert_eq!(text_of(&input[0]), "do the task", "the goal comes first");
        assert_eq!(&input[1..=output.len()], output.as_slice());
        let frontier = text_of(&input[output.len() + 1]);
        assert!(frontier.contains(&note), "{frontier}");
        // One call per step before it, each with its result (counted from the checkpoint
        // when the request was built by a resumed host).
        assert!(
            frontier.contains(&format!(
                "{} model steps and {} tool calls",
                step - 1,
                step - 1
            )),
            "{frontier}"
        );
        assert!(
            c.payload["checkpoint"].is_object(),
            "every compaction here is at a boundary with all calls answered"
        );
        // The history it replaced is gone.
        assert!(
            !input
                .iter()
                .any(|i| i["type"] == "function_call" && i["call_id"] == "c1")
        );
    }
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: compaction_replaces_the_history_and_keeps_the_frontier, a_call_id_reused_from_before_a_compaction_fails_the_run);

/// A run whose one step lists the directory and then answers (from the compacted history
/// too), with `compact` as the compact endpoint's rule (`null`: the emulator's default).
fn one_call_then_answer(compact: Value) -> String {
    let mut rules = vec![
        json!({"when": {"endpoint": "responses", "input_has_type": "compaction"},
               "reply": {"items": answer("FINAL: done")}}),
        json!({"when": {"endpoint": "responses", "tool_outputs": 0},
               "reply": {"items": [call("c1", "list_dir", json!({}))]}}),
        json!({"when": {"endpoint": "responses"}, "reply": {"items": answer("FINAL: done")}}),
    ];
    if !compact.is_null() {
        rules.insert(0, compact);
    }
    json!({"rules": rules}).to_string()
}

/// A compaction the run cannot use is skipped and the step goes on uncompacted: an output
/// with a call and no output (or an output with no call), which every later request would
/// carry and the API refuse for good; one too large to journal (it failed the run on every
/// resume); one that never comes (bounded by `--stream-idle-timeout`; it held the run for
/// up to half an hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_the_run_cannot_use_is_skipped() {
    let huge = "x".repeat(5_000_000);
    let cases = [
        (
            "a call",
            json!({"items": [call("zz", "shell", json!({}))]}),
            None,
        ),
        (
            "an output",
            json!({"items": [{"type": "function_call_output", "call_id": "zz", "output": "x"}]}),
            None,
        ),
        ("too large", json!({"items": answer(&huge)}), None),
        (
            "no answer",
            json!({"items": answer("late")}),
            Some(json!({"first_token_ms": 60_000})),
        ),
    ];
    for (what, reply, latency) in cases {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("c.db").display());
        let (_g, ws) = workspace();
        let mut rule = json!({"when": {"endpoint": "compact"}, "reply": reply});
        if let Some(latency) = latency {
            rule["latency"] = latency;
        }
        let server = emulator(&one_call_then_answer(rule)).await;
        let o = out_within(
            run_cmd(&db, &server, &ws, &["--compact-at", "1"])
                .env("AGENTCTL_STREAM_IDLE_TIMEOUT", "2"),
            std::time::Duration::from_secs(60),
        );
        assert_eq!(o.status.code(), Some(0), "{what}: {}", text(&o.stderr));
        let events = events(&db, &only_run(&db)).await;
        assert!(kinds_of(&events, "context.compacted").is_empty(), "{what}");
        assert!(
            text(&o.stderr).contains("compaction failed"),
            "{what}: {}",
            text(&o.stderr)
        );
    }
}

/// A run compacted by one `--mock` process and killed is resumed by another: the emulator's
/// compaction content verifies in any emulator process, as the API's does across sessions
/// (every resume was refused: "could not be verified").
#[test]
fn a_mock_run_compacted_then_killed_resumes_offline() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, one_call_then_answer(Value::Null)).unwrap();
    let (_g, ws) = workspace();
    let mock = |db: &str, cmd: &[&str]| {
        let mut c = agentctl(db);
        c.args(cmd).arg("--mock").arg("--mock-script").arg(&script);
        c
    };
    // The whole run once, to find the event after the compaction.
    let whole = format!("sqlite://{}", dir.path().join("whole.db").display());
    let o = out(mock(&whole, &["run", "--compact-at", "1"])
        .arg("--workspace")
        .arg(&ws)
        .arg("do the task"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let kinds: Vec<String> =
        text(&out(agentctl(&whole).args(["--json", "runs", "events", &only_run(&whole)])).stdout)
            .lines()
            .map(str::to_string)
            .collect();
    assert!(
        kinds.iter().any(|l| l.contains("context.compacted")),
        "{kinds:?}"
    );
    let db = format!("sqlite://{}", dir.path().join("k.db").display());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let n = rt.block_on(async {
        let evs = events(&whole, &only_run(&whole)).await;
        evs.iter()
            .position(|e| &*e.kind == "context.compacted")
            .unwrap()
            + 1
    });
    let o = out(mock(&db, &["run", "--compact-at", "1"])
        .arg("--workspace")
        .arg(&ws)
        .arg("do the task")
        .env("AGENTCTL_TEST_CRASH_AFTER_EVENTS", n.to_string()));
    assert_ne!(o.status.code(), Some(0), "the crash hook did not fire");
    let run = only_run(&db);
    let o = out(&mut mock(&db, &["resume", &run]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(show(&db, &run)["final_text"], "FINAL: done");
}

/// A model (or a server numbering calls per response) that reuses a call id from before a
/// compaction: the run fails saying so. It used to spin at full CPU forever: the old call's
/// events stood for the new one by their dedup keys, so nothing new was journaled.
async fn a_call_id_reused_from_before_a_compaction_fails_the_run(fresh: FreshDb) {
    let db = fresh.url();
    let (_g, ws) = workspace();
    std::fs::write(ws.join("notes.txt"), "keep python stdlib only\n").unwrap();
    let script = compaction_script().replace("\"c2\"", "\"c1\"");
    let server = emulator(&script).await;
    let child = run_cmd(db, &server, &ws, &["--compact-at", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = ended_within_a_minute(child, "the run did not end").await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let shown = show(db, &only_run(db));
    assert_eq!(shown["status"], "failed", "{shown}");
    let detail = shown["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("reused the call_id c1") && detail.contains("compacted"),
        "{shown}"
    );
}

async fn compaction_replaces_the_history_and_keeps_the_frontier(fresh: FreshDb) {
    let db = fresh.url();
    let (_g, ws) = workspace();
    std::fs::write(ws.join("notes.txt"), "keep python stdlib only\n").unwrap();
    let server = emulator(&compaction_script()).await;
    let o = out(&mut run_cmd(
        db,
        &server,
        &ws,
        &["--compact-at", "1", "--json"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let lines: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "context.compacted" && l["step"] == 2),
        "{lines:?}"
    );
    let run = only_run(db);
    assert_eq!(
        show(db, &run)["final_text"],
        "FINAL: from the compacted history"
    );
    let events = events(db, &run).await;
    check_invariants(&events);
    // The compact endpoint got the whole frontier: the call and its output.
    let compact_req = server
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/responses/compact"))
        .unwrap();
    let sent = compact_req.body["input"].as_array().unwrap();
    assert!(
        sent.iter()
            .any(|i| i["type"] == "function_call_output" && i["call_id"] == "c1")
    );
    // Neither the goal nor a frontier note goes to the compact endpoint: the host puts them
    // in front of the output itself, and the endpoint keeps user messages, so each
    // compaction used to add one more copy of both (the history grew with every one).
    for req in server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/responses/compact"))
    {
        let sent = req.body["input"].to_string();
        assert!(!sent.contains("do the task"), "{sent}");
        assert!(!sent.contains("[agentctl frontier]"), "{sent}");
    }
    // What a compaction costs counts toward the run's tokens.
    let total = |kind: &str| -> u64 {
        kinds_of(&events, kind)
            .iter()
            .map(|e| e.payload["usage"]["total_tokens"].as_u64().unwrap())
            .sum()
    };
    assert!(total("context.compacted") > 0);
    assert_eq!(
        show(db, &run)["usage"]["total_tokens"].as_u64().unwrap(),
        total("model.completed") + total("context.compacted")
    );
    check_compacted_requests(&server, &events);

    // Killed right before each compaction is journaled (as it calls the compact endpoint),
    // right after it (the resume starts from its checkpoint) and after the request that
    // follows it, then resumed: the same two compactions, once each, and the same answer.
    let before: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| &*e.kind == "context.compacted")
        .flat_map(|(i, _)| [i, i + 1, i + 2])
        .collect();
    for n in before {
        let sibling = fresh.sibling().await;
        let db = sibling.url();
        let server = emulator(&compaction_script()).await;
        let o = out(run_cmd(db, &server, &ws, &["--compact-at", "1"])
            .env("AGENTCTL_TEST_CRASH_AFTER_EVENTS", n.to_string()));
        assert_ne!(o.status.code(), Some(0), "the crash hook did not fire");
        let run = only_run(db);
        let o = out(&mut resume_cmd(db, &server, &run, &[]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert_eq!(
            show(db, &run)["final_text"],
            "FINAL: from the compacted history"
        );
        let resumed = crate::host::events(db, &run).await;
        check_invariants(&resumed);
        check_compacted_requests(&server, &resumed);
    }
}

/// A server error the client retries (503) is sent as often as the client's own retries
/// allow, not that again for each of the host's attempts (it was 9 requests a step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_the_client_retried_is_not_retried_again_by_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("r.db").display());
    let (_g, ws) = workspace();
    let script = json!({"rules": [{"when": {}, "reply": {"error": {
        "status": 503, "message": "overloaded", "type": "server_error"}}}]});
    let server = emulator(&script.to_string()).await;
    let o = out(&mut run_cmd(&db, &server, &ws, &[]));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let sent = server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/responses"))
        .count();
    // The client's policy: the request and two retries.
    assert_eq!(sent, 3, "{}", text(&o.stderr));
    let events = events(&db, &only_run(&db)).await;
    assert_eq!(kinds_of(&events, "model.requested").len(), 1);
    assert_eq!(kinds_of(&events, "model.failed").len(), 1);
}

/// A model that went silent behind keep-alives (SSE comments, WebSocket pings) ends the
/// step's attempts after `--stream-idle-timeout`, over both transports, instead of holding
/// the run for ever; the run pauses, resumable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_silent_behind_keep_alives_fails_its_attempts_after_the_idle_timeout() {
    let script = json!({"rules": [{"when": {}, "reply": {"items": answer("never finished")},
        "fault": {"after_events": 2, "kind": "keep_alive", "every_ms": 50}}]});
    let server = emulator(&script.to_string()).await;
    for transport in ["http", "ws"] {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("k.db").display());
        let (_g, ws) = workspace();
        let started = std::time::Instant::now();
        let o = out_within(
            run_cmd(&db, &server, &ws, &["--transport", transport])
                .env("AGENTCTL_STREAM_IDLE_TIMEOUT", "1"),
            std::time::Duration::from_secs(90),
        );
        assert_eq!(o.status.code(), Some(3), "{transport}: {}", text(&o.stderr));
        let events = events(&db, &only_run(&db)).await;
        let attempts: Vec<u64> = kinds_of(&events, "model.requested")
            .iter()
            .map(|e| e.payload["attempt"].as_u64().unwrap())
            .collect();
        assert_eq!(attempts, vec![1, 2, 3], "{transport}");
        let failed = kinds_of(&events, "model.failed");
        let message = failed.last().unwrap().payload.to_string();
        assert!(
            message.contains("no stream event for 1s"),
            "{transport}: {message}"
        );
        // Three 1 s waits and the backoff between them, not the 600 s default.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{transport}: {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_is_asked_again_with_the_bytes_its_hash_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("c.db").display());
    let (_g, ws) = workspace();
    // Step 1's first stream is cut inside its third event: the host asks again in the
    // same process (attempt 2), encoding the request anew.
    let script = json!({"rules": [
        {"when": {"tool_outputs": 0}, "times": 1,
         "reply": {"items": [call("c1", "list_dir", json!({}))]},
         "fault": {"after_events": 2, "kind": "cut"}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [call("c1", "list_dir", json!({}))]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: after the cut")}}
    ]});
    let server = emulator(&script.to_string()).await;
    let o = out(&mut run_cmd(&db, &server, &ws, &[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = only_run(&db);
    let events = events(&db, &run).await;
    check_invariants(&events);
    let requested: Vec<(u64, u64, String)> = kinds_of(&events, "model.requested")
        .iter()
        .map(|e| {
            let p = &e.payload;
            let sha = p["request_sha256"].as_str().unwrap().to_string();
            (
                p["step"].as_u64().unwrap(),
                p["attempt"].as_u64().unwrap(),
                sha,
            )
        })
        .collect();
    let steps: Vec<(u64, u64)> = requested.iter().map(|(s, a, _)| (*s, *a)).collect();
    assert_eq!(steps, vec![(1, 1), (1, 2), (2, 1)]);
    assert_eq!(
        requested[0].2, requested[1].2,
        "both attempts send one request"
    );
    // What the server received, re-encoded (compact, keys in arrival order), hashes to
    // what each attempt recorded.
    let received: Vec<String> = server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/responses"))
        .map(|r| agent_host::run::digest::sha256_hex(&serde_json::to_vec(&r.body).unwrap()))
        .collect();
    let recorded: Vec<String> = requested.into_iter().map(|(_, _, sha)| sha).collect();
    assert_eq!(received, recorded);
}

/// The lines of `child`'s piped stdout as they come, read on a thread of their own.
fn stdout_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    rx
}

/// With stdout piped, a call's start line is printed when the call starts, not when it
/// ends: the command here waits for a file the test writes only once it read that line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_line_is_printed_as_the_call_starts_when_stdout_is_piped() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("p.db").display());
    let (_g, ws) = workspace();
    let script = script_by_outputs(&[
        json!([call(
            "c_wait",
            "shell",
            json!({"command": "while [ ! -f go ]; do sleep 0.05; done; echo gone"})
        )]),
        answer("FINAL: went"),
    ]);
    let server = emulator(&script).await;
    let mut child = run_cmd(&db, &server, &ws, &["--approval", "auto"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let rx = stdout_lines(&mut child);
    let started = loop {
        match rx.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(line) if line.starts_with("-> shell") => break Some(line),
            Ok(_) => {}
            Err(_) => break None,
        }
    };
    if started.is_none() {
        let _ = child.kill();
        panic!("no start line while the call ran");
    }
    std::fs::write(ws.join("go"), "").unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let rest: Vec<String> = rx.iter().collect();
    assert!(
        rest.iter().any(|l| l.contains("shell completed")),
        "{rest:?}"
    );
}

/// Under `--json`, a call's end is printed as it is journaled, not when the slowest call of
/// its step ends: the shell here waits for a file the test writes only once it read the
/// other call's `item.completed` (without that line, the shell gives up and says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_ending_beside_a_slow_one_is_printed_as_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("p.db").display());
    let (_g, ws) = workspace();
    let wait = "for i in $(seq 300); do [ -f go ] && echo released && exit 0; sleep 0.05; done; echo gave-up";
    let script = script_by_outputs(&[
        json!([
            call("c_wait", "shell", json!({"command": wait})),
            call("c_list", "list_dir", json!({}))
        ]),
        answer("FINAL: both"),
    ]);
    let server = emulator(&script).await;
    let mut child = run_cmd(&db, &server, &ws, &["--approval", "auto", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let rx = stdout_lines(&mut child);
    let mut seen = Vec::new();
    while let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(60)) {
        let done = line.contains("\"item.completed\"") && line.contains("\"c_list\"");
        seen.push(line);
        if done {
            std::fs::write(ws.join("go"), "").unwrap();
            break;
        }
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{seen:?}");
    seen.extend(rx.iter());
    let shell_end = seen
        .iter()
        .find(|l| l.contains("\"item.completed\"") && l.contains("\"c_wait\""))
        .unwrap_or_else(|| panic!("{seen:?}"));
    let shell_end: Value = serde_json::from_str(shell_end).unwrap();
    let output = shell_end["item"]["aggregated_output"]
        .as_str()
        .unwrap_or_default();
    assert!(output.contains("released"), "{shell_end}");
}

/// Inputs a command cannot act on are usage errors (exit 2) that say what is wrong: a
/// budget at or below what the run used, a workspace that is a file; an upper-case hash
/// names the same arguments as a lower-case one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_workspaces_and_hashes_are_checked_as_a_user_means_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("b.db").display());
    let (_g, ws) = workspace();
    let script = script_by_outputs(&[
        json!([call("c1", "list_dir", json!({}))]),
        json!([call("c2", "list_dir", json!({}))]),
        json!([call("c3", "shell", json!({"command": "echo hi"}))]),
        answer("FINAL: budgets"),
    ]);
    let server = emulator(&script).await;
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &["--max-steps", "2", "--sandbox", "off"],
    ));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let run = only_run(&db);
    let o = out(&mut resume_cmd(&db, &server, &run, &["--max-steps", "1"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("has used 2 steps"),
        "{}",
        text(&o.stderr)
    );
    // Nothing was claimed by the refused resume.
    assert!(kinds_of(&events(&db, &run).await, "run.resumed").is_empty());
    let o = out(&mut resume_cmd(&db, &server, &run, &["--max-steps", "10"]));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let pending = show(&db, &run)["pending_approvals"][0].clone();
    let upper = pending["args_sha256"]
        .as_str()
        .unwrap()
        .to_ascii_uppercase();
    let o = out(agentctl(&db).args(["approve", &run, "c3", "--sha256", &upper]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(
        o.status.code(),
        Some(2),
        "resuming a completed run: {}",
        text(&o.stderr)
    );

    let file = dir.path().join("afile");
    std::fs::write(&file, "").unwrap();
    let o = out(agentctl(&db)
        .args(["run", "--base-url", &server.base_url(), "--workspace"])
        .arg(&file)
        .arg("do it"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("is not a directory"),
        "{}",
        text(&o.stderr)
    );
}

/// A final answer the model was cut off in (`status: incomplete`) does not end the run as
/// completed: it fails, saying why, in `runs show` and `--json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incomplete_final_answer_fails_the_run_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("inc.db").display());
    let (_g, ws) = workspace();
    let script =
        json!({"rules": [{"reply": {"status": "incomplete", "items": answer("FINAL: cut sh")}}]});
    let server = emulator(&script.to_string()).await;
    let o = out(&mut run_cmd(&db, &server, &ws, &["--json"]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let lines: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "turn.failed", "{lines:?}");
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("incomplete (max_output_tokens)"),
        "{last}"
    );
    let run = only_run(&db);
    let shown = show(&db, &run);
    assert_eq!(shown["status"], "failed");
    assert!(
        shown["detail"].as_str().unwrap().contains("incomplete"),
        "{shown}"
    );
    let completed = kinds_of(&events(&db, &run).await, "model.completed")
        .first()
        .map(|e| e.payload.clone())
        .unwrap();
    assert_eq!(completed["incomplete_reason"], "max_output_tokens");
}

/// Input a run cannot start from is a usage error (exit 2) whose message names the input.
#[test]
fn bad_input_is_a_usage_error_that_names_it() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("u.db").display());
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let bad_json = dir.path().join("bad-script.json");
    std::fs::write(&bad_json, "{not json").unwrap();
    let missing = dir.path().join("missing.json");
    let usage = |args: &[&str], stdin: Option<&[u8]>, named: &str| {
        let mut cmd = agentctl(&db);
        cmd.arg("run").arg("--workspace").arg(&ws).args(args);
        let o = match stdin {
            None => out(&mut cmd),
            Some(bytes) => {
                let mut child = cmd
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                // Input over a bound is refused before it is all read: the pipe may break.
                let _ = child.stdin.take().unwrap().write_all(bytes);
                child.wait_with_output().unwrap()
            }
        };
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(named), "{args:?} should name {named}: {err}");
    };
    let missing_s = missing.display().to_string();
    let bad_s = bad_json.display().to_string();
    let dir_s = dir.path().display().to_string();
    usage(
        &["--mock", "--mock-script", &missing_s, "x"],
        None,
        &missing_s,
    );
    usage(&["--mock", "--mock-script", &dir_s, "x"], None, &dir_s);
    usage(&["--mock", "--mock-script", &bad_s, "x"], None, &bad_s);
    usage(
        &["--mock", "--instructions-file", &missing_s, "x"],
        None,
        &missing_s,
    );
    usage(&["--base-url", "notaurl", "x"], None, "notaurl");
    usage(&["--base-url", "ftp://h/v1", "x"], None, "ftp://h/v1");
    usage(&["--mock", "--model", "", "x"], None, "--model");
    usage(&["--mock"], Some(b"look\0around"), "NUL");
    usage(&["--mock"], Some(b"look \xff around"), "UTF-8");
    let big = vec![b'a'; 5_000_000];
    usage(&["--mock"], Some(&big), "over 3932160 bytes");
    // An endless prompt on stdin is refused once past the bound, not read until memory
    // runs out; so are an instructions file and an output schema that never end.
    let mut endless = std::process::Command::new("yes")
        .arg("look around")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cmd = agentctl(&db);
    cmd.args(["run", "--mock", "--workspace"])
        .arg(&ws)
        .stdin(endless.stdout.take().unwrap());
    let o = out(&mut cmd);
    // `yes` ends on the broken pipe, once no handle of ours holds the pipe's other end.
    drop(cmd);
    endless.wait().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("the prompt on stdin is over"),
        "{}",
        text(&o.stderr)
    );
    usage(
        &["--mock", "--instructions-file", "/dev/zero", "x"],
        None,
        "--instructions-file /dev/zero is over",
    );
    usage(
        &["--mock", "--output-schema", "/dev/zero", "x"],
        None,
        "--output-schema /dev/zero is over",
    );
    usage(
        &["--mock", "--mock-script", "/dev/zero", "x"],
        None,
        "script /dev/zero is over",
    );
    // Within the limit as text, twice over it as the JSON `run.created` stores.
    let quotes = vec![b'"'; 3_932_160];
    usage(
        &["--mock"],
        Some(&quotes),
        "the prompt is 7864322 bytes as stored",
    );
    // No key in the environment, and no emulator.
    let mut cmd = agentctl(&db);
    cmd.env_remove("OPENAI_API_KEY")
        .args(["run", "--base-url", "http://127.0.0.1:9/v1", "--workspace"])
        .arg(&ws)
        .arg("x");
    let o = out(&mut cmd);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("OPENAI_API_KEY"),
        "{}",
        text(&o.stderr)
    );
}

/// A reply too large to journal fails the run, but what it cost is journaled and counted,
/// and the run says the text it showed was not recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_too_large_to_journal_still_records_its_usage() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("big.db").display());
    let (_g, ws) = workspace();
    let huge = "x".repeat(5_000_000);
    let script = json!({"rules": [{"reply": {"delta_chars": 1_000_000,
        "items": answer(&huge)}}]});
    let server = emulator(&script.to_string()).await;
    let o = out(&mut run_cmd(&db, &server, &ws, &[]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("was not recorded"),
        "{}",
        text(&o.stderr)
    );
    let run = only_run(&db);
    let shown = show(&db, &run);
    assert_eq!(shown["status"], "failed");
    assert!(shown["tokens"].as_u64().unwrap() > 0, "{shown}");
    let failed = kinds_of(&events(&db, &run).await, "model.failed")
        .first()
        .map(|e| e.payload.clone())
        .unwrap();
    assert_eq!(failed["code"], "response_too_large_to_journal");
    assert!(
        failed["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{failed}"
    );
}

/// A relative `--workspace` names the directory below the current one, for the sandbox's
/// startup probe as for the tools: the run is sandboxed (no fallback, no approvals) and
/// records the absolute path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_workspace_is_sandboxed_and_recorded_absolute() {
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().canonicalize().unwrap();
    std::fs::create_dir(parent.join("ws1")).unwrap();
    let db = format!("sqlite://{}", parent.join("rel.db").display());
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c1",
            "shell",
            json!({"command": "echo hi > made.txt"})
        )]),
        answer("FINAL: relative"),
    ]))
    .await;
    let o = out(agentctl(&db).current_dir(&parent).args([
        "run",
        "--base-url",
        &server.base_url(),
        "--workspace",
        "ws1",
        "do it",
    ]));
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    assert!(parent.join("ws1/made.txt").is_file());
    let shown = show(&db, &only_run(&db));
    assert_eq!(shown["sandbox"]["mode"], "workspace-write", "{shown}");
    assert_eq!(shown["workspace"], parent.join("ws1").display().to_string());
}

/// A workspace whose path is not UTF-8 could be recorded only lossily, and never resumed:
/// `run` refuses it (exit 2), naming it, and creates no run.
#[test]
fn a_workspace_path_that_is_not_utf8_is_refused() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("n.db").display());
    let ws = dir.path().join(std::ffi::OsStr::from_bytes(b"wn\xff"));
    std::fs::create_dir(&ws).unwrap();
    let script = dir.path().join("s.json");
    std::fs::write(&script, script_by_outputs(&[answer("FINAL: never")])).unwrap();
    let o = out(agentctl(&db)
        .args(["run", "--mock", "--mock-script"])
        .arg(&script)
        .arg("--workspace")
        .arg(&ws)
        .arg("x"));
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not a UTF-8 path"), "{stderr}");
    assert!(stderr.contains(&ws.display().to_string()), "{stderr}");
    let listed = out(agentctl(&db).args(["--json", "runs", "list"]));
    assert_eq!(text(&listed.stdout), "", "no run was created");
}

/// `submit` to a database that lives only in its own process queues a run no worker can
/// ever see: a usage error that says a shared database is needed.
#[test]
fn submit_refuses_a_database_no_worker_can_share() {
    let (_g, ws) = workspace();
    for db in ["memory:", "sqlite::memory:"] {
        let o = out(agentctl(db)
            .args(["submit", "--workspace"])
            .arg(&ws)
            .arg("queued work"));
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{db}: {stderr}");
        assert!(stderr.contains("shared with the workers"), "{stderr}");
        assert_eq!(text(&o.stdout), "", "no run id printed");
    }
}

/// A small file system for one test's database, unmounted when dropped (needs root, as CI
/// has: the journal must meet a full disk for real).
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &std::path::Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(dir).unwrap();
        let o = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "this test mounts a small tmpfs (root, as in CI): {}",
            text(&o.stderr)
        );
        SmallDisk(dir.to_path_buf())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// The disk fills while calls run: whichever write fails (a call's end, a model step), the
/// host exits with the journal's error instead of going round its open calls forever, and
/// the run is left for a resume.
#[tokio::test]
async fn a_full_disk_during_calls_ends_the_host_instead_of_spinning() {
    let (_g, ws) = workspace();
    let dir = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(&dir.path().join("disk"), "1100k");
    let db = format!("sqlite://{}/j.db", disk.0.display());
    let steps: Vec<Value> = (0..40)
        .map(|i| {
            json!([call(
                &format!("call_{i}"),
                "shell",
                json!({"command": format!("echo {i} >> lines.txt; head -c 60000 /dev/urandom | base64 -w 200")})
            )])
        })
        .chain([answer("FINAL big")])
        .collect();
    let script = dir.path().join("big.json");
    std::fs::write(&script, script_by_outputs(&steps)).unwrap();
    let child = agentctl(&db)
        .args(["run", "--mock", "--mock-script"])
        .arg(&script)
        .args(["--max-steps", "100", "--workspace"])
        .arg(&ws)
        .arg("fill")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = ended_within_a_minute(child, "the host did not end after the disk filled").await;
    let said = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(said.contains("full"), "{said}");
    if said.contains("journal writer failed") {
        assert!(
            said.contains("accepts writes again") && said.contains("resume"),
            "{said}"
        );
    }
    drop(disk);
}

/// A run whose driver died on another machine (here a UTS namespace named `container-1`, as
/// a container's host name differs) cannot be checked from this one: a plain resume is
/// refused with a hint naming `--take-over`, which then takes the run over.
#[tokio::test]
async fn a_run_whose_driver_died_elsewhere_is_taken_over_on_request() {
    let (_g, ws) = workspace();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/j.db", dir.path().display());
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c_slow",
            "shell",
            json!({"command": "touch started; sleep 30"})
        )]),
        answer("FINAL slow"),
    ]))
    .await;
    let mut elsewhere = std::process::Command::new("unshare")
        .args([
            "--uts",
            "sh",
            "-c",
            "hostname container-1 && exec \"$0\" \"$@\"",
        ])
        .arg(env!("CARGO_BIN_EXE_agentctl"))
        .env("OPENAI_API_KEY", agent_responses_mock::MOCK_API_KEY)
        .env("AGENTCTL_CONFIG_DIR", config_dir())
        .env_remove("AGENTCTL_DB")
        .args([
            "--db",
            &db,
            "run",
            "--approval",
            "auto",
            "--base-url",
            &server.base_url(),
        ])
        .arg("--workspace")
        .arg(&ws)
        .arg("go")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ws.join("started").exists() {
        if let Some(status) = elsewhere.try_wait().unwrap() {
            panic!(
                "the other machine's host ended first ({status}; unshare needs root, as CI has)"
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    elsewhere.kill().unwrap();
    elsewhere.wait().unwrap();
    let run = only_run(&db);
    let refused = out(agentctl(&db).args(["resume", "--base-url", &server.base_url(), &run]));
    let said = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("container-1") && said.contains("--take-over"),
        "{said}"
    );
    let taken = out(agentctl(&db).args([
        "resume",
        "--take-over",
        "--base-url",
        &server.base_url(),
        &run,
    ]));
    let said = text(&taken.stderr);
    assert!(!said.contains("being driven"), "{said}");
    // The call's end is unknown (the host died in it), so it asks, or it ran again.
    assert!(matches!(taken.status.code(), Some(0 | 3)), "{said}");
}

/// `child`'s output once it ended; killed, and the test failed with `why`, after a minute.
async fn ended_within_a_minute(mut child: std::process::Child, why: &str) -> Output {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{why}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    child.wait_with_output().unwrap()
}
