//! `agentctl codex run` and `agentctl probe codex` against app-servers that misbehave: a
//! small Python script, written into a temporary directory and run as `--codex-bin`, whose
//! behaviour is chosen by `FAKE_MODE`. Real `agentctl` processes, real signals.
//!
//! (A submodule of `codex_interop`, so that the test crate's module list stays as it is.)

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::fake_codex::{self, HANG_GUARD, Running};

/// The fake `codex app-server`. `initialize` is answered (mode `wrong_id`: with id 999).
/// After `turn/start` (answered, then `turn/started`):
/// - `silent`: a delta `working` and a newline, then nothing; `turn/interrupt` is never
///   answered, but its arrival is marked by the file `interrupt-received`;
/// - `no_status`: a `turn/completed` for our turn without a status;
/// - `other_thread`: a delta `ours`, another thread's `turn/completed` with our turn id,
///   that thread's delta `theirs`, then our turn, failed;
/// - `exit_leaving_child`: starts `sleep 300` (it inherits stdout; its pid goes to
///   `child.pid`) and exits 2;
/// - `exit_mid_line`: a delta `partial` (no newline), then exits 2.
///
/// Its own pid goes to `fake.pid`. Files are written in the directory of the script.
const FAKE: &str = r#"#!/usr/bin/env python3
import json, os, subprocess, sys
MODE = os.environ.get("FAKE_MODE", "")
HERE = os.path.dirname(os.path.abspath(__file__))
TH, TU = "thr_1", "turn_1"
def put(name, text):
    with open(os.path.join(HERE, name), "w") as f:
        f.write(text)
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
def note(method, params): send({"method": method, "params": params})
def delta(thread, text):
    note("item/agentMessage/delta", {"threadId": thread, "turnId": TU, "itemId": "m1", "delta": text})
put("fake.pid", str(os.getpid()))
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue
    if method == "initialize":
        send({"id": 999 if MODE == "wrong_id" else rid, "result": {"userAgent": "fake"}})
    elif method == "thread/start":
        send({"id": rid, "result": {"thread": {"id": TH}}})
    elif method == "turn/start":
        turn = {"id": TU, "status": "inProgress", "items": []}
        send({"id": rid, "result": {"turn": turn}})
        note("turn/started", {"threadId": TH, "turn": turn})
        if MODE == "silent":
            delta(TH, "working\n")
        elif MODE == "no_status":
            note("turn/completed", {"threadId": TH, "turn": {"id": TU, "items": []}})
        elif MODE == "other_thread":
            delta(TH, "ours")
            note("turn/completed", {"threadId": "thr_other", "turn": {"id": TU, "status": "completed", "items": []}})
            delta("thr_other", "theirs")
            note("turn/completed", {"threadId": TH, "turn": {"id": TU, "status": "failed", "items": [], "error": {"message": "ours failed"}}})
        elif MODE == "exit_leaving_child":
            child = subprocess.Popen(["sleep", "300"])
            put("child.pid", str(child.pid))
            sys.exit(2)
        elif MODE == "exit_mid_line":
            delta(TH, "partial")
            sys.exit(2)
    elif method == "turn/interrupt":
        put("interrupt-received", "")
    else:
        send({"id": rid, "error": {"code": -32601, "message": "unknown"}})
"#;

/// The fake of this file; `agentctl` gets it as `--codex-bin` too.
struct Fake(fake_codex::Fake);

impl Fake {
    fn new() -> Fake {
        Fake(fake_codex::Fake::new(FAKE))
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.file(name)
    }

    /// `agentctl ARGS --codex-bin FAKE`, the fake in `mode`, no `RUST_LOG`.
    fn agentctl(&self, mode: &str, args: &[&str]) -> Command {
        let mut cmd = self.0.agentctl(mode, args);
        cmd.arg("--codex-bin").arg(self.0.script());
        cmd
    }
}

/// Waits until `path` exists.
fn wait_for_file(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < HANG_GUARD,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True while the process whose pid is in `file` exists.
fn alive(file: &Path) -> bool {
    let pid = std::fs::read_to_string(file).unwrap();
    Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// Kills, when dropped (also when a test fails), the process whose pid is in the file,
/// once the file exists: the `sleep` the fake server leaves behind.
struct KillOnDrop(PathBuf);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        }
    }
}

const RUN: &[&str] = &["codex", "run", "--no-journal", "hi"];

#[test]
fn codex_run_gives_up_and_exits_130_when_the_interrupt_gets_no_answer() {
    let fake = Fake::new();
    let run = Running::start(fake.agentctl("silent", RUN));
    // The delta is shown from inside the event loop, which listens for Ctrl-C from its
    // first turn on.
    run.wait_for_line("working");
    run.interrupt();
    // The interrupt times out after the client's 15 s.
    let (status, stderr) = run.finish();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupt failed: `turn/interrupt` got no response within 15s"),
        "{stderr}"
    );
    assert!(
        stderr.contains("codex app-server did not carry out the interrupt"),
        "{stderr}"
    );
    assert!(
        stderr.contains("agentctl: gave up on the turn and stopped the app-server"),
        "{stderr}"
    );
    assert!(!stderr.contains("still waiting"), "{stderr}");
    assert!(!alive(&fake.file("fake.pid")), "the app-server was stopped");
}

#[test]
fn codex_run_exits_130_at_a_second_ctrl_c() {
    let fake = Fake::new();
    let run = Running::start(fake.agentctl("silent", RUN));
    run.wait_for_line("working");
    run.interrupt();
    wait_for_file(&fake.file("interrupt-received"));
    run.interrupt();
    let (status, stderr) = run.finish();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted again"), "{stderr}");
    // Not the interrupt's timeout (15 s) that ended it.
    assert!(!stderr.contains("interrupt failed"), "{stderr}");
    assert!(!alive(&fake.file("fake.pid")), "the app-server was stopped");
}

#[test]
fn codex_run_fails_on_a_malformed_turn_completed_for_its_turn() {
    let fake = Fake::new();
    let (status, stderr) = Running::start(fake.agentctl("no_status", RUN)).finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: codex app-server sent a malformed `turn/completed` for our turn"),
        "{stderr}"
    );
}

#[test]
fn codex_run_waits_for_its_own_threads_turn_completed() {
    let fake = Fake::new();
    let out = fake.agentctl("other_thread", RUN).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Our turn failed; another thread's completion with the same turn id changed nothing.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the Codex turn ended as failed: ours failed"),
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ours\n");
}

#[test]
fn codex_run_notices_the_servers_exit_while_its_child_keeps_the_output_open() {
    let fake = Fake::new();
    let _leftover = KillOnDrop(fake.file("child.pid"));
    let (status, stderr) = Running::start(fake.agentctl("exit_leaving_child", RUN)).finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("codex app-server stopped before the turn completed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the app-server exited (exit status: 2)"),
        "{stderr}"
    );
}

#[test]
fn codex_run_ends_the_agents_cut_off_line_before_the_error() {
    let fake = Fake::new();
    let out = fake.agentctl("exit_mid_line", RUN).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("codex app-server stopped before the turn completed"),
        "{stderr}"
    );
    // On a terminal the error would otherwise continue the agent's line.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "partial\n");
}

#[test]
fn probe_codex_names_an_answer_with_an_id_never_asked() {
    let fake = Fake::new();
    // The call waits out its 15 s: the answer may still come.
    let (status, stderr) = Running::start(fake.agentctl("wrong_id", &["probe", "codex"])).finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "`initialize` got no response within 15s (the server sent 1 answer with an id that was never asked: 999)"
        ),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("WARN") && l.contains("never used") && l.contains("999")),
        "{stderr}"
    );
    assert!(!stderr.contains("did not answer"), "{stderr}");
}

/// SIGINT while the probe waits for the server ends the probe (130) and the server with it;
/// the signal's default action used to end agentctl alone and leave the server running.
#[test]
fn probe_codex_stops_the_server_when_interrupted() {
    let fake = Fake::new();
    let _leftover = KillOnDrop(fake.file("fake.pid"));
    // `wrong_id`: the server never answers `initialize` with its id, so the probe waits.
    let run = Running::start(fake.agentctl("wrong_id", &["probe", "codex"]));
    wait_for_file(&fake.file("fake.pid"));
    run.interrupt();
    let (status, stderr) = run.finish();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(!alive(&fake.file("fake.pid")), "the app-server still runs");
}

/// Bad input to `codex run` (an empty prompt or `--steer` text, a `--cwd` that is no
/// directory, a `--mock-script` that cannot be read) is a usage error, exit 2, found before
/// Codex starts, as `run` and `steer` find it: empty text was sent to Codex, and the
/// others exited 1.
#[test]
fn codex_run_refuses_bad_input_before_codex_starts() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let missing = missing.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["  "], "the prompt is empty"),
        (&["--steer", " ", "hi"], "the --steer text is empty"),
        (&["--cwd", missing, "hi"], "--cwd"),
        (&["--mock", "--mock-script", missing, "hi"], "--mock-script"),
    ];
    for (args, says) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .env_remove("AGENTCTL_DB")
            .env_remove("CODEX_BIN")
            .args(["codex", "run", "--no-journal", "--codex-bin"])
            .arg(dir.path().join("no-codex-here"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
