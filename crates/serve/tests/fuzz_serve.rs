//! Fuzz target `serve`: the HTTP API's request handling (the guard, path and query parsing,
//! JSON bodies), through a real server on 127.0.0.1 over an in-memory journal with one run.
//!
//! Property: any method, path (a route's shape with any segments and query), `Host`, token,
//! `Origin` and body gets an answer below 500; a 4xx is the API's error shape
//! (`{"error": {"code", "message"}}`), or the console's HTML login page; nothing of a run is
//! answered without the right token and Host. The server then still answers a plain
//! request.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agent_fuzzkit::{config, corpus, json_text, keep_if_failing, within};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod common;

const TARGET: &str = "serve";
const BOUND: Duration = Duration::from_secs(20);
const TOKEN: &str = "fuzz-token-0123456789abcdef0123456789abcdef";

struct Fixture {
    runtime: tokio::runtime::Runtime,
    addr: std::net::SocketAddr,
    run: String,
    _dir: tempfile::TempDir,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (addr, run) = runtime.block_on(common::start(dir.path(), TOKEN));
        Fixture {
            runtime,
            addr,
            run,
            _dir: dir,
        }
    })
}

/// One request as generated (and saved when it fails, as JSON). `RUN` in the path stands
/// for the fixture's run id.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Case {
    method: String,
    path: String,
    /// The right `Host` (else a forged one).
    host: bool,
    /// The right token (else none).
    auth: bool,
    origin: Option<String>,
    body: String,
}

fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    })
}

fn check(case: &Case) -> Result<(), TestCaseError> {
    let f = fixture();
    let start = Instant::now();
    let path = case.path.replace("RUN", &f.run);
    f.runtime.block_on(async {
        let method =
            reqwest::Method::from_bytes(case.method.as_bytes()).unwrap_or(reqwest::Method::GET);
        let url = format!("http://{}{}", f.addr, path);
        let Ok(url) = reqwest::Url::parse(&url) else {
            return Ok(()); // not a request a client can send
        };
        let mut req = client()
            .request(method.clone(), url)
            .body(case.body.clone());
        if !case.host {
            req = req.header("host", "rebound.example");
        }
        if case.auth {
            req = req.bearer_auth(TOKEN);
        }
        if let Some(origin) = &case.origin
            && let Ok(v) = reqwest::header::HeaderValue::from_str(origin)
        {
            req = req.header("origin", v);
        }
        // A stream answers its head and then waits: only the head is read.
        let resp = tokio::time::timeout(Duration::from_secs(10), req.send())
            .await
            .map_err(|_| TestCaseError::fail("no answer within 10 s"))?
            .map_err(|e| TestCaseError::fail(format!("no answer: {e:?}")))?;
        let status = resp.status();
        let kind = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        if kind.starts_with("text/event-stream") {
            prop_assert!(
                case.auth && case.host,
                "a stream without the door: {case:?}"
            );
            return Ok(());
        }
        let body = resp.text().await.unwrap_or_default();
        // 501: a route this server was started without (search, submit).
        prop_assert!(
            status.as_u16() < 500 || status.as_u16() == 501,
            "{status} for {case:?}: {body}"
        );
        if status.is_client_error() && !kind.starts_with("text/html") {
            let v: Value = serde_json::from_str(&body)
                .map_err(|e| TestCaseError::fail(format!("{status} not JSON ({e}): {body}")))?;
            prop_assert!(v["error"]["code"].is_string(), "{body}");
            prop_assert!(v["error"]["message"].is_string(), "{body}");
        }
        if status.is_success() && path.starts_with("/api/") {
            prop_assert!(case.auth && case.host, "data without the door: {case:?}");
        }
        if !case.auth {
            prop_assert!(!body.contains(&f.run), "the run id leaked: {case:?}");
        }
        // Still serving.
        let ok = client()
            .get(format!("http://{}/api/v1/runs", f.addr))
            .bearer_auth(TOKEN)
            .send()
            .await
            .map_err(|e| TestCaseError::fail(format!("no longer serving: {e:?}")))?;
        prop_assert_eq!(ok.status().as_u16(), 200);
        Ok(())
    })?;
    within(start, BOUND, "the request")
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("RUN".to_string()),
        "[a-z0-9_-]{0,12}",
        "(%[0-9A-F]{2}){1,6}",
        "[^/?#]{0,40}",
        Just("x".repeat(3000)),
    ]
}

fn path() -> impl Strategy<Value = String> {
    let template = prop::sample::select(vec![
        "/api/v1/runs",
        "/api/v1/runs/{}",
        "/api/v1/runs/{}/events",
        "/api/v1/runs/{}/events/stream",
        "/api/v1/runs/{}/approvals/{}",
        "/api/v1/runs/{}/steer",
        "/api/v1/runs/{}/interrupt",
        "/api/v1/runs/{}/resume",
        "/api/v1/search",
        "/",
        "/assets/{}",
        "/{}",
    ]);
    let query = prop_oneof![
        Just(String::new()),
        "\\?(status|limit|cursor|after|q|run|token)=[^#]{0,20}",
        "\\?[^#]{0,60}",
    ];
    (template, segment(), segment(), query).prop_map(|(t, a, b, q)| {
        let mut p = t.replacen("{}", &a, 1).replacen("{}", &b, 1);
        p.push_str(&q);
        p
    })
}

fn case() -> impl Strategy<Value = Case> {
    let method = prop::sample::select(vec!["GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"]);
    let origin = prop_oneof![
        Just(None),
        Just(Some("http://evil.example".to_string())),
        "[ -~]{0,30}".prop_map(Some),
    ];
    let body = prop_oneof![
        Just(String::new()),
        json_text(),
        "[ -~]{0,200}",
        Just("{\"decision\":\"approve\"}".to_string()),
        Just("{\"text\":\"steer\"}".to_string()),
        Just("{\"prompt\":\"p\",\"workspace\":\"/tmp\"}".to_string()),
    ];
    (
        method,
        path(),
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.8),
        origin,
        body,
    )
        .prop_map(|(method, path, host, auth, origin, body)| Case {
            method: method.to_string(),
            path,
            host,
            auth,
            origin,
            body,
        })
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn any_request_gets_an_answer_in_the_api_shape(c in case()) {
        let saved = serde_json::to_vec(&c).unwrap();
        keep_if_failing("any_request", "json", &saved, check(&c))?;
    }
}

#[test]
fn corpus_replays() {
    for (name, bytes) in corpus(TARGET, 8) {
        let case: Case = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Err(e) = check(&case) {
            panic!("{name}: {e}");
        }
    }
}
