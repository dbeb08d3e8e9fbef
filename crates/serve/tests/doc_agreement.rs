//! Where the server answered otherwise than `docs/http-api.md` says, found by reading the
//! document against a running server: the login form's body limit, the `invalid` code of
//! an unusable `POST /runs` field, the `Bearer` scheme's case, and `always` on a denial.
//!
//! A real server on 127.0.0.1 over an in-memory journal with one run (no submitter: a
//! valid `POST /runs` would answer 501, so a 400 there is the validation's).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use reqwest::StatusCode;
use serde_json::{Value, json};

mod common;

const TOKEN: &str = "doc-token-0123456789abcdef0123456789abcdef";

/// Status and error code of `POST /api/v1{path}` with `body` and the token.
async fn post(s: &common::Server, path: &str, body: Value) -> (StatusCode, String) {
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1{path}", s.base))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let body: Value = resp.json().await.unwrap();
    let code = body["error"]["code"].as_str().unwrap_or("").to_string();
    (status, code)
}

/// "Request bodies are at most 1 MiB (`413`)": the login page's form too (it answered 400,
/// the page for a form it could not read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_form_over_the_body_limit_is_413() {
    let s = common::server(TOKEN).await;
    let client = reqwest::Client::new();
    let big = format!("token={}", "a".repeat(agent_serve::MAX_BODY + 1));
    let resp = client
        .post(format!("{}/", s.base))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        resp.text().await.unwrap().contains("<form"),
        "the login page"
    );
    // A form that fits is still read: a wrong token is the login page's 401, the right one
    // the cookie and the redirect.
    let wrong = client
        .post(format!("{}/", s.base))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("token=nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let right = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}/", s.base))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), StatusCode::SEE_OTHER);
    assert!(right.headers().contains_key("set-cookie"));
}

/// `400 invalid` is "a well-formed request that cannot be taken" (an empty model, an empty
/// steer): an empty prompt and a relative workspace are that too (they were `bad_request`,
/// the code of a body of the wrong shape, while an empty model was `invalid`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_prompt_and_a_relative_workspace_are_invalid() {
    let s = common::server(TOKEN).await;
    for body in [
        json!({"prompt": " ", "workspace": "/tmp"}),
        json!({"prompt": "p", "workspace": "relative/dir"}),
        json!({"prompt": "p", "workspace": "/tmp", "model": ""}),
    ] {
        assert_eq!(
            post(&s, "/runs", body.clone()).await,
            (StatusCode::BAD_REQUEST, "invalid".to_string()),
            "{body}"
        );
    }
    // A missing field is still the shape's fault.
    assert_eq!(
        post(&s, "/runs", json!({"prompt": "p"})).await,
        (StatusCode::BAD_REQUEST, "bad_request".to_string())
    );
}

/// `Authorization: Bearer TOKEN`: the scheme's name is case-insensitive in HTTP, and a
/// client that writes `bearer` was refused with 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_case_insensitive() {
    let s = common::server(TOKEN).await;
    let client = reqwest::Client::new();
    for (header, expected) in [
        (format!("Bearer {TOKEN}"), StatusCode::OK),
        (format!("bearer {TOKEN}"), StatusCode::OK),
        (format!("BEARER {TOKEN}"), StatusCode::OK),
        (format!("Basic {TOKEN}"), StatusCode::UNAUTHORIZED),
        (format!("Bearer{TOKEN}"), StatusCode::UNAUTHORIZED),
        (TOKEN.to_string(), StatusCode::UNAUTHORIZED),
        ("bearer wrong".to_string(), StatusCode::UNAUTHORIZED),
    ] {
        let resp = client
            .get(format!("{}/api/v1/runs", s.base))
            .header("Authorization", &header)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), expected, "{header}");
    }
}

/// `always` approves the tool's later calls; on a denial it was taken (200) and journaled
/// as a scope the host ignores, so a client asking to "deny always" was never told that
/// the next call would ask again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_on_a_denial_is_invalid() {
    let s = common::server(TOKEN).await;
    let path = format!("/runs/{}/approvals/c1", s.run);
    assert_eq!(
        post(&s, &path, json!({"decision": "deny", "always": true})).await,
        (StatusCode::BAD_REQUEST, "invalid".to_string())
    );
    // Without it, or on an approval, the body is fine: the run has no call c1.
    for body in [
        json!({"decision": "deny", "always": false}),
        json!({"decision": "approve", "always": true}),
    ] {
        assert_eq!(
            post(&s, &path, body.clone()).await,
            (StatusCode::NOT_FOUND, "not_found".to_string()),
            "{body}"
        );
    }
}
