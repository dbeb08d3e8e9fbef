//! A person's decision that lands while the driver launches the step's other calls: the
//! first decision of a round wins, also against the driver's own "approve --always".

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_host::run::events::DecisionScope;
use agent_host::run::{
    Decision, DecisionRequest, DriveOptions, Host, NewRun, Observer, RunState, decide, kinds,
};
use agent_host::tools::ApprovalMode;
use agent_journal::{Event, Journal};
use serde_json::json;

fn shell_call(id: &str, command: &str) -> serde_json::Value {
    json!({"type": "function_call", "call_id": id, "name": "shell",
           "arguments": json!({"command": command, "timeout_ms": null}).to_string()})
}

/// Denies `call_y` from another thread (another process, as far as the driver knows) the
/// moment the driver folds the person's "approve --always" of `call_x`: after the driver
/// read the step's open calls, before it decides `call_y` by that "always".
struct DenyWhenXIsApproved {
    journal: Journal,
    done: Mutex<bool>,
}

impl Observer for DenyWhenXIsApproved {
    fn event(&self, state: &RunState, event: &Event) {
        let x_approved = &*event.kind == kinds::APPROVAL_DECIDED
            && event.payload["call_id"] == "call_x"
            && event.payload["approve"] == true;
        let mut done = self.done.lock().unwrap();
        if !x_approved || *done {
            return;
        }
        *done = true;
        let (journal, run_id) = (self.journal.clone(), state.id().to_string());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(decide(&journal, &run_id, deny("call_y")))
                .unwrap();
        })
        .join()
        .unwrap();
    }
}

fn deny(call: &str) -> DecisionRequest {
    DecisionRequest {
        call_id: call.into(),
        decision: Decision {
            approve: false,
            reason: Some("nope".into()),
            by: Some("ana".into()),
            scope: None,
        },
        args_sha256: None,
        round: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_taken_before_the_drivers_always_wins_and_the_call_never_runs() {
    let script = json!({"rules": [
        {"when": {"tool_outputs": 0}, "reply": {"items": [
            shell_call("call_x", "echo x >> lines.txt"),
            shell_call("call_y", "echo y >> lines.txt")]}},
        {"when": {"tool_outputs": 2}, "reply": {"items": [
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "done"}]}]}}]});
    let (_server, client) = crate::bench_script::serve_script(&script.to_string()).await;
    let journal = Journal::open("memory:").await.unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let host = Host::new(journal.clone(), client);
    let observer = Arc::new(DenyWhenXIsApproved {
        journal: journal.clone(),
        done: Mutex::new(false),
    });
    let opts = DriveOptions {
        observer,
        wait: true,
        ..DriveOptions::default()
    };
    let run = NewRun::new("two commands", workspace.path()).approval(ApprovalMode::Ask);
    let drive = tokio::spawn(async move { host.start(run, opts).await });

    // Both calls ask; then a person approves `call_x` for the rest of the run.
    let run_id = loop {
        let threads = journal.threads().await.unwrap();
        if let Some(thread) = threads.iter().find(|t| t.starts_with("run:")) {
            let events = journal.replay(thread, 0).await.unwrap();
            let asked = events
                .iter()
                .filter(|e| &*e.kind == kinds::APPROVAL_REQUESTED)
                .count();
            if asked == 2 {
                break thread.trim_start_matches("run:").to_string();
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let always = DecisionRequest {
        call_id: "call_x".into(),
        decision: Decision {
            approve: true,
            reason: None,
            by: Some("ana".into()),
            scope: Some(DecisionScope::Run),
        },
        args_sha256: None,
        round: None,
    };
    decide(&journal, &run_id, always).await.unwrap();
    let report = tokio::time::timeout(Duration::from_secs(60), drive)
        .await
        .expect("the run ended")
        .unwrap()
        .unwrap();

    let lines = std::fs::read_to_string(workspace.path().join("lines.txt")).unwrap();
    assert_eq!(lines, "x\n", "the denied call ran");
    let y = report.state.call("call_y").unwrap();
    let decided: Vec<_> = y
        .approvals
        .iter()
        .filter_map(|a| a.decision.as_ref())
        .map(|d| d.approve)
        .collect();
    assert_eq!(decided, vec![false]);
}
