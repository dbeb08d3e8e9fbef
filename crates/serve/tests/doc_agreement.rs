//! Where the server answered otherwise than `docs/http-api.md` says, found by reading the
//! document against a running server: the login form's body limit, the `invalid` code of
//! an unusable `POST /runs` field, the `Bearer` scheme's case, and `always` on a denial.
//!
//! A real server on 127.0.0.1 over an in-memory journal with one run (no submitter: a
//! valid `POST /runs` would answer 501, so a 400 there is the validation's).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use reqwest::StatusCode;

mod common;

const TOKEN: &str = "doc-token-0123456789abcdef0123456789abcdef";

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
