//! Keep-alive: a response after which the server closes its connection says so, so that a
//! client does not send its next request on a connection that is closing.
//!
//! A real server on 127.0.0.1 over an in-memory journal with one run, and a real HTTP
//! client that keeps connections alive (reqwest).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use reqwest::header::CONNECTION;

mod common;

const TOKEN: &str = "conn-token-0123456789abcdef0123456789abcdef";

struct Server {
    base: String,
    run: String,
    _dir: tempfile::TempDir,
}

async fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let (addr, run) = common::start(dir.path(), TOKEN).await;
    Server {
        base: format!("http://{addr}"),
        run,
        _dir: dir,
    }
}

fn closes(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("close"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_to_a_request_whose_body_went_unread_closes_the_connection() {
    let s = server().await;
    let client = reqwest::Client::new();
    let steer = format!("{}/api/v1/runs/{}/steer", s.base, s.run);
    // Refused at the door, its body never read.
    let refused = client
        .post(&steer)
        .body(vec![b'['; 256 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert!(closes(&refused), "{:?}", refused.headers());
    // A route that takes no body, sent one anyway.
    let listed = client
        .get(format!("{}/api/v1/runs", s.base))
        .bearer_auth(TOKEN)
        .body("unread")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert!(closes(&listed), "{:?}", listed.headers());
    // A body the route reads to its end (whatever it then answers) keeps the connection.
    let read = client
        .post(&steer)
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"text": "keep going"}))
        .send()
        .await
        .unwrap();
    assert!(read.status().as_u16() < 500, "{}", read.status());
    assert!(!closes(&read), "{:?}", read.headers());
    // So does a request with no body.
    let plain = client
        .get(format!("{}/api/v1/runs", s.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 200);
    assert!(!closes(&plain), "{:?}", plain.headers());
}

/// What the `serve` fuzz target ran into after some thousands of cases: the request after
/// a refused one went out on the refused one's connection, which the server was closing,
/// and failed with a broken pipe or a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_after_a_refused_body_is_answered() {
    let s = server().await;
    let client = reqwest::Client::new();
    let steer = format!("{}/api/v1/runs/{}/steer", s.base, s.run);
    for i in 0..300 {
        let refused = client
            .post(&steer)
            .body(vec![b'['; 64 * 1024])
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
        let next = client
            .get(format!("{}/api/v1/runs", s.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {i} after a refused body: {e:?}"));
        assert_eq!(next.status(), 200);
    }
}
