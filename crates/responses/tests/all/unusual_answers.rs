//! Answers real servers and proxies give that the emulator does not, from a bare HTTP
//! server on 127.0.0.1: a `Retry-After` on every retry, a `Retry-After` far in the
//! future, a 200 whose body is not an event stream.

use std::time::Duration;

use crate::common::{client_for, http_reply, raw_server, start};
use agent_responses::retry::{Retry, RetryPolicy};
use agent_responses::types::{CreateResponse, Input, Response};
use agent_responses::{Client, ClientError};
use agent_responses_mock::MOCK_API_KEY;
use serde_json::json;

/// The key the clients of these tests send; some servers below quote it back.
const KEY: &str = "sk-test-unusual-SECRET-0123456789";

fn hello() -> CreateResponse {
    CreateResponse::new("gpt-test", Input::Text("hello".into()))
}

/// The whole of a streamed request: its final response, or the first error.
async fn streamed(client: &Client) -> Result<Response, ClientError> {
    client.create_stream(&hello()).await?.final_response().await
}

/// A real event stream, as the emulator writes it (`Echo: hello`), to replay verbatim.
async fn emulator_stream_body() -> Vec<u8> {
    let (server, _) = start(json!({"rules": []})).await;
    let body = reqwest::Client::new()
        .post(format!("{}/responses", server.base_url()))
        .bearer_auth(MOCK_API_KEY)
        .json(&json!({"model": "gpt-test", "input": "hello", "stream": true}))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(body.starts_with(b"event: "), "{body:?}");
    body.to_vec()
}

/// The gaps between consecutive arrivals.
fn gaps(arrivals: &[std::time::Instant]) -> Vec<Duration> {
    arrivals.windows(2).map(|w| w[1] - w[0]).collect()
}

/// 503 with `Retry-After: 1` twice, then a stream: the client waits the server's second
/// before each retry (the server sees each request at least 1 s after the previous one,
/// although the client's own backoff here is 1 ms), and a caller that retries a failed
/// call itself through `RetryPolicy::backoff` waits the server's delay too.
#[tokio::test]
async fn retry_after_is_honoured_on_every_retry_by_the_client_and_by_the_policy() {
    let busy = http_reply(
        "503 Service Unavailable",
        &[("content-type", "application/json"), ("retry-after", "1")],
        br#"{"error":{"message":"busy","type":"server_error"}}"#,
    );
    let ok = http_reply(
        "200 OK",
        &[("content-type", "text/event-stream")],
        &emulator_stream_body().await,
    );
    let (base, arrivals) = raw_server(vec![busy.clone(), busy.clone(), ok]).await;
    let client = client_for(&base, KEY);
    let response = streamed(&client).await.unwrap();
    assert_eq!(response.output_text(), "Echo: hello");
    let arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 3);
    for gap in gaps(&arrivals) {
        assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
    }

    // Always busy: the client gives up after its retries, each one after the server's
    // second; the error keeps the server's delay for whoever retries next.
    let (base, arrivals) = raw_server(vec![busy]).await;
    let client = client_for(&base, KEY);
    let err = client.create(&hello()).await.unwrap_err();
    assert_eq!(err.api().unwrap().status, Some(503));
    let arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 3);
    for gap in gaps(&arrivals) {
        assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
    }
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    assert_eq!(err.retries_taken(), Some(2), "the client's own retries");
    assert!(err.to_string().contains("(after 2 retries)"), "{err}");
    let policy = RetryPolicy::default();
    for retries in 0..policy.max_retries {
        assert_eq!(
            policy.backoff(&err, retries),
            Some(Duration::from_secs(1)),
            "retry {retries}"
        );
    }
    assert_eq!(policy.backoff(&err, policy.max_retries), None);
}

/// A `Retry-After` beyond the two minutes the client waits at most (in seconds, or as a
/// date in 2100) is an answer not to retry: sent once, `Retry::Never` for any caller, and
/// the message says why.
#[tokio::test]
async fn a_retry_after_beyond_the_cap_is_not_retried_and_says_so() {
    for retry_after in ["7200", "Fri, 01 Jan 2100 00:00:00 GMT"] {
        let (base, arrivals) = raw_server(vec![http_reply(
            "429 Too Many Requests",
            &[
                ("content-type", "application/json"),
                ("retry-after", retry_after),
            ],
            format!(
                r#"{{"error":{{"message":"slow down","type":"rate_limit_error","sent":"{KEY}"}}}}"#
            )
            .as_bytes(),
        )])
        .await;
        let client = client_for(&base, KEY);
        let err = client.create(&hello()).await.unwrap_err();
        assert_eq!(arrivals.lock().unwrap().len(), 1, "{retry_after}: retried");
        assert_eq!(err.api().unwrap().status, Some(429));
        assert_eq!(err.retry(), Retry::Never, "{retry_after}");
        assert_eq!(
            RetryPolicy::default().backoff(&err, 0),
            None,
            "{retry_after}"
        );
        let text = err.to_string();
        assert!(text.starts_with("Error code: 429 - slow down"), "{text}");
        assert!(text.contains("not retried"), "{text}");
        assert!(err.retry_after() > Some(Duration::from_secs(120)));
        assert_eq!(err.retries_taken(), Some(0));
    }
    // A server that quotes the key back in its error message does not get it into ours.
    let (base, _) = raw_server(vec![http_reply(
        "401 Unauthorized",
        &[("content-type", "application/json")],
        format!(r#"{{"error":{{"message":"bad key Bearer {KEY}"}}}}"#).as_bytes(),
    )])
    .await;
    let err = client_for(&base, KEY).create(&hello()).await.unwrap_err();
    assert_eq!(err.api().unwrap().message, "bad key Bearer ***");
}

/// A 200 whose body is not an event stream (a proxy's login page, a plain JSON response,
/// compressed bytes this client does not decode) is named for what it is, with the start
/// of the body (the key masked), and is not worth retrying; one request each.
#[tokio::test]
async fn a_200_that_is_not_an_event_stream_is_named_and_not_retried() {
    let page = format!("<html><body>Login required (you sent Bearer {KEY})</body></html>");
    let json_body = format!(r#"{{"id":"resp_1","object":"response","note":"{KEY}"}}"#);
    // (the reply's headers, its body, how the error names what came)
    type Case<'a> = (Vec<(&'a str, &'a str)>, Vec<u8>, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            vec![("content-type", "text/html; charset=utf-8")],
            page.clone().into_bytes(),
            "content-type text/html",
        ),
        (
            vec![("content-type", "application/json")],
            json_body.clone().into_bytes(),
            "content-type application/json",
        ),
        (vec![], json_body.into_bytes(), "no content-type"),
        (
            vec![
                ("content-type", "text/event-stream"),
                ("content-encoding", "gzip"),
            ],
            b"\x1f\x8b\x08\x00garbagegarbage".to_vec(),
            "content-encoding gzip",
        ),
    ];
    for (headers, body, named) in cases {
        let (base, arrivals) = raw_server(vec![http_reply("200 OK", &headers, &body)]).await;
        let client = client_for(&base, KEY);
        let err = streamed(&client).await.unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, ClientError::NotEventStream { status: 200, .. }),
            "{err:?}"
        );
        assert_eq!(err.retry(), Retry::Never, "{text}");
        assert_eq!(err.retries_taken(), Some(0));
        assert!(text.contains("not an event stream"), "{text}");
        assert!(text.contains(named), "{named}: {text}");
        assert!(!text.contains(KEY), "key leaked: {text}");
        assert!(!format!("{err:?}").contains(KEY), "key leaked: {err:?}");
        assert_eq!(arrivals.lock().unwrap().len(), 1, "{text}");
    }
    let (base, _) = raw_server(vec![http_reply(
        "200 OK",
        &[("content-type", "text/html")],
        page.as_bytes(),
    )])
    .await;
    let text = streamed(&client_for(&base, KEY))
        .await
        .unwrap_err()
        .to_string();
    assert!(text.contains("Login required"), "no excerpt: {text}");

    // A long body is quoted in part only.
    let long = format!("<html>{}</html>", "x".repeat(100_000));
    let (base, _) = raw_server(vec![http_reply(
        "200 OK",
        &[("content-type", "text/html")],
        long.as_bytes(),
    )])
    .await;
    let text = streamed(&client_for(&base, KEY))
        .await
        .unwrap_err()
        .to_string();
    assert!(text.len() < 1_000, "{} bytes", text.len());
}

/// Where servers differ and the body is an event stream all the same, it is read as one:
/// a charset parameter, no content-type at all, a generic text type.
#[tokio::test]
async fn an_event_stream_is_read_whatever_its_content_type_says() {
    let body = emulator_stream_body().await;
    let cases: [&[(&str, &str)]; 4] = [
        &[("content-type", "text/event-stream; charset=utf-8")],
        &[("content-type", "Text/Event-Stream")],
        &[],
        &[("content-type", "text/plain")],
    ];
    for headers in cases {
        let (base, arrivals) = raw_server(vec![http_reply("200 OK", headers, &body)]).await;
        let response = streamed(&client_for(&base, KEY)).await;
        assert_eq!(
            response.unwrap().output_text(),
            "Echo: hello",
            "{headers:?}"
        );
        assert_eq!(arrivals.lock().unwrap().len(), 1);
    }
}
