//! Fuzz-style properties of the retry headers (not yet an `xtask fuzz` target: it has no
//! seed corpus under `fixtures/fuzz/`; a campaign can still run it with `PROPTEST_CASES`
//! and `FUZZ_SAVE_DIR`): the `Retry-After` / `Retry-After-Ms` headers a server sends
//! are its own, so any text there (an HTTP date with absurd fields, huge numbers, garbage)
//! must give a delay or none, never a panic (an overflow adding it to the clock), and a
//! delay the client would wait is at most [`MAX_RETRY_AFTER`]. End to end, a 429 with such
//! a date is retried with the normal backoff and the call succeeds.

use std::time::{Duration, Instant};

use agent_fuzzkit::{config, keep_if_failing, within};
use agent_responses::ClientError;
use agent_responses::retry::{
    MAX_RETRY_AFTER, RetryPolicy, retry_delay, server_delay, should_retry,
};
use agent_responses::types::{CreateResponse, Input};
use proptest::prelude::*;
use reqwest::header::{HeaderMap, HeaderValue};

use crate::common::{client_for, http_reply, raw_server};

/// The two dates that crashed the host (an hour beyond any clock, a day 0).
const CRASHERS: [&str; 2] = [
    "Mon, 07 Dec 2026 3000000000000000:00:00 GMT",
    "Mon, 00 Mar 2027 00:00:00 GMT",
];

fn check(name: &'static str, value: &str) -> Result<(), TestCaseError> {
    let Ok(value) = HeaderValue::from_str(value) else {
        return Ok(()); // not sendable as a header
    };
    let start = Instant::now();
    let mut headers = HeaderMap::new();
    headers.insert(name, value);
    let delay = server_delay(&headers);
    let _ = should_retry(429, &headers);
    let policy = RetryPolicy::default();
    for unit in [0.0, 0.5, 1.0] {
        let wait = retry_delay(&policy, 1, Some(&headers), unit);
        prop_assert!(wait <= MAX_RETRY_AFTER, "{wait:?} for {delay:?}");
        // What the client does with a delay: sleep it from now.
        prop_assert!(tokio::time::Instant::now().checked_add(wait).is_some());
        prop_assert!(std::time::SystemTime::now().checked_add(wait).is_some());
    }
    within(start, Duration::from_secs(5), "retry-after")
}

/// An IMF-fixdate with every field any number (or a few odd spellings).
fn date_like() -> impl Strategy<Value = String> {
    let num = prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        (0u64..100).prop_map(|n| format!("{n:02}")),
        (1960u64..10_000).prop_map(|n| n.to_string()),
        Just("-1".to_owned()),
        Just("+5".to_owned()),
        Just("99999999999999999999999".to_owned()),
    ];
    let month = prop::sample::select(vec!["Jan", "Feb", "Mar", "Dec", "Foo", ""]);
    (
        num.clone(),
        month,
        num.clone(),
        num.clone(),
        num.clone(),
        num,
    )
        .prop_map(|(d, mo, y, h, m, s)| format!("Mon, {d} {mo} {y} {h}:{m}:{s} GMT"))
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn any_retry_after_text_gives_a_bounded_wait_without_panicking(
        text in prop_oneof![
            2 => "\\PC{0,40}",
            3 => date_like(),
            1 => any::<f64>().prop_map(|f| f.to_string()),
        ]
    ) {
        let result = check("retry-after", &text)
            .and_then(|()| check("retry-after-ms", &text));
        keep_if_failing("retry_after", "txt", text.as_bytes(), result)?;
    }
}

#[test]
fn the_dates_that_crashed_the_host_are_ignored() {
    for text in CRASHERS {
        check("retry-after", text).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static(text));
        assert_eq!(server_delay(&headers), None, "{text}");
        assert!(should_retry(429, &headers), "{text}: the status decides");
    }
    // Valid dates still count: one far away is over the cap, one past is no wait.
    let mut headers = HeaderMap::new();
    headers.insert(
        "retry-after",
        HeaderValue::from_static("Fri, 31 Dec 9999 23:59:60 GMT"),
    );
    assert!(server_delay(&headers).is_some_and(|d| d > MAX_RETRY_AFTER));
    headers.insert(
        "retry-after",
        HeaderValue::from_static("Thu, 29 Feb 2024 00:00:00 GMT"),
    );
    assert_eq!(server_delay(&headers), Some(Duration::ZERO));
    headers.insert(
        "retry-after",
        HeaderValue::from_static("Thu, 29 Feb 2023 00:00:00 GMT"),
    );
    assert_eq!(server_delay(&headers), None, "no 29 February in 2023");
}

/// A 429 with an absurd date: retried with the normal backoff, and the call succeeds.
#[tokio::test]
async fn a_429_with_an_absurd_retry_after_date_is_retried_with_the_backoff() {
    let ok = http_reply(
        "200 OK",
        &[("content-type", "application/json")],
        br#"{"id":"resp_1","object":"response","status":"completed","output":[]}"#,
    );
    for text in CRASHERS {
        let busy = http_reply(
            "429 Too Many Requests",
            &[("content-type", "application/json"), ("retry-after", text)],
            br#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
        );
        let (base, arrivals) = raw_server(vec![busy, ok.clone()]).await;
        let client = client_for(&base, "sk-test-retry-after");
        let request = CreateResponse::new("gpt-test", Input::Text("hello".into()));
        let response: Result<_, ClientError> = client.create(&request).await;
        let response = response.unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(response.id, "resp_1");
        assert_eq!(arrivals.lock().unwrap().len(), 2, "{text}");
    }
}
