//! Fuzz target `script`: emulator script loading (`script.rs`), and serving what loads.
//!
//! Properties:
//! 1. Any text (script-shaped JSON with fields of any type, JSON soup, the corpus, the
//!    shipped fixtures) loads or gives `ScriptError`, never a panic, in bounded time.
//! 2. What we write we read: a loaded script serialises and loads back equal.
//! 3. A loaded script is served: the emulator answers a plain and a streamed request with
//!    the API's error shape, JSON or a stream that parses; never a dropped connection.
//!    (scripts with `stall`, `keep_alive` and `gate` faults are only loaded, not served:
//!    they hold a stream open by design.)

use std::time::{Duration, Instant};

use crate::fuzz_common::{check_answer, client, runtime, send};
use agent_fuzzkit::{config, corpus, json_text, json_value, keep_if_failing, within};
use agent_responses_mock::script::FaultKind;
use agent_responses_mock::{MockConfig, MockServer, Script};
use proptest::prelude::*;
use serde_json::{Value, json};

const TARGET: &str = "script";
const BOUND: Duration = Duration::from_secs(20);

fn holds_streams(script: &Script) -> bool {
    script.rules.iter().any(|r| {
        r.fault.as_ref().is_some_and(|f| {
            matches!(
                f.kind,
                FaultKind::Stall | FaultKind::KeepAlive | FaultKind::Gate
            )
        })
    })
}

fn check(text: &str) -> Result<(), TestCaseError> {
    let start = Instant::now();
    let Ok(script) = Script::from_json_str(text) else {
        return within(start, BOUND, "loading");
    };
    let written = serde_json::to_string(&script).unwrap();
    let back = Script::from_json_str(&written).ok();
    prop_assert_eq!(back.as_ref(), Some(&script));
    if holds_streams(&script) {
        return within(start, BOUND, "loading");
    }
    runtime().block_on(async {
        let server = MockServer::start(MockConfig::new(script)).await.unwrap();
        for stream in [false, true] {
            let body = json!({"model": "m", "input": "hello api", "stream": stream});
            let answer = send(
                client()
                    .post(format!("{}/responses", server.base_url()))
                    .bearer_auth("sk-any")
                    .json(&body),
            )
            .await?;
            check_answer(&answer).map_err(|e| TestCaseError::fail(format!("{e}: {answer:?}")))?;
        }
        Ok::<(), TestCaseError>(())
    })?;
    within(start, BOUND, "loading and serving")
}

// ---- generators ----

fn maybe<T: Strategy<Value = Value>>(s: T) -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(0.4, prop_oneof![4 => s, 1 => json_value()])
}

fn output_item() -> impl Strategy<Value = Value> {
    prop_oneof![
        "\\PC{0,12}".prop_map(|t| json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": format!("{t} {{{{last_user}}}} {{{{outputs}}}}")}]})),
        "[a-z]{1,6}".prop_map(|n| json!({"type": "function_call", "name": n, "arguments": "{\"a\":1}"})),
        json_value(),
    ]
}

fn reply() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (prop::collection::vec(output_item(), 0..3), maybe(prop::sample::select(vec!["completed", "incomplete", "failed", "x"]).prop_map(Value::from)), maybe(prop::sample::select(vec![0u64, 1, 3, u64::MAX]).prop_map(Value::from)))
            .prop_map(|(items, status, delta)| {
                let mut r = json!({"items": items});
                if let Some(s) = status { r["status"] = s; }
                if let Some(d) = delta { r["delta_chars"] = d; }
                r
            }),
        2 => (prop::sample::select(vec![0u64, 99, 200, 204, 400, 401, 429, 500, 503, 599, 600, 999, 65535]),
              "\\PC{0,12}",
              prop::collection::vec(("\\PC{0,8}", json_value()), 0..3),
              maybe(json_value()))
            .prop_map(|(status, message, headers, kind)| {
                let headers: serde_json::Map<String, Value> = headers.into_iter().collect();
                let mut e = json!({"status": status, "message": message, "headers": headers});
                if let Some(k) = kind { e["type"] = k; }
                json!({"error": e})
            }),
        1 => any::<bool>().prop_map(|b| json!({"echo": b})),
        1 => json_value(),
    ]
}

fn rule() -> impl Strategy<Value = Value> {
    let when = (
        maybe(
            prop::sample::select(vec!["responses", "compact", "any", "other"])
                .prop_map(Value::from),
        ),
        maybe("\\PC{0,6}".prop_map(Value::from)),
        maybe(any::<bool>().prop_map(Value::from)),
        maybe((0u64..4).prop_map(Value::from)),
    )
        .prop_map(|(endpoint, contains, stream, outputs)| {
            let mut w = json!({});
            if let Some(v) = endpoint {
                w["endpoint"] = v;
            }
            if let Some(v) = contains {
                w["last_user_contains"] = v;
            }
            if let Some(v) = stream {
                w["stream"] = v;
            }
            if let Some(v) = outputs {
                w["tool_outputs_below"] = v;
            }
            w
        });
    let fault = prop::option::weighted(
        0.3,
        (
            0u64..6,
            prop::sample::select(vec![
                "cut",
                "error_event",
                "stall",
                "keep_alive",
                "gate",
                "boom",
            ]),
            maybe(prop::sample::select(vec!["nested", "flat", "other"]).prop_map(Value::from)),
        )
            .prop_map(|(after, kind, shape)| {
                let mut f = json!({"after_events": after, "kind": kind});
                if let Some(s) = shape {
                    f["shape"] = s;
                }
                f
            }),
    );
    (
        when,
        maybe((0u64..3).prop_map(Value::from)),
        reply(),
        fault,
        prop::option::weighted(0.05, ("[a-z]{1,6}", json_value())),
    )
        .prop_map(|(when, times, reply, fault, extra)| {
            let mut r = json!({"name": "r", "when": when, "reply": reply});
            if let Some(t) = times {
                r["times"] = t;
            }
            if let Some(f) = fault {
                r["fault"] = f;
            }
            if let Some((k, v)) = extra {
                r[k] = v;
            }
            r
        })
}

fn script_text() -> impl Strategy<Value = String> {
    prop_oneof![
        5 => (prop::collection::vec(rule(), 0..4), maybe("\\PC{0,8}".prop_map(Value::from)))
            .prop_map(|(rules, description)| {
                let mut s = json!({"rules": rules});
                if let Some(d) = description { s["description"] = d; }
                s.to_string()
            }),
        1 => json_text(),
    ]
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn scripts_load_round_trip_and_serve(text in script_text()) {
        keep_if_failing("script", "json", text.as_bytes(), check(&text))?;
    }
}

#[test]
fn corpus_and_shipped_fixtures_replay() {
    for (name, bytes) in corpus(TARGET, 5) {
        check(&String::from_utf8_lossy(&bytes)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let fixtures = agent_fuzzkit::corpus_dir("../responses");
    let codex = agent_fuzzkit::corpus_dir("../codex");
    for dir in [fixtures, codex] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(Script::from_json_str(&text).is_ok(), "{}", path.display());
                check(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        }
    }
}
