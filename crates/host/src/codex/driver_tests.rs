//! [`drive_turn`] and [`run_codex_turn`] against app-servers that misbehave: a small
//! Python script, written into a temporary directory and run as a real child process,
//! whose behaviour after `turn/start` is chosen by `FAKE_MODE`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_appserver::{
    AppServerClient, AppServerError, ApprovalPolicy, ClientInfo, ClientOptions, ConnectionLost,
    ServerCommand, StderrTarget, TurnStatus,
};

use super::driver::{DriveError, GiveUp, NotSent, TurnEvent, TurnReport, TurnRequest, drive_turn};
use super::session::{AppServerLaunch, CodexTurn, run_codex_turn};

/// Guards against a hang turning into a stuck test run; not a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// The fake `codex app-server`. After `turn/start` (answered, then `turn/started`):
/// - `silent`: nothing more; `turn/interrupt` is never answered;
/// - `exit_leaving_child`: starts `sleep 300` (which inherits stdout; its pid goes to
///   `$FAKE_PID_FILE`) and exits 2;
/// - `no_status` / `null_turn`: a `turn/completed` for our turn without a status / with
///   `turn: null`;
/// - `other_thread`: a delta `ours`; another thread's `turn/completed` (same turn id),
///   valid and malformed; that thread's delta `theirs`; then our turn, failed;
/// - `whole_message`: an agent message `whole\n` completed without deltas; a second one
///   whose delta `par` shows only the start of its text `partial`; our turn, completed;
/// - `no_text`: our turn, completed at once.
const FAKE: &str = r#"#!/usr/bin/env python3
import json, os, subprocess, sys
MODE = os.environ.get("FAKE_MODE", "")
TH, TU = "thr_1", "turn_1"
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
def note(method, params): send({"method": method, "params": params})
def delta(thread, text):
    note("item/agentMessage/delta", {"threadId": thread, "turnId": TU, "itemId": "m1", "delta": text})
def completed(thread, turn): note("turn/completed", {"threadId": thread, "turn": turn})
def message(item, text): note("item/completed", {"threadId": TH, "turnId": TU, "item": {"type": "agentMessage", "id": item, "text": text}})
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue
    if method == "initialize":
        send({"id": rid, "result": {"userAgent": "fake"}})
    elif method == "thread/start":
        send({"id": rid, "result": {"thread": {"id": TH}}})
    elif method == "turn/start":
        turn = {"id": TU, "status": "inProgress", "items": []}
        send({"id": rid, "result": {"turn": turn}})
        note("turn/started", {"threadId": TH, "turn": turn})
        if MODE == "exit_leaving_child":
            child = subprocess.Popen(["sleep", "300"])
            with open(os.environ["FAKE_PID_FILE"], "w") as f:
                f.write(str(child.pid))
            sys.exit(2)
        elif MODE == "no_status":
            completed(TH, {"id": TU, "items": []})
        elif MODE == "null_turn":
            completed(TH, None)
        elif MODE == "other_thread":
            delta(TH, "ours")
            completed("thr_other", {"id": TU, "status": "completed", "items": []})
            completed("thr_other", None)
            delta("thr_other", "theirs")
            completed(TH, {"id": TU, "status": "failed", "items": [], "error": {"message": "ours failed"}})
        elif MODE == "whole_message":
            message("m0", "whole\n")
            note("item/agentMessage/delta", {"threadId": TH, "turnId": TU, "itemId": "m1", "delta": "par"})
            message("m1", "partial")
            completed(TH, {"id": TU, "status": "completed", "items": []})
        elif MODE == "no_text":
            completed(TH, {"id": TU, "status": "completed", "items": []})
    elif method == "turn/interrupt":
        pass
    else:
        send({"id": rid, "error": {"code": -32601, "message": "unknown"}})
"#;

/// The fake, written executable into a fresh temporary directory.
struct Fake {
    dir: tempfile::TempDir,
    script: PathBuf,
}

impl Fake {
    fn new() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("fake-codex.py");
        agent_testkit::write_executable(&script, FAKE);
        Fake { dir, script }
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.path().join("child.pid")
    }

    fn command(&self, mode: &str) -> ServerCommand {
        ServerCommand::new(&self.script)
            .env("FAKE_MODE", mode)
            .env("FAKE_PID_FILE", self.pid_file())
            .stderr(StderrTarget::Null)
    }
}

fn request() -> TurnRequest {
    let info = ClientInfo {
        name: "agent_host_test".into(),
        title: None,
        version: "0.0.0".into(),
    };
    TurnRequest::new(info, "hi", std::env::temp_dir())
}

/// An interrupt signal that fires `times` times, each counted when polled.
fn signal_firing(times: usize) -> impl FnMut() -> std::pin::Pin<Box<dyn Future<Output = ()>>> {
    let fired = Arc::new(AtomicUsize::new(0));
    move || {
        let fired = Arc::clone(&fired);
        Box::pin(async move {
            if fired.fetch_add(1, Ordering::SeqCst) >= times {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// What the observer saw, in order, and the agent's text.
#[derive(Debug, Default)]
struct Seen {
    kinds: Vec<&'static str>,
    text: String,
}

impl Seen {
    fn note(&mut self, event: TurnEvent<'_>) -> Result<(), std::convert::Infallible> {
        let kind = match event {
            TurnEvent::ThreadStarted { .. } => "thread",
            TurnEvent::Server(_) => "server",
            TurnEvent::AgentText(text) => {
                self.text.push_str(text);
                "text"
            }
            TurnEvent::AgentMessageBoundary => "boundary",
            TurnEvent::SteerAccepted { .. } => "steer_accepted",
            TurnEvent::SteerFailed(_) => "steer_failed",
            TurnEvent::InterruptSignalled => "interrupt_signalled",
            TurnEvent::InterruptAccepted => "interrupt_accepted",
            TurnEvent::InterruptFailed(_) => "interrupt_failed",
            TurnEvent::Quiet(_) => "quiet",
            TurnEvent::TurnCompleted(_) => "turn_completed",
        };
        self.kinds.push(kind);
        Ok(())
    }
}

type Drive = (
    Result<TurnReport, DriveError<std::convert::Infallible>>,
    Seen,
);

/// Drives one turn against the fake in `mode`, with `options` and `request`.
async fn drive(
    fake: &Fake,
    mode: &str,
    options: ClientOptions,
    request: &TurnRequest,
    signals: usize,
) -> Drive {
    let (client, mut events) =
        AppServerClient::spawn(&fake.command(mode), options, ApprovalPolicy::default()).unwrap();
    let mut seen = Seen::default();
    let report = tokio::time::timeout(
        HANG_GUARD,
        drive_turn(
            &client,
            &mut events,
            request,
            None,
            signal_firing(signals),
            |e| seen.note(e),
        ),
    )
    .await
    .expect("the drive hung");
    client.close().await;
    (report, seen)
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

#[tokio::test]
async fn codex_an_interrupt_without_an_answer_gives_up_on_the_turn() {
    let fake = Fake::new();
    let options = ClientOptions {
        call_timeout: Duration::from_millis(500),
        ..ClientOptions::default()
    };
    // Quiet notices would come many times over while the interrupt waits, if allowed.
    let request = TurnRequest {
        quiet_notice: Duration::from_millis(20),
        ..request()
    };
    let (report, seen) = drive(&fake, "silent", options, &request, 1).await;
    let report = report.unwrap();
    let Some(GiveUp::InterruptFailed(why)) = &report.given_up else {
        panic!("expected a give-up after the failed interrupt: {report:?}");
    };
    assert!(why.contains("no response within"), "{why}");
    assert_eq!(report.turn.status, TurnStatus::Interrupted);
    assert_eq!(report.turn.id, "turn_1");
    let message = report.turn.error.as_ref().unwrap()["message"]
        .as_str()
        .unwrap();
    assert!(
        message
            .starts_with("gave up on the turn: codex app-server did not carry out the interrupt"),
        "{message}"
    );
    let from_signal: Vec<&str> = seen
        .kinds
        .iter()
        .copied()
        .skip_while(|k| *k != "interrupt_signalled")
        .filter(|k| *k != "server")
        .collect();
    assert_eq!(
        from_signal,
        ["interrupt_signalled", "interrupt_failed", "turn_completed"],
        "{:?}",
        seen.kinds
    );
}

#[tokio::test]
async fn codex_a_second_interrupt_signal_gives_up_at_once() {
    let fake = Fake::new();
    // The interrupt's own timeout is out of reach: only the second signal can end this.
    let launch = AppServerLaunch {
        stderr: StderrTarget::Null,
        ..AppServerLaunch::new(&fake.script)
    };
    let turn = CodexTurn {
        launch,
        #[cfg(feature = "mock")]
        mock_script: None,
        approvals: ApprovalPolicy::default(),
        request: request(),
    };
    // `run_codex_turn` spawns with the default options: the interrupt waits up to 15 s.
    let mut seen = Seen::default();
    let report = tokio::time::timeout(
        HANG_GUARD,
        run_codex_turn_in_mode(turn, "silent", signal_firing(2), |e| seen.note(e)),
    )
    .await
    .expect("the drive hung")
    .unwrap();
    assert_eq!(report.given_up, Some(GiveUp::SignalledAgain));
    assert_eq!(report.turn.status, TurnStatus::Interrupted);
    assert!(
        !seen.kinds.contains(&"interrupt_failed"),
        "the interrupt is not waited for: {:?}",
        seen.kinds
    );
    assert_eq!(seen.kinds.last(), Some(&"turn_completed"));
}

/// [`run_codex_turn`] with the fake in `mode`, set by a wrapper script that becomes the
/// launch's binary (a launch takes no environment of its own).
async fn run_codex_turn_in_mode<S, F, O>(
    mut turn: CodexTurn,
    mode: &str,
    signal: S,
    observe: O,
) -> Result<TurnReport, super::session::CodexTurnError<std::convert::Infallible>>
where
    S: FnMut() -> F,
    F: Future<Output = ()>,
    O: FnMut(TurnEvent<'_>) -> Result<(), std::convert::Infallible>,
{
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("codex");
    let script = turn.launch.codex_bin.display().to_string();
    agent_testkit::write_executable(
        &wrapper,
        &format!("#!/bin/sh\nFAKE_MODE={mode} exec '{script}' \"$@\"\n"),
    );
    turn.launch.codex_bin = wrapper;
    run_codex_turn(turn, None, signal, observe).await
}

#[tokio::test]
async fn codex_a_malformed_turn_completed_for_our_turn_is_a_protocol_error() {
    let fake = Fake::new();
    for mode in ["no_status", "null_turn"] {
        let (report, _) = drive(&fake, mode, ClientOptions::default(), &request(), 0).await;
        match report {
            Err(DriveError::Protocol { method, .. }) => assert_eq!(method, "turn/completed"),
            other => panic!("{mode}: expected a protocol error, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn codex_another_threads_turn_completed_does_not_end_ours() {
    let fake = Fake::new();
    let (report, seen) = drive(
        &fake,
        "other_thread",
        ClientOptions::default(),
        &request(),
        0,
    )
    .await;
    let report = report.unwrap();
    assert_eq!(report.turn.status, TurnStatus::Failed, "{report:?}");
    assert_eq!(report.given_up, None);
    assert_eq!(seen.text, "ours");
}

#[tokio::test]
async fn codex_a_server_that_exits_while_its_child_keeps_the_output_open_stops_the_drive() {
    let fake = Fake::new();
    let _leftover = KillOnDrop(fake.pid_file());
    let (report, _) = drive(
        &fake,
        "exit_leaving_child",
        ClientOptions::default(),
        &request(),
        0,
    )
    .await;
    match report {
        Err(DriveError::Stopped(AppServerError::ConnectionLost(
            ConnectionLost::ServerExited { status },
        ))) => assert_eq!(status.and_then(|s| s.code()), Some(2)),
        other => panic!("expected the server's exit, got {other:?}"),
    }
}

/// An agent message Codex sends whole (`item/completed` with its text, no deltas) never
/// reached the observer, and `--steer`/`--interrupt-after` waited for deltas that never
/// came. Its text is shown (of a message with deltas, the part they did not show) and
/// counts as one piece of text.
#[tokio::test]
async fn codex_an_agent_message_without_deltas_is_shown_and_counts_for_the_controls() {
    let fake = Fake::new();
    let request = TurnRequest {
        steer: Some("steer".into()),
        interrupt_after: Some(2),
        ..request()
    };
    let (report, seen) = drive(
        &fake,
        "whole_message",
        ClientOptions::default(),
        &request,
        0,
    )
    .await;
    let report = report.unwrap();
    assert_eq!(report.turn.status, TurnStatus::Completed, "{report:?}");
    assert_eq!(seen.text, "whole\npartial");
    assert!(report.not_sent.is_empty(), "{report:?}");
}

/// A steer or interrupt the turn ended before is reported, not dropped silently.
#[tokio::test]
async fn codex_a_steer_or_interrupt_never_sent_is_reported() {
    let fake = Fake::new();
    let asked = TurnRequest {
        steer: Some("steer".into()),
        interrupt_after: Some(1),
        ..request()
    };
    let (report, _) = drive(&fake, "no_text", ClientOptions::default(), &asked, 0).await;
    let report = report.unwrap();
    assert_eq!(report.not_sent, [NotSent::Steer, NotSent::Interrupt]);
    // Nothing asked, nothing to report.
    let (report, _) = drive(&fake, "no_text", ClientOptions::default(), &request(), 0).await;
    assert!(report.unwrap().not_sent.is_empty());
}

/// A working directory that is not UTF-8 was sent to Codex mangled (`display()` is lossy):
/// another directory. It is refused before anything starts.
#[tokio::test]
async fn codex_a_working_directory_that_is_not_utf8_is_refused() {
    use std::os::unix::ffi::OsStrExt as _;
    let fake = Fake::new();
    let cwd = std::env::temp_dir().join(std::ffi::OsStr::from_bytes(b"not-utf8-\xff"));
    let request = TurnRequest::new(request().client_info, "hi", cwd.clone());
    let (report, _) = drive(&fake, "no_text", ClientOptions::default(), &request, 0).await;
    match report {
        Err(DriveError::CwdNotUtf8(path)) => assert_eq!(path, cwd),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
