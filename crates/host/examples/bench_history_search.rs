#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code
//! The first `agentctl runs search --all` over many runs, catch-up included (issue 38),
//! printed as JSON lines for `cargo xtask bench context`.
//!
//! Writes `--runs R` runs of `--steps S` model steps each (one `run.created`, then one
//! `model.completed` per step whose output is a ~600-byte message) straight into a journal
//! on a SQLite file, copies that file once per mode, and on each copy times
//! `agent_host::run::history::search(journal, store, None, term, 50)`, the function
//! `agentctl runs search --all TERM` calls, with the journal and the context store on the
//! same file as `--db` puts them. The term is found nowhere, so every run is caught up (R x
//! S units appended) and searched. Then the same search again (everything caught up).
//!
//! Modes (one line each, `runs_search_all_first_<mode>`, same process, same journal):
//! `deferred` (the store's default options, as the command opens it), `index_at_once`
//! (`index_tail_bytes(0)`: every append indexed in its own transaction, the write path
//! before issue 38) and `unit_by_unit_index_at_once` (also the catch-up as it was then:
//! one `append_unit` per unit, see [`search_unit_by_unit`]).
//!
//! Usage: `bench_history_search [--runs 1000] [--steps 100] [--modes deferred,index_at_once]`
//! (`--modes`: a comma-separated subset of the modes, all three by default).

use std::time::Instant;

use agent_context::{ContextOptions, ContextStore};
use agent_journal::{Durability, Journal, JournalOptions, NewEvent};
use serde_json::json;

const WORDS: &[&str] = &[
    "build", "failed", "login", "module", "timeout", "retry", "cache", "schema", "docs", "test",
    "错误", "登录", "模块", "超时",
];

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn write_runs(url: &str, runs: usize, steps: usize) {
    let journal = Journal::open_with(
        url,
        JournalOptions::default().durability(Durability::Normal),
    )
    .await
    .unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for r in 0..runs {
        let thread = format!("run:bench-{r:05}");
        let mut events = vec![NewEvent::new(
            thread.clone(),
            "run.created",
            json!({"prompt": format!("task {r}"), "model": "m", "workspace": "/w", "tools": [],
                   "approval": "default", "budgets": {"max_steps": steps + 1},
                   "owner": {"host": "h", "pid": 1}}),
        )];
        for step in 1..=steps {
            let text: Vec<&str> = (0..70)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    WORDS[(x % WORDS.len() as u64) as usize]
                })
                .collect();
            events.push(NewEvent::new(
                thread.clone(),
                "model.completed",
                json!({"step": step, "attempt": 1, "response_id": format!("resp_{r}_{step}"),
                       "status": "completed", "usage": null,
                       "output": [{"type": "message", "role": "assistant", "id": format!("msg_{r}_{step}"),
                                   "content": [{"type": "output_text",
                                                "text": format!("Step {step}: {}", text.join(" "))}]}]}),
            ));
        }
        journal.append_batch(events).await.unwrap();
    }
    journal.close().await;
}

/// `history::search(journal, store, None, term, limit)` as it was when issue 38 was filed:
/// the same steps, but each run's missing units appended one `append_unit` (one durable
/// transaction) at a time.
async fn search_unit_by_unit(
    journal: &Journal,
    store: &ContextStore,
    term: &str,
    limit: usize,
) -> Vec<agent_context::Unit> {
    let mut hits = Vec::new();
    for state in agent_host::run::list(journal).await.unwrap() {
        if hits.len() >= limit {
            break;
        }
        let thread = agent_host::run::kinds::thread_of(state.id());
        let units = agent_host::run::history::units_of(&state);
        let held = store
            .threads()
            .await
            .unwrap()
            .into_iter()
            .find(|t| t.thread == thread)
            .map_or(0, |t| t.units);
        if held != units.len() as u64 {
            for unit in &units {
                match store.append_unit(&thread, &unit.id, &unit.items).await {
                    Ok(_) | Err(agent_context::ContextError::DuplicateUnit { .. }) => {}
                    Err(err) => panic!("{err}"),
                }
            }
        }
        hits.extend(
            store
                .search(&thread, term, limit - hits.len())
                .await
                .unwrap(),
        );
    }
    hits
}

async fn search_all(url: &str, options: ContextOptions, mode: &str, runs: usize, steps: usize) {
    let journal = Journal::open(url).await.unwrap();
    let store = ContextStore::open_with(url, options).await.unwrap();
    let term = "no-such-term-anywhere";
    let t = Instant::now();
    if mode == "unit_by_unit_index_at_once" {
        assert!(
            search_unit_by_unit(&journal, &store, term, 50)
                .await
                .is_empty()
        );
    } else {
        let hits = agent_host::run::history::search(&journal, &store, None, term, 50)
            .await
            .unwrap();
        assert!(hits.is_empty());
    }
    let first = t.elapsed().as_secs_f64();
    let units: u64 = store.threads().await.unwrap().iter().map(|t| t.units).sum();
    assert_eq!(units, (runs * steps) as u64, "{mode}: every unit caught up");
    let t = Instant::now();
    agent_host::run::history::search(&journal, &store, None, term, 50)
        .await
        .unwrap();
    let again = t.elapsed().as_secs_f64();
    // The part both modes share: reading every run back from the journal.
    let t = Instant::now();
    let listed = agent_host::run::list(&journal).await.unwrap();
    let replay = t.elapsed().as_secs_f64();
    assert_eq!(listed.len(), runs);
    let backlog = store.index_backlog().await.unwrap();
    println!(
        "{}",
        json!({"bench": format!("runs_search_all_first_{mode}"), "runs": runs, "steps": steps,
               "units_caught_up": units, "first_s": first, "second_s": again, "replay_s": replay, "backlog_after": backlog})
    );
    store.close().await;
    journal.close().await;
}

/// The same allocator as the `agentctl` binary, whose `runs search --all` this measures.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() {
    // As `agentctl` does once past its single-threaded start.
    tikv_jemalloc_ctl::background_thread::write(true).expect("jemalloc's background threads");
    let args: Vec<String> = std::env::args().collect();
    let runs = arg(&args, "--runs", 1000);
    let steps = arg(&args, "--steps", 100);
    let modes: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--modes")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').map(str::to_string).collect());
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("journal.db");
    write_runs(&format!("sqlite://{}", seed.display()), runs, steps).await;
    for (mode, options) in [
        (
            "unit_by_unit_index_at_once",
            ContextOptions::default().index_tail_bytes(0),
        ),
        (
            "index_at_once",
            ContextOptions::default().index_tail_bytes(0),
        ),
        ("deferred", ContextOptions::default()),
        (
            "deferred_normal",
            ContextOptions::default().durability(agent_context::StoreDurability::Normal),
        ),
    ] {
        if modes.as_ref().is_some_and(|m| !m.iter().any(|m| m == mode)) {
            continue;
        }
        let path = dir.path().join(format!("{mode}.db"));
        std::fs::copy(&seed, &path).unwrap();
        // The journal may leave its last commits in the WAL.
        let wal = |p: &std::path::Path| std::path::PathBuf::from(format!("{}-wal", p.display()));
        if wal(&seed).exists() {
            std::fs::copy(wal(&seed), wal(&path)).unwrap();
        }
        search_all(
            &format!("sqlite://{}", path.display()),
            options,
            mode,
            runs,
            steps,
        )
        .await;
    }
}
