#![allow(dead_code)]

use std::time::Duration;

use agent_responses::{ApiKey, Client, ClientConfig};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};

/// An emulator with `script` (JSON) requiring the mock key, and a client with fast backoff.
pub async fn start(script: serde_json::Value) -> (MockServer, Client) {
    let script: Script = serde_json::from_value(script).expect("script");
    start_with(MockConfig::new(script).with_api_key(MOCK_API_KEY)).await
}

pub async fn start_with(config: MockConfig) -> (MockServer, Client) {
    let server = MockServer::start(config).await.expect("start emulator");
    let client = client_for(&server.base_url(), MOCK_API_KEY);
    (server, client)
}

pub fn client_for(base: &str, key: &str) -> Client {
    Client::new(config_for(base, key)).expect("client")
}

/// The config [`client_for`] uses: the SDK defaults with fast backoff.
pub fn config_for(base: &str, key: &str) -> ClientConfig {
    let mut config = ClientConfig::new(base, ApiKey::new(key).expect("key"));
    config.retry.initial_delay = Duration::from_millis(1);
    config
}

/// The bodies of the recorded `POST /v1/responses` requests.
pub fn response_bodies(server: &MockServer) -> Vec<serde_json::Value> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/responses")
        .map(|r| r.body)
        .collect()
}

/// A bare HTTP/1.1 server on 127.0.0.1 for answers the emulator cannot give (a body cut
/// half-way, a 200 that is not an event stream, a `Retry-After` date): the `n`th request
/// (from 0) is answered with `replies[n]` (the last one once they run out), then its
/// connection is closed. Returns the base URL (`http://127.0.0.1:PORT/v1`) and the time
/// each complete request (headers and `content-length` bytes of body) arrived.
pub async fn raw_server(
    replies: Vec<Vec<u8>>,
) -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
) {
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    assert!(!replies.is_empty(), "a raw server needs a reply");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen_by_server = Arc::clone(&arrivals);
    let replies = Arc::new(replies);
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let arrivals = Arc::clone(&seen_by_server);
            let replies = Arc::clone(&replies);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                let body_start = loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&seen[..body_start]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while seen.len() < body_start + length {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                }
                let n = {
                    let mut arrivals = arrivals.lock().unwrap();
                    arrivals.push(std::time::Instant::now());
                    arrivals.len() - 1
                };
                let reply = &replies[n.min(replies.len() - 1)];
                let _ = socket.write_all(reply).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (format!("http://{addr}/v1"), arrivals)
}

/// An HTTP/1.1 response with `status` (e.g. `200 OK`), `headers` and `body`, closing the
/// connection after it.
pub fn http_reply(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut reply = format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        reply.push_str(&format!("{name}: {value}\r\n"));
    }
    reply.push_str("\r\n");
    let mut reply = reply.into_bytes();
    reply.extend_from_slice(body);
    reply
}
