//! Tools written in Rust through the whole host: the examples run, a call is journaled like
//! a built-in's, and a call cut off by a crash (the process aborts inside the tool, after its
//! effect) is not run again on resume unless the tool is retry-safe or a human approves.
//!
//! The crashing drives are this test binary run again as a child (`child_drive`, which
//! does nothing unless `RUST_TOOL_CHILD` is set), so the crash is a real process's end.

#[path = "../../examples/custom_tool.rs"]
#[allow(dead_code)]
mod custom_tool;
#[path = "../../examples/structured_output.rs"]
#[allow(dead_code)]
mod structured_output;

use std::path::Path;
use std::process::Command;

use agent_host::run::{DecisionRequest, DriveOptions, Host, NewRun, ResumeChange, RunEnd};
use agent_host::tools::{ApprovalMode, RustTool, ToolCall};
use agent_journal::Journal;
use agent_responses::{ApiKey, Client, ClientConfig};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[tokio::test]
async fn the_custom_tool_example_runs_its_tool_through_the_runtime() {
    let report = custom_tool::run().await.unwrap();
    assert_eq!(
        report.end,
        RunEnd::Completed {
            text: "It is 21 degrees and sunny in Paris.".into()
        }
    );
    let call = report.state.call("call_1").unwrap();
    assert_eq!(call.name, "weather");
    assert!(matches!(
        &call.progress,
        agent_host::run::state::CallProgress::Done(out) if out.ok && out.text == "21 degrees and sunny in Paris"
    ));
    let spec = report.state.spec().unwrap();
    let weather = spec.tools.iter().find(|t| t.name == "weather").unwrap();
    assert!(weather.retry_safe);
    assert!(weather.strict);
}

#[tokio::test]
async fn the_structured_output_example_gets_a_matching_answer() {
    let report = structured_output::run().await.unwrap();
    assert_eq!(
        report.output().map(|o| o.to_value().unwrap()),
        Some(json!({"title": "Fix the parser", "priority": 1}))
    );
    assert_eq!(report.state.rejections().len(), 1);
    assert!(report.state.rejections()[0].errors[0].contains("priority"));
}

/// The tool of the crash tests: appends a line to `effects` (its side effect), then, when
/// `crash` is set, aborts the process as a crash would end it.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Deploy {
    /// What to deploy.
    service: String,
}

fn deploy_tool(effects: std::path::PathBuf, crash: bool, retry_safe: bool) -> RustTool {
    RustTool::with_call(
        "deploy",
        "Deploy a service.",
        move |d: Deploy, call: ToolCall| {
            let effects = effects.clone();
            async move {
                use std::io::Write as _;
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&effects)
                    .map_err(|e| e.to_string())?;
                // The call id is the effect's idempotency key.
                writeln!(file, "{} {} {}", d.service, call.run_id(), call.call_id())
                    .map_err(|e| e.to_string())?;
                file.sync_all().map_err(|e| e.to_string())?;
                if crash {
                    std::process::abort();
                }
                Ok::<_, String>(format!("deployed {}", d.service))
            }
        },
    )
    .retry_safe(retry_safe)
}

const SCRIPT: &str = r#"{"rules": [
  {"when": {"tool_outputs": 0}, "reply": {"items": [{"type": "function_call", "call_id": "call_d",
     "name": "deploy", "arguments": "{\"service\": \"api\"}"}]}},
  {"reply": {"items": [{"type": "message", "role": "assistant",
     "content": [{"type": "output_text", "text": "Done: {{outputs}}"}]}]}}]}"#;

async fn host(db: &str, base_url: &str, tool: RustTool) -> (Journal, Host) {
    let journal = Journal::open(db).await.unwrap();
    let key = ApiKey::new(MOCK_API_KEY).unwrap();
    let client = Client::new(ClientConfig::new(base_url, key)).unwrap();
    (journal.clone(), Host::new(journal, client).tool(tool))
}

/// The child's drive: `RUST_TOOL_CHILD=start` starts a run, `=resume` resumes
/// `RUST_TOOL_RUN`; the tool crashes when `RUST_TOOL_CRASH` is set. Prints the end as JSON.
#[tokio::test]
async fn child_drive() {
    let Ok(mode) = std::env::var("RUST_TOOL_CHILD") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap();
    let tool = deploy_tool(
        var("RUST_TOOL_EFFECTS").into(),
        std::env::var("RUST_TOOL_CRASH").is_ok(),
        std::env::var("RUST_TOOL_RETRY_SAFE").is_ok(),
    );
    let (journal, host) = host(&var("RUST_TOOL_DB"), &var("RUST_TOOL_URL"), tool).await;
    let report = match mode.as_str() {
        "start" => {
            let run = NewRun::new("deploy the api", var("RUST_TOOL_WORKSPACE"))
                .approval(ApprovalMode::Default);
            host.start(run, DriveOptions::default()).await.unwrap()
        }
        _ => host
            .resume(
                &var("RUST_TOOL_RUN"),
                ResumeChange::default(),
                DriveOptions::default(),
            )
            .await
            .unwrap(),
    };
    journal.close().await;
    println!("END {}", serde_json::to_string(&report.end).unwrap());
}

/// Runs `child_drive` in a child process; returns its status and stdout.
fn child(env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "rust_tools::child_drive",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The effects written, each as `service call_id` (checked to name the run).
fn effects(path: &Path, run: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            assert_eq!(parts[1], run, "{line}");
            format!("{} {}", parts[0], parts[2])
        })
        .collect()
}

async fn only_run(db: &str) -> String {
    let journal = Journal::open(db).await.unwrap();
    let runs = agent_host::run::list(&journal).await.unwrap();
    journal.close().await;
    assert_eq!(runs.len(), 1);
    runs[0].id().to_string()
}

async fn kinds(db: &str, run: &str) -> Vec<(String, Value)> {
    let journal = Journal::open(db).await.unwrap();
    let events = journal.replay(&format!("run:{run}"), 0).await.unwrap();
    journal.close().await;
    events
        .into_iter()
        .map(|e| (e.kind.to_string(), e.payload))
        .collect()
}

/// A crash inside a tool that is not retry-safe: resume asks (indeterminate) instead of
/// running it again; denied, the model is told and the run completes; the effect happened
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_by_a_crash_is_not_run_twice() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let effects_file = dir.path().join("effects");
    let workspace = tempfile::tempdir().unwrap();
    let script = Script::from_json_str(SCRIPT).unwrap();
    let mock = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
        .await
        .unwrap();
    let url = mock.base_url();
    let effects_path = effects_file.display().to_string();
    let ws = workspace.path().display().to_string();
    let base = [
        ("RUST_TOOL_DB", db.as_str()),
        ("RUST_TOOL_URL", url.as_str()),
        ("RUST_TOOL_EFFECTS", effects_path.as_str()),
        ("RUST_TOOL_WORKSPACE", ws.as_str()),
    ];
    let mut first = base.to_vec();
    first.extend([("RUST_TOOL_CHILD", "start"), ("RUST_TOOL_CRASH", "1")]);
    let (status, _) = child(&first);
    assert!(!status.success(), "the child crashed");
    let run = only_run(&db).await;
    assert_eq!(effects(&effects_file, &run), ["api call_d"]);
    let events = kinds(&db, &run).await;
    assert!(
        events
            .iter()
            .any(|(k, p)| k == "tool.started" && p["call_id"] == "call_d")
    );
    assert!(!events.iter().any(|(k, _)| k == "tool.completed"));

    // Resumed: the call may or may not have had its effect, so a human is asked.
    let mut resume = base.to_vec();
    resume.extend([
        ("RUST_TOOL_CHILD", "resume"),
        ("RUST_TOOL_RUN", run.as_str()),
    ]);
    let (status, stdout) = child(&resume);
    assert!(status.success(), "{stdout}");
    assert!(stdout.contains(r#"END {"status":"paused""#), "{stdout}");
    assert_eq!(
        effects(&effects_file, &run),
        ["api call_d"],
        "not run again"
    );
    let events = kinds(&db, &run).await;
    let asked = events
        .iter()
        .find(|(k, _)| k == "approval.requested")
        .unwrap();
    assert_eq!(asked.1["reason"], "indeterminate");

    let journal = Journal::open(&db).await.unwrap();
    agent_host::run::decide(
        &journal,
        &run,
        DecisionRequest {
            call_id: "call_d".into(),
            decision: agent_host::run::Decision {
                approve: false,
                reason: Some("check by hand".into()),
                by: Some("test".into()),
                scope: None,
            },
            args_sha256: None,
            round: None,
        },
    )
    .await
    .unwrap();
    journal.close().await;
    let (status, stdout) = child(&resume);
    assert!(status.success(), "{stdout}");
    assert!(stdout.contains(r#"END {"status":"completed""#), "{stdout}");
    assert_eq!(
        effects(&effects_file, &run),
        ["api call_d"],
        "denied: never run again"
    );
}

/// A retry-safe tool cut off by a crash runs again on resume, without asking, and its
/// result is journaled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_safe_call_cut_off_by_a_crash_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let effects_file = dir.path().join("effects");
    let workspace = tempfile::tempdir().unwrap();
    let script = Script::from_json_str(SCRIPT).unwrap();
    let mock = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
        .await
        .unwrap();
    let url = mock.base_url();
    let effects_path = effects_file.display().to_string();
    let ws = workspace.path().display().to_string();
    let base = [
        ("RUST_TOOL_DB", db.as_str()),
        ("RUST_TOOL_URL", url.as_str()),
        ("RUST_TOOL_EFFECTS", effects_path.as_str()),
        ("RUST_TOOL_WORKSPACE", ws.as_str()),
        ("RUST_TOOL_RETRY_SAFE", "1"),
    ];
    let mut first = base.to_vec();
    first.extend([("RUST_TOOL_CHILD", "start"), ("RUST_TOOL_CRASH", "1")]);
    let (status, _) = child(&first);
    assert!(!status.success());
    let run = only_run(&db).await;
    let mut resume = base.to_vec();
    resume.extend([
        ("RUST_TOOL_CHILD", "resume"),
        ("RUST_TOOL_RUN", run.as_str()),
    ]);
    let (status, stdout) = child(&resume);
    assert!(status.success(), "{stdout}");
    assert!(
        stdout.contains(r#"END {"status":"completed","text":"Done: deployed api"}"#),
        "{stdout}"
    );
    assert_eq!(effects(&effects_file, &run), ["api call_d", "api call_d"]);
    let events = kinds(&db, &run).await;
    let completed: Vec<_> = events
        .iter()
        .filter(|(k, _)| k == "tool.completed")
        .collect();
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0].1["call_id"], "call_d");
    assert!(!events.iter().any(|(k, _)| k == "approval.requested"));
}

/// A resumed run whose Rust tool this host lacks is refused before anything is written;
/// a Rust tool named like a built-in is refused when the run starts.
#[tokio::test]
async fn missing_and_clashing_tools_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let workspace = tempfile::tempdir().unwrap();
    let script = Script::from_json_str(SCRIPT).unwrap();
    let mock = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
        .await
        .unwrap();
    let (journal, host) = host(
        &db,
        &mock.base_url(),
        deploy_tool(dir.path().join("effects"), false, false)
            .policy(agent_host::tools::Policy::Ask),
    )
    .await;
    let report = host
        .start(
            NewRun::new("deploy", workspace.path()),
            DriveOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        matches!(report.end, RunEnd::Paused { .. }),
        "{:?}",
        report.end
    );
    let key = ApiKey::new(MOCK_API_KEY).unwrap();
    let bare = Host::new(
        journal.clone(),
        Client::new(ClientConfig::new(mock.base_url(), key)).unwrap(),
    );
    let err = bare
        .resume(
            &report.run_id,
            ResumeChange::default(),
            DriveOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, agent_host::HostError::RustToolMissing { tool, .. } if tool == "deploy"),
        "{err}"
    );
    let clash = bare.tool(RustTool::new("shell", "", |d: Deploy| async move {
        Ok::<_, String>(d.service)
    }));
    let err = clash
        .start(NewRun::new("x", workspace.path()), DriveOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, agent_host::HostError::ToolName { tool, .. } if tool == "shell"),
        "{err}"
    );
    // A spec the journal cannot record whole is the caller's mistake, said as such, and
    // leaves no run behind.
    let huge = "x".repeat(agent_journal::MAX_PAYLOAD_BYTES);
    let plain = Host::new(
        journal.clone(),
        Client::new(ClientConfig::new(
            mock.base_url(),
            ApiKey::new(MOCK_API_KEY).unwrap(),
        ))
        .unwrap(),
    );
    let err = plain
        .submit(NewRun::new("x", workspace.path()).instructions(Some(huge)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, agent_host::HostError::SpecNotRecordable { .. }) && err.is_usage(),
        "{err}"
    );
    assert!(err.to_string().contains("the limit is"), "{err}");
    assert_eq!(agent_host::run::list(&journal).await.unwrap().len(), 1);
    journal.close().await;
}

/// A program's worker (`run_worker` with its own connector) drives a submitted run with
/// the program's Rust tool: the run recorded the tool at submit, the worker rebinds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_drives_a_submitted_run_with_its_rust_tool() {
    use agent_host::worker::{Connected, Connector, WorkerConfig, WorkerEvent, WorkerObserver};
    use futures::future::BoxFuture;
    use std::sync::Arc;
    use std::time::Duration;

    struct Programs {
        db: String,
        url: String,
        effects: std::path::PathBuf,
    }
    impl Connector for Programs {
        fn journal(&self) -> BoxFuture<'_, Result<Journal, agent_host::HostError>> {
            Box::pin(async move { Ok(Journal::open(&self.db).await?) })
        }
        fn client<'a>(
            &'a self,
            _: &'a agent_host::run::RunSpec,
        ) -> BoxFuture<'a, Result<Connected, agent_host::HostError>> {
            Box::pin(async move {
                let key = ApiKey::new(MOCK_API_KEY).unwrap();
                Ok(Connected {
                    client: Client::new(ClientConfig::new(&self.url, key)).unwrap(),
                    tools: Default::default(),
                    rust_tools: vec![deploy_tool(self.effects.clone(), false, false)],
                    sandbox: None,
                    guard: None,
                })
            })
        }
    }
    struct Quiet;
    impl WorkerObserver for Quiet {
        fn event(&self, _: &WorkerEvent) {}
    }

    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let effects_file = dir.path().join("effects");
    let workspace = tempfile::tempdir().unwrap();
    let script = Script::from_json_str(SCRIPT).unwrap();
    let mock = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
        .await
        .unwrap();
    let (journal, host) = host(
        &db,
        &mock.base_url(),
        deploy_tool(effects_file.clone(), false, false),
    )
    .await;
    let run = host
        .submit(NewRun::new("deploy the api", workspace.path()))
        .await
        .unwrap();
    let stop = agent_runtime::CancellationToken::new();
    let worker = tokio::spawn(agent_host::worker::run_worker(
        Arc::new(Programs {
            db: db.clone(),
            url: mock.base_url(),
            effects: effects_file.clone(),
        }),
        WorkerConfig {
            name: "w1".into(),
            concurrency: 1,
            lease_ttl: Duration::from_secs(15),
            poll: Duration::from_millis(50),
            grace: Duration::from_secs(5),
        },
        Arc::new(Quiet),
        stop.clone(),
    ));
    let end =
        agent_host::run::wait::wait_until_stopped(&journal, &run, Some(Duration::from_secs(60)))
            .await
            .unwrap();
    stop.cancel();
    worker.await.unwrap().unwrap();
    let agent_host::run::wait::WaitEnd::Stopped(state) = end else {
        panic!("the run did not stop: {end:?}");
    };
    assert_eq!(state.final_text(), Some("Done: deployed api"));
    assert_eq!(effects(&effects_file, &run), ["api call_d"]);
    journal.close().await;
}
