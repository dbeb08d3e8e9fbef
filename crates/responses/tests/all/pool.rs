//! How many HTTP/1.1 connections the client keeps between requests, counted by a TCP
//! relay in front of the emulator (every connection the client opens passes through it).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{config_for, start};
use agent_responses::types::{CreateResponse, Input};
use agent_responses::{ApiKey, Client, ClientConfig};
use agent_responses_mock::MOCK_API_KEY;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

/// A relay to `upstream` on 127.0.0.1; returns its address and its count of accepted
/// connections.
async fn counting_relay(upstream: std::net::SocketAddr) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut outbound = TcpStream::connect(upstream).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (format!("http://{addr}/v1"), accepted)
}

/// `n` requests at once; each answered with its own echo.
async fn burst(client: &Client, n: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let client = client.clone();
        tasks.spawn(async move {
            let request = CreateResponse::new("gpt-test", Input::Text(format!("n{i}")));
            let text = client.create(&request).await.unwrap().output_text();
            assert_eq!(text, format!("Echo: n{i}"));
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap();
    }
    // A connection goes back to the pool once its response is read, on its own task.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// Connections opened by two bursts of five requests, keeping at most `max_idle`.
async fn connections_over_two_bursts(max_idle: Option<usize>) -> usize {
    let (server, _) = start(json!({"rules": []})).await;
    let (base, accepted) = counting_relay(server.addr()).await;
    let mut config = config_for(&base, MOCK_API_KEY);
    if let Some(n) = max_idle {
        config.max_idle_connections = n;
    }
    let client = Client::new(config).unwrap();
    burst(&client, 5).await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        5,
        "five requests at once over HTTP/1.1 hold five connections"
    );
    burst(&client, 5).await;
    accepted.load(Ordering::SeqCst)
}

#[tokio::test]
async fn idle_connections_beyond_the_limit_are_closed() {
    // Two kept: the second burst reuses them and opens three.
    assert_eq!(connections_over_two_bursts(Some(2)).await, 8);
}

#[tokio::test]
async fn the_default_keeps_a_burst_of_connections_for_the_next() {
    assert_eq!(
        ClientConfig::new("http://x", ApiKey::new("k").unwrap()).max_idle_connections,
        100,
        "the SDK's max_keepalive_connections"
    );
    assert_eq!(connections_over_two_bursts(None).await, 5);
}
