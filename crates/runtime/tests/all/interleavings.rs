//! Property test: random interleavings of start, launch, steer, commit, cancel, finish and
//! crash-and-recover. On every replay of the journal: at most one terminal event per
//! scheduled call (exactly one once everything settled), no terminal before its
//! `tool.scheduled`, no commit at a stale revision, at most one running turn per thread.

use std::collections::HashMap;

use agent_journal::{Event, Journal};
use agent_runtime::{Runtime, RuntimeOptions, events};
use proptest::prelude::*;
use serde_json::{Value, json};

const THREADS: [&str; 2] = ["t0", "t1"];
const TOOLS: [&str; 3] = ["read_docs", "run_tests", "fail"];

#[derive(Debug, Clone)]
enum Op {
    Start(usize),
    Launch {
        thread: usize,
        call: u8,
        tool: usize,
        delay_ms: u8,
    },
    Steer(usize),
    Commit {
        thread: usize,
        behind: bool,
    },
    Cancel(usize),
    Finish(usize),
    CrashAndRecover,
    Yield,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..2usize).prop_map(Op::Start),
        5 => (0..2usize, 0..6u8, 0..3usize, 0..4u8)
            .prop_map(|(thread, call, tool, delay_ms)| Op::Launch { thread, call, tool, delay_ms }),
        2 => (0..2usize).prop_map(Op::Steer),
        2 => (0..2usize, any::<bool>()).prop_map(|(thread, behind)| Op::Commit { thread, behind }),
        1 => (0..2usize).prop_map(Op::Cancel),
        1 => (0..2usize).prop_map(Op::Finish),
        1 => Just(Op::CrashAndRecover),
        2 => Just(Op::Yield),
    ]
}

/// Checks the invariants on one thread's journal; `settled` also demands a terminal for
/// every scheduled call.
fn check(events: &[Event], settled: bool) -> Result<(), String> {
    let mut running: Option<String> = None;
    let mut revision: HashMap<String, u64> = HashMap::new();
    let mut terminals: HashMap<(String, String), usize> = HashMap::new();
    let turn_of = |e: &Event| {
        e.payload["turn_id"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    for e in events {
        let kind: &str = &e.kind;
        match kind {
            events::TURN_STARTED => {
                if let Some(r) = &running {
                    return Err(format!("seq {}: turn started while {r} is running", e.seq));
                }
                running = Some(turn_of(e));
                revision.insert(turn_of(e), 0);
            }
            events::STEER_ACCEPTED => {
                revision.insert(turn_of(e), e.payload["revision"].as_u64().unwrap_or(0));
            }
            events::PROPOSAL_COMMITTED => {
                let turn = turn_of(e);
                if running.as_deref() != Some(turn.as_str()) {
                    return Err(format!(
                        "seq {}: commit in a turn that is not running",
                        e.seq
                    ));
                }
                let current = revision.get(&turn).copied().unwrap_or(0);
                if e.payload["revision"].as_u64() != Some(current) {
                    return Err(format!(
                        "seq {}: commit at a stale revision (current {current})",
                        e.seq
                    ));
                }
            }
            _ if events::TURN_ENDS.contains(&kind)
                && running.as_deref() == Some(turn_of(e).as_str()) =>
            {
                running = None;
            }
            events::TOOL_SCHEDULED => {
                let key = (
                    turn_of(e),
                    e.payload["call_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
                if terminals.insert(key, 0).is_some() {
                    return Err(format!("seq {}: call scheduled twice", e.seq));
                }
            }
            _ if events::TOOL_TERMINALS.contains(&kind) => {
                let key = (
                    turn_of(e),
                    e.payload["call_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
                match terminals.get_mut(&key) {
                    None => return Err(format!("seq {}: terminal before tool.scheduled", e.seq)),
                    Some(n) => {
                        *n += 1;
                        if *n > 1 {
                            return Err(format!(
                                "seq {}: second terminal event for {key:?}",
                                e.seq
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if settled && let Some((key, _)) = terminals.iter().find(|(_, n)| **n != 1) {
        return Err(format!("call {key:?} has no terminal event"));
    }
    Ok(())
}

async fn check_all(journal: &Journal, settled: bool) -> Result<(), String> {
    for thread in THREADS {
        let events = journal.replay(thread, 0).await.map_err(|e| e.to_string())?;
        check(&events, settled).map_err(|e| format!("{thread}: {e}"))?;
    }
    Ok(())
}

async fn run_case(ops: Vec<Op>) -> Result<(), String> {
    let journal = Journal::open("sqlite::memory:")
        .await
        .map_err(|e| e.to_string())?;
    let options = || {
        RuntimeOptions::default()
            .tools(agent_runtime::demo::registry())
            .concurrency(2)
    };
    let mut rt = Runtime::recover(journal.clone(), options())
        .await
        .map_err(|e| e.to_string())?;
    for op in ops {
        match op {
            Op::Start(t) => {
                let _ = rt.start(THREADS[t]).await;
            }
            Op::Launch {
                thread,
                call,
                tool,
                delay_ms,
            } => {
                if let Some(turn) = rt.running_turn(THREADS[thread]) {
                    let args: Value = json!({ "delay": f64::from(delay_ms) / 1000.0 });
                    let _ = rt
                        .launch(
                            THREADS[thread],
                            &turn,
                            &format!("c{call}"),
                            TOOLS[tool],
                            args,
                        )
                        .await;
                }
            }
            Op::Steer(t) => {
                if let Some(turn) = rt.running_turn(THREADS[t]) {
                    let _ = rt.steer(THREADS[t], &turn, "update").await;
                }
            }
            Op::Commit { thread, behind } => {
                if let Some((turn, rev, _)) = rt.turn_status(THREADS[thread]) {
                    let rev = if behind { rev.wrapping_sub(1) } else { rev };
                    let _ = rt.commit(THREADS[thread], &turn, rev, "proposal").await;
                }
            }
            Op::Cancel(t) => {
                if let Some(turn) = rt.running_turn(THREADS[t]) {
                    let _ = rt.cancel(THREADS[t], &turn).await;
                }
            }
            Op::Finish(t) => {
                if let Some(turn) = rt.running_turn(THREADS[t]) {
                    let _ = rt.finish(THREADS[t], &turn).await;
                }
            }
            Op::CrashAndRecover => {
                rt.crash();
                rt = Runtime::recover(journal.clone(), options())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Op::Yield => tokio::task::yield_now().await,
        }
        check_all(&journal, false).await?;
    }
    // Settle: a last crash-and-recover (nothing may be lost), then close.
    rt.crash();
    let rt = Runtime::recover(journal.clone(), options())
        .await
        .map_err(|e| e.to_string())?;
    rt.close().await;
    check_all(&journal, true).await
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn journal_invariants_hold_under_random_interleavings(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let outcome = rt.block_on(run_case(ops));
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}
