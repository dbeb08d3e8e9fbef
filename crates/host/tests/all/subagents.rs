//! Sub-agents through the library: children driven in the parent's process ask the
//! parent's inline decider, one question at a time, each naming the child's run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_host::run::events::ChildEnd;
use agent_host::run::{
    ApprovalReason, CallRecord, Decider, Decision, DriveOptions, Host, NewRun, RunEnd,
};
use agent_host::subagents::SubagentLimits;
use agent_journal::Journal;
use agent_responses::{ApiKey, Client, ClientConfig};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use futures::future::BoxFuture;
use serde_json::json;

/// Approves everything; counts how many questions are open at once.
#[derive(Default)]
struct Counting {
    open: AtomicUsize,
    most: AtomicUsize,
    asked: Mutex<Vec<String>>,
}

impl Decider for Counting {
    fn decide<'a>(
        &'a self,
        run_id: &'a str,
        _call: &'a CallRecord,
        _reason: ApprovalReason,
    ) -> BoxFuture<'a, Option<Decision>> {
        Box::pin(async move {
            let now = self.open.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            self.asked.lock().unwrap().push(run_id.to_string());
            // Give the other child every chance to ask meanwhile: it asks within this
            // second unless questions are taken one at a time (then the test is slower,
            // never wrong).
            let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
            while self.open.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < until {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            self.open.fetch_sub(1, Ordering::SeqCst);
            Some(Decision {
                approve: true,
                reason: None,
                by: Some("test".into()),
                scope: None,
            })
        })
    }
}

fn answer(text: &str) -> serde_json::Value {
    json!([{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_ask_the_parents_decider_one_at_a_time() {
    let mut rules = Vec::new();
    for (tag, line) in [("CHILD-A", "a"), ("CHILD-B", "b")] {
        rules.push(json!({"when": {"last_user_contains": tag, "tool_outputs": 0}, "reply": {"items": [
            {"type": "function_call", "call_id": format!("call_{line}"), "name": "shell",
             "arguments": json!({"command": format!("echo {line} >> effects.txt")}).to_string()}]}}));
        rules.push(
            json!({"when": {"last_user_contains": tag, "tool_outputs": 1},
            "reply": {"items": answer(&format!("{line} done"))}}),
        );
    }
    let agents = json!({"agents": [
        {"prompt": "CHILD-A", "instructions": null, "tools": ["shell"]},
        {"prompt": "CHILD-B", "instructions": null, "tools": ["shell"]}]});
    rules.push(json!({"when": {"tool_outputs": 0}, "reply": {"items": [
        {"type": "function_call", "call_id": "spawn", "name": "spawn_agents", "arguments": agents.to_string()}]}}));
    rules.push(json!({"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL")}}));
    let script = Script::from_json_str(&json!({"rules": rules}).to_string()).unwrap();
    let mock = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
        .await
        .unwrap();
    let client = Client::new(ClientConfig::new(
        mock.base_url(),
        ApiKey::new(MOCK_API_KEY).unwrap(),
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(&format!("sqlite://{}", dir.path().join("j.db").display()))
        .await
        .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let decider = Arc::new(Counting::default());
    // Unsandboxed, `shell` asks: each child's call goes to the decider.
    let run = NewRun::new("PARENT", ws.path()).subagents(Some(SubagentLimits::new(2)));
    let opts = DriveOptions {
        decider: Some(Arc::clone(&decider) as Arc<dyn Decider>),
        ..DriveOptions::default()
    };
    let report = Host::new(journal.clone(), client)
        .start(run, opts)
        .await
        .unwrap();
    assert_eq!(
        report.end,
        RunEnd::Completed {
            text: "FINAL".into()
        }
    );
    let children: Vec<String> = report
        .state
        .children()
        .iter()
        .map(|c| c.run_id.clone())
        .collect();
    assert_eq!(children.len(), 2);
    assert!(
        report
            .state
            .children()
            .iter()
            .all(|c| c.ended == Some(ChildEnd::Completed))
    );
    let mut asked = decider.asked.lock().unwrap().clone();
    asked.sort();
    let mut expected = children.clone();
    expected.sort();
    assert_eq!(asked, expected, "each child asked once, by its own run id");
    assert_eq!(
        decider.most.load(Ordering::SeqCst),
        1,
        "one question at a time"
    );
    let effects = std::fs::read_to_string(ws.path().join("effects.txt")).unwrap();
    let mut lines: Vec<&str> = effects.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["a", "b"]);
    journal.close().await;
}
