//! Interop with the real Codex CLI (`@openai/codex`, pinned in `interop/codex`).
//!
//! Ignored by default: `cargo xtask interop codex` installs the pinned CLI and runs these
//! with `--ignored` and `CODEX_BIN` set. Codex runs with a temporary `CODEX_HOME` whose
//! config makes our Responses emulator (in this process, 127.0.0.1, ephemeral port) its
//! model provider, so no network and no key are needed. Scripts are in `fixtures/codex/`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent_appserver::{
    AppServerClient, AppServerEvent, ApprovalPolicy, COMMAND_APPROVAL, ClientInfo, Events,
    StderrTarget, ThreadStartParams, Turn, TurnNotification, TurnStartParams, TurnStatus,
    UserInput, codex_home,
};
use agent_host::codex::{AppServerLaunch, MockProvider};
use agent_responses_mock::Script;
use serde_json::Value;

/// Guards against a hang turning into a stuck CI job; not a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(180);

// Not interop: `codex run` and `probe codex` against a fake app-server that misbehaves.
#[path = "codex_faults.rs"]
mod codex_faults;

fn codex_bin() -> PathBuf {
    let bin = std::env::var_os("CODEX_BIN")
        .expect("CODEX_BIN must point at the Codex CLI (run `cargo xtask interop codex`)");
    PathBuf::from(bin)
}

/// The child's output; a child still running after `limit` is killed and fails the test
/// (a turn that is never interrupted would otherwise hang the suite).
fn output_within(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/codex")
        .join(name)
}

#[test]
fn the_codex_fixtures_are_valid_emulator_scripts() {
    for name in ["reply.json", "exec-declined.json", "slow-stream.json"] {
        Script::load(&fixture(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
    }
}

#[test]
fn a_missing_codex_binary_gets_the_install_hint() {
    for args in [
        &["probe", "codex"][..],
        &["codex", "run", "--no-journal", "say hi"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .args(args)
            .args(["--codex-bin", "/nonexistent/agentctl-test/codex"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("error: cannot start"), "{stderr}");
        assert!(
            stderr.contains("npm install -g @openai/codex@0.171.0"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
    }
}

/// Every line of a `--json` stdout: a JSON object with a string `type` and no camelCase key
/// of ours (the Codex messages relayed under `params` and `reply` keep Codex's keys).
fn typed_lines(what: &str, stdout: &str) -> Vec<Value> {
    fn ours_snake_case(what: &str, value: &Value) {
        if let Value::Object(object) = value {
            for (key, field) in object {
                assert!(
                    !key.chars().any(|c| c.is_ascii_uppercase()),
                    "{what}: camelCase key `{key}`"
                );
                if key != "params" && key != "reply" {
                    ours_snake_case(what, field);
                }
            }
        }
    }
    stdout
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|err| panic!("{what}: not JSON ({err}): {line}"));
            assert!(
                value["type"].is_string(),
                "{what}: no string `type`: {line}"
            );
            ours_snake_case(what, &value);
            value
        })
        .collect()
}

/// The emulator as Codex's model provider (the library's setup, as `codex run --mock`
/// uses it) and a working directory.
struct Setup {
    provider: MockProvider,
    cwd: tempfile::TempDir,
}

impl Setup {
    async fn new(script: &str) -> Setup {
        let script = Script::load(&fixture(script)).unwrap();
        // Not under /tmp: Codex refuses to create its helper aliases there (harmless, noisy).
        let provider =
            MockProvider::start_with_home_in(script, Path::new(env!("CARGO_TARGET_TMPDIR")))
                .await
                .unwrap();
        let cwd = tempfile::Builder::new()
            .prefix("codex-cwd-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        Setup { provider, cwd }
    }

    async fn client(&self) -> (AppServerClient, Events) {
        // The library's launch, as `codex run` uses it, with the server's stderr kept.
        let launch = AppServerLaunch {
            cwd: Some(self.cwd.path().to_path_buf()),
            stderr: StderrTarget::File(self.provider.home().join("app-server.stderr")),
            ..AppServerLaunch::new(codex_bin())
        };
        let (client, events) = launch
            .spawn(self.provider.env(), ApprovalPolicy::default())
            .unwrap();
        client
            .initialize(ClientInfo {
                name: "agentctl_interop".into(),
                title: None,
                version: "0.0.0".into(),
            })
            .await
            .unwrap();
        (client, events)
    }

    async fn start_turn(&self, client: &AppServerClient, prompt: &str) -> (String, Turn) {
        let thread = client
            .thread_start(&ThreadStartParams {
                cwd: Some(self.cwd.path().display().to_string()),
                ephemeral: Some(true),
                ..ThreadStartParams::default()
            })
            .await
            .unwrap();
        assert_eq!(
            thread.model_provider.as_deref(),
            Some(codex_home::PROVIDER_ID)
        );
        let turn = client
            .turn_start(&TurnStartParams {
                thread_id: thread.thread.id.clone(),
                input: vec![UserInput::text(prompt)],
                approval_policy: Some("untrusted".into()),
                ..TurnStartParams::default()
            })
            .await
            .unwrap()
            .turn;
        (thread.thread.id, turn)
    }

    /// The `input` arrays of every `POST /v1/responses` the emulator received.
    fn inputs(&self) -> Vec<Vec<Value>> {
        self.provider
            .emulator()
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/responses"))
            .map(|r| r.body["input"].as_array().cloned().unwrap_or_default())
            .collect()
    }
}

/// Events until our turn completes, with a hook on each agent-message delta.
async fn until_completed(
    events: &mut Events,
    turn_id: &str,
    mut on_delta: impl FnMut(&str),
) -> (Vec<AppServerEvent>, String, Turn) {
    let mut seen = Vec::new();
    let mut text = String::new();
    loop {
        let event = tokio::time::timeout(HANG_GUARD, events.recv())
            .await
            .expect("hang guard: the turn did not complete")
            .expect("codex app-server ended before turn/completed");
        if let AppServerEvent::Notification(note) = &event {
            match TurnNotification::parse(note).unwrap() {
                Some(TurnNotification::AgentMessageDelta {
                    delta, turn_id: t, ..
                }) if t == turn_id => {
                    text.push_str(&delta);
                    on_delta(&delta);
                }
                Some(TurnNotification::TurnCompleted { turn, .. }) if turn.id == turn_id => {
                    seen.push(event);
                    return (seen, text, turn);
                }
                _ => {}
            }
        }
        seen.push(event);
    }
}

#[test]
#[ignore = "needs the real Codex CLI: cargo xtask interop codex"]
fn probe_prints_the_initialize_keys() {
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .args(["--json", "probe", "codex", "--codex-bin"])
        .arg(codex_bin())
        .env("CODEX_HOME", home.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = typed_lines("probe codex", &stdout);
    assert_eq!(lines.len(), 1, "{stdout}");
    let report = &lines[0];
    assert_eq!(report["type"], "probe.codex");
    assert_eq!(report["ok"], Value::Bool(true));
    let keys: Vec<&str> = report["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for key in ["codexHome", "platformFamily", "platformOs", "userAgent"] {
        assert!(keys.contains(&key), "{keys:?}");
    }
    assert!(
        report["user_agent"]
            .as_str()
            .unwrap()
            .starts_with("agentctl/")
    );
    // No thread was created: Codex wrote no session.
    assert!(!home.path().join("sessions").exists());
}

#[tokio::test]
#[ignore = "needs the real Codex CLI: cargo xtask interop codex"]
async fn a_plain_turn_gets_its_reply_from_the_emulator() {
    let setup = Setup::new("reply.json").await;
    let (client, mut events) = setup.client().await;
    let (_, turn) = setup.start_turn(&client, "say hi").await;
    let (_, text, done) = until_completed(&mut events, &turn.id, |_| {}).await;
    assert_eq!(done.status, TurnStatus::Completed);
    assert_eq!(text, "Hello from the agentctl emulator.");
    let requests = setup.provider.emulator().requests();
    let post = requests
        .iter()
        .find(|r| r.path.ends_with("/responses"))
        .unwrap();
    assert_eq!(post.body["model"], Value::from(codex_home::EMULATED_MODEL));
    let inputs = setup.inputs();
    let last_user = inputs[0]
        .iter()
        .rev()
        .find(|i| i["role"] == "user")
        .unwrap();
    assert!(last_user.to_string().contains("say hi"));
    client.close().await;
}

#[tokio::test]
#[ignore = "needs the real Codex CLI: cargo xtask interop codex"]
async fn a_declined_command_does_not_run_and_the_model_gets_its_output() {
    let setup = Setup::new("exec-declined.json").await;
    let (client, mut events) = setup.client().await;
    let (_, turn) = setup.start_turn(&client, "create the marker file").await;
    let (seen, text, done) = until_completed(&mut events, &turn.id, |_| {}).await;
    assert_eq!(done.status, TurnStatus::Completed);

    // We were asked, and we declined.
    let approval = seen
        .iter()
        .find_map(|e| match e {
            AppServerEvent::Request { request, reply } if request.method == COMMAND_APPROVAL => {
                Some((request, reply))
            }
            _ => None,
        })
        .expect("Codex asked for approval");
    assert_eq!(approval.0.params["itemId"], Value::from("call_exec_marker"));
    assert_eq!(
        approval.1.as_ref().unwrap()["decision"],
        Value::from("decline")
    );
    let declined = seen.iter().any(|e| match e {
        AppServerEvent::Notification(n) => matches!(
            TurnNotification::parse(n).unwrap(),
            Some(TurnNotification::ItemCompleted { item, .. })
                if item.kind == "commandExecution" && item.status.as_deref() == Some("declined")
        ),
        AppServerEvent::Request { .. } => false,
    });
    assert!(declined, "the command item ended declined");

    // The command did not run.
    assert!(!setup.cwd.path().join("agentctl-interop-marker").exists());

    // The emulator received the matching function_call_output, and its reply was shown.
    let inputs = setup.inputs();
    assert_eq!(
        inputs.len(),
        2,
        "one request for the call, one with its output"
    );
    let output = inputs[1]
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .expect("a function_call_output");
    assert_eq!(output["call_id"], Value::from("call_exec_marker"));
    assert!(text.starts_with("The command did not run: "), "{text}");
    client.close().await;
}

#[tokio::test]
#[ignore = "needs the real Codex CLI: cargo xtask interop codex"]
async fn a_steer_during_a_slow_stream_redirects_the_turn() {
    let setup = Setup::new("slow-stream.json").await;
    let (client, mut events) = setup.client().await;
    let (thread_id, turn) = setup.start_turn(&client, "count slowly").await;
    let (steer_tx, steer_rx) = tokio::sync::oneshot::channel();
    let mut steer_tx = Some(steer_tx);
    let steerer = tokio::spawn({
        let client = client.clone();
        let (thread_id, turn_id) = (thread_id.clone(), turn.id.clone());
        async move {
            steer_rx.await.unwrap();
            client
                .turn_steer(
                    &thread_id,
                    &turn_id,
                    vec![UserInput::text("STEER: stop counting")],
                )
                .await
        }
    });
    // Steer once the first delta shows the stream is running (it then waits at the gate).
    let (_, text, done) = until_completed(&mut events, &turn.id, |_| {
        if let Some(tx) = steer_tx.take() {
            tx.send(()).unwrap();
        }
    })
    .await;
    let steered = steerer.await.unwrap().unwrap();
    assert_eq!(steered.turn_id, turn.id);
    assert_eq!(done.status, TurnStatus::Completed);
    assert!(text.ends_with("Steered: stopping here."), "{text}");
    let inputs = setup.inputs();
    assert_eq!(
        inputs.len(),
        2,
        "the slow request, then one carrying the steer"
    );
    assert!(
        Value::Array(inputs[1].clone())
            .to_string()
            .contains("STEER: stop counting")
    );
    client.close().await;
}

#[tokio::test]
#[ignore = "needs the real Codex CLI: cargo xtask interop codex"]
async fn an_interrupt_ends_the_turn_as_interrupted() {
    let setup = Setup::new("slow-stream.json").await;
    let (client, mut events) = setup.client().await;
    let (thread_id, turn) = setup.start_turn(&client, "count slowly").await;
    let (go_tx, go_rx) = tokio::sync::oneshot::channel();
    let mut go_tx = Some(go_tx);
    let interrupter = tokio::spawn({
        let client = client.clone();
        let (thread_id, turn_id) = (thread_id.clone(), turn.id.clone());
        async move {
            go_rx.await.unwrap();
            client.turn_interrupt(&thread_id, &turn_id).await
        }
    });
    let (_, text, done) = until_completed(&mut events, &turn.id, |_| {
        if let Some(tx) = go_tx.take() {
            tx.send(()).unwrap();
        }
    })
    .await;
    interrupter.await.unwrap().unwrap();
    assert_eq!(done.status, TurnStatus::Interrupted);
    assert!(!text.is_empty() && !text.contains("Steered"), "{text}");
    client.close().await;
}

#[test]
#[ignore = "needs the real Codex CLI: cargo xtask interop codex"]
fn codex_run_mock_streams_the_reply_and_journals_every_notification() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = format!("sqlite://{}", dir.path().join("journal.db").display());
    let out = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .args(["--db", &db, "codex", "run", "--mock", "--mock-script"])
        .arg(fixture("exec-declined.json"))
        .arg("--codex-bin")
        .arg(codex_bin())
        .arg("--cwd")
        .arg(dir.path())
        .arg("create the marker file")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("The command did not run: "), "{stdout}");
    assert!(stderr.contains("answered"), "{stderr}");
    assert!(!dir.path().join("agentctl-interop-marker").exists());
    let thread = stderr
        .lines()
        .find_map(|l| l.strip_prefix("agentctl: codex thread "))
        .expect("the thread id on stderr")
        .trim()
        .to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let kinds: Vec<String> = rt.block_on(async {
        let journal = agent_journal::Journal::open(&db).await.unwrap();
        let events = journal.replay(&thread, 0).await.unwrap();
        journal.close().await;
        events.into_iter().map(|e| e.kind.to_string()).collect()
    });
    for kind in [
        "codex:turn/started",
        "codex:item/agentMessage/delta",
        "codex-request:item/commandExecution/requestApproval",
        "codex:turn/completed",
    ] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "{kind} missing from {kinds:?}"
        );
    }
}

#[test]
#[ignore = "needs the real Codex CLI: cargo xtask interop codex"]
fn codex_run_mock_interrupt_exits_130() {
    // 0: as soon as the turn has started (an interrupt sent before Codex reports the turn
    // started is refused with "no active turn"); 1: after the first delta.
    for after in ["0", "1"] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .args([
                "codex",
                "run",
                "--no-journal",
                "--mock",
                "--interrupt-after",
                after,
                "--mock-script",
            ])
            .arg(fixture("slow-stream.json"))
            .arg("--codex-bin")
            .arg(codex_bin())
            .arg("--cwd")
            .arg(dir.path())
            .arg("count slowly")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = output_within(out, Duration::from_secs(60));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(130),
            "--interrupt-after {after}: {stderr}"
        );
        assert!(!stderr.contains("interrupt failed"), "{stderr}");
    }
}

#[test]
#[ignore = "needs the real Codex CLI: cargo xtask interop codex"]
fn codex_run_mock_json_prints_typed_snake_case_lines() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = format!("sqlite://{}", dir.path().join("journal.db").display());
    let out = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .args([
            "--json",
            "--db",
            &db,
            "codex",
            "run",
            "--mock",
            "--mock-script",
        ])
        .arg(fixture("exec-declined.json"))
        .arg("--codex-bin")
        .arg(codex_bin())
        .arg("--cwd")
        .arg(dir.path())
        .arg("create the marker file")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = typed_lines("codex run", &stdout);
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"codex.thread"), "{stdout}");
    assert_eq!(kinds.last(), Some(&"codex.turn"), "{stdout}");
    assert!(kinds.contains(&"codex.notification"), "{stdout}");
    assert!(kinds.contains(&"codex.server_request"), "{stdout}");
    let turn = lines.last().unwrap();
    assert_eq!(turn["status"], "completed");
    assert_eq!(turn["thread_id"], lines[0]["thread_id"]);
}
