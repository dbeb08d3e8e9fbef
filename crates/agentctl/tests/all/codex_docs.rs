//! What README.md's "Codex app-server" section and `codex run --help` promise, checked
//! against a fake `codex app-server` (a small Python script run as `--codex-bin`) where the
//! real CLI is not needed: how Ctrl-C and SIGTERM reach the turn, relative paths, the hint
//! of a failed turn. The real CLI's side is in `codex_interop.rs`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::fake_codex::{self, HANG_GUARD, Running};

/// The fake `codex app-server`. It writes the `thread/start` params' `cwd` and its own
/// working directory to `seen-cwd` (`THREAD_CWD|SERVER_CWD`). After `turn/start` (answered,
/// then `turn/started`), a delta `working` and a newline; then, in mode `fail`, our turn
/// fails with `boom`; otherwise it waits for `turn/interrupt`, which it answers, marks with
/// the file `interrupt-received`, and ends the turn as interrupted. In mode `hang` it never
/// answers `initialize`. Modes that end the turn as completed right after `turn/started`:
/// `whole` (an agent message `said whole` sent without deltas), `no_text` (nothing),
/// `secret` (deltas and the completed message `key <$OPENAI_API_KEY> nul<NUL> end`, the key
/// split across the deltas), `env` (writes to `seen-env` the JSON object of the variables
/// OPENAI_API_KEY, AGENTCTL_DB and AGENTCTL_TEST_PG_URL it has); and `ask`, which asks to
/// run `touch x` and ends the turn once answered. SIGINT ends it as it
/// ends any Python program. Files are written in the directory of the script.
const FAKE: &str = r#"#!/usr/bin/env python3
import json, os, sys
MODE = os.environ.get("FAKE_MODE", "")
HERE = os.path.dirname(os.path.abspath(__file__))
TH, TU = "thr_1", "turn_1"
def put(name, text):
    with open(os.path.join(HERE, name), "w") as f:
        f.write(text)
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
def note(method, params): send({"method": method, "params": params})
def delta(text): note("item/agentMessage/delta", {"threadId": TH, "turnId": TU, "itemId": "m1", "delta": text})
def message(text): note("item/completed", {"threadId": TH, "turnId": TU, "item": {"type": "agentMessage", "id": "m1", "text": text}})
def done(): note("turn/completed", {"threadId": TH, "turn": {"id": TU, "status": "completed", "items": []}})
put("fake.pid", str(os.getpid()))
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue
    if method is None:
        # Our answer to the server's request.
        done()
        continue
    if method == "initialize":
        if MODE == "hang":
            continue
        send({"id": rid, "result": {"userAgent": "fake"}})
    elif method == "thread/start":
        put("seen-cwd", msg["params"].get("cwd", "") + "|" + os.getcwd())
        send({"id": rid, "result": {"thread": {"id": TH}}})
    elif method == "turn/start":
        turn = {"id": TU, "status": "inProgress", "items": []}
        send({"id": rid, "result": {"turn": turn}})
        note("turn/started", {"threadId": TH, "turn": turn})
        if MODE == "whole":
            message("said whole")
            done()
            continue
        if MODE == "no_text":
            done()
            continue
        if MODE == "ask":
            send({"id": 0, "method": "item/commandExecution/requestApproval",
                  "params": {"threadId": TH, "turnId": TU, "itemId": "c1", "command": "touch x"}})
            continue
        if MODE == "secret":
            key = os.environ.get("OPENAI_API_KEY", "")
            delta("key " + key[:6])
            delta(key[6:] + " nul\u0000 end\n")
            message("key " + key + " nul\u0000 end\n")
            done()
            continue
        if MODE == "env":
            names = ["OPENAI_API_KEY", "AGENTCTL_DB", "AGENTCTL_TEST_PG_URL"]
            put("seen-env", json.dumps({k: os.environ[k] for k in names if k in os.environ}))
            done()
            continue
        note("item/agentMessage/delta", {"threadId": TH, "turnId": TU, "itemId": "m1", "delta": "working\n"})
        if MODE == "fail":
            note("turn/completed", {"threadId": TH, "turn": {"id": TU, "status": "failed", "items": [], "error": {"message": "boom"}}})
    elif method == "turn/interrupt":
        send({"id": rid, "result": {}})
        put("interrupt-received", "")
        note("turn/completed", {"threadId": TH, "turn": {"id": TU, "status": "interrupted", "items": []}})
    else:
        send({"id": rid, "error": {"code": -32601, "message": "unknown"}})
"#;

/// The fake of this file.
fn fake() -> fake_codex::Fake {
    fake_codex::Fake::new(FAKE)
}

const RUN: &[&str] = &["codex", "run", "--no-journal", "hi"];

/// README: "Ctrl-C interrupts the turn". A terminal sends SIGINT to its whole foreground
/// process group; the app-server was in agentctl's group, died of it, and the interrupt
/// failed ("gave up on the turn").
#[test]
fn codex_run_interrupts_the_turn_at_a_terminals_ctrl_c() {
    let fake = fake();
    let run = Running::start(fake.agentctl("", RUN));
    run.wait_for_line("working");
    run.signal("-INT", true);
    let (status, stderr) = run.finish();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(fake.file("interrupt-received").exists(), "{stderr}");
    assert!(
        stderr.contains("agentctl: the turn was interrupted"),
        "{stderr}"
    );
    assert!(!stderr.contains("gave up"), "{stderr}");
}

/// A relative `--cwd` was sent to Codex as the thread's cwd while the server already ran
/// in that directory, so Codex resolved it twice (`sub/sub`) and every command it ran
/// failed; a relative `--codex-bin` (README: `--codex-bin interop/codex/...`) was looked
/// for inside `--cwd` and reported as not installed.
#[test]
fn codex_run_resolves_relative_cwd_and_codex_bin_against_the_current_directory() {
    let fake = fake();
    let sub = fake.file("sub");
    std::fs::create_dir(&sub).unwrap();
    for cwd in ["sub", "./sub/", "../sub"] {
        let _ = std::fs::remove_file(fake.file("seen-cwd"));
        // `../sub` from the directory `other`.
        let from = if cwd == "../sub" {
            let other = fake.file("other");
            std::fs::create_dir_all(&other).unwrap();
            other
        } else {
            fake.dir().to_path_buf()
        };
        let bin = if cwd == "../sub" {
            "../fake-codex.py"
        } else {
            "./fake-codex.py"
        };
        let out = fake
            .agentctl("fail", &["codex", "run", "--no-journal", "--cwd", cwd])
            .args(["--codex-bin", bin, "hi"])
            .current_dir(&from)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("cannot start"), "{cwd}: {stderr}");
        let seen = std::fs::read_to_string(fake.file("seen-cwd")).unwrap();
        let canonical = sub.canonicalize().unwrap();
        let canonical = canonical.display();
        assert_eq!(seen, format!("{canonical}|{canonical}"), "--cwd {cwd}");
    }
}

/// The hint of a failed turn named a command that does not parse (`journal replay THREAD`
/// without `--thread`), without the `--db` the turn was journaled in, and pointed at the
/// journal also under `--no-journal`.
#[test]
fn a_failed_turns_hint_names_a_command_that_replays_it() {
    let fake = fake();
    let db = format!("sqlite://{}", fake.file("journal.db").display());
    let out = fake
        .agentctl("fail", &["--db", &db, "codex", "run", "hi"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the Codex turn ended as failed: boom"),
        "{stderr}"
    );
    let hint = stderr
        .lines()
        .find_map(|l| l.strip_prefix("hint: "))
        .unwrap_or_else(|| panic!("no hint: {stderr}"));
    let command = hint
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("no command in the hint: {hint}"));
    // With the --db it was given, so that pasting it reads the same journal.
    assert_eq!(
        command,
        format!("agentctl --db {db} journal replay --thread thr_1"),
        "{hint}"
    );
    let replay = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .args(command.split(' ').skip(1))
        .env_remove("AGENTCTL_DB")
        .output()
        .unwrap();
    let replayed = String::from_utf8_lossy(&replay.stdout);
    assert!(replay.status.success(), "{replayed}");
    assert!(replayed.contains("codex:turn/completed"), "{replayed}");

    let out = fake
        .agentctl("fail", RUN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("journal"), "--no-journal: {stderr}");
}

/// SIGTERM (a service manager, `timeout`, `kill`) is handled as Ctrl-C is: the turn is
/// interrupted and the command ends with 130, instead of dying at once with the turn left
/// running, the agent's line unended and `--mock`'s temporary CODEX_HOME left behind.
#[test]
fn codex_run_interrupts_the_turn_at_sigterm() {
    let fake = fake();
    let run = Running::start(fake.agentctl("", RUN));
    run.wait_for_line("working");
    run.signal("-TERM", false);
    let (status, stderr) = run.finish();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(fake.file("interrupt-received").exists(), "{stderr}");
    assert!(
        stderr.contains("agentctl: the turn was interrupted"),
        "{stderr}"
    );
}

/// A `--codex-bin` that is not the Codex CLI, or one too old for `app-server`, exits at
/// once. Whether our first write or the end of its output noticed it first, the hint is
/// the same and says what to check; a broken pipe got a generic one. What the server wrote
/// to stderr is quoted (it was discarded, and the hint said to run again with RUST_LOG).
#[test]
fn a_codex_that_exits_at_once_gets_one_hint() {
    let dir = tempfile::tempdir().unwrap();
    let key = "sk-test-not-a-secret-0123456789";
    let cases = [
        // Closes its input first: our `initialize` meets a broken pipe. It says nothing,
        // so the hint says how to see more.
        (
            "closes-input",
            "#!/bin/sh\nexec 0<&-\nsleep 1\nexit 2\n",
            "hint: codex app-server exited; run with RUST_LOG=debug",
        ),
        // What it said is quoted, the key masked wherever it echoes it.
        (
            "exits",
            "#!/bin/sh\necho \"error: unrecognized subcommand 'app-server' ($OPENAI_API_KEY)\" >&2\nexit 2\n",
            "hint: codex app-server exited; its stderr ended with:\n    \
             error: unrecognized subcommand 'app-server' (***)\n",
        ),
    ];
    for (name, script, hint) in cases {
        let bin = dir.path().join(name);
        agent_testkit::write_executable(&bin, script);
        for args in [&["probe", "codex"][..], RUN] {
            let out = Command::new(env!("CARGO_BIN_EXE_agentctl"))
                .args(args)
                .arg("--codex-bin")
                .arg(&bin)
                .env_remove("RUST_LOG")
                .env_remove("AGENTCTL_DB")
                .env("OPENAI_API_KEY", key)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name} {args:?}: {stderr}");
            assert!(stderr.contains(hint), "{name} {args:?}: {stderr}");
            assert!(!stderr.contains(key), "{name} {args:?}: {stderr}");
        }
    }
}

/// Ctrl-C while the handshake waits for an answer stops the command at once (exit 130) and
/// the server with it. Once agentctl handled the signal itself, it waited out the call's
/// 15 s (and the next call's); before, the signal ended agentctl alone.
#[test]
fn codex_run_stops_at_once_when_interrupted_before_the_thread_exists() {
    let fake = fake();
    let run = Running::start(fake.agentctl("hang", RUN));
    let start = Instant::now();
    while !fake.file("fake.pid").exists() {
        assert!(start.elapsed() < HANG_GUARD, "the fake never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Time for `initialize` to be sent.
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    run.signal("-INT", false);
    let (status, stderr) = run.finish();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "took {:?}: {stderr}",
        sent.elapsed()
    );
    assert!(!stderr.contains("no response"), "{stderr}");
    let pid = std::fs::read_to_string(fake.file("fake.pid")).unwrap();
    let start = Instant::now();
    while Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the app-server still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `agentctl codex run ARGS` against the fake in `mode`, stdin closed; its exit code,
/// stdout and stderr.
fn codex_run(
    fake: &fake_codex::Fake,
    mode: &str,
    args: &[&str],
    key: &str,
) -> (Option<i32>, String, String) {
    let out = fake
        .agentctl(mode, &[&["codex", "run"][..], args].concat())
        .env("OPENAI_API_KEY", key)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const KEY: &str = "sk-test-codex-SECRET-0123456789";

/// A NUL in any Codex event made the journal refuse the whole batch: the command ended
/// with "the journal writer stopped" (exit 1) and lost events. The API key Codex's events
/// quote (a command's `env`, the agent's text) reached stdout and the journal as it was.
/// Now the NUL is U+FFFD and the key `***`, on stdout (also split across deltas) and in
/// the journal.
#[test]
fn codex_run_journals_nul_and_masks_the_key_on_stdout_and_in_the_journal() {
    let fake = fake();
    let db = format!("sqlite://{}", fake.file("journal.db").display());
    let out = fake
        .agentctl("secret", &["--db", &db, "codex", "run", "hi"])
        .env("OPENAI_API_KEY", KEY)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "key *** nul\u{FFFD} end\n", "{stderr}");
    let replay = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .args(["--db", &db, "journal", "replay", "--thread", "thr_1"])
        .env_remove("AGENTCTL_DB")
        .output()
        .unwrap();
    let replayed = String::from_utf8_lossy(&replay.stdout);
    assert!(replay.status.success(), "{replayed}");
    assert!(!replayed.contains("SECRET"), "{replayed}");
    for kind in [
        "codex:item/agentMessage/delta",
        "codex:item/completed",
        "codex:turn/completed",
    ] {
        assert!(replayed.contains(kind), "{kind}: {replayed}");
    }
    assert!(replayed.contains("key *** nul\u{FFFD} end"), "{replayed}");
}

/// Under `--mock`, Codex (and every command it runs) got our real OPENAI_API_KEY and
/// AGENTCTL_DB; like `run`'s commands, it now gets neither.
#[test]
fn codex_run_mock_hides_the_key_and_the_database_from_codex() {
    let fake = fake();
    let out = fake
        .agentctl("env", &["codex", "run", "--mock", "--no-journal", "hi"])
        .env("OPENAI_API_KEY", KEY)
        .env("AGENTCTL_DB", "sqlite:///nonexistent/agentctl-test.db")
        .env("AGENTCTL_TEST_PG_URL", "postgres://u:p@127.0.0.1:1/db")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let seen = std::fs::read_to_string(fake.file("seen-env")).unwrap();
    assert_eq!(seen, "{}", "{stderr}");
    // Without --mock Codex uses its own configuration: the variables stay.
    let out = fake
        .agentctl("env", &["codex", "run", "--no-journal", "hi"])
        .env("OPENAI_API_KEY", KEY)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let seen = std::fs::read_to_string(fake.file("seen-env")).unwrap();
    assert!(seen.contains("OPENAI_API_KEY"), "{seen}");
}

/// An agent message sent without deltas never reached stdout, and a `--steer` or
/// `--interrupt-after` the turn ended before did nothing, silently.
#[test]
fn codex_run_shows_a_message_sent_whole_and_reports_controls_never_sent() {
    let fake = fake();
    let (code, stdout, stderr) = codex_run(&fake, "whole", &["--no-journal", "hi"], KEY);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "said whole\n", "{stderr}");

    let args = [
        "--no-journal",
        "--steer",
        "go on",
        "--interrupt-after",
        "3",
        "hi",
    ];
    let (code, _, stderr) = codex_run(&fake, "no_text", &args, KEY);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: --steer was never sent"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: --interrupt-after was never sent"),
        "{stderr}"
    );

    let out = fake
        .agentctl(
            "no_text",
            &[&["--json", "codex", "run"][..], &args].concat(),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let turn: serde_json::Value = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["type"] == "codex.turn")
        .unwrap_or_else(|| panic!("no codex.turn line: {stdout}"));
    assert_eq!(
        turn["not_sent"],
        serde_json::json!(["steer", "interrupt"]),
        "{turn}"
    );
}

/// A `--cwd` (or current directory) that is not UTF-8 was sent to Codex mangled
/// (`display()` is lossy); it is refused as a usage error, as `run` refuses such a
/// workspace.
#[test]
fn codex_run_refuses_a_working_directory_that_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt as _;
    let fake = fake();
    let dir = fake.dir().join(std::ffi::OsStr::from_bytes(b"bad-\xff"));
    std::fs::create_dir(&dir).unwrap();
    let out = fake
        .agentctl("", RUN)
        .arg("--cwd")
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not valid UTF-8"), "{stderr}");
    let out = fake
        .agentctl("", RUN)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the current directory"), "{stderr}");
    assert!(
        !fake.file("seen-cwd").exists(),
        "Codex was started: {stderr}"
    );
}

/// docs/cli-json.md showed `codex.server_request`'s `"reply":{"decision":"decline"}`, but
/// the line carries the JSON-RPC answer, `{"result":{"decision":"decline"}}`; and its
/// `codex.turn` line has the keys the documented one has.
#[test]
fn the_documented_codex_json_lines_match_the_output() {
    let fake = fake();
    let out = fake
        .agentctl("ask", &["--json", "codex", "run", "--no-journal", "hi"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let line = |kind: &str| {
        lines
            .iter()
            .find(|l| l["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} line: {stdout}"))
    };
    let reply = &line("codex.server_request")["reply"];
    assert_eq!(
        reply,
        &serde_json::json!({"result": {"decision": "decline"}})
    );

    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli-json.md"),
    )
    .unwrap();
    let documented = |kind: &str| {
        doc.lines()
            .find(|l| l.starts_with(&format!("{{\"type\":\"{kind}\"")))
            .unwrap_or_else(|| panic!("docs/cli-json.md shows no {kind} line"))
    };
    assert!(
        documented("codex.server_request").ends_with(&format!(",\"reply\":{reply}}}")),
        "{}",
        documented("codex.server_request")
    );
    let keys = |value: &serde_json::Value| {
        let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    let turn: serde_json::Value = serde_json::from_str(documented("codex.turn")).unwrap();
    assert_eq!(keys(&turn), keys(line("codex.turn")));
}
