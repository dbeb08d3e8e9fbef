//! Request bodies and queries the review found answered wrongly: a NUL in a body field
//! read as "no such run", an empty model taken, steer ids of any length, a bad cursor
//! ignored, an array body's 400 naming nothing.
//!
//! A real server on 127.0.0.1 over an in-memory journal with one run (no submitter: a
//! valid `POST /runs` would answer 501, so a 400 there is the validation's).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use reqwest::StatusCode;
use serde_json::{Value, json};

mod common;

const TOKEN: &str = "body-token-0123456789abcdef0123456789abcdef";

use common::Server;

async fn server() -> Server {
    common::server(TOKEN).await
}

impl Server {
    /// Status, error code and message of `POST path` with `body`.
    async fn post(&self, path: &str, body: String) -> (StatusCode, String, String) {
        let resp = reqwest::Client::new()
            .post(format!("{}/api/v1{path}", self.base))
            .bearer_auth(TOKEN)
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        error_of(resp).await
    }

    async fn get(&self, path: &str) -> (StatusCode, String, String) {
        let resp = reqwest::Client::new()
            .get(format!("{}/api/v1{path}", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        error_of(resp).await
    }
}

async fn error_of(resp: reqwest::Response) -> (StatusCode, String, String) {
    let status = resp.status();
    let body: Value = resp.json().await.unwrap();
    let code = body["error"]["code"].as_str().unwrap_or("").to_string();
    let message = body["error"]["message"].as_str().unwrap_or("").to_string();
    (status, code, message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_a_body_field_is_invalid_and_named() {
    let s = server().await;
    let run = &s.run;
    let cases = [
        (
            format!("/runs/{run}/steer"),
            r#"{"text": "a\u0000b"}"#,
            "text",
        ),
        (
            format!("/runs/{run}/steer"),
            r#"{"text": "ok", "id": "x\u0000"}"#,
            "id",
        ),
        (
            format!("/runs/{run}/approvals/c1"),
            r#"{"decision": "deny", "reason": "why\u0000"}"#,
            "reason",
        ),
        (
            "/runs".to_string(),
            r#"{"prompt": "p\u0000", "workspace": "/tmp"}"#,
            "prompt",
        ),
        (
            "/runs".to_string(),
            r#"{"prompt": "p", "workspace": "/tmp", "instructions": "\u0000"}"#,
            "instructions",
        ),
    ];
    for (path, body, field) in cases {
        let (status, code, message) = s.post(&path, body.to_string()).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{path} {body}: {message}"
        );
        assert!(message.starts_with(field), "{path} {body}: {message}");
        assert!(message.contains("NUL"), "{message}");
    }
    // A `\u0000` that is text (an escaped backslash) is no NUL: the steer is taken.
    let (status, _, message) = s
        .post(
            &format!("/runs/{run}/steer"),
            r#"{"text": "a\\u0000b"}"#.into(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_model_and_odd_steer_ids_are_refused() {
    let s = server().await;
    for model in ["", "  "] {
        let body = json!({"prompt": "p", "workspace": "/tmp", "model": model}).to_string();
        let (status, code, message) = s.post("/runs", body).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{message}"
        );
        assert!(message.starts_with("model"), "{message}");
    }
    let steer = format!("/runs/{}/steer", s.run);
    for id in [String::new(), "i".repeat(129), "a\nb".into()] {
        let body = json!({"text": "go", "id": id}).to_string();
        let (status, code, message) = s.post(&steer, body).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{id:?}: {message}"
        );
        assert!(message.starts_with("id"), "{message}");
    }
    let body = json!({"text": "go", "id": "i".repeat(128)}).to_string();
    let (status, _, message) = s.post(&steer, body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_no_object_and_a_bad_cursor_say_so() {
    let s = server().await;
    for body in ["[1]", "\"text\"", "7"] {
        let (status, code, message) = s.post(&format!("/runs/{}/steer", s.run), body.into()).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "{body}: {message}"
        );
        assert!(message.contains("JSON object"), "{body}: {message}");
    }
    let (status, code, message) = s.get("/runs?cursor=zzz").await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "bad_request"),
        "{message}"
    );
    assert!(message.starts_with("cursor"), "{message}");
    // The run's own id is a cursor (the page after it is empty).
    let resp = reqwest::Client::new()
        .get(format!("{}/api/v1/runs?cursor={}", s.base, s.run))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}
