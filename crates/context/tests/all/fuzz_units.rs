//! Fuzz target `units`: context units (`unit.rs`): what we write we read, on
//! `sqlite::memory:`.
//!
//! Properties:
//! 1. Any unit (items of any JSON shape; tool calls and outputs paired, unpaired,
//!    duplicated, with non-string `call_id`s; names with NUL, empty, over the limit) is
//!    accepted exactly when the documented rules allow it (names 1-256 bytes without NUL,
//!    1-1024 items, every item an object, calls and outputs paired one to one by string
//!    `call_id`), refused with a typed error otherwise, and never panics.
//! 2. An accepted unit comes back from `window` with the same items, and `search` for a
//!    piece of its text (any case) finds it.
//! 3. `fold` does not amplify: its output is at most 3 times its input; and it is the
//!    per-character Unicode lowercase map (its fast ASCII path changes nothing).

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_context::{CALL_OUTPUT_TYPES, ContextStore, fold};
use agent_fuzzkit::{config, corpus, json_value, keep_if_failing, within};
use proptest::prelude::*;
use serde_json::{Value, json};

const TARGET: &str = "units";
const BOUND: Duration = Duration::from_secs(10);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn store() -> &'static ContextStore {
    static STORE: OnceLock<ContextStore> = OnceLock::new();
    STORE.get_or_init(|| {
        runtime()
            .block_on(ContextStore::open("sqlite::memory:"))
            .unwrap()
    })
}

/// A thread name of its own for each case.
fn fresh_thread() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("t{}", N.fetch_add(1, Ordering::Relaxed))
}

fn name_ok(name: &str) -> bool {
    !name.is_empty() && name.len() <= 256 && !name.contains('\0')
}

/// The documented acceptance rule, written plainly.
fn acceptable(unit: &str, items: &[Value]) -> bool {
    if !name_ok(unit) || items.is_empty() || items.len() > 1024 {
        return false;
    }
    let (mut calls, mut outputs) = (BTreeSet::new(), BTreeSet::new());
    for item in items {
        let Some(obj) = item.as_object() else {
            return false;
        };
        let Some(kind) = obj.get("type").and_then(Value::as_str) else {
            continue;
        };
        let is_call = CALL_OUTPUT_TYPES.iter().any(|(c, _)| *c == kind);
        let is_output = CALL_OUTPUT_TYPES.iter().any(|(_, o)| *o == kind);
        if !is_call && !is_output {
            continue;
        }
        let Some(id) = obj.get("call_id").and_then(Value::as_str) else {
            return false;
        };
        if !(if is_call { &mut calls } else { &mut outputs }).insert(id.to_owned()) {
            return false;
        }
    }
    calls == outputs && serde_json::to_string(items).unwrap().len() <= 1 << 20
}

fn check_unit(unit: &str, items: &[Value], needle: Option<&str>) -> Result<(), TestCaseError> {
    let store = store();
    let thread = fresh_thread();
    let start = Instant::now();
    let (appended, window, found) = runtime().block_on(async {
        let appended = store.append_unit(&thread, unit, items).await;
        let window = store.window(&thread, "goal", 10).await;
        let found = match needle {
            Some(term) if appended.is_ok() => Some(store.search(&thread, term, 10).await),
            _ => None,
        };
        (appended, window, found)
    });
    within(start, BOUND, "append, window and search")?;
    let window = window.map_err(|e| TestCaseError::fail(format!("window: {e}")))?;
    let expected = acceptable(unit, items);
    match appended {
        Ok(_) => {
            prop_assert!(expected, "accepted what the rules refuse");
            prop_assert_eq!(window.recent_units.len(), 1);
            prop_assert_eq!(&window.recent_units[0].unit, unit);
            prop_assert_eq!(&window.recent_units[0].items, &items.to_vec());
            if let Some(found) = found {
                let found = found.map_err(|e| TestCaseError::fail(format!("search: {e}")))?;
                prop_assert!(
                    found.iter().any(|u| u.unit == unit),
                    "search for {needle:?} missed it"
                );
            }
        }
        Err(e) => {
            prop_assert!(!expected, "refused a valid unit: {e}");
            prop_assert!(window.recent_units.is_empty(), "a refused unit was stored");
        }
    }
    Ok(())
}

// ---- generators ----

fn item() -> impl Strategy<Value = Value> {
    let kind = prop::sample::select(vec![
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "computer_call_output",
        "local_shell_call",
        "message",
        "reasoning",
        "other",
    ]);
    let call_id = prop_oneof![
        4 => prop::sample::select(vec!["c1", "c2", "c3"]).prop_map(Value::from),
        1 => json_value(),
    ];
    prop_oneof![
        6 => (kind, prop::option::weighted(0.9, call_id), json_value()).prop_map(|(k, id, extra)| {
            let mut item = json!({"type": k, "payload": extra});
            if let Some(id) = id {
                item["call_id"] = id;
            }
            item
        }),
        3 => "[a-zA-Z0-9 éÉ数据ΣΑ]{0,24}".prop_map(|t| json!({"role": "user", "content": t})),
        1 => json_value(),
    ]
}

fn unit_name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[a-z0-9_-]{1,12}",
        1 => Just(String::new()),
        1 => "[a-z]{0,3}\0[a-z]{0,3}",
        1 => (250usize..260).prop_map(|n| "u".repeat(n)),
        1 => "\\PC{1,8}",
    ]
}

proptest! {
    #![proptest_config(config(150))]

    #[test]
    fn units_are_checked_then_read_back(
        unit in unit_name(),
        items in prop::collection::vec(item(), 0..8),
        pick in any::<prop::sample::Index>(),
    ) {
        // A search term: 3 or more characters of a message's text, in upper case.
        let texts: Vec<&str> = items.iter()
            .filter_map(|i| i.get("content").and_then(Value::as_str))
            .filter(|t| t.chars().count() >= 3)
            .collect();
        let needle = (!texts.is_empty()).then(|| {
            let text: Vec<char> = pick.get(&texts).chars().collect();
            let from = pick.index(text.len() - 2);
            text[from..(from + 3)].iter().collect::<String>().to_uppercase()
        });
        let needle = needle.filter(|n| !n.trim().is_empty());
        let input = serde_json::to_string(&json!({"unit": unit, "items": items})).unwrap();
        let result = check_unit(&unit, &items, needle.as_deref());
        keep_if_failing("unit", "json", input.as_bytes(), result)?;
    }

    #[test]
    fn fold_does_not_amplify(text in "\\PC{0,64}") {
        let folded = fold(&text);
        prop_assert!(folded.len() <= 3 * text.len());
    }

    #[test]
    fn fold_is_the_per_character_lowercase_map(text in "\\PC{0,64}") {
        let reference: String = text.chars().flat_map(char::to_lowercase).collect();
        prop_assert_eq!(fold(&text), reference);
    }
}

#[test]
fn corpus_replays() {
    for (name, bytes) in corpus(TARGET, 5) {
        let case: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let unit = case["unit"].as_str().unwrap();
        let items = case["items"].as_array().unwrap();
        check_unit(unit, items, None).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn a_unit_just_over_the_size_limit_is_refused() {
    let big = "x".repeat(1 << 20);
    check_unit("big", &[json!({"role": "user", "content": big})], None).unwrap();
}
