//! Fuzz target `requests`: the emulator's request handling (`router.rs`, `validate.rs`, the
//! WebSocket session), through an in-process server on 127.0.0.1.
//!
//! Properties:
//! 1. HTTP: any method, path, `Authorization` header, content type and body (request-shaped
//!    JSON with items of any shape, JSON soup, raw bytes) gets an answer: the API's JSON
//!    error shape for a status of 400 and up, otherwise JSON or an SSE stream that parses;
//!    never a dropped connection. The server then still answers a plain request.
//! 2. WebSocket: any text or binary frame gets events that are JSON objects with a string
//!    `type`, each `error` event in the API's error shape with a `status`; the connection
//!    then still completes a plain `response.create`.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::fuzz_common::{check_answer, check_error_shape, client, runtime, send, still_serves};
use agent_fuzzkit::{config, corpus, json_text, json_value, keep_if_failing, within};
use agent_responses_mock::ws::WsOptions;
use agent_responses_mock::{MockConfig, MockServer, Script};
use futures::{SinkExt as _, StreamExt as _};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

const TARGET: &str = "requests";
const KEY: &str = "sk-fuzz";
const BOUND: Duration = Duration::from_secs(20);

fn server() -> &'static MockServer {
    static SERVER: OnceLock<MockServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let mut config = MockConfig::new(Script::default()).with_api_key(KEY);
        config.ws = WsOptions {
            steer_window: None,
            ..WsOptions::default()
        };
        runtime().block_on(MockServer::start(config)).unwrap()
    })
}

/// One HTTP request as generated (and saved when it fails, as JSON).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct HttpCase {
    method: String,
    path: String,
    auth: Option<Vec<u8>>,
    content_type: Option<String>,
    body: Vec<u8>,
}

fn check_http(case: &HttpCase) -> Result<(), TestCaseError> {
    let server = server();
    let base = server.base_url();
    let start = Instant::now();
    runtime().block_on(async {
        let method = reqwest::Method::from_bytes(case.method.as_bytes()).unwrap();
        let mut request = client()
            .request(method, format!("{base}{}", case.path))
            .body(case.body.clone());
        if let Some(auth) = &case.auth
            && let Ok(value) = reqwest::header::HeaderValue::from_bytes(auth)
        {
            request = request.header("authorization", value);
        }
        if let Some(ct) = &case.content_type {
            request = request.header("content-type", ct.as_str());
        }
        let answer = send(request).await?;
        check_answer(&answer).map_err(|e| TestCaseError::fail(format!("{e}: {answer:?}")))?;
        still_serves(&base, KEY).await
    })?;
    within(start, BOUND, "the request")
}

/// Sends `frame`, then a plain create; every event must be well formed and the plain
/// create must complete on the same connection.
fn check_ws(frame: &Message) -> Result<(), TestCaseError> {
    let addr = server().addr();
    let start = Instant::now();
    runtime().block_on(async {
        let mut request = format!("ws://{addr}/v1/responses")
            .into_client_request()
            .unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {KEY}").parse().unwrap());
        let (mut socket, _) = tokio_tungstenite::connect_async(request)
            .await
            .map_err(|e| TestCaseError::fail(format!("connect: {e}")))?;
        socket.send(frame.clone()).await.unwrap();
        let probe =
            json!({"type": "response.create", "model": "m", "input": "probe-7f3a", "store": false});
        socket.send(Message::text(probe.to_string())).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let next = tokio::time::timeout_at(deadline, socket.next()).await;
            let message = match next {
                Err(_) => return Err(TestCaseError::fail("the plain create never completed")),
                Ok(None) => return Err(TestCaseError::fail("connection ended")),
                Ok(Some(Err(e))) => return Err(TestCaseError::fail(format!("socket: {e}"))),
                Ok(Some(Ok(m))) => m,
            };
            let text = match message {
                Message::Text(text) => text.as_str().to_owned(),
                Message::Ping(_) | Message::Pong(_) => continue,
                other => return Err(TestCaseError::fail(format!("unexpected {other:?}"))),
            };
            let event: Value = serde_json::from_str(&text)
                .map_err(|e| TestCaseError::fail(format!("event is not JSON: {e}")))?;
            let kind = event["type"].as_str().unwrap_or_default().to_owned();
            prop_assert!(!kind.is_empty(), "event without a type: {event}");
            if kind == "error" {
                prop_assert!(
                    event["status"].is_u64(),
                    "error event without status: {event}"
                );
                check_error_shape(&event)?;
            }
            if kind == "response.completed" && event.to_string().contains("probe-7f3a") {
                break;
            }
        }
        let _ = socket.close(None).await;
        Ok(())
    })?;
    within(start, BOUND, "the WebSocket exchange")
}

// ---- generators ----

fn item() -> impl Strategy<Value = Value> {
    let kind = prop::sample::select(vec![
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "program",
        "program_output",
        "compaction",
        "reasoning",
        "item_reference",
        "brand_new",
    ]);
    let field = prop::sample::select(vec![
        "role",
        "content",
        "call_id",
        "caller",
        "output",
        "name",
        "arguments",
        "async",
        "fingerprint",
        "encrypted_content",
        "id",
        "status",
        "input",
    ]);
    let value = prop_oneof![
        2 => prop::sample::select(vec!["c1", "c2", "user", "assistant", "x"]).prop_map(Value::from),
        1 => json_value(),
        1 => Just(json!({"type": "program", "caller_id": "c1"})),
    ];
    (
        prop::option::weighted(0.9, kind),
        prop::collection::vec((field, value), 0..5),
    )
        .prop_map(|(kind, fields)| {
            let mut map: serde_json::Map<String, Value> =
                fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            if let Some(kind) = kind {
                map.insert("type".into(), kind.into());
            }
            Value::Object(map)
        })
}

fn request_body() -> impl Strategy<Value = Vec<u8>> {
    let shaped = (
        prop_oneof![
            Just(json!("m")),
            Just(json!("")),
            Just(json!("  ")),
            json_value()
        ],
        prop_oneof![
            json_value(),
            "\\PC{0,16}".prop_map(Value::from),
            prop::collection::vec(item(), 0..5).prop_map(Value::from)
        ],
        prop::option::of(prop_oneof![
            any::<bool>().prop_map(Value::from),
            json_value()
        ]),
        prop::option::of(prop_oneof![Just(json!("resp_nope")), json_value()]),
        prop::collection::vec(
            (
                prop::sample::select(vec!["tools", "store", "instructions", "background", "x"]),
                json_value(),
            ),
            0..3,
        ),
    )
        .prop_map(|(model, input, stream, previous, extra)| {
            let mut body = json!({"model": model, "input": input});
            if let Some(stream) = stream {
                body["stream"] = stream;
            }
            if let Some(previous) = previous {
                body["previous_response_id"] = previous;
            }
            for (k, v) in extra {
                body[k] = v;
            }
            body.to_string().into_bytes()
        });
    prop_oneof![
        5 => shaped,
        2 => json_text().prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

fn http_case() -> impl Strategy<Value = HttpCase> {
    let method = prop::sample::select(vec![
        "POST", "POST", "POST", "GET", "DELETE", "PUT", "PATCH",
    ]);
    let path = prop_oneof![
        6 => Just("/responses".to_owned()),
        2 => Just("/responses/compact".to_owned()),
        2 => "[a-zA-Z0-9_%.~-]{0,12}".prop_map(|id| format!("/responses/{id}")),
        1 => prop::sample::select(vec!["", "/", "/nope", "/responses//x", "/__mock/requests", "/responses/%00", "/responses/%ff%fe"])
            .prop_map(str::to_owned),
    ];
    let auth = prop_oneof![
        6 => Just(Some(format!("Bearer {KEY}").into_bytes())),
        1 => Just(None),
        1 => prop::sample::select(vec!["Bearer sk-wrong", "Bearer ", "Basic abc", "bearer sk-fuzz", "Bearer  sk-fuzz "])
            .prop_map(|s| Some(s.as_bytes().to_vec())),
        1 => prop::collection::vec(any::<u8>(), 0..16).prop_map(Some),
    ];
    let content_type = prop::option::weighted(
        0.8,
        prop::sample::select(vec![
            "application/json",
            "text/plain",
            "application/json; charset=latin1",
            "multipart/form-data",
        ])
        .prop_map(str::to_owned),
    );
    (method, path, auth, content_type, request_body()).prop_map(
        |(method, path, auth, content_type, body)| HttpCase {
            method: method.to_owned(),
            path,
            auth,
            content_type,
            body,
        },
    )
}

fn ws_frame() -> impl Strategy<Value = Message> {
    let create = (
        prop::collection::vec(item(), 0..4),
        prop::option::of(json_value()),
        any::<bool>(),
    )
        .prop_map(|(input, stream_id, store)| {
            let mut frame =
                json!({"type": "response.create", "model": "m", "input": input, "store": store});
            if let Some(id) = stream_id {
                frame["stream_id"] = id;
            }
            frame.to_string()
        });
    let steer = (json_value(), json_value()).prop_map(|(previous, input)| {
        json!({"type": "response.steer", "previous_response_id": previous, "input": input})
            .to_string()
    });
    prop_oneof![
        3 => create.prop_map(Message::text),
        2 => steer.prop_map(Message::text),
        3 => json_text().prop_map(Message::text),
        1 => request_body().prop_map(|b| Message::text(String::from_utf8_lossy(&b).into_owned())),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Message::binary),
    ]
}

proptest! {
    #![proptest_config(config(120))]

    #[test]
    fn every_http_request_gets_an_api_answer(case in http_case()) {
        let saved = serde_json::to_vec(&case).unwrap();
        keep_if_failing("http", "json", &saved, check_http(&case))?;
    }

    #[test]
    fn every_websocket_frame_gets_well_formed_events(frame in ws_frame()) {
        let saved = frame.clone().into_data().to_vec();
        keep_if_failing("ws", "frame", &saved, check_ws(&frame))?;
    }
}

#[test]
fn corpus_replays() {
    for (name, bytes) in corpus(TARGET, 5) {
        if name.ends_with(".frame") {
            let frame = match String::from_utf8(bytes.clone()) {
                Ok(text) => Message::text(text),
                Err(_) => Message::binary(bytes),
            };
            check_ws(&frame).unwrap_or_else(|e| panic!("{name}: {e}"));
        } else {
            let case: HttpCase =
                serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            check_http(&case).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

#[test]
fn a_body_over_the_limit_gets_the_error_shape() {
    let case = HttpCase {
        method: "POST".into(),
        path: "/responses".into(),
        auth: Some(format!("Bearer {KEY}").into_bytes()),
        content_type: Some("application/json".into()),
        body: vec![b' '; 3 << 20],
    };
    check_http(&case).unwrap();
}
