//! Support for the host tests: the emulator in this process (shared by every child
//! `agentctl` so its request log spans crashes), children run on a database and a workspace.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use agent_journal::{Event, Journal};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use serde_json::Value;

/// The machine's processes, not zombies, whose working directory is `dir`: pid and name.
pub fn processes_in(dir: &Path) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| std::fs::read_link(p.join("cwd")).is_ok_and(|cwd| cwd == dir))
        .filter_map(|p| {
            let stat = std::fs::read_to_string(p.join("stat")).ok()?;
            let zombie = stat.contains(") Z ");
            let pid = p.file_name()?.to_string_lossy().into_owned();
            (!zombie).then(|| (pid, stat.split(' ').nth(1).unwrap_or("").to_string()))
        })
        .collect()
}

/// Shell that sets `$h` to the pid of the host driving a sandboxed `shell` call: the parent
/// of the sandbox's entry point, which is the command's parent (`$PPID` is 0 in the
/// sandbox's PID namespace).
pub const HOST_PID: &str =
    "read -r _ _ _ e _ < /proc/self/stat; read -r _ _ _ h _ < /proc/$e/stat;";

/// The configuration directory every `agentctl` of this test process uses (its trusted
/// workspaces), instead of the user's.
pub fn config_dir() -> PathBuf {
    std::env::temp_dir().join(format!("agentctl-test-config-{}", std::process::id()))
}

/// `agentctl trust WS`: what the workspace's `agentctl.toml` asks is used from now on.
pub fn trust(ws: &Path) {
    let o = out(agentctl("memory:").arg("trust").arg(ws));
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// An emulator playing `script` (JSON text).
pub async fn emulator(script: &str) -> MockServer {
    let script = Script::from_json_str(script).unwrap();
    MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
        .await
        .unwrap()
}

/// A script whose rules answer by the number of tool outputs: `steps[n]` is the reply to a
/// request holding `n` outputs (a list of output items).
pub fn script_by_outputs(steps: &[Value]) -> String {
    let rules: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(n, items)| serde_json::json!({"when": {"tool_outputs": n}, "reply": {"items": items}}))
        .collect();
    serde_json::json!({"rules": rules}).to_string()
}

pub fn call(call_id: &str, name: &str, args: Value) -> Value {
    serde_json::json!({"type": "function_call", "call_id": call_id, "name": name, "arguments": args.to_string()})
}

pub fn answer(text: &str) -> Value {
    serde_json::json!([{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}])
}

/// `agentctl --db DB` with the emulator's key and no inherited database or API settings.
pub fn agentctl(db: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentctl"));
    cmd.env_remove("AGENTCTL_DB")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("AGENTCTL_TEST_CRASH_AFTER_EVENTS")
        .env_remove("AGENTCTL_TEST_CRASH_CHILD_AFTER_EVENTS")
        .env("OPENAI_API_KEY", MOCK_API_KEY)
        .env("AGENTCTL_CONFIG_DIR", config_dir())
        .args(["--db", db])
        .stdin(std::process::Stdio::null());
    cmd
}

/// `agentctl run` against `server` in `workspace`, with `extra` options, the prompt last.
pub fn run_cmd(db: &str, server: &MockServer, workspace: &Path, extra: &[&str]) -> Command {
    let mut cmd = agentctl(db);
    cmd.args(["run", "--base-url", &server.base_url(), "--workspace"])
        .arg(workspace)
        .args(extra)
        .arg("do the task");
    cmd
}

pub fn resume_cmd(db: &str, server: &MockServer, run: &str, extra: &[&str]) -> Command {
    let mut cmd = agentctl(db);
    cmd.args(["resume", run, "--base-url", &server.base_url()])
        .args(extra);
    cmd
}

pub fn out(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

/// [`out`], but the command is killed and the test fails if it has not ended within
/// `limit` (for a command whose bug would be a hang).
pub fn out_within(cmd: &mut Command, limit: std::time::Duration) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("the command did not end within {limit:?}");
        }
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The only run of the database.
pub fn only_run(db: &str) -> String {
    let o = out(agentctl(db).args(["--json", "runs", "list"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    lines[0]["run_id"].as_str().unwrap().to_string()
}

pub fn show(db: &str, run: &str) -> Value {
    let o = out(agentctl(db).args(["--json", "runs", "show", run]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Every event of the run's thread.
pub async fn events(db: &str, run: &str) -> Vec<Event> {
    let journal = Journal::open(db).await.unwrap();
    let events = journal.replay(&format!("run:{run}"), 0).await.unwrap();
    journal.close().await;
    events
}

pub fn kinds_of<'a>(events: &'a [Event], kind: &str) -> Vec<&'a Event> {
    events.iter().filter(|e| &*e.kind == kind).collect()
}

pub fn call_id_of(e: &Event) -> &str {
    e.payload["call_id"].as_str().unwrap_or("")
}

/// A fresh workspace directory.
pub fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    (dir, path)
}

/// Checks the journal invariants every host run keeps: each scheduled call (per turn) has
/// exactly one terminal event; no step is requested after its completion.
pub fn check_invariants(events: &[Event]) {
    use std::collections::HashMap;
    let mut terminals: HashMap<(String, String), usize> = HashMap::new();
    for e in events {
        let key = (
            e.payload["turn_id"].as_str().unwrap_or("").to_string(),
            call_id_of(e).to_string(),
        );
        match &*e.kind {
            "tool.scheduled" => {
                terminals.entry(key).or_insert(0);
            }
            "tool.completed" | "tool.failed" | "tool.timeout" | "tool.cancelled"
            | "tool.interrupted" => {
                *terminals.entry(key).or_insert(0) += 1;
            }
            _ => {}
        }
    }
    for (key, n) in &terminals {
        assert_eq!(*n, 1, "call {key:?} has {n} terminal events");
    }
    let mut completed: HashMap<u64, i64> = HashMap::new();
    for e in events {
        let step = e.payload["step"].as_u64().unwrap_or(0);
        match &*e.kind {
            "model.completed" => {
                assert!(
                    completed.insert(step, e.seq).is_none(),
                    "step {step} completed twice"
                );
            }
            "model.requested" => {
                assert!(
                    !completed.contains_key(&step),
                    "step {step} requested after its completion"
                );
            }
            _ => {}
        }
    }
}

/// The emulator's last `POST /responses` request body.
pub fn last_request(server: &MockServer) -> Value {
    server
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path.ends_with("/responses"))
        .unwrap()
        .body
}

/// A script whose first step runs a long shell command (it touches `started` first), then
/// answers `FINAL: after interrupt`.
pub fn long_shell_script() -> String {
    script_by_outputs(&[
        serde_json::json!([call(
            "c_long",
            "shell",
            serde_json::json!({"command": "touch started; sleep 60; touch finished"})
        )]),
        answer("FINAL: after interrupt"),
    ])
}

/// Starts `run` of the long shell script and returns once its command runs.
pub async fn spawn_long_shell(
    db: &str,
    server: &MockServer,
    ws: &Path,
    extra: &[&str],
) -> std::process::Child {
    let child = run_cmd(db, server, ws, extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ws.join("started").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    child
}

/// The fixtures of `agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: ...)` for
/// cases that take a database: `async fn case(db: FreshDb)`, each on a fresh one.
pub mod fresh_db {
    pub use agent_testkit::FreshDb;

    pub async fn sqlite() -> FreshDb {
        FreshDb::sqlite()
    }

    pub async fn postgres() -> Option<FreshDb> {
        FreshDb::postgres("agentctl").await
    }
}
