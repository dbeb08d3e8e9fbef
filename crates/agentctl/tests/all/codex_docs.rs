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
/// answers `initialize`. SIGINT ends it as it
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
put("fake.pid", str(os.getpid()))
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
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
