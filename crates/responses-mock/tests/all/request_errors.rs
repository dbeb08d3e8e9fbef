//! Requests that are JSON but not valid requests get the API's typed errors: the field
//! named in `param`, `invalid_type` for a wrong JSON type, `invalid_value` for an input
//! item type the API does not know; never "not valid JSON".

use agent_responses_mock::{MockConfig, MockServer, Script};
use serde_json::{Value, json};

const KEY: &str = "sk-test-key";

async fn post(server: &MockServer, path: &str, body: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.base_url()))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn server() -> MockServer {
    MockServer::start(MockConfig::new(Script::default()))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_field_of_the_wrong_type_is_named_with_invalid_type() {
    let server = server().await;
    for (path, body, param, message) in [
        (
            "/responses",
            r#"{"model": 5, "input": "hi"}"#,
            "model",
            "Invalid type for 'model': expected a string, but got an integer instead.",
        ),
        (
            "/responses",
            r#"{"model": "m", "input": 5}"#,
            "input",
            "Invalid type for 'input': expected a string or an array of input items, but got an integer instead.",
        ),
        (
            "/responses",
            r#"{"model": "m", "input": "hi", "stream": "yes"}"#,
            "stream",
            "Invalid type for 'stream': expected a boolean, but got a string instead.",
        ),
        (
            "/responses",
            r#"{"model": "m", "input": ["hi"]}"#,
            "input[0]",
            "Invalid type for 'input[0]': expected an object, but got a string instead.",
        ),
        (
            "/responses",
            r#"{"model": "m", "input": "hi", "store": 1.5}"#,
            "store",
            "Invalid type for 'store': expected a boolean, but got a decimal instead.",
        ),
        (
            "/responses/compact",
            r#"{"model": ["m"], "input": "hi"}"#,
            "model",
            "Invalid type for 'model': expected a string, but got an array instead.",
        ),
    ] {
        let (status, body) = post(&server, path, body).await;
        assert_eq!(status, 400, "{body}");
        let error = &body["error"];
        assert_eq!(error["type"], "invalid_request_error", "{body}");
        assert_eq!(error["param"], param, "{body}");
        assert_eq!(error["code"], "invalid_type", "{body}");
        assert_eq!(error["message"], message, "{body}");
    }
}

#[tokio::test]
async fn only_a_body_that_is_not_json_is_reported_as_not_json() {
    let server = server().await;
    let (status, body) = post(&server, "/responses", r#"{"model": "m", "#).await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{body}"
    );
    let (status, body) = post(&server, "/responses", "[1, 2]").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_type", "{body}");
}

#[tokio::test]
async fn an_input_item_of_an_unknown_type_is_refused() {
    let server = server().await;
    for path in ["/responses", "/responses/compact"] {
        let body = json!({"model": "m", "input": [
            {"role": "user", "content": "hi"},
            {"type": "bogus"}
        ]});
        let (status, body) = post(&server, path, &body.to_string()).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["param"], "input[1].type", "{body}");
        assert_eq!(body["error"]["code"], "invalid_value", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Invalid value: 'bogus'. Supported values are: 'message'"),
            "{body}"
        );
    }
    let typed = json!({"model": "m", "input": [{"type": 7}]});
    let (status, body) = post(&server, "/responses", &typed.to_string()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "input[0].type", "{body}");
    assert_eq!(body["error"]["code"], "invalid_type", "{body}");
    // Item types the API knows but the emulator does not model still pass.
    let known = json!({"model": "m", "input": [
        {"role": "user", "content": "hi"},
        {"type": "item_reference", "id": "msg_1"}
    ]});
    let (status, body) = post(&server, "/responses", &known.to_string()).await;
    assert_eq!(status, 200, "{body}");
}

/// An id that is not UTF-8 once decoded gets the API's JSON error, worded once.
#[tokio::test]
async fn a_non_utf8_id_is_refused_without_a_doubled_prefix() {
    let server = MockServer::start(MockConfig::new(Script::default()))
        .await
        .unwrap();
    let response = reqwest::Client::new()
        .get(format!("{}/responses/%FF", server.base_url()))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("Invalid URL: "), "{message}");
    assert!(!message.contains("Invalid URL: Invalid URL"), "{message}");
}
