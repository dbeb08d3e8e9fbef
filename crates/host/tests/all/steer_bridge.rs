//! `run_steered` against the emulator over a real WebSocket on 127.0.0.1, with and without
//! a runtime turn whose revision follows the steer.

use std::time::Duration;

use agent_host::steer_bridge::{RevisionBridge, SteerProgress, SteeredRequest, run_steered};
use agent_journal::Journal;
use agent_responses::ApiKey;
use agent_responses::ws::WsConfig;
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};

async fn emulator() -> (MockServer, WsConfig) {
    let mut mock = MockConfig::new(Script::default()).with_api_key(MOCK_API_KEY);
    mock.ws.steer_window = Some(Duration::from_secs(60));
    let server = MockServer::start(mock).await.unwrap();
    let mut config = WsConfig::new(server.base_url(), ApiKey::new(MOCK_API_KEY).unwrap());
    config.request_timeout = Duration::from_secs(60);
    (server, config)
}

fn request() -> SteeredRequest {
    SteeredRequest {
        model: "gpt-test".into(),
        prompt: "plan a task tracker".into(),
        steer: "new constraint: two days, one person".into(),
    }
}

/// Progress as short strings, in order.
fn label(progress: &SteerProgress<'_>) -> String {
    match progress {
        SteerProgress::Accepted { .. } => "accepted".into(),
        SteerProgress::RevisionBumped { revision } => format!("revision {revision}"),
        SteerProgress::Committed { .. } => "committed".into(),
        SteerProgress::RuntimeCommitted { revision, .. } => format!("runtime commit {revision}"),
    }
}

#[tokio::test]
async fn the_successor_answers_after_accept_and_commit() {
    let (_server, config) = emulator().await;
    let mut seen = Vec::new();
    let answer = run_steered(config, &request(), None, |p| {
        seen.push(label(&p));
        Ok::<(), std::convert::Infallible>(())
    })
    .await
    .unwrap();
    assert_eq!(seen, ["accepted", "committed"]);
    assert!(answer.response_id.starts_with("resp_"));
    assert!(answer.lines.join("\n").contains("two days, one person"));
}

#[tokio::test]
async fn with_a_runtime_turn_the_steer_is_a_revision_and_the_stale_proposal_is_refused() {
    let (_server, config) = emulator().await;
    let journal = Journal::open("memory:").await.unwrap();
    let mut bridge = RevisionBridge::start(journal.clone(), "steered")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut refusal = String::new();
    let answer = run_steered(config, &request(), Some(&mut bridge), |p| {
        if let SteerProgress::RuntimeCommitted { stale_refused, .. } = &p {
            refusal = stale_refused.to_string();
        }
        seen.push(label(&p));
        Ok::<(), std::convert::Infallible>(())
    })
    .await
    .unwrap();
    assert_eq!(
        seen,
        ["accepted", "revision 1", "committed", "runtime commit 1"]
    );
    assert!(
        refusal.contains("proposal predates user update"),
        "{refusal}"
    );
    let kinds: Vec<String> = journal
        .replay("steered", 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind.to_string())
        .collect();
    // One steer, one commit (the stale proposal left no trace), then the turn's end.
    assert_eq!(
        kinds,
        [
            "turn.started",
            "steer.accepted",
            "proposal.committed",
            "turn.completed"
        ]
    );
    assert!(!answer.lines.is_empty());
    bridge.close().await;
}
