//! What `agentctl run` prints in human mode: stdout ends with the run's final answer,
//! exactly as `runs show --json` has it (masked, no abandoned attempt, no diagnostics), on a
//! pipe and on a terminal alike; a retried stream's restart and a failed call are said on
//! stderr.

use std::process::{Command, Output, Stdio};

use agent_responses_mock::MOCK_API_KEY;
use serde_json::{Value, json};

use crate::host::*;

/// Runs the command given as arguments with a terminal as its stdout (stdin: nothing,
/// stderr: this process's); prints what reached the terminal, newlines as `\n`, and exits
/// with the command's status.
const ON_A_TERMINAL: &str = r#"
import os, pty, subprocess, sys
master, slave = pty.openpty()
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=slave)
os.close(slave)
out = bytearray()
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
code = p.wait()
sys.stdout.buffer.write(bytes(out).replace(b"\r\n", b"\n"))
sys.stdout.flush()
sys.exit(code)
"#;

/// `cmd` (its program, arguments, environment and directory) run with a terminal as stdout.
fn on_a_terminal(cmd: &Command) -> Output {
    let mut py = Command::new("python3");
    py.args(["-c", ON_A_TERMINAL])
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdin(Stdio::null());
    for (name, value) in cmd.get_envs() {
        match value {
            Some(value) => py.env(name, value),
            None => py.env_remove(name),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        py.current_dir(dir);
    }
    py.output().unwrap()
}

const ANSWER: &str = "hello world";

/// A reply of `text` in deltas of 3 characters: `hel`, `lo `, `wor`, `ld`.
fn reply(text: &str) -> Value {
    json!({"items": answer(text), "delta_chars": 3})
}

/// The first request's stream is cut after `hel` and `lo ` (events 4 and 5); the retry is
/// answered whole.
fn cut_once() -> String {
    json!({"rules": [
        {"name": "cut", "times": 1, "reply": reply(ANSWER),
         "fault": {"after_events": 6, "kind": "cut"}},
        {"name": "whole", "reply": reply(ANSWER)}
    ]})
    .to_string()
}

fn db_in(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("j.db").display())
}

/// The final answer as `runs show --json` has it.
fn final_text(db: &str) -> String {
    let run = only_run(db);
    show(db, &run)["final_text"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_stream_leaves_only_the_answer_on_a_pipe() {
    // Over WebSocket too: its client retries nothing, so a cut is the host's to retry.
    for transport in ["http", "ws"] {
        let dir = tempfile::tempdir().unwrap();
        let db = db_in(&dir);
        let server = emulator(&cut_once()).await;
        let (_g, ws) = workspace();
        let o = out(&mut run_cmd(&db, &server, &ws, &["--transport", transport]));
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{transport}: {stderr}");
        assert_eq!(final_text(&db), ANSWER, "{transport}");
        assert_eq!(
            text(&o.stdout),
            format!("{ANSWER}\n"),
            "{transport}: {stderr}"
        );
        let run = only_run(&db);
        assert_eq!(
            kinds_of(&events(&db, &run).await, "model.requested").len(),
            2,
            "{transport}: the stream was retried"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_stream_restarts_the_answer_on_its_own_line_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let server = emulator(&cut_once()).await;
    let (_g, ws) = workspace();
    let o = on_a_terminal(&run_cmd(&db, &server, &ws, &[]));
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert_eq!(final_text(&db), ANSWER);
    // The cut attempt's text was shown live; the answer starts again on a line of its own,
    // which is the last one.
    assert_eq!(stdout, format!("hello \n{ANSWER}\n"), "{stderr}");
    assert!(stderr.contains("the answer starts again"), "{stderr}");
}

/// A server that sends the text only in the done events and `response.completed`.
fn no_deltas() -> String {
    json!({"rules": [{"reply": {"items": answer("the answer"), "text_deltas": false}}]}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_was_never_streamed_is_printed() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let server = emulator(&no_deltas()).await;
    let (_g, ws) = workspace();
    let piped = out(&mut run_cmd(&db, &server, &ws, &[]));
    assert_eq!(piped.status.code(), Some(0), "{}", text(&piped.stderr));
    assert_eq!(text(&piped.stdout), "the answer\n");
    let terminal = on_a_terminal(&run_cmd(&db, &server, &ws, &[]));
    assert_eq!(
        terminal.status.code(),
        Some(0),
        "{}",
        text(&terminal.stderr)
    );
    assert_eq!(text(&terminal.stdout), "the answer\n");
    let o = out(agentctl(&db).args(["--json", "runs", "list"]));
    for line in text(&o.stdout).lines() {
        let run: Value = serde_json::from_str(line).unwrap();
        let shown = show(&db, run["run_id"].as_str().unwrap());
        assert_eq!(shown["final_text"], "the answer");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_model_call_is_reported_on_stderr_only() {
    for transport in ["http", "ws"] {
        let dir = tempfile::tempdir().unwrap();
        let db = db_in(&dir);
        // Every attempt is cut after `hello `.
        let script = json!({"rules": [{"reply": reply(ANSWER), "fault": {"after_events": 6, "kind": "cut"}}]});
        let server = emulator(&script.to_string()).await;
        let (_g, ws) = workspace();
        let o = out(&mut run_cmd(&db, &server, &ws, &["--transport", transport]));
        let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(3), "{transport}: paused: {stderr}");
        assert_eq!(
            stdout, "",
            "{transport}: no partial text, no diagnostics: {stderr}"
        );
        assert!(
            stderr.contains("!! model call failed"),
            "{transport}: {stderr}"
        );
    }
}

/// The model quotes the key, in deltas of 5 characters: `the k`, `ey is`, ` sk-m`,
/// `ock-a`, `gentc`, `tl, k`, ...: the key is split over four of them.
fn quoting_the_key() -> String {
    let text = format!("the key is {MOCK_API_KEY}, keep it");
    json!({"rules": [{"reply": {"items": answer(&text), "delta_chars": 5}}]}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_in_the_streamed_text_is_masked() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let server = emulator(&quoting_the_key()).await;
    let (_g, ws) = workspace();
    let piped = out(&mut run_cmd(&db, &server, &ws, &[]));
    let terminal = on_a_terminal(&run_cmd(&db, &server, &ws, &[]));
    for (how, o) in [("pipe", piped), ("terminal", terminal)] {
        let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{how}: {stderr}");
        assert!(!stdout.contains(MOCK_API_KEY), "{how}: {stdout}");
        assert!(!stderr.contains(MOCK_API_KEY), "{how}: {stderr}");
        assert_eq!(stdout, "the key is ***, keep it\n", "{how}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_in_a_structured_answer_streamed_on_stderr_is_masked() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let schema = dir.path().join("note.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"note":{"type":"string"}},"required":["note"],"additionalProperties":false}"#,
    )
    .unwrap();
    // Streamed in 8-character deltas: `{"note":`, `"sk-mock`, `-agentct`, `l"}`.
    let script = json!({"rules": [{"reply": {"json": {"note": MOCK_API_KEY}}}]});
    let server = emulator(&script.to_string()).await;
    let (_g, ws) = workspace();
    let o = out(run_cmd(&db, &server, &ws, &[])
        .arg("--output-schema")
        .arg(&schema));
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains(MOCK_API_KEY), "{stderr}");
    assert!(stderr.contains(r#"{"note":"***"}"#), "{stderr}");
    assert_eq!(stdout, "{\"note\":\"***\"}\n", "{stderr}");
}

/// Step 1 says something (in no delta) and lists the workspace; step 2 answers `done`.
fn two_steps() -> String {
    let look = json!([
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
        call("c1", "list_dir", json!({"path": "."}))
    ]);
    json!({"rules": [
        {"when": {"tool_outputs": 0}, "reply": {"items": look, "text_deltas": false}},
        {"when": {"tool_outputs": 1}, "reply": reply("done")}
    ]})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_step_says_its_text_and_the_answer_comes_last() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let server = emulator(&two_steps()).await;
    let (_g, ws) = workspace();
    let piped = out(&mut run_cmd(&db, &server, &ws, &["--approval", "auto"]));
    let terminal = on_a_terminal(&run_cmd(&db, &server, &ws, &["--approval", "auto"]));
    for (how, o) in [("pipe", piped), ("terminal", terminal)] {
        let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{how}: {stderr}");
        assert!(
            stdout.starts_with("Let me look.\n-> list_dir"),
            "{how}: {stdout}"
        );
        assert!(stdout.ends_with("\ndone\n"), "{how}: {stdout}");
    }
}
