//! A full disk under a SQLite context store, on the real kernel: each scenario runs in a
//! child process (this test binary, re-run for one ignored test) inside a mount namespace of
//! its own, where its directory is a small tmpfs that a filler file fills up.
//!
//! What must hold: a write that cannot be made is refused with a clear error and writes
//! nothing (no unit half-appended, none lost, none twice); reads keep working; once space
//! is back, the same store takes the refused writes again, and its index agrees with its
//! units.
//!
//! The namespace needs root, or unprivileged user namespaces (CI runs as root): without it
//! the suite says `SKIPPED:` on stderr, and fails under `CI=true`, as the PostgreSQL suites
//! do without a server.

use agent_context::{ContextError, ContextOptions, ContextStore, NewEvidence, NewUnit};
use agent_testkit::small_disk::{child_dir, fill, on_small_disk};
use serde_json::json;

fn unit(n: u64) -> NewUnit {
    NewUnit {
        unit: format!("u{n}"),
        items: vec![json!({"type": "message", "text": format!("tok-{n}-z {}", "w".repeat(3000))})],
    }
}

fn evidence(n: u64) -> NewEvidence {
    NewEvidence {
        source: format!("s{n}"),
        project: "p".into(),
        key: format!("k{}", n % 5),
        value: format!("v{n} {}", "x".repeat(2000)),
        observed: 1_700_000_000 + i64::try_from(n).unwrap(),
        confirmed: true,
    }
}

/// The refusal of a write on the full disk: a database error that says so.
fn refused_for_a_full_disk(err: &ContextError) {
    let ContextError::Database(db) = err else {
        panic!("refused with {err:?}");
    };
    assert!(db.to_string().contains("disk is full"), "{db}");
}

/// Each of `units` is found by its token exactly once in `thread`, and the thread holds
/// exactly `units`, in order.
async fn holds_exactly(store: &ContextStore, thread: &str, units: &[u64]) {
    for n in units {
        let hits = store
            .search(thread, &format!("tok-{n}-z"), 10)
            .await
            .unwrap();
        let ids: Vec<&str> = hits.iter().map(|u| u.unit.as_str()).collect();
        assert_eq!(ids, [format!("u{n}")], "unit {n}");
    }
    let window = store.window(thread, "goal", 1000).await.unwrap();
    let ids: Vec<String> = window.recent_units.iter().map(|u| u.unit.clone()).collect();
    let want: Vec<String> = units.iter().map(|n| format!("u{n}")).collect();
    assert_eq!(ids, want);
}

#[test]
fn writes_on_a_full_disk_are_refused_whole_and_taken_again_once_space_is_back() {
    on_small_disk("disk_full::writes_on_a_full_disk_child", "8m");
}

#[test]
#[ignore = "child process of writes_on_a_full_disk_are_refused_whole_and_taken_again_once_space_is_back"]
fn writes_on_a_full_disk_child() {
    let Some(dir) = child_dir() else { return };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let path = dir.join("c.db");
        let url = format!("sqlite://{}", path.display());
        // A small tail bound: appends fold the index on the write path too.
        let options = ContextOptions::default().index_tail_bytes(8 << 10);
        let store = ContextStore::open_with(&url, options).await.unwrap();
        let mut acked = Vec::new();
        for n in 0..20 {
            store.append_units("t", &[unit(n)]).await.unwrap();
            acked.push(n);
        }
        for n in 0..10 {
            store.add_evidence(&evidence(n)).await.unwrap();
        }
        store.consolidate().await.unwrap();
        let memory = store.recall("p", 1_800_000_000, i64::MAX).await.unwrap();
        let filler = fill(&dir);
        // Durable and derived appends, one unit or several at once.
        let mut refused = Vec::new();
        for n in (20..40).step_by(2) {
            let batch = [unit(n), unit(n + 1)];
            let result = if n % 4 == 0 {
                store.append_units("t", &batch).await
            } else {
                store.append_derived_units("t", &batch[..1]).await
            };
            match result {
                Ok(_) if n % 4 == 0 => acked.extend([n, n + 1]),
                Ok(_) => acked.push(n),
                Err(err) => {
                    refused_for_a_full_disk(&err);
                    refused.push(n);
                }
            }
        }
        assert!(!refused.is_empty(), "a full disk refused nothing");
        refused_for_a_full_disk(&store.add_evidence(&evidence(50)).await.unwrap_err());
        refused_for_a_full_disk(&store.consolidate().await.unwrap_err());
        // Reads go on: every acknowledged unit once, no refused one, memory as it was.
        holds_exactly(&store, "t", &acked).await;
        for n in &refused {
            let hits = store
                .search("t", &format!("tok-{}-z", n + 1), 10)
                .await
                .unwrap();
            assert!(hits.is_empty(), "a refused batch left unit {}", n + 1);
        }
        assert_eq!(
            store.recall("p", 1_800_000_000, i64::MAX).await.unwrap(),
            memory
        );
        std::fs::remove_file(&filler).unwrap();
        // The same store takes the refused writes now, none of them a duplicate.
        for n in &refused {
            store
                .append_units("t", &[unit(*n), unit(n + 1)])
                .await
                .unwrap();
            acked.extend([*n, n + 1]);
        }
        store.add_evidence(&evidence(50)).await.unwrap();
        let consolidated = store.consolidate().await.unwrap();
        assert!(consolidated.written > 0, "{consolidated:?}");
        holds_exactly(&store, "t", &acked).await;
        while store.fold_index_step(10_000).await.unwrap() > 0 {}
        store.close().await;
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO context_units_fts (context_units_fts, rank) VALUES ('integrity-check', 1)",
            [],
        )
        .unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    });
}
