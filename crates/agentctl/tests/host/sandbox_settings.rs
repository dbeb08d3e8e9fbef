//! `[sandbox]` settings the sandbox cannot apply, and the fallback to `off`: a setting at
//! fault (a `deny_read` of `/usr`, which leaves no `true` to probe with) refuses the run
//! instead of turning the sandbox off; a system that cannot sandbox at all (the test hook)
//! falls back with every setting kept, and there `shell` and `write_file` ask whatever
//! `--approval` says; the built-in `--mock` story runs unasked as an explicit `off`; a
//! worker adds its own user's hidden paths to the runs it drives.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::host::*;

const UNSUPPORTED: &str = "AGENTCTL_TEST_SANDBOX_UNSUPPORTED";

/// A directory with a workspace (holding `secret.txt`), a configuration directory of its
/// own and the database file inside the workspace.
struct Setup {
    dir: tempfile::TempDir,
    ws: PathBuf,
    config: PathBuf,
    db: String,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (ws, config) = (root.join("ws"), root.join("config"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(ws.join("secret.txt"), "TOPSECRET\n").unwrap();
    let db = format!("sqlite://{}", ws.join("run.db").display());
    Setup {
        dir,
        ws,
        config,
        db,
    }
}

impl Setup {
    /// `agentctl --db DB` with this setup's configuration directory.
    fn agentctl(&self) -> std::process::Command {
        let mut cmd = agentctl(&self.db);
        cmd.env("AGENTCTL_CONFIG_DIR", &self.config);
        cmd
    }

    /// `agentctl run` against `server` in this setup's workspace, with `extra` options.
    fn run(
        &self,
        server: &agent_responses_mock::MockServer,
        extra: &[&str],
    ) -> std::process::Command {
        let mut cmd = run_cmd(&self.db, server, &self.ws, extra);
        cmd.env("AGENTCTL_CONFIG_DIR", &self.config);
        cmd
    }

    fn user_config(&self, text: &str) {
        std::fs::write(self.config.join("config.toml"), text).unwrap();
    }

    fn outside(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap().join("OUTSIDE")
    }
}

fn shell(call_id: &str, command: &str) -> Value {
    call(
        call_id,
        "shell",
        json!({"command": command, "timeout_ms": null}),
    )
}

fn read_file(call_id: &str, path: &str) -> Value {
    call(
        call_id,
        "read_file",
        json!({"path": path, "offset": null, "limit": null}),
    )
}

/// The outputs the model got, by call id.
async fn outputs(db: &str, run: &str) -> Vec<(String, String)> {
    events(db, run)
        .await
        .iter()
        .filter(|e| &*e.kind == "tool.completed" || &*e.kind == "tool.failed")
        .map(|e| (call_id_of(e).to_string(), e.payload.to_string()))
        .collect()
}

/// A workspace file whose `deny_read` the sandbox cannot apply (`/usr` hides `true`, so the
/// probe fails) is the settings' fault, not the system's: the run is refused, exit 2, with
/// no run created and nothing run, whatever `--approval` says; it used to turn the sandbox
/// off for an untrusted file, and `--approval auto` then ran the model's command outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_the_sandbox_cannot_apply_refuse_the_run_instead_of_turning_it_off() {
    let s = setup();
    std::fs::write(
        s.ws.join("agentctl.toml"),
        "[sandbox]\ndeny_read = [\"/usr\"]\n",
    )
    .unwrap();
    let outside = s.outside();
    let server = emulator(&script_by_outputs(&[
        json!([shell("c0", &format!("touch {}", outside.display()))]),
        answer("done"),
    ]))
    .await;
    let mut cmd = s.run(&server, &["--approval", "auto"]);
    let o = out(&mut cmd);
    let said = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("cannot be applied"), "{said}");
    assert!(said.contains("agentctl.toml"), "{said}");
    assert!(said.contains("fix or remove the setting"), "{said}");
    assert!(!said.contains("--sandbox off"), "{said}");
    assert!(!outside.exists(), "the command ran");
    let listed = out(s.agentctl().args(["--json", "runs", "list"]));
    assert_eq!(text(&listed.stdout).trim(), "", "a run was created");
}

/// Where the system cannot sandbox at all, the default mode falls back to `off` keeping
/// every configured setting: the user's `deny_read` and the run's database stay hidden from
/// the file tools, the network and writable roots are recorded; and the command asks,
/// although `--approval auto` was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_keeps_the_settings_and_asks_whatever_approval_says() {
    let s = setup();
    let extra = s.dir.path().canonicalize().unwrap().join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    let secret = s.ws.join("secret.txt");
    s.user_config(&format!(
        "[sandbox]\ndeny_read = [\"{}\"]\nwritable_roots = [\"{}\"]\nnetwork = true\n",
        secret.display(),
        extra.display()
    ));
    let outside = s.outside();
    let server = emulator(&script_by_outputs(&[
        json!([read_file("c0", "secret.txt")]),
        json!([read_file("c1", "run.db")]),
        json!([shell("c2", &format!("touch {}", outside.display()))]),
        answer("done"),
    ]))
    .await;
    let mut cmd = s.run(&server, &["--approval", "auto"]);
    cmd.env(UNSUPPORTED, "1");
    let o = out(&mut cmd);
    let said = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "the command must ask: {said}");
    assert!(said.contains("each asking first"), "{said}");
    assert!(!outside.exists(), "the command ran unasked");
    let run = only_run(&s.db);
    let view = show(&s.db, &run);
    let sandbox = &view["sandbox"];
    assert_eq!(sandbox["mode"], "off", "{sandbox}");
    assert!(sandbox["fallback"].as_str().unwrap().contains("test"));
    assert_eq!(sandbox["network"], true, "{sandbox}");
    assert_eq!(sandbox["writable_roots"], json!([extra]), "{sandbox}");
    let hidden: Vec<&str> = sandbox["deny_read"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for path in [secret.clone(), s.ws.join("run.db"), s.config.clone()] {
        assert!(
            hidden.contains(&path.to_str().unwrap()),
            "{} not hidden: {sandbox}",
            path.display()
        );
    }
    assert_eq!(view["pending_approvals"][0]["reason"], "policy");
    let outputs = outputs(&s.db, &run).await;
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    for (id, output) in &outputs {
        assert!(
            output.contains("hidden from the run's tools"),
            "{id}: {output}"
        );
        assert!(!output.contains("TOPSECRET"), "{id}: {output}");
    }
}

/// The built-in `--mock` story (our script, not a model's) must never ask, CI runs it: where
/// the system cannot sandbox it records an explicit `off`, no fallback, and says so.
#[test]
fn the_builtin_story_without_a_sandbox_runs_unasked_as_an_explicit_off() {
    let s = setup();
    let mut cmd = s.agentctl();
    cmd.args(["run", "--mock", "--workspace"])
        .arg(&s.ws)
        .arg("hi")
        .env(UNSUPPORTED, "1");
    let o = out(&mut cmd);
    let said = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{said}");
    assert!(said.contains("built-in story"), "{said}");
    let view = show(&s.db, &only_run(&s.db));
    assert_eq!(view["sandbox"]["mode"], "off", "{view}");
    assert!(view["sandbox"]["fallback"].is_null(), "{view}");
}

/// A run that resumes where the system cannot sandbox falls back (journaled, cause
/// `unsupported`, its hidden paths kept) and its next command asks, although it was
/// started with `--approval auto`: the policies are recomputed for the fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_that_falls_back_asks_whatever_approval_says() {
    let s = setup();
    let server = emulator(&script_by_outputs(&[
        json!([shell("c1", "echo a > a.txt")]),
        json!([shell("c2", "echo b > b.txt")]),
        answer("done"),
    ]))
    .await;
    let mut cmd = s.run(&server, &["--approval", "auto", "--max-steps", "1"]);
    let o = out(&mut cmd);
    assert!(s.ws.join("a.txt").exists(), "{}", text(&o.stderr));
    let run = only_run(&s.db);
    let mut resume = s.agentctl();
    resume
        .args([
            "resume",
            &run,
            "--max-steps",
            "5",
            "--base-url",
            &server.base_url(),
        ])
        .env(UNSUPPORTED, "1");
    let o = out(&mut resume);
    let said = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "c2 must ask: {said}");
    assert!(!s.ws.join("b.txt").exists(), "c2 ran unasked");
    let changes: Vec<Value> = kinds_of(&events(&s.db, &run).await, "run.sandbox_changed")
        .into_iter()
        .map(|e| e.payload.clone())
        .collect();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0]["cause"], "unsupported");
    assert_eq!(changes[0]["policies"]["shell"], "ask", "{}", changes[0]);
    assert_eq!(
        changes[0]["policies"]["write_file"], "ask",
        "{}",
        changes[0]
    );
    let db_file = s.ws.join("run.db");
    assert!(
        changes[0]["sandbox"]["deny_read"]
            .as_array()
            .unwrap()
            .contains(&json!(db_file)),
        "{}",
        changes[0]
    );
}

/// A mode asked for on resume that works here, but not with the run's recorded settings,
/// is refused naming them (not as a system without the sandbox).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_whose_recorded_settings_cannot_be_applied_is_refused() {
    let s = setup();
    s.user_config("[sandbox]\ndeny_read = [\"/usr\"]\n");
    let server = emulator(&script_by_outputs(&[
        json!([shell("c1", "echo a > a.txt")]),
        answer("done"),
    ]))
    .await;
    let mut cmd = s.run(
        &server,
        &["--sandbox", "off", "--max-steps", "1", "--approval", "deny"],
    );
    let o = out(&mut cmd);
    assert!(text(&o.stderr).contains("paused"), "{}", text(&o.stderr));
    let run = only_run(&s.db);
    let before = events(&s.db, &run).await.len();
    let o = out(s.agentctl().args([
        "resume",
        &run,
        "--sandbox",
        "workspace-write",
        "--base-url",
        &server.base_url(),
    ]));
    let said = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("settings"), "{said}");
    assert!(said.contains("cannot be applied here"), "{said}");
    assert_eq!(
        events(&s.db, &run).await.len(),
        before,
        "the refused resume wrote"
    );
}

/// A worker adds the paths its own user's configuration hides to a run submitted by
/// someone else (journaled as `run.sandbox_changed`, cause `worker_floor`): its file tools
/// refuse them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_adds_its_users_hidden_paths_to_a_run() {
    let s = setup();
    let server = emulator(&script_by_outputs(&[
        json!([read_file("c1", "secret.txt")]),
        answer(crate::workers::FINAL),
    ]))
    .await;
    // Submitted with the test's configuration, which hides nothing of the workspace.
    let o = out(agentctl(&s.db)
        .args(["submit", "--base-url", &server.base_url(), "--workspace"])
        .arg(&s.ws)
        .arg("go"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = text(&o.stdout).trim().to_string();
    let secret = s.ws.join("secret.txt");
    s.user_config(&format!(
        "[sandbox]\ndeny_read = [\"{}\"]\n",
        secret.display()
    ));
    let worker = crate::workers::start_worker_from(s.agentctl(), s.dir.path(), "w", "5", &[]);
    let left = crate::workers::wait_all_completed(
        &s.db,
        std::slice::from_ref(&id),
        Duration::from_secs(30),
    )
    .await;
    assert!(left.is_empty(), "not completed: {left:?}");
    worker.signal("TERM");
    let evs = events(&s.db, &id).await;
    let changes = kinds_of(&evs, "run.sandbox_changed");
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].payload["cause"], "worker_floor");
    assert!(
        changes[0].payload["sandbox"]["deny_read"]
            .as_array()
            .unwrap()
            .contains(&json!(secret)),
        "{}",
        changes[0].payload
    );
    let outputs = outputs(&s.db, &id).await;
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    assert!(
        outputs[0].1.contains("hidden from the run's tools"),
        "{outputs:?}"
    );
    assert!(!outputs[0].1.contains("TOPSECRET"), "{outputs:?}");
}
