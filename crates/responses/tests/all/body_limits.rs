//! A server that answers with a body that does not end (or ends far beyond any sane size)
//! cannot make the client read it all: a 2xx JSON answer stops at `MAX_JSON_BODY` with
//! `ClientError::BodyTooLarge`, an error answer at `MAX_ERROR_BODY` (its error built from
//! what was read), and in both cases the client closes the connection instead of reading
//! on, which the server sees as its writes failing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_responses::ClientError;
use agent_responses::http::{MAX_ERROR_BODY, MAX_JSON_BODY};
use agent_responses::types::{CompactRequest, CreateResponse, Input};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common::client_for;

const KEY: &str = "sk-test-body-limits-SECRET";

/// What the server saw of one connection: the bytes of body it wrote, and whether a write
/// failed (the client closed the connection) before the whole body was sent.
#[derive(Debug, Clone, Copy)]
struct Sent {
    written: usize,
    cut_by_client: bool,
}

/// A server on 127.0.0.1 answering every request with `status` and a chunked body of
/// `fill` bytes, `total` of them in all (far more than the client should read), then the
/// body's end. Returns the base URL and what each connection saw once it ended.
async fn flooding_server(
    status: &'static str,
    fill: u8,
    total: usize,
) -> (String, Arc<Mutex<Vec<Sent>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let report = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let report = Arc::clone(&report);
            tokio::spawn(async move {
                // The request: its head, then `content-length` bytes.
                let mut request = Vec::new();
                let mut buf = [0u8; 8192];
                let body_at = loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&request[..body_at]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while request.len() < body_at + length {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                let reply = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                );
                let mut sent = Sent {
                    written: 0,
                    cut_by_client: false,
                };
                if socket.write_all(reply.as_bytes()).await.is_err() {
                    sent.cut_by_client = true;
                }
                let chunk = [fill; 64 * 1024];
                let framed = [
                    format!("{:x}\r\n", chunk.len()).into_bytes(),
                    chunk.to_vec(),
                    b"\r\n".to_vec(),
                ]
                .concat();
                while !sent.cut_by_client && sent.written < total {
                    if socket.write_all(&framed).await.is_err() {
                        sent.cut_by_client = true;
                    } else {
                        sent.written += chunk.len();
                    }
                }
                if !sent.cut_by_client {
                    let _ = socket.write_all(b"0\r\n\r\n").await;
                }
                report.lock().unwrap().push(sent);
            });
        }
    });
    (format!("http://{addr}/v1"), seen)
}

/// Waits until `n` connections ended, and returns what they saw.
async fn connections(seen: &Mutex<Vec<Sent>>, n: usize) -> Vec<Sent> {
    for _ in 0..200 {
        let now = seen.lock().unwrap().clone();
        if now.len() >= n {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server still writes: {:?}", seen.lock().unwrap());
}

/// What the kernel buffers of a loopback connection (both ends) and the client's own
/// buffer may hold beyond what the client read.
const SLACK: usize = 16 * 1024 * 1024;

fn hello() -> CreateResponse {
    CreateResponse::new("gpt-test", Input::Text("hello".into()))
}

#[tokio::test]
async fn an_endless_json_answer_stops_at_the_bound_with_a_typed_error() {
    // Spaces are valid JSON whitespace: read whole, they would parse on and on.
    let (base, seen) = flooding_server("200 OK", b' ', MAX_JSON_BODY + 3 * SLACK).await;
    let client = client_for(&base, KEY);
    let err = tokio::time::timeout(Duration::from_secs(60), client.create(&hello()))
        .await
        .expect("the call ends")
        .unwrap_err();
    assert!(
        matches!(err, ClientError::BodyTooLarge { limit } if limit == MAX_JSON_BODY),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("32 MiB"), "{text}");
    assert!(!text.contains(KEY), "{text}");
    assert_eq!(err.retries_taken(), Some(0));
    assert!(!err.is_retryable());
    let sent = connections(&seen, 1).await;
    assert_eq!(sent.len(), 1, "a 2xx is not sent again: {sent:?}");
    assert!(sent[0].cut_by_client, "{sent:?}");
    assert!(sent[0].written <= MAX_JSON_BODY + SLACK, "{sent:?}");

    // The compact endpoint reads its JSON the same way.
    let (base, seen) = flooding_server("200 OK", b' ', MAX_JSON_BODY + 3 * SLACK).await;
    let client = client_for(&base, KEY);
    let compact: CompactRequest =
        serde_json::from_value(serde_json::json!({"model": "gpt-test", "input": "hi"})).unwrap();
    let err = tokio::time::timeout(Duration::from_secs(60), client.compact(&compact))
        .await
        .expect("the call ends")
        .unwrap_err();
    assert!(matches!(err, ClientError::BodyTooLarge { .. }), "{err:?}");
    assert!(connections(&seen, 1).await[0].cut_by_client);

    // And so does retrieval.
    let (base, seen) = flooding_server("200 OK", b' ', MAX_JSON_BODY + 3 * SLACK).await;
    let client = client_for(&base, KEY);
    let err = tokio::time::timeout(Duration::from_secs(60), client.retrieve("resp_1"))
        .await
        .expect("the call ends")
        .unwrap_err();
    assert!(matches!(err, ClientError::BodyTooLarge { .. }), "{err:?}");
    assert!(connections(&seen, 1).await[0].cut_by_client);
}

#[tokio::test]
async fn an_endless_error_answer_is_read_up_to_its_bound_on_every_attempt() {
    let (base, seen) = flooding_server("500 Internal Server Error", b'x', 4 * SLACK).await;
    let client = client_for(&base, KEY);
    let err = tokio::time::timeout(Duration::from_secs(60), client.create(&hello()))
        .await
        .expect("the call ends")
        .unwrap_err();
    let api = err.api().unwrap_or_else(|| panic!("{err:?}"));
    assert_eq!(api.status, Some(500));
    assert_eq!(api.retries_taken, 2, "retried as any 5xx");
    // Built from the start of the body (the raw text, cut at 500 characters).
    assert!(api.message.starts_with("xxxx"), "{}", api.message);
    assert!(api.message.len() <= 500 * 4);
    let sent = connections(&seen, 3).await;
    assert_eq!(sent.len(), 3, "{sent:?}");
    for one in sent {
        assert!(one.cut_by_client, "read to its end: {one:?}");
        assert!(one.written <= MAX_ERROR_BODY + SLACK, "{one:?}");
    }
}
