//! Model latency over real HTTP and WebSocket: a reply's first output waits for the first
//! token, its deltas come at the token rate, a JSON reply waits for its last token; a rule's
//! latency replaces the script's, which replaces the server's. Only lower bounds are checked
//! (a loaded machine may be later, never earlier).

use std::time::{Duration, Instant};

use agent_responses_mock::{Latency, MockConfig, MockServer, Script, ScriptError};
use serde_json::{Value, json};

/// 200 characters: 50 tokens.
fn text() -> String {
    "abcd".repeat(50)
}

fn script(latency: Value, rule_latency: Option<Value>) -> Script {
    let mut rule = json!({"when": {"last_user_contains": "slow"},
        "reply": {"delta_chars": 20,
            "items": [{"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": text()}]}]}});
    if let Some(l) = rule_latency {
        rule["latency"] = l;
    }
    Script::from_json_str(&json!({"latency": latency, "rules": [rule]}).to_string()).unwrap()
}

async fn post(server: &MockServer, input: &str, stream: bool) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/responses", server.base_url()))
        .bearer_auth("sk-test")
        .json(&json!({"model": "m", "input": input, "stream": stream}))
        .send()
        .await
        .unwrap()
}

/// Each SSE event's type and when it arrived after `start`.
async fn timed_events(mut response: reqwest::Response, start: Instant) -> Vec<(String, Duration)> {
    let mut events = Vec::new();
    let mut buffer = String::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        let at = start.elapsed();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            if let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) {
                let event: Value = serde_json::from_str(data).unwrap();
                events.push((event["type"].as_str().unwrap_or("").to_owned(), at));
            }
        }
    }
    events
}

fn at(events: &[(String, Duration)], kind: &str, nth: usize) -> Duration {
    events
        .iter()
        .filter(|(k, _)| k == kind)
        .nth(nth)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("no {kind} #{nth} in {events:?}"))
}

#[tokio::test]
async fn a_streamed_reply_waits_for_its_first_token_then_streams_at_the_rate() {
    let latency = json!({"first_token_ms": 300, "tokens_per_second": 100});
    let server = MockServer::start(MockConfig::new(script(latency, None)))
        .await
        .unwrap();
    let start = Instant::now();
    let events = timed_events(post(&server, "slow please", true).await, start).await;
    let first = at(&events, "response.output_text.delta", 0);
    let last = at(&events, "response.output_text.delta", 9);
    assert!(first >= Duration::from_millis(300), "{events:?}");
    // Ten deltas of 5 tokens: the last starts after 45 tokens at 100/s.
    assert!(last - first >= Duration::from_millis(440), "{events:?}");
    assert!(
        at(&events, "response.completed", 0) >= Duration::from_millis(800),
        "{events:?}"
    );
    assert!(
        first - at(&events, "response.created", 0) >= Duration::from_millis(200),
        "response.created is not held back: {events:?}"
    );
}

#[tokio::test]
async fn a_json_reply_comes_when_its_last_token_would_have_and_rules_override_the_script() {
    // The script: 100 ms then 500 tokens/s; the rule: 400 ms and no rate limit.
    let server = MockServer::start(MockConfig::new(script(
        json!({"first_token_ms": 100, "tokens_per_second": 500}),
        Some(json!({"first_token_ms": 400})),
    )))
    .await
    .unwrap();
    let start = Instant::now();
    let response = post(&server, "slow please", false).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["output"][0]["content"][0]["text"], text());
    assert!(start.elapsed() >= Duration::from_millis(400));

    // No rule matches: the script's latency (the echo's output is 100 ms plus its tokens).
    let start = Instant::now();
    let response = post(&server, "quick", false).await;
    assert_eq!(response.status(), 200);
    assert!(start.elapsed() >= Duration::from_millis(100));
}

#[tokio::test]
async fn the_servers_latency_applies_when_the_script_sets_none() {
    let mut config = MockConfig::new(Script::default());
    config.latency = Latency {
        first_token_ms: 250,
        tokens_per_second: None,
    };
    let server = MockServer::start(config).await.unwrap();
    let start = Instant::now();
    let events = timed_events(post(&server, "hello", true).await, start).await;
    assert!(
        at(&events, "response.output_text.delta", 0) >= Duration::from_millis(250),
        "{events:?}"
    );
}

#[tokio::test]
async fn the_websocket_mode_takes_the_same_time() {
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    let latency = json!({"first_token_ms": 300, "tokens_per_second": 100});
    let server = MockServer::start(MockConfig::new(script(latency, None)))
        .await
        .unwrap();
    let mut ws = crate::ws_client::connect(&server).await;
    let start = Instant::now();
    let create = json!({"type": "response.create", "model": "m", "input": "slow please"});
    ws.send(Message::text(create.to_string())).await.unwrap();
    let mut events = Vec::new();
    while let Some(Ok(message)) = ws.next().await {
        let Message::Text(text) = message else {
            continue;
        };
        let event: Value = serde_json::from_str(&text).unwrap();
        let kind = event["type"].as_str().unwrap_or("").to_owned();
        events.push((kind.clone(), start.elapsed()));
        if kind == "response.completed" || kind == "error" {
            break;
        }
    }
    let first = at(&events, "response.output_text.delta", 0);
    assert!(first >= Duration::from_millis(300), "{events:?}");
    assert!(
        at(&events, "response.output_text.delta", 9) - first >= Duration::from_millis(440),
        "{events:?}"
    );
}

#[test]
fn a_rate_that_is_not_positive_is_refused_naming_the_rule() {
    let text = json!({"rules": [{"name": "r1", "latency": {"tokens_per_second": 0},
        "reply": {"echo": true}}]})
    .to_string();
    match Script::from_json_str(&text) {
        Err(ScriptError::Invalid(why)) => {
            assert!(
                why.contains("r1") && why.contains("tokens_per_second"),
                "{why}"
            );
        }
        other => panic!("expected an invalid script, got {other:?}"),
    }
    let unknown = json!({"latency": {"ttft_ms": 5}, "rules": []}).to_string();
    assert!(Script::from_json_str(&unknown).is_err());
}

/// A positive rate so small that a token takes longer than any client waits (and used to
/// overflow a duration in the handler) is refused up front: in a script, in a server's
/// settings, and in a script built in code.
#[tokio::test]
async fn a_vanishingly_small_rate_is_refused_before_serving() {
    let tiny = json!({"first_token_ms": 1, "tokens_per_second": 1e-300});
    let text = json!({"latency": tiny, "rules": []}).to_string();
    assert!(matches!(
        Script::from_json_str(&text),
        Err(ScriptError::Invalid(why)) if why.contains("at least")
    ));
    let mut config = MockConfig::new(Script::default());
    config.latency = Latency {
        first_token_ms: 1,
        tokens_per_second: Some(1e-300),
    };
    let refused = MockServer::start(config).await.unwrap_err();
    assert!(
        matches!(refused, agent_responses_mock::MockError::Latency(_)),
        "{refused}"
    );
    let script = Script {
        latency: serde_json::from_value(tiny).unwrap(),
        ..Script::default()
    };
    assert!(MockServer::start(MockConfig::new(script)).await.is_err());
}
