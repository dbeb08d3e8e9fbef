//! Every command that runs offline, with `--json`: each stdout line is one JSON object with a
//! string `type`, and no key of our own is camelCase (`docs/cli-json.md`). Offline means the
//! emulator (`--mock`), temporary SQLite files and a private data directory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

/// Fields that carry someone else's data verbatim (Responses API items, Codex protocol
/// messages, user-given JSON): their keys are not ours to name.
const RELAYED: &[&str] = &["items", "params", "reply", "payload", "output", "arguments"];

/// `agentctl --json --db DB` with a private data directory and no inherited settings.
fn agentctl(db: &str, data: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentctl"));
    cmd.env_remove("AGENTCTL_DB")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RUST_LOG")
        .env("XDG_DATA_HOME", data)
        .env("HOME", data)
        .args(["--json", "--db", db])
        .stdin(Stdio::null());
    cmd
}

/// A temp dir holding the database and the data directory, and the database URL.
fn setup() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("cli-json.db").display());
    (dir, db)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `args`, requires exit status `code`, checks and returns the JSON lines.
fn lines_of(dir: &Path, db: &str, args: &[&str], code: i32) -> Vec<Value> {
    let out = agentctl(db, dir).args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: stderr {}",
        text(&out.stderr)
    );
    checked(args, &out)
}

fn checked(args: &[&str], out: &Output) -> Vec<Value> {
    let stdout = text(&out.stdout);
    assert!(!stdout.trim().is_empty(), "{args:?} printed nothing");
    stdout
        .lines()
        .map(|line| check_line(&format!("{args:?}"), line))
        .collect()
}

/// One line: a JSON object, a string `type` as its first key, snake_case keys of our own.
fn check_line(what: &str, line: &str) -> Value {
    let value: Value =
        serde_json::from_str(line).unwrap_or_else(|err| panic!("{what}: not JSON ({err}): {line}"));
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("{what}: not an object: {line}"));
    assert!(
        object.get("type").is_some_and(Value::is_string),
        "{what}: no string `type`: {line}"
    );
    assert_eq!(
        object.keys().next().map(String::as_str),
        Some("type"),
        "{what}: `type` is not the first key: {line}"
    );
    no_camel_case(what, &value, line);
    value
}

fn no_camel_case(what: &str, value: &Value, line: &str) {
    match value {
        Value::Object(object) => {
            for (key, field) in object {
                assert!(
                    !key.chars().any(|c| c.is_ascii_uppercase()),
                    "{what}: camelCase key `{key}`: {line}"
                );
                if !RELAYED.contains(&key.as_str()) {
                    no_camel_case(what, field, line);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| no_camel_case(what, i, line)),
        _ => {}
    }
}

fn types(lines: &[Value]) -> Vec<&str> {
    lines.iter().filter_map(|l| l["type"].as_str()).collect()
}

#[test]
fn journal_history_and_memory_print_typed_lines() {
    let (dir, db) = setup();
    let d = dir.path();
    let appended = lines_of(
        d,
        &db,
        &[
            "history",
            "append",
            "--thread",
            "t",
            "--unit",
            "u1",
            r#"[{"type":"message","text":"E42 in the old login"}]"#,
        ],
        0,
    );
    assert_eq!(types(&appended), ["history.appended"]);
    let hits = lines_of(d, &db, &["history", "search", "--thread", "t", "E42"], 0);
    assert_eq!(types(&hits), ["history.hit"]);
    let window = lines_of(d, &db, &["history", "window", "--thread", "t"], 0);
    assert_eq!(types(&window), ["history.window"]);
    let threads = lines_of(d, &db, &["history", "threads"], 0);
    assert_eq!(types(&threads), ["history.thread"]);

    let add = |source: &str, value: &str, observed: &str| {
        lines_of(
            d,
            &db,
            &[
                "memory",
                "add",
                "--source",
                source,
                "--project",
                "p",
                "--key",
                "jdk",
                "--value",
                value,
                "--observed",
                observed,
            ],
            0,
        )
    };
    assert_eq!(types(&add("r1", "8", "1")), ["memory.added"]);
    add("r2", "17", "10");
    let recall = lines_of(d, &db, &["memory", "recall", "--project", "p"], 0);
    assert_eq!(types(&recall), ["memory.entry"]);
    let evidence = lines_of(d, &db, &["memory", "evidence", "--project", "p"], 0);
    assert_eq!(types(&evidence), ["memory.evidence", "memory.evidence"]);
    let revoked = lines_of(d, &db, &["memory", "revoke", "r2"], 0);
    assert_eq!(types(&revoked), ["memory.revoked"]);
    // What memory holds now, flagged as `recall` flags it by default: observed in 1970,
    // it needs a refresh.
    assert_eq!(revoked[0]["now"]["value"], "8", "{revoked:?}");
    assert_eq!(revoked[0]["now"]["needs_refresh"], true, "{revoked:?}");
    let consolidated = lines_of(d, &db, &["memory", "consolidate"], 0);
    assert_eq!(types(&consolidated), ["memory.consolidated"]);

    // The journal: the runtime demo writes thread `demo`.
    let demo = lines_of(d, &db, &["demo", "runtime"], 0);
    assert_eq!(types(&demo), ["demo.runtime"]);
    let threads = lines_of(d, &db, &["journal", "threads"], 0);
    assert!(threads.iter().any(|t| t["thread"] == "demo"), "{threads:?}");
    assert!(types(&threads).iter().all(|t| *t == "thread"));
    let replay = lines_of(d, &db, &["journal", "replay", "--thread", "demo"], 0);
    assert!(replay.len() > 3);
    assert!(types(&replay).iter().all(|t| *t == "event"));
}

#[test]
fn demos_and_api_stories_print_typed_lines() {
    let (dir, db) = setup();
    let d = dir.path();
    for (demo, kind) in [
        ("memory", "demo.memory"),
        ("gui", "demo.gui"),
        ("orchestrate", "demo.orchestrate"),
    ] {
        assert_eq!(types(&lines_of(d, &db, &["demo", demo], 0)), [kind]);
    }
    for mode in ["direct", "ptc", "async", "compact"] {
        let lines = lines_of(d, &db, &["api", mode, "--mock"], 0);
        let last = lines.last().unwrap();
        assert_eq!(last["type"], "api.result", "{mode}");
        assert_eq!(last["mode"], mode);
    }
    let steer = lines_of(d, &db, &["api", "steer", "--mock"], 0);
    assert_eq!(
        types(&steer),
        ["steer.accepted", "steer.committed", "completed"]
    );
}

/// Two shell calls in one step, then an answer: with `--approval ask` and no terminal the
/// run pauses (exit 3) with both waiting for a decision.
fn two_approvals_script(dir: &Path) -> std::path::PathBuf {
    let call = |id: &str| {
        json!({"type": "function_call", "call_id": id, "name": "shell",
               "arguments": json!({"command": format!("echo {id}")}).to_string()})
    };
    let answer = json!([{"type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": "FINAL: done"}]}]);
    let script = json!({"rules": [
        {"when": {"tool_outputs": 0}, "reply": {"items": [call("c1"), call("c2")]}},
        {"when": {"tool_outputs": 2}, "reply": {"items": answer}},
    ]});
    let path = dir.join("two-approvals.json");
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

#[test]
fn runs_and_decisions_print_typed_lines() {
    let (dir, db) = setup();
    let d = dir.path();
    // The built-in story, to completion.
    let run = lines_of(d, &db, &["run", "--mock", "look around"], 0);
    assert_eq!(run[0]["type"], "thread.started");
    assert_eq!(run.last().unwrap()["type"], "turn.completed");
    let id = run[0]["thread_id"].as_str().unwrap().to_owned();

    let list = lines_of(d, &db, &["runs", "list"], 0);
    assert_eq!(types(&list), ["run"]);
    assert_eq!(
        types(&lines_of(d, &db, &["runs", "show", &id], 0)),
        ["run.show"]
    );
    assert_eq!(types(&lines_of(d, &db, &["runs", "wait", &id], 0)), ["run"]);
    let events = lines_of(d, &db, &["runs", "events", &id], 0);
    assert_eq!(events.len(), run.len());
    let hits = lines_of(d, &db, &["runs", "search", "--all", "README"], 0);
    assert!(types(&hits).iter().all(|t| *t == "runs.search.hit"));

    // A run waiting for two decisions.
    let workspace = tempfile::tempdir_in(d).unwrap();
    let script = two_approvals_script(d);
    let paused = lines_of(
        d,
        &db,
        &[
            "run",
            "--mock",
            "--mock-script",
            script.to_str().unwrap(),
            "--approval",
            "ask",
            "--workspace",
            workspace.path().to_str().unwrap(),
            "say hi twice",
        ],
        3,
    );
    assert!(types(&paused).contains(&"approval.requested"), "{paused:?}");
    let id = paused[0]["thread_id"].as_str().unwrap().to_owned();
    let approved = lines_of(d, &db, &["approve", &id, "c1"], 0);
    assert_eq!(types(&approved), ["approval.decided"]);
    let denied = lines_of(d, &db, &["deny", &id, "c2", "--reason", "no"], 0);
    assert_eq!(types(&denied), ["approval.decided"]);
    let steer = lines_of(d, &db, &["steer", &id, "be brief"], 0);
    assert_eq!(types(&steer), ["steer.requested"]);
    // `interrupt` needs a run a host is driving (a paused one is refused, exit 2); its
    // CLI line is not checked here (the host lifecycle test checks the journaled event).
}

#[test]
fn submit_and_worker_print_typed_lines() {
    let (dir, db) = setup();
    let d = dir.path();
    let submitted = lines_of(d, &db, &["submit", "--mock", "look around"], 0);
    assert_eq!(types(&submitted), ["run.submitted"]);
    let id = submitted[0]["run_id"].as_str().unwrap().to_owned();
    // No worker yet: the wait times out (124) and still prints the run it waited on.
    let waited = lines_of(d, &db, &["runs", "wait", &id, "--timeout", "0.2"], 124);
    assert_eq!(types(&waited), ["run"]);
    assert_eq!(waited[0]["status"], "queued");

    let mut worker = agentctl(&db, d)
        .args(["worker", "--poll", "0.05", "--grace", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(worker.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    // Read until the run has ended, then stop the worker and read what it says last.
    for line in stdout.by_ref() {
        let line = check_line("worker", &line.unwrap());
        let ended = line["type"] == "ended" && line["run_id"] == id.as_str();
        seen.push(line);
        if ended {
            break;
        }
    }
    let status = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    for line in stdout {
        seen.push(check_line("worker", &line.unwrap()));
    }
    assert!(worker.wait().unwrap().success());
    let kinds = types(&seen);
    assert_eq!(kinds[..2], ["claimed", "ended"], "{seen:?}");
    assert_eq!(seen[1]["status"], "completed", "{seen:?}");
}

#[test]
fn mock_serve_prints_one_typed_line_first() {
    let (dir, db) = setup();
    let mut server = agentctl(&db, dir.path())
        .args(["mock", "serve"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let line = check_line("mock serve", first.trim_end());
    assert_eq!(line["type"], "mock.listening");
    assert!(
        line["base_url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:")
    );
}
