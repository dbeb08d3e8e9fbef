//! What the emulator's two fuzz targets (`fuzz_requests`, `fuzz_script`) share: one runtime,
//! one HTTP client, and the checks of an answer.

#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use agent_responses::sse::SseParser;
use proptest::prelude::*;
use serde_json::{Value, json};

pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

pub fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    })
}

/// An answer as received: status, content type, body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// Sends `request`; a transport error (the server dropped the connection: a handler
/// panicked, it stopped serving, or it closed a connection it had left open for the next
/// request) fails the case. Such an error on a pooled connection was once retried here;
/// the server now says `Connection: close` where it closes one (see `keep_alive`).
pub async fn send(request: reqwest::RequestBuilder) -> Result<Answer, TestCaseError> {
    let response = request
        .send()
        .await
        .map_err(|e| TestCaseError::fail(format!("no answer: {e:?}")))?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = response
        .bytes()
        .await
        .map_err(|e| TestCaseError::fail(format!("body cut: {e}")))?
        .to_vec();
    Ok(Answer {
        status,
        content_type,
        body,
    })
}

/// The API's error shape: `{"error": {"message": str, "type": str, "param": str|null,
/// "code": str|null}}`.
pub fn check_error_shape(value: &Value) -> Result<(), TestCaseError> {
    let error = &value["error"];
    prop_assert!(error["message"].is_string(), "no error.message in {value}");
    prop_assert!(error["type"].is_string(), "no error.type in {value}");
    for key in ["param", "code"] {
        prop_assert!(
            error.get(key).is_some_and(|v| v.is_string() || v.is_null()),
            "error.{key} is not a string or null in {value}"
        );
    }
    Ok(())
}

/// An answer is an error in the API's shape (JSON), a JSON body, or an SSE stream whose
/// frames parse.
pub fn check_answer(answer: &Answer) -> Result<(), TestCaseError> {
    if answer.status < 200 || answer.status == 204 || answer.status == 304 {
        // A script may ask for a status that has no body in HTTP.
        prop_assert!(answer.body.is_empty());
        return Ok(());
    }
    if answer.status >= 400 {
        prop_assert!(
            answer.content_type.starts_with("application/json"),
            "{answer:?}"
        );
        let value: Value = serde_json::from_slice(&answer.body)
            .map_err(|e| TestCaseError::fail(format!("error body is not JSON: {e}")))?;
        return check_error_shape(&value);
    }
    if answer.content_type.starts_with("text/event-stream") {
        let mut frames = Vec::new();
        let mut parser = SseParser::new();
        parser
            .push(&answer.body, &mut frames)
            .and_then(|()| parser.finish(&mut frames))
            .map_err(|e| TestCaseError::fail(format!("stream does not parse: {e}")))?;
    } else {
        prop_assert!(
            answer.content_type.starts_with("application/json"),
            "{answer:?}"
        );
        serde_json::from_slice::<Value>(&answer.body)
            .map_err(|e| TestCaseError::fail(format!("body is not JSON: {e}")))?;
    }
    Ok(())
}

/// The server still answers a plain request.
pub async fn still_serves(base: &str, key: &str) -> Result<(), TestCaseError> {
    let answer = send(
        client()
            .post(format!("{base}/responses"))
            .bearer_auth(key)
            .json(&json!({"model": "m", "input": "still there?"})),
    )
    .await?;
    prop_assert!(
        answer.status < 500,
        "the server stopped serving well: {answer:?}"
    );
    Ok(())
}
