//! Fuzz target `journal`: event names and payloads (`limits.rs`), and the round trip
//! append then replay on the `memory:` backend.
//!
//! Properties:
//! 1. Names: any thread, kind and dedup key is either accepted or refused with
//!    `InvalidInput`, exactly by the documented rule (non-empty, within its byte limit, no
//!    NUL); never a panic.
//! 2. Value payloads: any JSON value (deep, unicode, NUL, text that spells `\u0000`,
//!    extreme numbers) is refused with `InvalidInput` exactly when a string holds NUL, and
//!    otherwise replays as the same event (thread, kind, payload, dedup key). Floats are
//!    those serde_json reads back exactly (see `agent_fuzzkit::json_value`).
//! 3. Text payloads (`Payload::raw`): any text that parses as a `RawValue`, and the corpus
//!    `fixtures/fuzz/journal/*.json`, is refused with `InvalidInput` or replays as the
//!    value the text means: an acknowledged event always replays.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agent_fuzzkit::{config, corpus, json_text, json_value, keep_if_failing, nasty_json, within};
use agent_journal::{
    Journal, JournalError, MAX_DEDUP_KEY_BYTES, MAX_KIND_BYTES, MAX_THREAD_BYTES, MEMORY_URL,
    NewEvent, Payload,
};
use proptest::prelude::*;
use serde_json::Value;
use serde_json::value::RawValue;

const TARGET: &str = "journal";
const BOUND: Duration = Duration::from_secs(5);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

fn name_ok(name: &str, max: usize) -> bool {
    !name.is_empty() && name.len() <= max && !name.contains('\0')
}

fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// Appends `event` to a fresh `memory:` journal and replays its thread. `expected` is the
/// payload it must come back as, `None` when it must be refused as invalid input.
fn check_append(
    event: NewEvent,
    acceptable: bool,
    expected: Option<Value>,
) -> Result<(), TestCaseError> {
    let start = Instant::now();
    let result = runtime().block_on(async {
        let journal = Journal::open(MEMORY_URL).await.unwrap();
        let appended = journal.append(event.clone()).await;
        let replayed = match &appended {
            Ok(_) => Some(journal.replay(&event.thread, 0).await),
            Err(_) => None,
        };
        journal.close().await;
        (appended, replayed)
    });
    within(start, BOUND, "append and replay")?;
    match (result, acceptable.then_some(()).and(expected)) {
        ((Ok(appended), Some(replayed)), Some(payload)) => {
            let events = replayed.map_err(|e| TestCaseError::fail(format!("replay: {e}")))?;
            prop_assert_eq!(events.len(), 1);
            let got = &events[0];
            prop_assert_eq!(got.seq, appended.seq);
            prop_assert_eq!(&*got.thread, event.thread.as_str());
            prop_assert_eq!(&*got.kind, event.kind.as_str());
            prop_assert_eq!(&got.dedup_key, &event.dedup_key);
            prop_assert_eq!(&got.payload, &payload);
        }
        ((Err(JournalError::InvalidInput { .. }), _), None) => {}
        ((Ok(_), _), None) => prop_assert!(false, "accepted what it must refuse: {event:?}"),
        ((Err(e), _), _) => prop_assert!(false, "refused {event:?}: {e}"),
        ((Ok(_), None), Some(_)) => unreachable!(),
    }
    Ok(())
}

/// A text payload: refused as invalid input, or replayed as the value it means.
fn check_text(text: &str) -> Result<(), TestCaseError> {
    let Ok(raw) = serde_json::from_str::<Box<RawValue>>(text) else {
        return Ok(()); // not JSON: `Payload::raw` cannot be built from it
    };
    let event = NewEvent::new("t", "k", Payload::raw(raw));
    let start = Instant::now();
    let (appended, replayed) = runtime().block_on(async {
        let journal = Journal::open(MEMORY_URL).await.unwrap();
        let appended = journal.append(event).await;
        let replayed = journal.replay("t", 0).await;
        journal.close().await;
        (appended, replayed)
    });
    within(start, BOUND, "append and replay")?;
    match appended {
        Ok(_) => {
            let events = replayed.map_err(|e| {
                TestCaseError::fail(format!("acknowledged but not replayable: {e}"))
            })?;
            // What the text spells (`serde_json` alone reads some objects as other values).
            let meant: Value = agent_schema::json::from_str(text).map_err(|e| {
                TestCaseError::fail(format!("accepted a text that is no value: {e}"))
            })?;
            prop_assert_eq!(&events[0].payload, &meant);
        }
        Err(JournalError::InvalidInput { .. }) => {}
        Err(e) => prop_assert!(false, "refused with {e}"),
    }
    Ok(())
}

// ---- generators ----

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z0-9._:/-]{1,12}",
        2 => "\\PC{0,12}",
        1 => Just(String::new()),
        1 => "[a-z]{0,4}\0[a-z]{0,4}",
        1 => (100usize..600).prop_map(|n| "é".repeat(n / 2)),
        1 => prop::sample::select(vec![MAX_KIND_BYTES, MAX_THREAD_BYTES, MAX_DEDUP_KEY_BYTES])
            .prop_flat_map(|n| (n - 1..=n + 1).prop_map(|n| "x".repeat(n))),
    ]
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn names_are_checked_by_the_documented_rule(
        thread in name(), kind in name(), key in prop::option::of(name()),
    ) {
        let ok = name_ok(&thread, MAX_THREAD_BYTES)
            && name_ok(&kind, MAX_KIND_BYTES)
            && key.as_deref().is_none_or(|k| name_ok(k, MAX_DEDUP_KEY_BYTES));
        let mut event = NewEvent::new(thread.clone(), kind.clone(), serde_json::json!({"n": 1}));
        event.dedup_key = key.clone();
        let input = format!("{thread}\n{kind}\n{}", key.as_deref().unwrap_or(""));
        let result = check_append(event, ok, Some(serde_json::json!({"n": 1})));
        keep_if_failing("names", "txt", input.as_bytes(), result)?;
    }

    #[test]
    fn value_payloads_round_trip(payload in json_value()) {
        let ok = !has_nul(&payload);
        let event = NewEvent::new("thread", "kind", payload.clone());
        let input = payload.to_string();
        keep_if_failing("value", "json", input.as_bytes(), check_append(event, ok, Some(payload)))?;
    }

    /// Objects that start with one of `serde_json`'s private keys, holding anything.
    #[test]
    fn values_with_serde_json_private_keys_round_trip(
        key in prop::sample::select(vec![
            "$serde_json::private::RawValue",
            "$serde_json::private::Number",
        ]),
        held in prop_oneof![
            json_value(),
            json_value().prop_map(|v| Value::String(v.to_string())),
        ],
        rest in json_value(),
    ) {
        let payload = serde_json::json!([{ key: held, "rest": rest }, { key: "[1]" }]);
        let ok = !has_nul(&payload);
        let event = NewEvent::new("thread", "kind", payload.clone());
        let input = payload.to_string();
        keep_if_failing("private", "json", input.as_bytes(), check_append(event, ok, Some(payload)))?;
    }

    #[test]
    fn text_payloads_are_refused_or_replay(text in json_text()) {
        keep_if_failing("text", "json", text.as_bytes(), check_text(&text))?;
    }
}

#[test]
fn corpus_replays() {
    for (name, bytes) in corpus(TARGET, 5) {
        let text = String::from_utf8_lossy(&bytes);
        check_text(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            let ok = !has_nul(&value);
            let event = NewEvent::new("t", "k", value.clone());
            check_append(event, ok, Some(value)).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    for text in nasty_json() {
        check_text(&text).unwrap_or_else(|e| panic!("{text:.40}: {e}"));
    }
}

#[test]
fn a_payload_at_the_size_limit_and_one_over() {
    // 4 MiB of compact JSON is accepted, one byte more is refused (no amplification:
    // the limit is on the encoded size, checked before anything is stored).
    let limit = agent_journal::MAX_PAYLOAD_BYTES;
    let at = Value::String("x".repeat(limit - 2));
    check_append(NewEvent::new("t", "k", at.clone()), true, Some(at)).unwrap();
    let over = Value::String("x".repeat(limit - 1));
    check_append(NewEvent::new("t", "k", over), false, None).unwrap();
}
