//! One conformance suite, run against SQLite (a temp file, plus `sqlite::memory:` where it
//! matters) and PostgreSQL (a fresh database per test; needs `AGENTCTL_TEST_PG_URL`).
//! Includes the two storage tests of the Python demo this crate grew from
//! (`test_window_keeps_pairs_and_archive`, `test_memory_provenance_revocation_and_scope`)
//! and a test for every error.

use crate::common;

use agent_context::{ContextError, ContextStore, NewEvidence, NewUnit, limits};
use serde_json::{Value, json};

fn ev(
    source: &str,
    project: &str,
    key: &str,
    value: &str,
    observed: i64,
    confirmed: bool,
) -> NewEvidence {
    NewEvidence {
        source: source.into(),
        project: project.into(),
        key: key.into(),
        value: value.into(),
        observed,
        confirmed,
    }
}

fn msg(text: &str) -> Vec<Value> {
    vec![json!({"type": "message", "text": text})]
}

fn units_of(w: &agent_context::Window) -> Vec<&str> {
    w.recent_units.iter().map(|u| u.unit.as_str()).collect()
}

/// The Python demo's `test_window_keeps_pairs_and_archive`.
async fn window_keeps_pairs_and_archive(db: common::Db) {
    let s = &db.store;
    s.append_unit("a", "1", &[json!({"type": "message", "text": "E42"})])
        .await
        .unwrap();
    s.append_unit(
        "a",
        "2",
        &[
            json!({"type": "function_call", "call_id": "x"}),
            json!({"type": "function_call_output", "call_id": "x"}),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        s.window("a", "goal", 1).await.unwrap().recent_units[0]
            .items
            .len(),
        2
    );
    assert_eq!(s.search("a", "E42", 5).await.unwrap().len(), 1);
    assert!(s.search("b", "E42", 5).await.unwrap().is_empty());
    let err = s
        .append_unit(
            "a",
            "bad",
            &[json!({"type": "function_call", "call_id": "x"})],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ContextError::UnpairedCalls { .. }), "{err}");
}

/// The Python demo's `test_memory_provenance_revocation_and_scope`.
async fn memory_provenance_revocation_and_scope(db: common::Db) {
    let s = &db.store;
    s.add_evidence(&ev("a", "p", "jdk", "8", 1, true))
        .await
        .unwrap();
    s.add_evidence(&ev("b", "p", "jdk", "17", 2, true))
        .await
        .unwrap();
    s.add_evidence(&ev("c", "p", "jdk", "99", 3, false))
        .await
        .unwrap();
    s.consolidate().await.unwrap();
    let r = s.recall("p", 40, 30).await.unwrap();
    assert_eq!(r[0].value, "17");
    assert!(r[0].needs_refresh);
    assert!(s.recall("other", 40, 30).await.unwrap().is_empty());
    s.revoke("b").await.unwrap();
    s.consolidate().await.unwrap();
    assert_eq!(s.recall("p", 40, 30).await.unwrap()[0].source, "a");
}

async fn window_order_goal_and_keep(db: common::Db) {
    let s = &db.store;
    for i in 1..=5 {
        s.append_unit("t", &format!("u{i}"), &msg(&format!("step {i}")))
            .await
            .unwrap();
    }
    s.append_unit("other", "u9", &msg("noise")).await.unwrap();
    let w = s.window("t", "the goal", 3).await.unwrap();
    assert_eq!(w.pinned_goal, "the goal");
    assert_eq!(units_of(&w), ["u3", "u4", "u5"]);
    assert_eq!(
        w.recent_units
            .iter()
            .map(|u| u.position)
            .collect::<Vec<_>>(),
        [3, 4, 5]
    );
    assert_eq!(units_of(&s.window("t", "g", 100).await.unwrap()).len(), 5);
    assert!(
        s.window("nobody", "g", 2)
            .await
            .unwrap()
            .recent_units
            .is_empty()
    );
    // Items come back exactly as appended (key order, unicode).
    let items = vec![
        json!({"type": "message", "z": 1, "a": "错误码 E42", "nested": {"b": [1, 2.5, null]}}),
    ];
    s.append_unit("t", "u6", &items).await.unwrap();
    assert_eq!(
        s.window("t", "g", 1).await.unwrap().recent_units[0].items,
        items
    );
    // units_bytes is the size of the returned items' compact JSON (escapes, unicode,
    // floats included), however the backend measures it.
    let odd =
        vec![json!({"type": "message", "t": "tab\t \"q\" \u{1F600} é", "f": [0.1, 1e300, -0.0]})];
    s.append_unit("t", "u7", &odd).await.unwrap();
    let w = s.window("t", "g", 3).await.unwrap();
    let expected: usize = w
        .recent_units
        .iter()
        .map(|u| serde_json::to_string(&u.items).unwrap().len())
        .sum();
    assert_eq!(w.units_bytes, expected as u64);
}

async fn window_budget_never_splits(db: common::Db) {
    let s = &db.store;
    let a = msg("aaaaaaaaaa");
    let size = serde_json::to_string(&a).unwrap().len() as u64;
    for i in 1..=4 {
        s.append_unit("t", &format!("u{i}"), &a).await.unwrap();
    }
    // Goal "g" costs 1 byte: room for exactly two units.
    let w = s
        .window_budget("t", "g", 1 + 2 * size + size - 1)
        .await
        .unwrap();
    assert_eq!(units_of(&w), ["u3", "u4"]);
    assert_eq!(w.units_bytes, 2 * size);
    // The goal is kept even when nothing else fits.
    let w = s.window_budget("t", "a long goal", 3).await.unwrap();
    assert_eq!(w.pinned_goal, "a long goal");
    assert!(w.recent_units.is_empty());
    let w = s.window_budget("t", "g", u64::MAX).await.unwrap();
    assert_eq!(w.recent_units.len(), 4);
}

async fn pairing_rules(db: common::Db) {
    let s = &db.store;
    // Several calls, interleaved, in any order: fine.
    let ok = [
        json!({"type": "function_call_output", "call_id": "b", "output": "2"}),
        json!({"type": "function_call", "call_id": "a", "name": "x"}),
        json!({"type": "function_call", "call_id": "b", "name": "y"}),
        json!({"type": "function_call_output", "call_id": "a", "output": "1"}),
        json!({"type": "custom_tool_call", "call_id": "c"}),
        json!({"type": "custom_tool_call_output", "call_id": "c"}),
    ];
    s.append_unit("t", "ok", &ok).await.unwrap();
    let err = s
        .append_unit(
            "t",
            "bad",
            &[
                json!({"type": "function_call", "call_id": "c1"}),
                json!({"type": "function_call", "call_id": "c2"}),
                json!({"type": "function_call_output", "call_id": "c2"}),
                json!({"type": "function_call_output", "call_id": "c3"}),
            ],
        )
        .await
        .unwrap_err();
    match &err {
        ContextError::UnpairedCalls {
            unit,
            calls_without_output,
            outputs_without_call,
        } => {
            assert_eq!(unit, "bad");
            assert_eq!(calls_without_output, &["c1"]);
            assert_eq!(outputs_without_call, &["c3"]);
        }
        other => panic!("unexpected {other}"),
    }
    let text = err.to_string();
    assert!(text.contains("c1") && text.contains("c3"), "{text}");
    let dup = [
        json!({"type": "function_call", "call_id": "d"}),
        json!({"type": "function_call", "call_id": "d"}),
        json!({"type": "function_call_output", "call_id": "d"}),
    ];
    assert!(matches!(
        s.append_unit("t", "dup", &dup).await.unwrap_err(),
        ContextError::DuplicateCallId { .. }
    ));
    assert!(matches!(
        s.append_unit("t", "x", &[json!("just a string")])
            .await
            .unwrap_err(),
        ContextError::InvalidItem { index: 0, .. }
    ));
    assert!(matches!(
        s.append_unit("t", "x", &[json!({"type": "function_call"})])
            .await
            .unwrap_err(),
        ContextError::InvalidItem { .. }
    ));
    assert!(matches!(
        s.append_unit("t", "x", &[]).await.unwrap_err(),
        ContextError::EmptyUnit { .. }
    ));
    // Nothing of the refused units was written.
    assert_eq!(units_of(&s.window("t", "g", 10).await.unwrap()), ["ok"]);
}

async fn duplicate_unit_refused(db: common::Db) {
    let s = &db.store;
    s.append_unit("t", "u1", &msg("first")).await.unwrap();
    let err = s.append_unit("t", "u1", &msg("second")).await.unwrap_err();
    assert!(
        matches!(&err, ContextError::DuplicateUnit { thread, unit } if thread == "t" && unit == "u1"),
        "{err}"
    );
    // Same unit id in another thread is fine; positions stay gap-free after a refusal.
    s.append_unit("t2", "u1", &msg("other thread"))
        .await
        .unwrap();
    let p = s.append_unit("t", "u2", &msg("third")).await.unwrap();
    assert_eq!(p.position, 2);
    let w = s.window("t", "g", 5).await.unwrap();
    assert_eq!(units_of(&w), ["u1", "u2"]);
    assert_eq!(w.recent_units[0].items, msg("first"));
}

async fn batch_is_all_or_nothing(db: common::Db) {
    let s = &db.store;
    let good = NewUnit {
        unit: "b1".into(),
        items: msg("one"),
    };
    let dup = NewUnit {
        unit: "b1".into(),
        items: msg("two"),
    };
    assert!(matches!(
        s.append_units("t", &[good.clone(), dup]).await.unwrap_err(),
        ContextError::DuplicateUnit { .. }
    ));
    assert!(s.window("t", "g", 5).await.unwrap().recent_units.is_empty());
    let b2 = NewUnit {
        unit: "b2".into(),
        items: msg("two"),
    };
    assert_eq!(s.append_units("t", &[good, b2]).await.unwrap().position, 2);
    assert_eq!(s.threads().await.unwrap()[0].units, 2);
    // A unit that already exists is named; the batch leaves nothing behind.
    let b3 = NewUnit {
        unit: "b3".into(),
        items: msg("three"),
    };
    let b2_again = NewUnit {
        unit: "b2".into(),
        items: msg("again"),
    };
    let err = s
        .append_units("t", &[b3.clone(), b2_again])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ContextError::DuplicateUnit { unit, .. } if unit == "b2"),
        "{err}"
    );
    assert_eq!(
        s.thread_units("t").await.unwrap(),
        2,
        "a refused batch counts nothing"
    );
    assert_eq!(s.append_units("t", &[b3]).await.unwrap().position, 3);
    assert_eq!(s.thread_units("t").await.unwrap(), 3);
    assert_eq!(s.thread_units("never-written").await.unwrap(), 0);
    // Large batches (several INSERT chunks) keep order and positions.
    let many: Vec<NewUnit> = (0..2500)
        .map(|i| NewUnit {
            unit: format!("m{i}"),
            items: msg(&format!("bulk {i}")),
        })
        .collect();
    assert_eq!(s.append_units("bulk", &many).await.unwrap().position, 2500);
    let w = s.window("bulk", "g", 3).await.unwrap();
    assert_eq!(units_of(&w), ["m2497", "m2498", "m2499"]);
    assert_eq!(w.recent_units[2].position, 2500);
    assert_eq!(
        s.search("bulk", "bulk 1234", 5).await.unwrap()[0].unit,
        "m1234"
    );
    // An existing unit deep in a later chunk is named, and the chunks before it are undone.
    let mut again: Vec<NewUnit> = (0..1200)
        .map(|i| NewUnit {
            unit: format!("n{i}"),
            items: msg("n"),
        })
        .collect();
    again[1100].unit = "m7".into();
    let err = s.append_units("bulk", &again).await.unwrap_err();
    assert!(
        matches!(&err, ContextError::DuplicateUnit { unit, .. } if unit == "m7"),
        "{err}"
    );
    assert_eq!(
        units_of(&s.window("bulk", "g", 1).await.unwrap()),
        ["m2499"]
    );
    assert_eq!(
        s.append_unit("bulk", "n0", &msg("n"))
            .await
            .unwrap()
            .position,
        2501
    );
    // Derived units (commit not waiting for the disk): the same checks and all-or-none
    // batch, found by the next search and shown by the next window like any other.
    let derived: Vec<NewUnit> = (0..3)
        .map(|i| NewUnit {
            unit: format!("d{i}"),
            items: msg(&format!("derived needle {i}")),
        })
        .collect();
    assert!(matches!(
        s.append_derived_units("bulk", &[derived[0].clone(), derived[0].clone()])
            .await
            .unwrap_err(),
        ContextError::DuplicateUnit { .. }
    ));
    assert_eq!(
        s.append_derived_units("bulk", &derived)
            .await
            .unwrap()
            .position,
        2504
    );
    let found = s.search("bulk", "DERIVED NEEDLE", 5).await.unwrap();
    assert_eq!(
        found.iter().map(|u| u.unit.as_str()).collect::<Vec<_>>(),
        ["d0", "d1", "d2"]
    );
    assert_eq!(
        units_of(&s.window("bulk", "g", 2).await.unwrap()),
        ["d1", "d2"]
    );
    assert!(matches!(
        s.append_derived_units("bulk", &derived[1..2]).await.unwrap_err(),
        ContextError::DuplicateUnit { unit, .. } if unit == "d1"
    ));
    assert_eq!(s.thread_units("bulk").await.unwrap(), 2504);
    // A durable append after a derived one is as before.
    assert_eq!(
        s.append_unit("bulk", "n1", &msg("n"))
            .await
            .unwrap()
            .position,
        2505
    );
}

async fn search_semantics(db: common::Db) {
    let s = &db.store;
    s.append_unit("a", "u1", &msg("错误码 E42 是旧登录模块的故障"))
        .await
        .unwrap();
    s.append_unit("a", "u2", &msg("Build FAILED in Login module"))
        .await
        .unwrap();
    s.append_unit("a", "u3", &msg("当前目标：只读诊断"))
        .await
        .unwrap();
    s.append_unit("a", "u4", &msg("login again; 50% done_ok"))
        .await
        .unwrap();
    s.append_unit("b", "u1", &msg("login in another thread, E42"))
        .await
        .unwrap();
    let hits = |v: Vec<agent_context::Unit>| v.into_iter().map(|u| u.unit).collect::<Vec<_>>();
    // Case-insensitive, in thread order, only this thread.
    assert_eq!(
        hits(s.search("a", "LOGIN", 10).await.unwrap()),
        ["u2", "u4"]
    );
    assert_eq!(hits(s.search("a", "e42", 10).await.unwrap()), ["u1"]);
    // CJK substrings (3+ chars through the index, shorter through the thread scan).
    assert_eq!(hits(s.search("a", "旧登录", 10).await.unwrap()), ["u1"]);
    assert_eq!(hits(s.search("a", "登录", 10).await.unwrap()), ["u1"]);
    assert_eq!(hits(s.search("a", "诊", 10).await.unwrap()), ["u3"]);
    // Short latin term, limit respected.
    assert_eq!(hits(s.search("a", "in", 1).await.unwrap()), ["u2"]);
    // LIKE / FTS syntax characters are plain text.
    assert_eq!(hits(s.search("a", "50%", 10).await.unwrap()), ["u4"]);
    assert_eq!(hits(s.search("a", "done_ok", 10).await.unwrap()), ["u4"]);
    assert!(s.search("a", "don_ok", 10).await.unwrap().is_empty());
    assert!(
        s.search("a", "\"x\" OR login", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(s.search("a", "no-such-term", 10).await.unwrap().is_empty());
    assert!(s.search("nobody", "login", 10).await.unwrap().is_empty());
    // Non-ASCII case folding.
    s.append_unit("a", "u5", &msg("ÄRGER über Straße"))
        .await
        .unwrap();
    assert_eq!(hits(s.search("a", "ärger", 10).await.unwrap()), ["u5"]);
    assert_eq!(hits(s.search("a", "ÜBER", 10).await.unwrap()), ["u5"]);
}

/// A term is text, as the unit's text reads: a unit is kept (and indexed) as its JSON, so
/// a backslash, a quote or a line break in it were searched for as their escapes, and
/// `C:\Users` found nothing where `C:\\Users` did.
async fn search_finds_text_that_json_escapes(db: common::Db) {
    let s = &db.store;
    s.append_unit(
        "a",
        "u1",
        &msg("path C:\\Users and \"quoted\"\nnext line\tTAB"),
    )
    .await
    .unwrap();
    s.append_unit("a", "u2", &msg("plain")).await.unwrap();
    let hits = |v: Vec<agent_context::Unit>| v.into_iter().map(|u| u.unit).collect::<Vec<_>>();
    for term in [
        "C:\\Users",
        "\"quoted\"",
        "and \"",
        "\"\nnext",
        "line\ttab",
        "\\u",
    ] {
        assert_eq!(
            hits(s.search("a", term, 10).await.unwrap()),
            ["u1"],
            "{term:?}"
        );
    }
    // The escapes themselves are not the text.
    assert!(s.search("a", "C:\\\\Users", 10).await.unwrap().is_empty());
    assert!(s.search("a", "\\nnext", 10).await.unwrap().is_empty());
}

async fn search_and_window_errors(db: common::Db) {
    let s = &db.store;
    assert!(matches!(
        s.search("a", "", 5).await.unwrap_err(),
        ContextError::EmptyTerm
    ));
    assert!(matches!(
        s.search("a", "x", 0).await.unwrap_err(),
        ContextError::InvalidLimit { .. }
    ));
    assert!(matches!(
        s.search("a", "x", limits::MAX_SEARCH_LIMIT + 1)
            .await
            .unwrap_err(),
        ContextError::InvalidLimit { .. }
    ));
    let long = "x".repeat(limits::MAX_TERM_BYTES + 1);
    assert!(matches!(
        s.search("a", &long, 5).await.unwrap_err(),
        ContextError::TooLarge { .. }
    ));
    assert!(matches!(
        s.window("a", "g", 0).await.unwrap_err(),
        ContextError::InvalidKeepUnits { got: 0, .. }
    ));
    assert!(matches!(
        s.window("a", "g", limits::MAX_WINDOW_UNITS + 1)
            .await
            .unwrap_err(),
        ContextError::InvalidKeepUnits { .. }
    ));
    assert!(matches!(
        s.window("", "g", 1).await.unwrap_err(),
        ContextError::Empty { .. }
    ));
}

async fn input_limits(db: common::Db) {
    let s = &db.store;
    let long = "n".repeat(limits::MAX_NAME_BYTES + 1);
    assert!(matches!(
        s.append_unit(&long, "u", &msg("x")).await.unwrap_err(),
        ContextError::TooLarge { .. }
    ));
    assert!(matches!(
        s.append_unit("t", "", &msg("x")).await.unwrap_err(),
        ContextError::Empty { .. }
    ));
    assert!(matches!(
        s.append_unit("t\0", "u", &msg("x")).await.unwrap_err(),
        ContextError::NulChar { .. }
    ));
    let big = msg(&"x".repeat(limits::MAX_UNIT_BYTES));
    assert!(matches!(
        s.append_unit("t", "u", &big).await.unwrap_err(),
        ContextError::TooLarge { field: "unit", .. }
    ));
    let many = vec![json!({"type": "message"}); limits::MAX_ITEMS_PER_UNIT + 1];
    let err = s.append_unit("t", "u", &many).await.unwrap_err();
    assert!(
        matches!(err, ContextError::TooManyItems { got, .. } if got == limits::MAX_ITEMS_PER_UNIT + 1),
        "{err:?}"
    );
    assert!(err.to_string().contains("items, the limit is"), "{err}");
    // NUL inside JSON strings is fine: it is escaped in the stored JSON.
    s.append_unit("t", "nul", &msg("a\0b")).await.unwrap();
    assert_eq!(
        s.window("t", "g", 1).await.unwrap().recent_units[0].items,
        msg("a\0b")
    );
    let value = "v".repeat(limits::MAX_VALUE_BYTES + 1);
    assert!(matches!(
        s.add_evidence(&ev("s", "p", "k", &value, 1, true))
            .await
            .unwrap_err(),
        ContextError::TooLarge { .. }
    ));
    assert!(matches!(
        s.add_evidence(&ev("", "p", "k", "v", 1, true))
            .await
            .unwrap_err(),
        ContextError::Empty { .. }
    ));
    assert!(matches!(
        s.add_evidence(&ev("s", "p", "k", "v\0", 1, true))
            .await
            .unwrap_err(),
        ContextError::NulChar { .. }
    ));
    assert!(matches!(
        s.recall("", 1, 1).await.unwrap_err(),
        ContextError::Empty { .. }
    ));
}

async fn evidence_errors(db: common::Db) {
    let s = &db.store;
    s.add_evidence(&ev("src", "p", "k", "1", 1, true))
        .await
        .unwrap();
    let err = s
        .add_evidence(&ev("src", "p", "k", "2", 2, true))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ContextError::DuplicateSource(src) if src == "src"),
        "{err}"
    );
    let err = s.revoke("nope").await.unwrap_err();
    assert!(
        matches!(&err, ContextError::UnknownSource(src) if src == "nope"),
        "{err}"
    );
    assert!(matches!(
        s.recall("p", 1, -1).await.unwrap_err(),
        ContextError::NegativeMaxAge(-1)
    ));
    // The duplicate did not overwrite.
    s.consolidate().await.unwrap();
    assert_eq!(s.recall("p", 1, 10).await.unwrap()[0].value, "1");
    // Batches are all or nothing, and name the duplicate.
    let batch = [
        ev("n1", "p", "k2", "a", 1, true),
        ev("src", "p", "k2", "b", 1, true),
    ];
    assert!(
        matches!(s.add_evidence_batch(&batch).await.unwrap_err(), ContextError::DuplicateSource(src) if src == "src")
    );
    let batch = [
        ev("n1", "p", "k2", "a", 1, true),
        ev("n1", "p", "k3", "b", 1, true),
    ];
    assert!(
        matches!(s.add_evidence_batch(&batch).await.unwrap_err(), ContextError::DuplicateSource(src) if src == "n1")
    );
    assert_eq!(
        s.pending().await.unwrap(),
        0,
        "nothing of a refused batch was written"
    );
    let batch: Vec<NewEvidence> = (0..1500)
        .map(|i| {
            ev(
                &format!("bulk{i}"),
                "bulk",
                &format!("k{}", i % 700),
                &i.to_string(),
                i,
                true,
            )
        })
        .collect();
    s.add_evidence_batch(&batch).await.unwrap();
    assert_eq!(s.consolidate().await.unwrap().recomputed, 700);
    let r = s.recall("bulk", 0, 10).await.unwrap();
    assert_eq!(r.len(), 700);
    assert_eq!(r.iter().find(|e| e.key == "k5").unwrap().value, "1405");
    // Revoking twice is harmless and reported.
    assert!(s.revoke("src").await.unwrap().newly_revoked);
    assert!(!s.revoke("src").await.unwrap().newly_revoked);
}

async fn memory_rules_and_incremental(db: common::Db) {
    let s = &db.store;
    // Ties on `observed` are broken by the greatest source (the contract in lib.rs).
    s.add_evidence(&ev("r-a", "p", "k", "from-a", 5, true))
        .await
        .unwrap();
    s.add_evidence(&ev("r-b", "p", "k", "from-b", 5, true))
        .await
        .unwrap();
    s.add_evidence(&ev("r-c", "p", "other", "x", 1, false))
        .await
        .unwrap();
    s.add_evidence(&ev("q-1", "q", "k", "q-value", 100, true))
        .await
        .unwrap();
    assert_eq!(s.pending().await.unwrap(), 3);
    // Nothing is visible before consolidation.
    assert!(s.recall("p", 0, 10).await.unwrap().is_empty());
    let c = s.consolidate().await.unwrap();
    assert_eq!((c.recomputed, c.written), (3, 2));
    let r = s.recall("p", 6, 10).await.unwrap();
    assert_eq!(r.len(), 1, "unconfirmed evidence never becomes memory");
    assert_eq!(
        (r[0].value.as_str(), r[0].source.as_str(), r[0].observed),
        ("from-b", "r-b", 5)
    );
    assert!(!r[0].needs_refresh);
    assert!(s.recall("p", 16, 10).await.unwrap()[0].needs_refresh);
    assert!(!s.recall("p", 15, 10).await.unwrap()[0].needs_refresh);
    // Nothing changed: nothing recomputed.
    assert_eq!(s.consolidate().await.unwrap().recomputed, 0);
    // One change: one pair recomputed; other projects untouched.
    s.add_evidence(&ev("r-d", "p", "k", "from-d", 4, true))
        .await
        .unwrap();
    let c = s.consolidate().await.unwrap();
    assert_eq!((c.recomputed, c.written), (1, 1));
    assert_eq!(
        s.recall("p", 6, 10).await.unwrap()[0].source,
        "r-b",
        "older evidence does not win"
    );
    // Revoking every source forgets the key.
    for src in ["r-a", "r-b", "r-d"] {
        s.revoke(src).await.unwrap();
    }
    assert_eq!(
        s.consolidate().await.unwrap(),
        agent_context::Consolidation {
            recomputed: 1,
            written: 0
        }
    );
    assert!(s.recall("p", 6, 10).await.unwrap().is_empty());
    assert_eq!(s.recall("q", 100, 0).await.unwrap()[0].value, "q-value");
    // Evidence listing keeps everything, with status.
    let all = s.evidence("p", None).await.unwrap();
    assert_eq!(all.len(), 4);
    assert!(all.iter().filter(|e| e.key == "k").all(|e| e.revoked));
    assert_eq!(s.evidence("p", Some("other")).await.unwrap().len(), 1);
    // Extreme times do not overflow.
    s.add_evidence(&ev("old", "z", "k", "v", 0, true))
        .await
        .unwrap();
    s.consolidate().await.unwrap();
    assert!(s.recall("z", i64::MAX, i64::MAX - 1).await.unwrap()[0].needs_refresh);
    assert!(!s.recall("z", i64::MIN, 0).await.unwrap()[0].needs_refresh);
}

async fn readers_see_old_or_new_memory(db: common::Db) {
    let s = &db.store;
    for i in 0..50 {
        s.add_evidence(&ev(&format!("a{i}"), "p", &format!("k{i}"), "old", 1, true))
            .await
            .unwrap();
    }
    s.consolidate().await.unwrap();
    for i in 0..50 {
        s.add_evidence(&ev(&format!("b{i}"), "p", &format!("k{i}"), "new", 2, true))
            .await
            .unwrap();
    }
    let writer = {
        let s = s.clone();
        tokio::spawn(async move { s.consolidate().await.unwrap() })
    };
    // Every snapshot a reader sees is all-old or all-new.
    loop {
        let r = s.recall("p", 2, 10).await.unwrap();
        assert_eq!(r.len(), 50);
        let new = r.iter().filter(|e| e.value == "new").count();
        assert!(
            new == 0 || new == 50,
            "half-updated memory: {new} of 50 new"
        );
        if new == 50 {
            break;
        }
        tokio::task::yield_now().await;
    }
    writer.await.unwrap();
}

/// Unix seconds now, as the store reads its clock.
fn unix_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_secs()).unwrap()
}

/// The newest observation wins for good: the store itself refuses a time far in the future
/// (or before 1970), so no caller can pin a value by mistake.
async fn observed_time_is_checked(db: common::Db) {
    let s = &db.store;
    let now = unix_now();
    // Two days ahead is refused; the bound itself is a day, and the test allows for the
    // clock moving between here and the store's check.
    for observed in [
        -1,
        i64::MIN,
        i64::MAX,
        now + 2 * agent_context::MAX_FUTURE_SKEW_SECS,
    ] {
        let err = s
            .add_evidence(&ev("s", "p", "k", "v", observed, true))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ContextError::ObservedOutOfRange { observed: o, .. } if o == observed),
            "{observed}: {err}"
        );
    }
    // One bad row refuses the whole batch.
    let err = s
        .add_evidence_batch(&[
            ev("ok", "p", "k", "v", now, true),
            ev("bad", "p", "k", "v", -5, true),
        ])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ContextError::ObservedOutOfRange { .. }),
        "{err}"
    );
    assert!(s.evidence("p", None).await.unwrap().is_empty());
    // 1970 itself, now, and a little clock skew are fine.
    s.add_evidence_batch(&[
        ev("epoch", "p", "k", "a", 0, true),
        ev("now", "p", "k", "b", now, true),
        ev("skew", "p", "k", "c", now + 3600, true),
    ])
    .await
    .unwrap();
    assert_eq!(s.evidence("p", None).await.unwrap().len(), 3);
}

agent_testkit::backend_tests!(
    common,
    [sqlite, postgres]:
    observed_time_is_checked,
    window_keeps_pairs_and_archive,
    memory_provenance_revocation_and_scope,
    window_order_goal_and_keep,
    window_budget_never_splits,
    pairing_rules,
    duplicate_unit_refused,
    batch_is_all_or_nothing,
    search_semantics,
    search_finds_text_that_json_escapes,
    search_and_window_errors,
    input_limits,
    evidence_errors,
    memory_rules_and_incremental,
    readers_see_old_or_new_memory,
    long_reads_give_whole_answers,
    every_search_path_finds_what_a_scan_finds,
    derived_through_is_raised_with_its_units_and_never_lowered,
    items_with_serde_json_private_keys_read_back_as_appended,
    items_too_deep_to_read_back_are_refused,
    items_too_deep_to_serialise_are_refused,
    floats_read_back_exactly,
);

/// An item nested deeper than a read can decode (`serde_json` reads 127 levels, and a
/// unit's items sit in one more) is refused at append; one that fits reads back.
async fn items_too_deep_to_read_back_are_refused(db: common::Db) {
    let nested = |levels: usize| {
        (1..levels).fold(
            json!({"type": "message"}),
            |inner, _| json!({"type": "message", "in": inner}),
        )
    };
    let s = &db.store;
    for levels in [127, 400] {
        let items = vec![json!({"type": "message", "text": "ok"}), nested(levels)];
        let err = s.append_unit("deep", "1", &items).await.unwrap_err();
        assert!(
            matches!(err, ContextError::InvalidItem { index: 1, .. }),
            "{levels}: {err}"
        );
    }
    s.append_unit("deep", "2", &[nested(126)]).await.unwrap();
    let window = s.window("deep", "goal", 5).await.unwrap();
    assert_eq!(window.recent_units[0].items, [nested(126)]);
}

/// Floats read back as appended (`Unit::items` are the items exactly as appended), on this
/// crate's own build too: serde_json reads some floats one ULP off unless its
/// `float_roundtrip` feature is on (about a third of these, without it).
async fn floats_read_back_exactly(db: common::Db) {
    let s = &db.store;
    let mut bits: u64 = 0x9E37_79B9_7F4A_7C15;
    let floats: Vec<f64> = std::iter::from_fn(|| {
        bits ^= bits << 13;
        bits ^= bits >> 7;
        bits ^= bits << 17;
        Some(f64::from_bits(bits))
    })
    .filter(|f| f.is_finite())
    .take(200)
    .chain([
        1.0715660391465826e-75,
        0.1,
        -0.0,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
    ])
    .collect();
    let items = vec![json!({"type": "message", "text": "floats", "values": floats})];
    s.append_unit("f", "u", &items).await.unwrap();
    let window = s.window("f", "goal", 1).await.unwrap();
    assert_eq!(window.recent_units[0].items, items);
    assert_eq!(
        window.units_bytes,
        serde_json::to_string(&items).unwrap().len() as u64
    );
    assert_eq!(s.search("f", "floats", 1).await.unwrap()[0].items, items);
}

/// `levels` nested arrays and objects around a string, built without recursion (`json!`
/// would serialise `inner` again).
fn deep_value(levels: usize) -> Value {
    (0..levels).fold(json!("leaf"), |inner, level| {
        if level % 2 == 0 {
            Value::Array(vec![inner])
        } else {
            Value::Object([("in".to_string(), inner)].into_iter().collect())
        }
    })
}

/// Drops `value` without recursion (the compiler's drop of a deep value recurses).
fn drop_flat(value: Value) {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

/// An item nested thousands of levels deep (a `Value` built in memory can be; serialising
/// it recurses once per level) is refused like one just over the limit, not serialised
/// first: the append must not overflow the caller's stack, whatever the depth.
async fn items_too_deep_to_serialise_are_refused(db: common::Db) {
    let s = &db.store;
    for levels in [3_000, 200_000] {
        let items = vec![
            json!({"type": "message", "text": "ok"}),
            Value::Object(
                [
                    ("type".to_string(), json!("message")),
                    ("in".to_string(), deep_value(levels)),
                ]
                .into_iter()
                .collect(),
            ),
        ];
        let err = s.append_unit("deep", "1", &items).await.unwrap_err();
        assert!(
            matches!(err, ContextError::InvalidItem { index: 1, .. }),
            "{levels}: {err}"
        );
        let batch = [NewUnit {
            unit: "2".into(),
            items,
        }];
        let err = s.append_units("deep", &batch).await.unwrap_err();
        assert!(
            matches!(err, ContextError::InvalidItem { index: 1, .. }),
            "{levels}: {err}"
        );
        let [NewUnit { items, .. }] = batch;
        items.into_iter().for_each(drop_flat);
    }
    assert!(
        s.window("deep", "goal", 5)
            .await
            .unwrap()
            .recent_units
            .is_empty()
    );
}

/// An item holding an object whose first key is one of `serde_json`'s private tokens (a
/// tool's output can hold anything) reads back as it was appended, and its thread's window
/// and search keep working (`serde_json` alone reads such an object as the JSON its string
/// holds, and refuses it when the string is not JSON).
async fn items_with_serde_json_private_keys_read_back_as_appended(db: common::Db) {
    const RAW: &str = "$serde_json::private::RawValue";
    let s = &db.store;
    let items = vec![
        json!({"type": "message", "text": "zebra", "data": { RAW: "not json" }}),
        json!({"type": "message", "text": "zebra", "data": [{ RAW: "[1]" }]}),
    ];
    s.append_unit("odd", "1", &items).await.unwrap();
    let window = s.window("odd", "goal", 5).await.unwrap();
    assert_eq!(window.recent_units[0].items, items);
    let hits = s.search("odd", "zebra", 5).await.unwrap();
    assert_eq!(hits[0].items, items);
}

/// `derived_through`: unknown until marked; raised with the units of a derived append in
/// their transaction (not by an append refused whole), or alone; never lowered; an unknown
/// thread is not created by a mark.
async fn derived_through_is_raised_with_its_units_and_never_lowered(db: common::Db) {
    let s = &db.store;
    let unit = |id: &str| NewUnit {
        unit: id.into(),
        items: msg(&format!("text of {id}")),
    };
    assert_eq!(s.derived_through("d").await.unwrap(), None);
    assert!(!s.mark_derived_through("d", 5).await.unwrap());
    assert_eq!(s.derived_through("d").await.unwrap(), None);
    assert!(s.threads().await.unwrap().iter().all(|t| t.thread != "d"));
    // Units appended without a position leave it unknown.
    s.append_units("d", &[unit("u0")]).await.unwrap();
    assert_eq!(s.derived_through("d").await.unwrap(), None);
    let appended = s
        .append_derived_units_through("d", &[unit("u1"), unit("u2")], 10)
        .await
        .unwrap();
    assert_eq!(appended.position, 3);
    assert_eq!(s.derived_through("d").await.unwrap(), Some(10));
    s.append_derived_units("d", &[unit("u3")]).await.unwrap();
    assert!(s.mark_derived_through("d", 7).await.unwrap());
    assert_eq!(s.derived_through("d").await.unwrap(), Some(10));
    // A batch refused whole (a unit held already) records nothing either.
    let refused = s
        .append_derived_units_through("d", &[unit("u4"), unit("u1")], 40)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ContextError::DuplicateUnit { .. }),
        "{refused}"
    );
    assert_eq!(s.derived_through("d").await.unwrap(), Some(10));
    s.append_derived_units_through("d", &[unit("u4")], 8)
        .await
        .unwrap();
    assert_eq!(s.derived_through("d").await.unwrap(), Some(10));
    assert!(s.mark_derived_through("d", 20).await.unwrap());
    assert_eq!(s.derived_through("d").await.unwrap(), Some(20));
    // No units: the record alone.
    let held = s.append_derived_units_through("d", &[], 30).await.unwrap();
    assert_eq!(held.position, 5);
    assert_eq!(s.derived_through("d").await.unwrap(), Some(30));
    let window = s.window("d", "g", 10).await.unwrap();
    assert_eq!(units_of(&window), ["u0", "u1", "u2", "u3", "u4"]);
    // Another thread is its own.
    s.append_derived_units_through("e", &[unit("u0")], 3)
        .await
        .unwrap();
    assert_eq!(s.derived_through("e").await.unwrap(), Some(3));
    assert_eq!(s.derived_through("d").await.unwrap(), Some(30));
    // No units for an unknown thread: the thread is made, with no units, and recorded (a
    // source from which nothing was derived is not derived again until it moves on); its
    // first units come at position 1, and they are searched as any.
    let made = s.append_derived_units_through("f", &[], 4).await.unwrap();
    assert_eq!(made.position, 0);
    assert_eq!(s.derived_through("f").await.unwrap(), Some(4));
    assert_eq!(s.thread_units("f").await.unwrap(), 0);
    let listed = s.threads().await.unwrap();
    assert!(
        listed.iter().any(|t| t.thread == "f" && t.units == 0),
        "{listed:?}"
    );
    assert!(
        s.window("f", "g", 10)
            .await
            .unwrap()
            .recent_units
            .is_empty()
    );
    assert!(s.search("f", "text of", 5).await.unwrap().is_empty());
    assert!(s.search("f", "te", 5).await.unwrap().is_empty());
    let appended = s
        .append_derived_units_through("f", &[unit("u0")], 6)
        .await
        .unwrap();
    assert_eq!(appended.position, 1);
    assert_eq!(s.derived_through("f").await.unwrap(), Some(6));
    let found = s.search("f", "TEXT OF U0", 5).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].unit.as_str(), found[0].position), ("u0", 1));
}

/// Every way a search is served (the thread's first units tested directly, the index, the
/// tail not folded yet, a scan of the thread for a term the index cannot look up) finds
/// exactly the units a scan of the thread's texts finds, in order, whatever the limit:
/// terms of punctuation only, common and rare terms, terms whose hits cross from one range
/// to the next.
async fn every_search_path_finds_what_a_scan_finds(db: common::Db) {
    let s = &db.store;
    let text = |i: usize| {
        let mut text = format!("unit {i} common");
        if i % 50 == 7 {
            text.push_str(" --> arrow");
        }
        if i % 97 == 3 {
            text.push_str(" rare word");
        }
        if i.is_multiple_of(3) {
            text.push_str(" a.b");
        }
        if i % 211 == 5 {
            text.push_str(" ===");
        }
        text
    };
    s.pause_index_fold(true).await.unwrap();
    let units: Vec<NewUnit> = (0..700)
        .map(|i| NewUnit {
            unit: format!("u{i}"),
            items: msg(&text(i)),
        })
        .collect();
    s.append_units("p", &units).await.unwrap();
    // Positions up to 100 folded into the index (fewer than the directly tested prefix of
    // the larger limits), then up to 500; the rest left in the tail.
    let mut folded = 0;
    for upto in [100, 500] {
        while folded < upto {
            let step = s.fold_index_step(upto - folded).await.unwrap();
            assert!(step > 0);
            folded += step;
        }
        found_as_by_a_scan(s, &text).await;
    }
}

async fn found_as_by_a_scan(s: &ContextStore, text: &impl Fn(usize) -> String) {
    for term in [
        "-->",
        "===",
        "   ",
        "common",
        "rare word",
        "a.b",
        "arrow",
        "unit 69",
    ] {
        let all: Vec<String> = (0..700)
            .filter(|i| text(*i).contains(term))
            .map(|i| format!("u{i}"))
            .collect();
        for limit in [1, 5, 40, 1000] {
            let hits: Vec<String> = s
                .search("p", term, limit)
                .await
                .unwrap()
                .into_iter()
                .map(|u| u.unit)
                .collect();
            assert_eq!(hits, all[..limit.min(all.len())], "{term:?}, limit {limit}");
        }
    }
}

/// Reads that outlast the SQLite backend's inline budget are finished elsewhere; the answer
/// must not depend on where a read ran.
async fn long_reads_give_whole_answers(db: common::Db) {
    let s = &db.store;
    let units: Vec<NewUnit> = (0..4000)
        .map(|i| NewUnit {
            unit: format!("m{i}"),
            items: msg(&format!("filler {i} {}", "x".repeat(200))),
        })
        .collect();
    s.append_units("long", &units).await.unwrap();
    s.append_unit("long", "last", &msg("qz zq needle-at-the-end"))
        .await
        .unwrap();
    // A 2-character term present only in the last unit: the whole thread is scanned.
    let hits = s.search("long", "qz", 5).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].unit, "last");
    assert_eq!(hits[0].position, 4001);
    // Trigram path, past the directly tested prefix.
    let hits = s.search("long", "needle-at", 5).await.unwrap();
    assert_eq!(hits[0].unit, "last");
    let hits = s.search("long", "filler 39", 1000).await.unwrap();
    assert_eq!(hits.len(), 111); // 39, 390..=399, 3900..=3999
    assert_eq!(hits[0].unit, "m39");
    assert_eq!(hits[110].unit, "m3999");
    let w = s.window("long", "g", 4001).await.unwrap();
    assert_eq!(w.recent_units.len(), 4001);
    assert_eq!(w.recent_units[0].unit, "m0");
}

/// A busy timeout too long for SQLite (it takes milliseconds in a C `int`; "wait forever"
/// is easily written `Duration::MAX`) waits as long as SQLite can, on every connection:
/// the writer's, the checkpointer's and the readers'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_any_busy_timeout_is_taken() {
    for busy_timeout in [
        std::time::Duration::MAX,
        std::time::Duration::from_millis(u64::from(u32::MAX)),
    ] {
        let options = agent_context::ContextOptions {
            busy_timeout,
            ..Default::default()
        };
        let db = common::sqlite_with(options).await;
        let s = &db.store;
        s.append_unit("t", "u", &msg("patient")).await.unwrap();
        assert_eq!(s.window("t", "g", 1).await.unwrap().recent_units.len(), 1);
        assert_eq!(s.search("t", "patient", 1).await.unwrap().len(), 1);
    }
}

/// A batch within the limits whose units hold more than 1 GB of text in all (600 units of
/// 1 MiB, each sent as body and folded text) is appended whole: PostgreSQL refuses a
/// message over 1 GB, so the inserts must not send the batch in one. Heavy (about 3 GB of
/// memory and a minute in a debug build), so run by hand: `--ignored`.
async fn a_batch_of_a_gigabyte_is_appended(db: common::Db) {
    let s = &db.store;
    let text = "x".repeat(limits::MAX_UNIT_BYTES - 64);
    let units: Vec<NewUnit> = (0..600)
        .map(|i| NewUnit {
            unit: format!("u{i}"),
            items: msg(&text),
        })
        .collect();
    s.append_units("big", &units).await.unwrap();
    drop(units);
    assert_eq!(s.thread_units("big").await.unwrap(), 600);
    let window = s.window("big", "goal", 1).await.unwrap();
    assert_eq!(window.recent_units[0].unit, "u599");
    assert_eq!(window.recent_units[0].position, 600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "about 3 GB of memory and a minute: run with --ignored"]
async fn a_batch_of_a_gigabyte_is_appended_sqlite() {
    a_batch_of_a_gigabyte_is_appended(common::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "about 3 GB of memory and a minute: run with --ignored"]
async fn a_batch_of_a_gigabyte_is_appended_postgres() {
    if let Some(db) = common::postgres().await {
        a_batch_of_a_gigabyte_is_appended(db).await;
    }
}

#[tokio::test]
async fn sqlite_memory_url_works() {
    // Each case on a fresh `sqlite::memory:` store.
    window_keeps_pairs_and_archive(common::memory().await).await;
    memory_provenance_revocation_and_scope(common::memory().await).await;
    search_semantics(common::memory().await).await;
    long_reads_give_whole_answers(common::memory().await).await;
    readers_see_old_or_new_memory(common::memory().await).await;
    window_order_goal_and_keep(common::memory().await).await;
}

#[tokio::test]
async fn sqlite_calls_after_close_fail() {
    let s = ContextStore::open("sqlite::memory:").await.unwrap();
    s.append_unit("t", "u1", &msg("x")).await.unwrap();
    s.close().await;
    assert!(matches!(
        s.window("t", "g", 1).await.unwrap_err(),
        ContextError::Closed
    ));
    assert!(matches!(
        s.append_unit("t", "u2", &msg("x")).await.unwrap_err(),
        ContextError::Closed
    ));
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("c.db").display());
    let s = ContextStore::open(&url).await.unwrap();
    s.append_unit("t", "u1", &msg("x")).await.unwrap();
    assert_eq!(s.search("t", "x", 1).await.unwrap().len(), 1);
    let other = s.clone();
    s.close().await;
    for store in [&s, &other] {
        assert!(matches!(
            store.search("t", "x", 1).await.unwrap_err(),
            ContextError::Closed
        ));
        assert!(matches!(
            store.consolidate().await.unwrap_err(),
            ContextError::Closed
        ));
    }
    // The file is whole and reopens.
    let s = ContextStore::open(&url).await.unwrap();
    assert_eq!(s.window("t", "g", 5).await.unwrap().recent_units.len(), 1);
}

#[tokio::test]
async fn sqlite_reopen_keeps_history_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("c.db").display());
    let s = ContextStore::open(&url).await.unwrap();
    s.append_unit("t", "u1", &msg("persisted E42"))
        .await
        .unwrap();
    s.add_evidence(&ev("a", "p", "k", "v", 1, true))
        .await
        .unwrap();
    s.consolidate().await.unwrap();
    s.close().await;
    let s = ContextStore::open(&url).await.unwrap();
    assert_eq!(s.search("t", "e42", 5).await.unwrap().len(), 1);
    assert_eq!(s.recall("p", 1, 1).await.unwrap()[0].value, "v");
    s.append_unit("t", "u2", &msg("more")).await.unwrap();
    assert_eq!(s.window("t", "g", 5).await.unwrap().recent_units.len(), 2);
}

#[tokio::test]
async fn sqlite_shares_a_file_with_other_tables() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    {
        use sqlx::Connection as _;
        let mut c = sqlx::SqliteConnection::connect(&format!("{url}?mode=rwc"))
            .await
            .unwrap();
        sqlx::raw_sql("CREATE TABLE journal_events (seq INTEGER PRIMARY KEY); CREATE TABLE journal_schema (version INTEGER);")
            .execute(&mut c)
            .await
            .unwrap();
    }
    let s = ContextStore::open(&url).await.unwrap();
    s.append_unit("t", "u1", &msg("x")).await.unwrap();
}

#[tokio::test]
async fn unsupported_url_is_an_error() {
    for url in ["mysql://x", "", "/tmp/plain/path"] {
        assert!(
            matches!(
                ContextStore::open(url).await.unwrap_err(),
                ContextError::UnsupportedUrl(_)
            ),
            "{url}"
        );
    }
}

#[tokio::test]
async fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("c.db").display());
    ContextStore::open(&url).await.unwrap().close().await;
    {
        use sqlx::Connection as _;
        let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("INSERT INTO context_schema (version) VALUES (99)")
            .execute(&mut c)
            .await
            .unwrap();
    }
    assert!(matches!(
        ContextStore::open(&url).await.unwrap_err(),
        ContextError::SchemaTooNew { found: 99, .. }
    ));
}

/// The error, its `Debug` form and every cause in its chain, as one text.
fn everything_shown(err: &ContextError) -> String {
    let mut shown = format!("{err} {err:?}");
    let mut cause = std::error::Error::source(err);
    while let Some(err) = cause {
        shown.push_str(&format!(" {err} {err:?}"));
        cause = err.source();
    }
    shown
}

/// No error of the store shows a database password, whether it comes from our URL parsing
/// or from a driver quoting the URL (userinfo, `password=` and `sslpassword=` alike).
#[tokio::test]
async fn errors_never_show_a_password() {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut urls = vec![
        "mysql://u:SECRETPW@h/x".to_string(),
        "mysql://h/x?password=SECRETPW".to_string(),
        "sqlite:///tmp/never.db?password=SECRETPW".to_string(),
        "sqlite://u:SECRETPW@x.db?mode=bogus".to_string(),
        format!("postgres://u:SECRETPW@127.0.0.1:{closed_port}/x"),
        format!("postgresql://u:SEC/RETPW@127.0.0.1:{closed_port}/x"),
        format!("postgres://u@127.0.0.1:{closed_port}/x?password=SECRETPW"),
        format!("postgres://u:SECRETPW@127.0.0.1:{closed_port}/x?sslmode=bogus"),
        format!(
            "postgres://u:SECRETPW@127.0.0.1:{closed_port}/x?sslpassword=SECRETPW&sslmode=require"
        ),
        "postgres://u:SECRETPW@127.0.0.1:notaport/x".to_string(),
    ];
    // A real server refusing the password, when there is one.
    if let Some((base, at)) = std::env::var(agent_testkit::PG_URL_VAR)
        .ok()
        .and_then(|base| base.find('@').map(|at| (base, at)))
    {
        let scheme_end = base.find("://").unwrap() + 3;
        let user = base[scheme_end..at].split(':').next().unwrap();
        urls.push(format!(
            "{}{user}:SECRETPW{}",
            &base[..scheme_end],
            &base[at..]
        ));
    }
    for url in &urls {
        let err = ContextStore::open(url).await.unwrap_err();
        let shown = everything_shown(&err);
        assert!(!shown.contains("SECRETPW"), "{url}: {shown}");
        assert!(!shown.contains("RETPW"), "{url}: {shown}");
    }
    let err = ContextStore::open("mysql://u:SECRETPW@h/x")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unsupported database URL `mysql://u:***@h/x`: use sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DB"
    );
}

/// Driver failures come out as [`agent_context::DatabaseError`] with a kind, not as a
/// driver's type.
#[tokio::test]
async fn driver_failures_have_a_kind() {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://u@127.0.0.1:{closed_port}/x");
    match ContextStore::open(&url).await.unwrap_err() {
        ContextError::Database(err) => {
            assert_eq!(
                err.kind(),
                agent_context::DatabaseErrorKind::Unavailable,
                "{err}"
            );
        }
        other => panic!("not a database error: {other}"),
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = format!(
        "sqlite://{}?mode=rw",
        dir.path().join("missing.db").display()
    );
    match ContextStore::open(&missing).await.unwrap_err() {
        ContextError::Database(err) => {
            assert_eq!(
                err.kind(),
                agent_context::DatabaseErrorKind::Unavailable,
                "{err}"
            );
        }
        other => panic!("not a database error: {other}"),
    }
}

/// Stores on databases whose default collation is not code point order (PostgreSQL: ICU
/// `en-US`, where `a < A < b < B`; production servers are often created so), for the rules
/// that compare names.
mod locale_collation {
    use crate::common::{self, Db};

    pub async fn sqlite() -> Db {
        common::sqlite().await
    }

    /// A fresh database recreated under its own name with an ICU `en-US` default
    /// collation (dropped with its guard like any other).
    pub async fn postgres() -> Option<Db> {
        use sqlx::Connection as _;
        let db = agent_testkit::fresh_pg_database("ctx_icu").await?;
        let name = db
            .url()
            .rsplit('/')
            .next()
            .unwrap()
            .split('?')
            .next()
            .unwrap();
        let admin_url = agent_testkit::pg_base_url().unwrap();
        let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
        for sql in [
            format!("DROP DATABASE {name}"),
            format!(
                "CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu \
                 ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
            ),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut admin)
                .await
                .unwrap();
        }
        admin.close().await.unwrap();
        Some(common::postgres_on(db).await)
    }
}

/// Names compare by code point on every backend, whatever the database's collation: a tie
/// on `observed` goes to the greatest source in that order (the memory contract: the same
/// evidence gives the same memory on SQLite and PostgreSQL), and lists by name come in it.
async fn names_compare_by_code_point(db: common::Db) {
    let s = &db.store;
    // Code point order: "B" < "a" (in en-US, "a" < "B").
    s.add_evidence_batch(&[
        ev("a", "p", "k", "from a", 100, true),
        ev("B", "p", "k", "from B", 100, true),
    ])
    .await
    .unwrap();
    let keys = ["b", "B", "a", "A", "_x"];
    for key in keys {
        s.add_evidence(&ev(&format!("s-{key}"), "q", key, "v", 1, true))
            .await
            .unwrap();
    }
    s.consolidate().await.unwrap();
    let winner = s.recall("p", 100, 10).await.unwrap();
    assert_eq!(
        (winner[0].source.as_str(), winner[0].value.as_str()),
        ("a", "from a")
    );
    let mut want: Vec<&str> = keys.to_vec();
    want.sort();
    let recalled = s.recall("q", 1, 10).await.unwrap();
    assert_eq!(
        recalled.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        want
    );
    let evidence = s.evidence("q", None).await.unwrap();
    assert_eq!(
        evidence.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        want
    );
    for thread in keys {
        s.append_unit(thread, "u", &msg("x")).await.unwrap();
    }
    let threads = s.threads().await.unwrap();
    assert_eq!(
        threads
            .iter()
            .map(|t| t.thread.as_str())
            .collect::<Vec<_>>(),
        want
    );
}

agent_testkit::backend_tests!(
    locale_collation,
    [sqlite, postgres]:
    names_compare_by_code_point,
);
