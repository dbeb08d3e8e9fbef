//! What README.md and docs/cli-json.md promise, checked against the binary where the two
//! once disagreed: exit statuses, which `--json` line a command prints, and the examples a
//! user copies. Offline: the emulator (`--mock`), temporary SQLite files, a private data
//! directory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

/// `agentctl --db DB` with a private data directory and no inherited settings.
fn agentctl(db: &str, data: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentctl"));
    cmd.env_remove("AGENTCTL_DB")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RUST_LOG")
        .env("XDG_DATA_HOME", data)
        .env("XDG_CONFIG_HOME", data.join("config"))
        .env("HOME", data)
        .args(["--db", db])
        .stdin(Stdio::null());
    cmd
}

/// A temp dir holding the database and the data directory, and the database URL.
fn setup() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("docs.db").display());
    (dir, db)
}

fn run(dir: &Path, db: &str, args: &[&str]) -> Output {
    agentctl(db, dir).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `args`, requires exit status `code`, returns stdout's JSON lines.
fn json_lines(dir: &Path, db: &str, args: &[&str], code: i32) -> Vec<Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = run(dir, db, &all);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: stdout {} stderr {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?}: {e}: {l}")))
        .collect()
}

/// An emulator script at `dir/name` of `rules`.
fn script(dir: &Path, name: &str, rules: Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, json!({ "rules": rules }).to_string()).unwrap();
    path
}

/// README: `runs wait RUN` exits "as `run`"; docs/cli-json.md: "`runs wait` exits as `run`
/// does". A request the API refused (400) makes `run` exit 1 (the run paused
/// `model_rejected`), so waiting on that run must exit 1 too, not 3.
#[test]
fn runs_wait_exits_as_run_for_a_rejected_request() {
    let (dir, db) = setup();
    let d = dir.path();
    let rejecting = script(
        d,
        "reject.json",
        json!([{"reply": {"error": {"status": 400, "message": "bad param",
                                    "type": "invalid_request_error"}}}]),
    );
    let workspace = tempfile::tempdir_in(d).unwrap();
    let lines = json_lines(
        d,
        &db,
        &[
            "run",
            "--mock",
            "--mock-script",
            rejecting.to_str().unwrap(),
            "--workspace",
            workspace.path().to_str().unwrap(),
            "x",
        ],
        1,
    );
    let id = lines[0]["thread_id"].as_str().unwrap().to_owned();
    let paused = lines.last().unwrap();
    assert_eq!(paused["type"], "run.paused");
    assert_eq!(paused["reason"], "model_rejected");

    let waited = json_lines(d, &db, &["runs", "wait", &id], 1);
    assert_eq!(waited[0]["status"], "paused");
    let human = run(d, &db, &["runs", "wait", &id]);
    assert_eq!(human.status.code(), Some(1), "{}", text(&human.stderr));
}

/// docs/cli-json.md, as corrected: a steer of a run already over is dropped at once (exit
/// 1, without `--wait` too); `runs wait` prints the short `run` object; the history `runs
/// search` reads is `history search --thread run:<id>`; `demo gui` lists the actions it
/// took.
#[test]
fn documented_shapes_of_a_completed_run() {
    let (dir, db) = setup();
    let d = dir.path();
    let lines = json_lines(d, &db, &["run", "--mock", "look around"], 0);
    let id = lines[0]["thread_id"].as_str().unwrap().to_owned();

    let dropped = json_lines(d, &db, &["steer", &id, "too late"], 1);
    assert_eq!(dropped.len(), 1);
    assert_eq!(dropped[0]["type"], "steer.dropped");
    assert!(dropped[0]["reason"].is_string(), "{dropped:?}");

    let waited = json_lines(d, &db, &["runs", "wait", &id], 0);
    let keys: Vec<&str> = waited[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "type",
            "run_id",
            "status",
            "steps",
            "tokens",
            "age_seconds",
            "title"
        ]
    );

    let hits = json_lines(d, &db, &["runs", "search", &id, "README"], 0);
    assert!(!hits.is_empty());
    let thread = format!("run:{id}");
    let same = json_lines(
        d,
        &db,
        &["history", "search", "--thread", &thread, "README"],
        0,
    );
    assert!(
        same.iter().all(|h| h["type"] == "history.hit") && !same.is_empty(),
        "{same:?}"
    );

    let gui = json_lines(d, &db, &["demo", "gui"], 0);
    assert_eq!(gui[0]["actions"], json!(["open_filters", "type_penguin"]));
}

/// `--stream-idle-timeout`'s help said a run whose model went silent "fails and can be
/// resumed"; it pauses `model_error` (exit 3), as the README says of every model call that
/// a retry might fix. The help now says so.
#[test]
fn a_silent_model_pauses_the_run_as_the_help_says() {
    let (dir, db) = setup();
    let d = dir.path();
    let stalling = script(
        d,
        "stall.json",
        json!([{"reply": {"echo": true}, "fault": {"after_events": 2, "kind": "stall"}}]),
    );
    let workspace = tempfile::tempdir_in(d).unwrap();
    let lines = json_lines(
        d,
        &db,
        &[
            "run",
            "--mock",
            "--mock-script",
            stalling.to_str().unwrap(),
            "--stream-idle-timeout",
            "1",
            "--workspace",
            workspace.path().to_str().unwrap(),
            "x",
        ],
        3,
    );
    let paused = lines.last().unwrap();
    assert_eq!(paused["type"], "run.paused");
    assert_eq!(paused["reason"], "model_error");

    let help = run(d, &db, &["run", "--help"]);
    let help = text(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("after its retries the run pauses (`model_error`, exit status 3)"),
        "{help}"
    );
}

/// `run --help` said every 4xx the API answers fails the run (exit 1); a 429 is retried and
/// then pauses the run `model_error` (exit 3), as the README says. The help now lists the
/// statuses that fail it and those that pause it.
#[test]
fn a_rate_limited_run_pauses_as_run_help_says() {
    let (dir, db) = setup();
    let d = dir.path();
    let limited = script(
        d,
        "429.json",
        json!([{"reply": {"error": {"status": 429, "message": "slow down",
                                    "headers": {"retry-after-ms": "1"}}}}]),
    );
    let workspace = tempfile::tempdir_in(d).unwrap();
    let lines = json_lines(
        d,
        &db,
        &[
            "run",
            "--mock",
            "--mock-script",
            limited.to_str().unwrap(),
            "--workspace",
            workspace.path().to_str().unwrap(),
            "x",
        ],
        3,
    );
    assert_eq!(lines.last().unwrap()["reason"], "model_error");

    let help = run(d, &db, &["run", "--help"]);
    let help = text(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!help.contains("4xx"), "{help}");
    assert!(help.contains("3 paused (also a model call that failed after its retries: a connection, 408, 409, 429, 5xx)"), "{help}");
}

/// README: without `OPENAI_API_KEY` and without `--mock` "the command fails with a hint";
/// `run` exits 2 (a usage error: the command was not given what it needs), and so must the
/// `api` stories, which exited 1.
#[test]
fn a_missing_key_is_a_usage_error_everywhere() {
    let (dir, db) = setup();
    let d = dir.path();
    let workspace = tempfile::tempdir_in(d).unwrap();
    let ws = workspace.path().to_str().unwrap();
    for args in [
        &["run", "--workspace", ws, "x"][..],
        &["api", "direct"],
        &["api", "steer"],
    ] {
        let out = run(d, &db, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("OPENAI_API_KEY"), "{args:?}: {stderr}");
        assert!(stderr.contains("--mock"), "{args:?}: {stderr}");
    }
}

/// README: exit 2 is a usage error, "bad flags or input". `history append` given items that
/// are not JSON, or JSON that is not an array, exited 1; what it was given is wrong, so 2.
#[test]
fn history_append_of_bad_items_is_a_usage_error() {
    let (dir, db) = setup();
    let d = dir.path();
    for items in ["notjson", r#"{"type":"message"}"#] {
        let out = run(
            d,
            &db,
            &["history", "append", "--thread", "t", "--unit", "u1", items],
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{items}: {stderr}");
        assert!(stderr.contains("pass a JSON array"), "{items}: {stderr}");
    }
    let ok = run(
        d,
        &db,
        &[
            "history",
            "append",
            "--thread",
            "t",
            "--unit",
            "u1",
            r#"[{"type":"message","text":"hi"}]"#,
        ],
    );
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
}

/// `--db`'s help lists the commands that keep nothing and so never open the database; a
/// `--db` no journal understands must not fail them. `trust` and `sandbox` were missing
/// from the list.
#[test]
fn commands_that_keep_nothing_do_not_open_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let help = run(d, "bogus://x", &["runs", "list", "--help"]);
    let help = text(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("do not open it: mock, probe, trust, sandbox, demo gui and orchestrate"),
        "{help}"
    );
    for args in [
        &["trust", "--list"][..],
        &["sandbox", "--mode", "off", "--", "true"],
        &["demo", "gui"],
        &["demo", "orchestrate"],
    ] {
        let out = run(d, "bogus://x", args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let out = run(d, "bogus://x", &["runs", "list"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}
