//! The `--max-watchers` bound is checked before anything of a run is read: a stream refused
//! for want of a permit costs no read of the run (a refused stream used to fold the whole
//! run first, however large).
//!
//! A real server on 127.0.0.1 over an in-memory journal with one run (4 watchers at most).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use reqwest::StatusCode;
use serde_json::Value;

mod common;

const TOKEN: &str = "watch-token-0123456789abcdef0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_past_the_bound_is_refused_before_its_run_is_read() {
    let s = common::server(TOKEN).await;
    let client = reqwest::Client::new();
    let stream = |run: &str| {
        client
            .get(format!("{}/api/v1/runs/{run}/events/stream", s.base))
            .bearer_auth(TOKEN)
            .send()
    };
    // Unknown while a permit is free: the run is looked for, and not found.
    let unknown = "01a00000-0000-7000-8000-000000000000";
    assert_eq!(
        stream(unknown).await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    let mut held = Vec::new();
    for _ in 0..4 {
        let resp = stream(&s.run).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        held.push(resp);
    }
    // Past the bound the answer is 429 before the run is looked for: an unknown run too.
    for run in [s.run.as_str(), unknown] {
        let resp = stream(run).await.unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "{run}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "too_many_watchers");
    }
    // A stream that ends gives its permit back.
    held.pop();
    let mut again = None;
    for _ in 0..100 {
        let resp = stream(&s.run).await.unwrap();
        if resp.status() == StatusCode::OK {
            again = Some(resp);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(again.is_some(), "the permit came back");
}
