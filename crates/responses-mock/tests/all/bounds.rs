//! What a long-running emulator keeps: only authorised requests, credentials redacted, and a
//! bounded number of requests and stored responses.

use agent_responses_mock::{MockConfig, MockServer, script::Script};
use serde_json::{Value, json};

const KEY: &str = "sk-test-key";

async fn server() -> MockServer {
    let script = Script::from_json_str(r#"{"rules": []}"#).unwrap();
    MockServer::start(MockConfig::new(script).with_api_key(KEY))
        .await
        .unwrap()
}

async fn create(server: &MockServer, key: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/responses", server.base_url()))
        .bearer_auth(key)
        .header("x-api-key", "sk-other-secret")
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn only_authorised_requests_are_kept_and_credentials_are_redacted() {
    let server = server().await;
    let body = json!({"model": "m", "input": "hi"});
    assert_eq!(create(&server, "sk-wrong", &body).await.status(), 401);
    assert!(
        server.requests().is_empty(),
        "a refused request is not kept"
    );
    assert_eq!(create(&server, KEY, &body).await.status(), 200);
    let kept = server.requests();
    assert_eq!(kept.len(), 1);
    let text = format!("{kept:?}");
    assert!(
        !text.contains(KEY) && !text.contains("sk-other-secret"),
        "{text}"
    );

    // The inspection route needs the key too.
    let url = format!("http://{}/__mock/requests", server.addr());
    let client = reqwest::Client::new();
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    let listed = client.get(&url).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(listed.status(), 200);
    let listed: Value = listed.json().await.unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["headers"]["x-api-key"], "<redacted>");
}

#[tokio::test]
async fn the_oldest_stored_responses_and_requests_are_forgotten() {
    let server = server().await;
    let mut first = None;
    for n in 0..1001 {
        let response = create(
            &server,
            KEY,
            &json!({"model": "m", "input": format!("{n}")}),
        )
        .await;
        let response: Value = response.json().await.unwrap();
        first.get_or_insert(response["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(server.requests().len(), 1000);
    let follow_up = create(
        &server,
        KEY,
        &json!({"model": "m", "input": "more", "previous_response_id": first.unwrap()}),
    )
    .await;
    assert_eq!(follow_up.status(), 400);
    let error: Value = follow_up.json().await.unwrap();
    assert_eq!(error["error"]["param"], "previous_response_id", "{error}");
}

async fn websocket(server: &MockServer) -> WsClient {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let url = format!("ws://{}/v1/responses", server.addr());
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {KEY}").parse().unwrap());
    tokio_tungstenite::connect_async(request).await.unwrap().0
}

type WsClient =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

#[tokio::test]
async fn a_clean_websocket_close_is_answered_with_a_close_frame() {
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    let server = server().await;
    let mut ws = websocket(&server).await;
    ws.send(Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    })))
    .await
    .unwrap();
    match ws.next().await {
        Some(Ok(Message::Close(_))) => {}
        other => panic!("expected the server's close frame, got {other:?}"),
    }
}

#[tokio::test]
async fn a_websocket_message_over_the_body_limit_ends_the_connection() {
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    let server = server().await;
    let mut ws = websocket(&server).await;
    let huge = json!({"type": "response.create", "model": "m", "input": "x".repeat(3 << 20)});
    let _ = ws.send(Message::text(huge.to_string())).await;
    // No reply to the oversized request: the connection ends (a close frame or an error).
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(text))) => panic!("answered an oversized message: {text}"),
            Some(Ok(Message::Close(_)) | Err(_)) | None => break,
            Some(Ok(_)) => {}
        }
    }
    assert!(server.ws_frames().is_empty());
}

#[tokio::test]
async fn an_oversized_body_and_a_wrong_method_get_json_errors() {
    let server = server().await;
    let client = reqwest::Client::new();
    let huge = json!({"model": "m", "input": "x".repeat(3 << 20)});
    let response = create(&server, KEY, &huge).await;
    assert_eq!(response.status(), 413);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    assert!(server.requests().is_empty());

    let response = client
        .delete(format!("{}/responses/resp_1", server.base_url()))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("DELETE /v1/responses/resp_1"),
        "{error}"
    );
}

/// Every event of a stream is built before the first is sent: a long echo is streamed in
/// a bounded number of deltas instead of one event per 8 characters.
#[tokio::test]
async fn a_long_streamed_echo_has_a_bounded_number_of_events() {
    let server = server().await;
    let input = "y".repeat(1 << 20);
    let response = create(
        &server,
        KEY,
        &json!({"model": "m", "input": input, "stream": true}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let events = body.lines().filter(|l| l.starts_with("data:")).count();
    assert!(events < 600, "{events} events");
    let text: String = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        text.ends_with(&input),
        "the deltas still add up to the echo"
    );
}

/// A rule's own `delta_chars` is kept, but never makes more than `MAX_SCRIPTED_DELTAS`
/// deltas: a 1-character typewriter echoing a large input would otherwise build an event
/// per character (a million for 1 MB) before sending the first.
#[tokio::test]
async fn a_scripted_delta_size_cannot_make_an_unbounded_number_of_events() {
    use agent_responses_mock::sse::MAX_SCRIPTED_DELTAS;
    let script = Script::from_json_str(
        &json!({"rules": [{"name": "typewriter", "reply": {"delta_chars": 1, "items": [
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "{{last_user}}"}]}]}}]})
        .to_string(),
    )
    .unwrap();
    let server = MockServer::start(MockConfig::new(script).with_api_key(KEY))
        .await
        .unwrap();
    let deltas = |body: &str| -> Vec<String> {
        body.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| e["delta"].as_str().unwrap().to_owned())
            .collect()
    };
    // A short text keeps the rule's size exactly.
    let short = create(
        &server,
        KEY,
        &json!({"model": "m", "input": "abc", "stream": true}),
    )
    .await;
    assert_eq!(deltas(&short.text().await.unwrap()), ["a", "b", "c"]);
    let input = "z".repeat(100_000);
    let response = create(
        &server,
        KEY,
        &json!({"model": "m", "input": input, "stream": true}),
    )
    .await;
    let streamed = deltas(&response.text().await.unwrap());
    assert!(
        streamed.len() <= MAX_SCRIPTED_DELTAS,
        "{} deltas",
        streamed.len()
    );
    assert_eq!(streamed.concat(), input);
}

/// A WebSocket connection keeps its most recent 1000 responses, as the server's store does:
/// a long session with `store: false` forgets the oldest instead of growing without bound.
#[tokio::test]
async fn a_websocket_connection_forgets_its_oldest_responses() {
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    let server = server().await;
    let mut ws = websocket(&server).await;
    let mut create = async |body: Value| -> Value {
        ws.send(Message::text(body.to_string())).await.unwrap();
        loop {
            let Some(Ok(Message::Text(text))) = ws.next().await else {
                panic!("connection ended");
            };
            let event: Value = serde_json::from_str(&text).unwrap();
            if event["type"] == "response.completed" || event["type"] == "error" {
                return event;
            }
        }
    };
    let mut first = None;
    let mut previous: Option<String> = None;
    for n in 0..1001 {
        let mut body = json!({"type": "response.create", "model": "m",
            "input": format!("{n}"), "store": false});
        if let Some(id) = &previous {
            body["previous_response_id"] = json!(id);
        }
        let event = create(body).await;
        let id = event["response"]["id"].as_str().unwrap().to_owned();
        first.get_or_insert(id.clone());
        previous = Some(id);
    }
    let recent = create(
        json!({"type": "response.create", "model": "m", "input": "more",
        "store": false, "previous_response_id": previous.unwrap()}),
    )
    .await;
    assert_eq!(recent["type"], "response.completed", "{recent}");
    let forgotten = create(
        json!({"type": "response.create", "model": "m", "input": "more",
        "store": false, "previous_response_id": first.unwrap()}),
    )
    .await;
    assert_eq!(forgotten["type"], "error", "{forgotten}");
    assert_eq!(
        forgotten["error"]["code"], "previous_response_not_found",
        "{forgotten}"
    );
}

/// The bytes of recorded requests and WebSocket frames are bounded too (32 MiB per store),
/// not only their count: 20 messages of almost 2 MiB keep the most recent that fit, the
/// newest always, and what is kept weighs about what was received.
#[tokio::test]
async fn recorded_requests_and_websocket_frames_are_bounded_by_bytes() {
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    const BUDGET: usize = 32 * 1024 * 1024;
    const SENT: usize = 20;
    let pad = "x".repeat(1900 * 1024);
    let server = server().await;

    let mut ws = websocket(&server).await;
    for n in 0..SENT {
        let frame = json!({"type": "bogus", "n": n, "pad": pad}).to_string();
        ws.send(Message::text(frame)).await.unwrap();
        // Each gets its error event: the frame was handled (and recorded) by then.
        loop {
            let Some(Ok(Message::Text(text))) = ws.next().await else {
                panic!("connection ended");
            };
            if serde_json::from_str::<Value>(&text).unwrap()["type"] == "error" {
                break;
            }
        }
    }
    let frames = server.ws_frames();
    let weight: usize = frames.iter().map(|f| f.to_string().len()).sum();
    assert!(weight <= BUDGET, "{weight} bytes of frames kept");
    assert!(
        frames.len() > 2 && frames.len() < SENT,
        "{} kept",
        frames.len()
    );
    assert_eq!(frames.last().unwrap()["n"], SENT - 1, "the newest is kept");
    let oldest = frames[0]["n"].as_u64().unwrap() as usize;
    assert_eq!(oldest, SENT - frames.len(), "the oldest went first");

    let client = reqwest::Client::new();
    for n in 0..SENT {
        let body = json!({"model": 5, "n": n, "pad": pad});
        let response = client
            .post(format!("{}/responses", server.base_url()))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400);
    }
    let requests = server.requests();
    let weight: usize = requests.iter().map(|r| r.body.to_string().len()).sum();
    assert!(weight <= BUDGET, "{weight} bytes of requests kept");
    assert!(
        requests.len() > 2 && requests.len() < SENT,
        "{} kept",
        requests.len()
    );
    assert_eq!(requests.last().unwrap().body["n"], SENT - 1);
}

/// Stored responses are bounded by their estimated bytes (64 MiB per store), not only by
/// their count: 20 responses to requests of almost 2 MiB forget the oldest, which a
/// `previous_response_id` or a retrieval then finds as it finds an unknown id.
#[tokio::test]
async fn stored_responses_are_bounded_by_bytes() {
    const SENT: usize = 20;
    let pad = "x".repeat(1900 * 1024);
    let server = server().await;
    let mut ids = Vec::new();
    for n in 0..SENT {
        let response = create(
            &server,
            KEY,
            &json!({"model": "m", "input": format!("{n} {pad}")}),
        )
        .await;
        assert_eq!(response.status(), 200);
        let response: Value = response.json().await.unwrap();
        ids.push(response["id"].as_str().unwrap().to_owned());
    }
    let follow = async |id: &str| -> (u16, Value) {
        let response = create(
            &server,
            KEY,
            &json!({"model": "m", "input": "more", "previous_response_id": id}),
        )
        .await;
        (response.status().as_u16(), response.json().await.unwrap())
    };
    let (status, _) = follow(&ids[SENT - 1]).await;
    assert_eq!(status, 200, "the newest is kept");
    let (forgotten_status, forgotten) = follow(&ids[0]).await;
    let (unknown_status, unknown) = follow("resp_unknown").await;
    assert_eq!(forgotten_status, unknown_status);
    assert_eq!(forgotten_status, 400);
    assert_eq!(
        forgotten["error"]["message"],
        format!("Previous response with id '{}' not found.", ids[0])
    );
    assert_eq!(forgotten["error"]["code"], unknown["error"]["code"]);
    assert_eq!(forgotten["error"]["param"], unknown["error"]["param"]);

    let get = |id: &str| {
        reqwest::Client::new()
            .get(format!("{}/responses/{id}", server.base_url()))
            .bearer_auth(KEY)
            .send()
    };
    assert_eq!(get(&ids[0]).await.unwrap().status(), 404);
    assert_eq!(get(&ids[SENT - 1]).await.unwrap().status(), 200);
}

/// A WebSocket connection's cache of `store: false` responses is bounded by bytes too.
#[tokio::test]
async fn a_websocket_connection_forgets_its_oldest_responses_beyond_its_bytes() {
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    const SENT: usize = 30;
    let pad = "x".repeat(1900 * 1024);
    let server = server().await;
    let mut ws = websocket(&server).await;
    let mut create = async |body: Value| -> Value {
        ws.send(Message::text(body.to_string())).await.unwrap();
        loop {
            let Some(Ok(Message::Text(text))) = ws.next().await else {
                panic!("connection ended");
            };
            let event: Value = serde_json::from_str(&text).unwrap();
            if event["type"] == "response.completed" || event["type"] == "error" {
                return event;
            }
        }
    };
    let mut ids = Vec::new();
    for n in 0..SENT {
        let event = create(json!({"type": "response.create", "model": "m",
            "input": format!("{n} {pad}"), "store": false}))
        .await;
        assert_eq!(event["type"], "response.completed");
        ids.push(event["response"]["id"].as_str().unwrap().to_owned());
    }
    let recent = create(
        json!({"type": "response.create", "model": "m", "input": "more",
        "store": false, "previous_response_id": ids[SENT - 1]}),
    )
    .await;
    assert_eq!(recent["type"], "response.completed");
    let forgotten = create(
        json!({"type": "response.create", "model": "m", "input": "more",
        "store": false, "previous_response_id": ids[0]}),
    )
    .await;
    assert_eq!(forgotten["type"], "error");
    assert_eq!(
        forgotten["error"]["code"], "previous_response_not_found",
        "{forgotten}"
    );
}
