//! A drive whose future is dropped mid-run (a worker that lost the run's lease or whose
//! journal failed, a caller that gave up) leaves nothing running in the process: its tool
//! calls stop where they stand and its interrupt watcher ends. Before, each dropped drive
//! left its running tools (a shell command, its process group and scratch dir) and a task
//! tailing the run's thread for good, holding the journal it was opened on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_host::run::{DriveOptions, Host, NewRun, RunEnd};
use agent_host::tools::{ApprovalMode, RustTool, ToolCall};
use agent_journal::Journal;
use agent_responses::{ApiKey, Client, ClientConfig};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc;

/// A prompt with "hold" calls the tool; any other is answered with text at once.
const SCRIPT: &str = r#"{"rules": [
  {"when": {"last_user_contains": "hold", "tool_outputs": 0}, "reply": {"items": [
     {"type": "function_call", "call_id": "call_h", "name": "hold", "arguments": "{}"}]}}]}"#;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// Counts the tool futures dropped.
struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A tool that says it started, then neither ends nor heeds cancellation: only dropping
/// its future stops it.
fn hold_tool(started: mpsc::UnboundedSender<()>, dropped: Arc<AtomicUsize>) -> RustTool {
    RustTool::with_call("hold", "Holds.", move |_: NoArgs, _: ToolCall| {
        let started = started.clone();
        let dropped = Arc::clone(&dropped);
        async move {
            let _counted = Dropped(dropped);
            let _ = started.send(());
            std::future::pending::<()>().await;
            Ok::<_, String>("never")
        }
    })
}

/// The emulator on a runtime of its own, so that the test's runtime counts only the host's
/// tasks.
fn emulator() -> (String, std::sync::mpsc::Sender<()>) {
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let server = rt.block_on(async {
            let script = Script::from_json_str(SCRIPT).unwrap();
            MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
                .await
                .unwrap()
        });
        url_tx.send(server.base_url()).unwrap();
        let _ = stop_rx.recv();
        drop(server);
    });
    (url_rx.recv().unwrap(), stop_tx)
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Waits until `done` holds, giving up (and saying so) after a minute: a bound for a
/// broken build, not a measure of speed.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..6000 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_drive_stops_its_tools_and_its_interrupt_watcher() {
    const DROPPED_DRIVES: usize = 5;
    let (url, _stop) = emulator();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let journal = Journal::open(&db).await.unwrap();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let dropped = Arc::new(AtomicUsize::new(0));
    let client = Client::new(ClientConfig::new(
        url.as_str(),
        ApiKey::new(MOCK_API_KEY).unwrap(),
    ))
    .unwrap();
    let host = Arc::new(
        Host::new(journal.clone(), client).tool(hold_tool(started_tx, Arc::clone(&dropped))),
    );
    let new_run =
        |prompt: &str| NewRun::new(prompt, dir.path().to_path_buf()).approval(ApprovalMode::Auto);

    // A whole run first: what a process that drove runs keeps (pooled connections).
    let report = host
        .start(new_run("say hi"), DriveOptions::default())
        .await
        .unwrap();
    assert!(
        matches!(report.end, RunEnd::Completed { .. }),
        "{:?}",
        report.end
    );
    let before = alive_tasks();

    for _ in 0..DROPPED_DRIVES {
        let driving = {
            let host = Arc::clone(&host);
            let run = new_run("hold on");
            tokio::spawn(async move { host.start(run, DriveOptions::default()).await })
        };
        started.recv().await.unwrap();
        driving.abort();
        assert!(driving.await.unwrap_err().is_cancelled());
    }

    let stopped = eventually(|| dropped.load(Ordering::SeqCst) == DROPPED_DRIVES).await;
    assert!(
        stopped,
        "{} of {DROPPED_DRIVES} tool calls of dropped drives still run",
        DROPPED_DRIVES - dropped.load(Ordering::SeqCst)
    );
    let settled = eventually(|| alive_tasks() <= before).await;
    assert!(
        settled,
        "{} tasks alive after {DROPPED_DRIVES} dropped drives, {before} before",
        alive_tasks()
    );
    journal.close().await;
}
