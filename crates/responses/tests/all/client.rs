//! The HTTP client against the emulator over real HTTP: retries, errors, SSE, faults.

use std::time::Duration;

use crate::common::{client_for, config_for, raw_server, start, start_with};
use agent_responses::retry::RetryPolicy;
use agent_responses::types::{CompactRequest, CreateResponse, Input, StreamEvent};
use agent_responses::{ApiKey, Client, ClientConfig, ClientError, EventStream};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use serde_json::json;

fn hello() -> CreateResponse {
    CreateResponse::new("gpt-test", Input::Text("hello".into()))
}

fn error_rule(status: u16, headers: serde_json::Value, times: Option<u32>) -> serde_json::Value {
    json!({"name": "fault", "times": times, "when": {"endpoint": "any"},
           "reply": {"error": {"status": status, "headers": headers, "message": format!("scripted {status}"),
                               "code": "scripted_code", "param": "input"}}})
}

fn retry_counts(server: &MockServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|r| {
            r.header("x-stainless-retry-count")
                .unwrap_or("-")
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn default_conversation_echoes_the_last_user_input() {
    let (_server, client) = start(json!({"rules": []})).await;
    let response = client.create(&hello()).await.unwrap();
    assert!(response.is_completed());
    assert_eq!(response.output_text(), "Echo: hello");
    let usage = response.usage.clone().flatten().unwrap();
    assert_eq!(usage.total_tokens, usage.input_tokens + usage.output_tokens);
}

#[tokio::test]
async fn retries_429_honouring_retry_after_ms_then_succeeds() {
    let (server, client) =
        start(json!({"rules": [error_rule(429, json!({"retry-after-ms": "5"}), Some(2))]})).await;
    let response = client.create(&hello()).await.unwrap();
    assert_eq!(response.output_text(), "Echo: hello");
    assert_eq!(retry_counts(&server), ["0", "1", "2"]);
}

#[tokio::test]
async fn persistent_429_gives_a_typed_error_after_three_attempts() {
    let (server, client) =
        start(json!({"rules": [error_rule(429, json!({"retry-after": "0"}), None)]})).await;
    let err = client.create(&hello()).await.unwrap_err();
    let api = err.api().expect("api error").clone();
    assert_eq!(api.status, Some(429));
    assert_eq!(api.kind.as_deref(), Some("rate_limit_error"));
    assert_eq!(api.code.as_deref(), Some("scripted_code"));
    assert_eq!(api.param.as_deref(), Some("input"));
    assert_eq!(api.message, "scripted 429");
    assert!(api.request_id.as_deref().unwrap().starts_with("req_"));
    assert!(
        err.to_string()
            .starts_with("Error code: 429 - scripted 429")
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn server_errors_retry_with_backoff() {
    let (server, client) = start(json!({"rules": [error_rule(500, json!({}), Some(2))]})).await;
    client.create(&hello()).await.unwrap();
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn x_should_retry_overrides_the_status() {
    let (server, client) =
        start(json!({"rules": [error_rule(500, json!({"x-should-retry": "false"}), None)]})).await;
    assert_eq!(
        client
            .create(&hello())
            .await
            .unwrap_err()
            .api()
            .unwrap()
            .status,
        Some(500)
    );
    assert_eq!(server.requests().len(), 1);

    let (server, client) =
        start(json!({"rules": [error_rule(400, json!({"x-should-retry": "true"}), Some(1))]}))
            .await;
    client.create(&hello()).await.unwrap();
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn no_retry_for_4xx_or_retry_after_above_the_cap() {
    let (server, client) = start(json!({"rules": [error_rule(400, json!({}), None)]})).await;
    client.create(&hello()).await.unwrap_err();
    assert_eq!(server.requests().len(), 1);
    let (server, client) =
        start(json!({"rules": [error_rule(429, json!({"retry-after": "121"}), None)]})).await;
    client.create(&hello()).await.unwrap_err();
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn connection_refused_is_retried_then_a_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = client_for(&format!("http://{addr}/v1"), MOCK_API_KEY);
    let err = client.create(&hello()).await.unwrap_err();
    assert!(matches!(err, ClientError::Connect(_)), "{err:?}");
}

#[tokio::test]
async fn wrong_or_missing_key_is_401_and_the_key_never_leaks() {
    let secret = "sk-super-secret-value-123";
    let (server, _) = start(json!({"rules": []})).await;
    let client = client_for(&server.base_url(), secret);
    let err = client.create(&hello()).await.unwrap_err();
    let api = err.api().unwrap();
    assert_eq!(api.status, Some(401));
    assert_eq!(api.code.as_deref(), Some("invalid_api_key"));
    for text in [
        format!("{err}"),
        format!("{err:?}"),
        format!("{client:?}"),
        format!("{:?}", client.config()),
    ] {
        assert!(!text.contains(secret), "key leaked in {text}");
    }
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.header("authorization") == Some("<redacted>"))
    );

    let raw = reqwest::Client::new()
        .post(format!("{}/responses", server.base_url()))
        .json(&json!({"model": "m", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 401);
    let body: serde_json::Value = raw.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("You didn't provide an API key.")
    );

    // A missing key is a clear error before any request.
    let none: Option<ApiKey> = ApiKey::new("   ");
    assert!(none.is_none());
}

/// The text of a stream's `output_text` deltas, in order.
fn delta_text(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::OutputTextDelta(d) => Some(d.delta.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn stream_follows_the_section_6_3_order() {
    let (_server, client) = start(json!({"rules": [{"when": {"stream": true}, "reply": {"items": [
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "scan", "arguments": "{\"module\":\"api\"}"},
        {"type": "message", "content": [{"type": "output_text", "text": "Hi there, this is long enough to split."}]}
    ]}}]})).await;
    let mut stream = client.create_stream(&hello()).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.unwrap());
    }
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.sequence_number(), Some(i as u64));
    }
    let names: Vec<&str> = events.iter().map(|e| e.type_name().unwrap()).collect();
    assert_eq!(
        names[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_item.done"
        ]
    );
    assert_eq!(
        names[4..6],
        [
            "response.output_item.added",
            "response.function_call_arguments.delta"
        ]
    );
    assert_eq!(
        delta_text(&events),
        "Hi there, this is long enough to split."
    );
    let Some(StreamEvent::Completed(done)) = events.last() else {
        panic!("last event {names:?}")
    };
    assert_eq!(done.response.output.len(), 3);
    assert!(done.response.usage.clone().flatten().is_some());
    let StreamEvent::Created(created) = &events[0] else {
        panic!()
    };
    assert_eq!(created.response.id, done.response.id);
    assert!(created.response.usage.clone().flatten().is_none());
}

#[tokio::test]
async fn a_filtered_stream_decodes_only_the_kept_events_and_still_ends_as_before() {
    let (_server, client) = start(json!({"rules": [{"when": {"stream": true}, "reply": {"items": [
        {"type": "function_call", "call_id": "call_1", "name": "scan", "arguments": "{}"},
        {"type": "message", "content": [{"type": "output_text", "text": "Hi there, this is long enough to split."}]}
    ]}}]})).await;
    let stream = client.create_stream(&hello()).await.unwrap();
    let mut stream = stream.only(|kind| kind == "response.output_text.delta");
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.unwrap());
    }
    let names: Vec<&str> = events.iter().map(|e| e.type_name().unwrap()).collect();
    let (last, deltas) = names.split_last().unwrap();
    assert_eq!(*last, "response.completed");
    assert!(deltas.len() > 1, "{names:?}");
    assert!(
        deltas.iter().all(|n| *n == "response.output_text.delta"),
        "{names:?}"
    );
    assert_eq!(
        delta_text(&events),
        "Hi there, this is long enough to split."
    );
    let Some(StreamEvent::Completed(done)) = events.last() else {
        panic!("last event {names:?}")
    };
    assert_eq!(done.response.output.len(), 2);

    // An error event is never filtered out: it still ends the stream as an error.
    let (_server, mut stream) = error_event_stream_keeping_nothing().await;
    let first = stream.next().await.unwrap();
    assert!(
        matches!(first, Err(ClientError::StreamError(_))),
        "{first:?}"
    );
    assert!(stream.next().await.is_none());
}

#[tokio::test]
async fn raw_events_are_the_typed_events_undecoded_and_end_the_same_way() {
    let script = json!({"rules": [{"when": {"stream": true}, "reply": {"items": [
        {"type": "function_call", "call_id": "call_1", "name": "scan", "arguments": "{}"},
        {"type": "message", "content": [{"type": "output_text", "text": "Hi there, this is long enough to split."}]}
    ]}}]});
    let (_server, client) = start(script).await;
    let mut typed = Vec::new();
    let mut stream = client.create_stream(&hello()).await.unwrap();
    while let Some(event) = stream.next().await {
        typed.push(event.unwrap());
    }
    let mut raw = Vec::new();
    let mut stream = client.create_stream(&hello()).await.unwrap();
    while let Some(event) = stream.next_raw().await {
        raw.push(event.unwrap());
    }
    assert!(
        stream.next_raw().await.is_none(),
        "ended after the terminal event"
    );
    assert_eq!(raw.len(), typed.len());
    for (raw, typed) in raw.iter().zip(&typed) {
        assert_eq!(Some(raw.kind()), typed.type_name());
        // Ids and times are minted per response: compare the shape, not the values.
        let (r, t) = (raw.decode().unwrap(), typed);
        assert_eq!(r.type_name(), t.type_name());
        assert_eq!(r.sequence_number(), t.sequence_number());
    }
    assert_eq!(raw.last().unwrap().kind(), "response.completed");

    // Filtered, an error event still ends the stream as an error, not as a raw event.
    let (_server, mut stream) = error_event_stream_keeping_nothing().await;
    let first = stream.next_raw().await.unwrap();
    assert!(
        matches!(first, Err(ClientError::StreamError(_))),
        "{first:?}"
    );
    assert!(stream.next_raw().await.is_none());
}

/// A stream whose fourth event is an `error` event, filtered to keep no other event.
async fn error_event_stream_keeping_nothing() -> (MockServer, EventStream) {
    let script: Script = serde_json::from_value(json!({"rules": [{"when": {"stream": true},
        "reply": {"items": [{"type": "message", "content": [{"type": "output_text", "text": "one two"}]}]},
        "fault": {"after_events": 3, "kind": "error_event"}}]}))
    .unwrap();
    let server = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
        .await
        .unwrap();
    let client = client_for(&server.base_url(), MOCK_API_KEY);
    let stream = client
        .create_stream(&hello())
        .await
        .unwrap()
        .only(|_| false);
    (server, stream)
}

async fn stream_error(fault: serde_json::Value, idle: Option<Duration>) -> ClientError {
    let script: Script = serde_json::from_value(json!({"rules": [{"when": {"stream": true},
        "reply": {"items": [{"type": "message", "content": [{"type": "output_text", "text": "one two three four five six"}]}]},
        "fault": fault}]})).unwrap();
    let server = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
        .await
        .unwrap();
    let mut config = ClientConfig::new(server.base_url(), ApiKey::new(MOCK_API_KEY).unwrap());
    if let Some(idle) = idle {
        config.stream_idle_timeout = idle;
    }
    let client = Client::new(config).unwrap();
    let mut stream = client.create_stream(&hello()).await.unwrap();
    let mut seen = 0;
    loop {
        match stream.next().await {
            Some(Ok(_)) => seen += 1,
            Some(Err(err)) => {
                assert!(seen >= 3, "error came before the fault point");
                assert!(
                    stream.next().await.is_none(),
                    "the stream ends after an error"
                );
                return err;
            }
            None => panic!("stream ended without an error"),
        }
    }
}

#[tokio::test]
async fn a_cut_stream_is_an_error_not_a_hang() {
    let err = stream_error(json!({"after_events": 3, "kind": "cut"}), None).await;
    assert!(matches!(err, ClientError::StreamEndedEarly), "{err:?}");
}

#[tokio::test]
async fn keep_alive_comments_do_not_hold_a_silent_stream_open() {
    // Comments every 20 ms, no event after the third: the idle timeout counts events.
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        stream_error(
            json!({"after_events": 3, "kind": "keep_alive", "every_ms": 20}),
            Some(Duration::from_millis(300)),
        ),
    )
    .await
    .expect("keep-alive comments held the stream open past its idle timeout");
    assert!(matches!(err, ClientError::StreamIdleTimeout(_)), "{err:?}");
}

#[tokio::test]
async fn a_stream_slower_in_total_than_its_idle_timeout_completes() {
    // 48 deltas 25 ms apart (1.2 s in all) against a 300 ms idle timeout.
    let script: Script = serde_json::from_value(json!({
        "latency": {"first_token_ms": 100, "tokens_per_second": 40},
        "rules": [{"when": {"stream": true},
        "reply": {"delta_chars": 4, "items": [{"type": "message", "content": [{"type": "output_text", "text": "x".repeat(192)}]}]}}]}))
    .unwrap();
    let server = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
        .await
        .unwrap();
    let mut config = ClientConfig::new(server.base_url(), ApiKey::new(MOCK_API_KEY).unwrap());
    config.stream_idle_timeout = Duration::from_millis(300);
    let client = Client::new(config).unwrap();
    let started = std::time::Instant::now();
    let response = client
        .create_stream(&hello())
        .await
        .unwrap()
        .final_response()
        .await
        .unwrap();
    assert_eq!(response.output_text(), "x".repeat(192));
    assert!(
        started.elapsed() > Duration::from_millis(600),
        "the reply was not slow"
    );
}

#[tokio::test]
async fn a_stalled_stream_hits_the_idle_timeout() {
    let err = stream_error(
        json!({"after_events": 3, "kind": "stall"}),
        Some(Duration::from_millis(300)),
    )
    .await;
    assert!(matches!(err, ClientError::StreamIdleTimeout(_)), "{err:?}");
}

#[tokio::test]
async fn nested_and_flat_error_events_become_stream_errors() {
    for shape in ["nested", "flat"] {
        let err = stream_error(
            json!({"after_events": 3, "kind": "error_event", "shape": shape}),
            None,
        )
        .await;
        let ClientError::StreamError(api) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(
            api.message,
            "The emulator was scripted to fail this stream."
        );
        assert_eq!(api.code.as_deref(), Some("server_error"));
    }
}

#[tokio::test]
async fn validation_uses_the_api_messages() {
    let (_server, client) = start(json!({"rules": []})).await;
    let call =
        json!({"type": "function_call", "call_id": "call_x", "name": "scan", "arguments": "{}"});
    let output = json!({"type": "function_call_output", "call_id": "call_y", "output": "{}"});
    let cases = [
        (
            json!({"model": "m", "input": [call]}),
            "No tool output found for function call call_x.",
        ),
        (
            json!({"model": "m", "input": [output]}),
            "No tool call found for function call output with call_id call_y.",
        ),
        (
            json!({"model": "m", "input": "hi", "previous_response_id": "resp_nope"}),
            "Previous response with id 'resp_nope' not found.",
        ),
    ];
    for (body, message) in cases {
        let request: CreateResponse = serde_json::from_value(body).unwrap();
        let err = client.create(&request).await.unwrap_err();
        let api = err.api().unwrap();
        assert_eq!((api.status, api.message.as_str()), (Some(400), message));
        assert_eq!(api.kind.as_deref(), Some("invalid_request_error"));
    }
    let request: CreateResponse = serde_json::from_value(
        json!({"model": "m", "input": "hi", "previous_response_id": "resp_nope"}),
    )
    .unwrap();
    let api = client
        .create(&request)
        .await
        .unwrap_err()
        .api()
        .unwrap()
        .clone();
    assert_eq!(api.code.as_deref(), Some("previous_response_not_found"));
    assert_eq!(api.param.as_deref(), Some("previous_response_id"));
}

#[tokio::test]
async fn stored_responses_are_retrievable_and_chainable() {
    let (_server, client) =
        start_with(MockConfig::new(Script::default()).with_api_key(MOCK_API_KEY)).await;
    let first = client.create(&hello()).await.unwrap();
    let fetched = client.retrieve(&first.id).await.unwrap();
    assert_eq!(fetched, first);
    let mut next = CreateResponse::new("gpt-test", Input::Text("again".into()));
    next.previous_response_id = Some(Some(first.id.clone()));
    assert_eq!(
        client.create(&next).await.unwrap().output_text(),
        "Echo: again"
    );
    let err = client.retrieve("resp_missing").await.unwrap_err();
    assert_eq!(err.api().unwrap().status, Some(404));
    // store:false responses cannot be chained.
    let mut unstored = hello();
    unstored.store = Some(Some(false));
    let id = client.create(&unstored).await.unwrap().id;
    next.previous_response_id = Some(Some(id));
    assert_eq!(
        client
            .create(&next)
            .await
            .unwrap_err()
            .api()
            .unwrap()
            .status,
        Some(400)
    );
}

#[tokio::test]
async fn compact_returns_user_messages_and_one_compaction_item() {
    let (_server, client) = start(json!({"rules": []})).await;
    let request: CompactRequest = serde_json::from_value(json!({"model": "m", "input": [
        {"role": "user", "content": "first"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"role": "user", "content": "second"}]})).unwrap();
    let compacted = client.compact(&request).await.unwrap();
    assert_eq!(compacted.extra["object"], "response.compaction");
    let types: Vec<_> = compacted
        .output
        .iter()
        .map(|i| i.type_name().unwrap().to_owned())
        .collect();
    assert_eq!(types, ["message", "message", "compaction"]);
    // A forged compaction item is refused.
    let forged: CreateResponse = serde_json::from_value(json!({"model": "m", "input": [
        {"type": "compaction", "id": "cmp_x", "encrypted_content": "forged"}, {"role": "user", "content": "go"}]})).unwrap();
    let api = client
        .create(&forged)
        .await
        .unwrap_err()
        .api()
        .unwrap()
        .clone();
    assert_eq!(
        api.message,
        "The encrypted content for item cmp_x could not be verified."
    );
}

fn h2_client(base: &str) -> Client {
    let mut config = config_for(base, MOCK_API_KEY);
    config.http2_prior_knowledge = true;
    Client::new(config).expect("client")
}

#[tokio::test]
async fn http2_prior_knowledge_opens_with_the_http2_preface() {
    use tokio::io::AsyncReadExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let h2 = h2_client(&base);
    let request = tokio::spawn(async move { h2.create(&hello()).await });
    let (mut socket, _) = listener.accept().await.unwrap();
    let mut preface = [0u8; 24];
    socket.read_exact(&mut preface).await.unwrap();
    assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    // Off by default: the same request opens with an HTTP/1.1 request line.
    let plain = client_for(&base, MOCK_API_KEY);
    let plain = tokio::spawn(async move { plain.create(&hello()).await });
    let (mut socket, _) = listener.accept().await.unwrap();
    let mut line = [0u8; 17];
    socket.read_exact(&mut line).await.unwrap();
    assert_eq!(&line, b"POST /v1/response");
    request.abort();
    plain.abort();
}

#[tokio::test]
async fn concurrent_streams_over_http2_each_end_with_their_own_answer() {
    let (server, _) = start(json!({"rules": []})).await;
    let client = h2_client(&server.base_url());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let client = client.clone();
        tasks.spawn(async move {
            let request = CreateResponse::new("gpt-test", Input::Text(format!("n{i}")));
            let response = client
                .create_stream(&request)
                .await
                .unwrap()
                .final_response()
                .await
                .unwrap();
            (i, response.output_text())
        });
    }
    let mut answers = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (i, text) = joined.unwrap();
        assert_eq!(text, format!("Echo: n{i}"));
        answers.push(i);
    }
    assert_eq!(answers.len(), 20);
}

/// Issue 37, item 6: statuses a retry cannot fix are `Retry::Never`, sent once, with the
/// API's message; the SDK's retryable statuses are `Retry::Backoff`, after the client's own
/// retries.
#[tokio::test]
async fn errors_a_retry_cannot_fix_are_never_retried_and_keep_the_api_message() {
    use agent_responses::retry::Retry;
    for status in [400, 401, 403, 404, 422] {
        let (server, client) = start(json!({"rules": [error_rule(status, json!({}), None)]})).await;
        let err = client.create(&hello()).await.unwrap_err();
        assert_eq!(err.retry(), Retry::Never, "{status}");
        assert!(!err.is_retryable());
        let api = err.api().unwrap();
        assert_eq!(
            (api.status, api.message.as_str()),
            (Some(status), format!("scripted {status}").as_str())
        );
        assert_eq!(server.requests().len(), 1, "{status} was sent again");
        assert_eq!(RetryPolicy::default().backoff(&err, 0), None);
    }
    for status in [408, 409, 429, 500, 502, 503] {
        let (server, client) = start(json!({"rules": [error_rule(status, json!({}), None)]})).await;
        let err = client.create(&hello()).await.unwrap_err();
        assert_eq!(err.retry(), Retry::Backoff, "{status}");
        assert!(err.is_retryable());
        assert_eq!(server.requests().len(), 3, "{status}");
    }
    for err in [
        ClientError::MissingApiKey,
        ClientError::InvalidBaseUrl("ftp://x".into()),
        ClientError::Decode("bad".into()),
    ] {
        assert_eq!(err.retry(), Retry::Never, "{err}");
    }
}

/// Issue 37, item 7: a cut stream is retryable and waits the same backoff as a 5xx: the
/// policy's delay for it is never zero (0.375-0.5 s before the first retry, doubling), and
/// a `retry-after` the API sent is used as given.
#[tokio::test]
async fn a_cut_stream_is_retryable_and_waits_the_same_backoff_as_a_5xx() {
    use agent_responses::retry::Retry;
    let cut = stream_error(json!({"after_events": 3, "kind": "cut"}), None).await;
    assert!(matches!(cut, ClientError::StreamEndedEarly), "{cut:?}");
    assert_eq!(cut.retry(), Retry::Backoff);
    let (_server, client) = start(json!({"rules": [error_rule(500, json!({}), None)]})).await;
    let server_error = client.create(&hello()).await.unwrap_err();
    let policy = RetryPolicy::default();
    for retries in 0..policy.max_retries {
        let base = Duration::from_millis(500) * 2u32.pow(retries);
        for err in [&cut, &server_error] {
            let delay = policy.backoff(err, retries).unwrap();
            assert!(
                delay >= base * 3 / 4 && delay <= base,
                "{err}: retry {retries} waits {delay:?}"
            );
        }
    }
    assert_eq!(policy.backoff(&cut, policy.max_retries), None);
    assert_eq!(
        policy.delay(0, Some(Duration::from_secs(3))),
        Duration::from_secs(3)
    );
    // A wait the API asks for above two minutes is not waited for: the backoff instead.
    assert!(policy.delay(0, Some(Duration::from_secs(121))) <= Duration::from_millis(500));
}

/// Issue 32: a 2xx whose body is cut is not POSTed again (the first may be billed): one
/// request, and a typed error that says the answer was lost. The server sends the headers
/// and half the body, then closes.
#[tokio::test]
async fn a_2xx_body_lost_while_reading_is_not_posted_again() {
    let (base, arrivals) = raw_server(vec![
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 400\r\n\r\n{\"id\":\"resp_1\",\"object\":\"resp".to_vec(),
    ])
    .await;
    let requests = || arrivals.lock().unwrap().len();
    let client = client_for(&base, MOCK_API_KEY);
    let err = client.create(&hello()).await.unwrap_err();
    assert!(matches!(err, ClientError::BodyLost(_)), "{err:?}");
    assert_eq!(requests(), 1, "the request was sent again");
    let err = client
        .compact(
            &serde_json::from_value::<CompactRequest>(json!({"model": "m", "input": "hi"}))
                .unwrap(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::BodyLost(_)), "{err:?}");
    assert_eq!(requests(), 2, "the compaction was sent again");
}
