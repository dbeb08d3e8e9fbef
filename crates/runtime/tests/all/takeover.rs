//! Per-thread adoption ([`Runtime::open`] + [`Runtime::adopt`]) and cancel safety (futures
//! dropped after any number of polls), on SQLite, PostgreSQL and `memory:`.

use std::collections::HashMap;

use agent_runtime::{
    InterruptedCall, JobKey, Runtime, RuntimeError, RuntimeOptions, RuntimeTurnStatus, ToolRegistry,
};
use serde_json::json;

use crate::common::{GateTool, count, replay, terminals_of};
use agent_testkit::poll_then_drop;

use crate::support::{self, Fixture};

agent_testkit::backend_tests!(
    support,
    [sqlite, postgres, memory]:
    adopt_settles_one_thread_and_leaves_the_others_alone,
    adopt_is_idempotent_refuses_a_driven_thread_and_knows_fresh_ones,
    open_knows_no_thread_until_it_adopts_one,
    adopt_refuses_a_thread_whose_calls_run_here,
    adopt_after_a_checkpoint_folds_only_the_events_after_it,
    dropped_launches_leave_no_entry_and_every_call_one_terminal,
    dropped_launches_free_their_admission_slots,
    dropped_results_leave_the_call_running,
);

/// Every `tool.scheduled` of `thread` has exactly one terminal event.
fn assert_one_terminal_each(events: &[agent_journal::Event]) {
    let mut terminals: HashMap<String, usize> = HashMap::new();
    for e in events {
        if agent_runtime::events::TOOL_TERMINALS.contains(&&*e.kind) {
            *terminals
                .entry(e.payload["call_id"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    for e in events.iter().filter(|e| &*e.kind == "tool.scheduled") {
        let call = e.payload["call_id"].as_str().unwrap();
        assert_eq!(terminals.get(call), Some(&1), "call {call}");
    }
    assert_eq!(
        terminals.len(),
        count(events, "tool.scheduled"),
        "a terminal without a scheduled call"
    );
}

async fn adopt_settles_one_thread_and_leaves_the_others_alone(f: Fixture) {
    let (effect, mut effect_h) = GateTool::new("effect", false, true);
    let (lookup, mut lookup_h) = GateTool::new("lookup", true, true);
    let opts = RuntimeOptions::default()
        .tools(agent_runtime::demo::registry())
        .concurrency(2)
        .deadlines(agent_runtime::Deadlines::none())
        .tools(ToolRegistry::new().with(effect).with(lookup));
    // The process that drove both threads.
    let old = Runtime::open(f.journal.clone(), opts.clone());
    let ta = old.start("a").await.unwrap();
    old.steer("a", &ta, "more").await.unwrap();
    let tb = old.start("b").await.unwrap();
    old.launch("a", &ta, "e", "effect", json!({}))
        .await
        .unwrap();
    old.launch("a", &ta, "l", "lookup", json!({}))
        .await
        .unwrap();
    effect_h.wait_started(1).await;
    lookup_h.wait_started(1).await;
    // No slot left: scheduled, never started.
    old.launch("a", &ta, "q", "effect", json!({}))
        .await
        .unwrap();
    old.launch("b", &tb, "b1", "effect", json!({}))
        .await
        .unwrap();
    old.crash();
    let b_before = replay(&f.journal, "b").await;

    let new = Runtime::open(f.journal.clone(), opts);
    let report = new.adopt("a").await.unwrap();
    assert_eq!(report.threads, 1);
    assert_eq!(report.turns_interrupted, 1);
    assert_eq!(report.calls_retried, 0, "adopt re-runs nothing");
    assert_eq!(report.calls_interrupted, 3);
    let call = |id: &str, name: &str, started: bool| InterruptedCall {
        turn: ta.clone(),
        call_id: id.into(),
        name: name.into(),
        started,
    };
    assert_eq!(
        report.interrupted,
        vec![
            call("e", "effect", true),
            call("l", "lookup", true),
            call("q", "effect", false),
        ]
    );
    assert_eq!(
        new.turn_status("a").unwrap(),
        (ta.clone(), 1, RuntimeTurnStatus::Interrupted)
    );
    let a = replay(&f.journal, "a").await;
    assert_one_terminal_each(&a);
    assert_eq!(terminals_of(&a, "l"), ["tool.interrupted"]);
    assert_eq!(count(&a, "turn.interrupted"), 1);
    // The other thread is untouched, and unknown to the new runtime.
    assert_eq!(replay(&f.journal, "b").await, b_before);
    assert!(new.turn_status("b").is_none());
    assert_eq!(new.jobs_in_memory(), 0);
    assert_eq!(lookup_h.calls(), 1, "the retry-safe call did not run again");
    // The adopted thread takes a new turn.
    let t2 = new.start("a").await.unwrap();
    assert_ne!(t2, ta);
    effect_h.open();
    lookup_h.open();
    new.close().await;
}

async fn adopt_after_a_checkpoint_folds_only_the_events_after_it(f: Fixture) {
    let (effect, mut effect_h) = GateTool::new("effect", false, true);
    let (quick, quick_h) = GateTool::new("quick", false, true);
    quick_h.open();
    let (slow, mut slow_h) = GateTool::new("slow", false, true);
    let opts = RuntimeOptions::default()
        .concurrency(2)
        .deadlines(agent_runtime::Deadlines::none())
        .tools(ToolRegistry::new().with(effect).with(quick).with(slow));
    let old = Runtime::open(f.journal.clone(), opts.clone());
    let ta = old.start("a").await.unwrap();
    let done = old
        .launch("a", &ta, "done", "quick", json!({}))
        .await
        .unwrap();
    old.launch("a", &ta, "running", "effect", json!({}))
        .await
        .unwrap();
    effect_h.wait_started(1).await;
    assert_eq!(old.checkpoint("a"), None, "a call of the thread runs here");
    // An event no fold can read: adopting from the first event fails on it, so an adoption
    // that succeeds did not fold it.
    f.journal
        .append(agent_journal::NewEvent::new(
            "a",
            "tool.scheduled",
            json!({"turn_id": ta}),
        ))
        .await
        .unwrap();
    effect_h.open();
    let running = JobKey {
        thread: "a".into(),
        turn: ta.clone(),
        call_id: "running".into(),
    };
    old.result("a", &ta, &running).await.unwrap();
    old.result("a", &ta, &done).await.unwrap();
    old.steer("a", &ta, "more").await.unwrap();
    let checkpoint = old.checkpoint("a").unwrap();
    assert_eq!(
        checkpoint.turn,
        Some(agent_runtime::CheckpointTurn {
            id: ta.clone(),
            revision: 1,
            ended: None,
        })
    );
    let seq = f.journal.last_seq("a").await.unwrap().unwrap();
    // After the checkpoint: one call left unstarted, one steer, then the crash.
    old.launch("a", &ta, "late", "slow", json!({}))
        .await
        .unwrap();
    slow_h.wait_started(1).await;
    old.steer("a", &ta, "again").await.unwrap();
    old.crash();

    let fresh = Runtime::open(f.journal.clone(), opts.clone());
    let whole = fresh.adopt("a").await.unwrap_err();
    assert!(
        matches!(whole, RuntimeError::CorruptEvent { .. }),
        "{whole:?}"
    );
    let new = Runtime::open(f.journal.clone(), opts);
    let after = f.journal.replay("a", seq).await.unwrap();
    let (first, rest) = after.split_at(1);
    let report = new
        .adopt_after("a", checkpoint, seq, first.to_vec())
        .await
        .unwrap();
    assert_eq!(report.turns_interrupted, 1);
    assert_eq!(
        report.events,
        1 + rest.len(),
        "only the events after the checkpoint"
    );
    assert_eq!(
        report.interrupted,
        vec![InterruptedCall {
            turn: ta.clone(),
            call_id: "late".into(),
            name: "slow".into(),
            started: true,
        }]
    );
    assert_eq!(
        new.turn_status("a").unwrap(),
        (ta.clone(), 2, RuntimeTurnStatus::Interrupted)
    );
    assert_eq!(count(&replay(&f.journal, "a").await, "turn.interrupted"), 1);
    let t2 = new.start("a").await.unwrap();
    assert_ne!(t2, ta);
    new.close().await;
}

async fn adopt_is_idempotent_refuses_a_driven_thread_and_knows_fresh_ones(f: Fixture) {
    let r = Runtime::open(
        f.journal.clone(),
        RuntimeOptions::default().tools(agent_runtime::demo::registry()),
    );
    // A thread without events: nothing to do, nothing loaded.
    let fresh = r.adopt("fresh").await.unwrap();
    assert_eq!((fresh.threads, fresh.events), (1, 0));
    assert!(r.turn_status("fresh").is_none());
    let t = r.start("fresh").await.unwrap();
    // Adopting a thread this runtime drives would interrupt its own live turn.
    let err = r.adopt("fresh").await.unwrap_err();
    assert!(matches!(err, RuntimeError::TurnActive { .. }), "{err}");
    r.finish("fresh", &t).await.unwrap();
    let before = replay(&f.journal, "fresh").await.len();
    // Settled: adopting writes nothing and loads the finished turn.
    for _ in 0..2 {
        let again = r.adopt("fresh").await.unwrap();
        assert_eq!(again.turns_interrupted + again.calls_interrupted, 0);
        assert!(again.interrupted.is_empty());
        assert_eq!(
            r.turn_status("fresh").unwrap(),
            (t.clone(), 0, RuntimeTurnStatus::Completed)
        );
    }
    assert_eq!(replay(&f.journal, "fresh").await.len(), before);
    r.close().await;
    let err = r.adopt("fresh").await.unwrap_err();
    assert!(matches!(err, RuntimeError::Closed), "{err}");
}

async fn open_knows_no_thread_until_it_adopts_one(f: Fixture) {
    let first = Runtime::open(
        f.journal.clone(),
        RuntimeOptions::default().tools(agent_runtime::demo::registry()),
    );
    let t = first.start("x").await.unwrap();
    first.crash();
    let second = Runtime::open(
        f.journal.clone(),
        RuntimeOptions::default().tools(agent_runtime::demo::registry()),
    );
    assert!(second.turn_status("x").is_none());
    assert_eq!(second.recovery_report(), Default::default());
    // Nothing was written on open: the old turn is still open in the journal.
    assert_eq!(count(&replay(&f.journal, "x").await, "turn.interrupted"), 0);
    second.adopt("x").await.unwrap();
    assert_eq!(second.turn_status("x").unwrap().0, t);
    assert_eq!(count(&replay(&f.journal, "x").await, "turn.interrupted"), 1);
}

async fn adopt_refuses_a_thread_whose_calls_run_here(f: Fixture) {
    let (lookup, mut lookup_h) = GateTool::new("lookup", true, true);
    let opts = RuntimeOptions::default().tools(ToolRegistry::new().with(lookup));
    let first = Runtime::open(f.journal.clone(), opts.clone());
    let t = first.start("a").await.unwrap();
    first
        .launch("a", &t, "l", "lookup", json!({}))
        .await
        .unwrap();
    lookup_h.wait_started(1).await;
    first.crash();
    // Whole-journal recovery runs the retry-safe call again, here.
    let r = Runtime::recover(f.journal.clone(), opts).await.unwrap();
    lookup_h.wait_started(1).await;
    let err = r.adopt("a").await.unwrap_err();
    assert!(matches!(err, RuntimeError::TurnActive { .. }), "{err}");
    lookup_h.open();
    let key = JobKey {
        thread: "a".into(),
        turn: t.clone(),
        call_id: "l".into(),
    };
    assert!(r.result("a", &t, &key).await.unwrap().ok);
    let report = r.adopt("a").await.unwrap();
    assert!(report.interrupted.is_empty());
    assert_one_terminal_each(&replay(&f.journal, "a").await);
    r.close().await;
}

const DROP_POINTS: usize = 24;

/// A launch abandoned after 0, 1, 2, ... polls: it leaves no entry behind, a relaunch with
/// the same call id gets the same job (or its recorded outcome), the tool runs exactly once
/// per call, and every scheduled call gets one terminal event.
async fn dropped_launches_leave_no_entry_and_every_call_one_terminal(f: Fixture) {
    let (gate, gate_h) = GateTool::new("gate", false, true);
    gate_h.open();
    let r = Runtime::open(
        f.journal.clone(),
        RuntimeOptions::default().tools(ToolRegistry::new().with(gate)),
    );
    let t = r.start("a").await.unwrap();
    let mut abandoned = 0;
    for polls in 0..DROP_POINTS {
        let call_id = format!("c{polls}");
        let args = json!({ "n": polls });
        let dropped =
            poll_then_drop(r.launch("a", &t, &call_id, "gate", args.clone()), polls).await;
        let key = r.launch("a", &t, &call_id, "gate", args).await.unwrap();
        match dropped {
            Some(first) => assert_eq!(first.unwrap(), key),
            None if polls > 0 => abandoned += 1,
            None => {}
        }
        let result = r.result("a", &t, &key).await.unwrap();
        assert!(result.ok, "{polls}: {result:?}");
        // Another argument under the same id is still a collision.
        let err = r
            .launch("a", &t, &call_id, "gate", json!({ "other": true }))
            .await
            .unwrap_err();
        assert!(matches!(err, RuntimeError::CallIdCollision { .. }), "{err}");
    }
    assert_eq!(r.jobs_in_memory(), 0);
    assert_eq!(gate_h.calls(), DROP_POINTS, "each call ran exactly once");
    // A database journal acknowledges after a commit: some launches were abandoned while
    // their `tool.scheduled` was being written (memory: writes within the first poll).
    if f.url != agent_journal::MEMORY_URL {
        assert!(abandoned > 0);
    }
    r.finish("a", &t).await.unwrap();
    r.close().await;
    let events = replay(&f.journal, "a").await;
    assert_eq!(count(&events, "tool.scheduled"), DROP_POINTS);
    assert_eq!(count(&events, "tool.completed"), DROP_POINTS);
    assert_one_terminal_each(&events);
}

/// Abandoned launches do not hold admission slots: with room for two calls in flight,
/// many more abandoned launches are admitted one after another.
async fn dropped_launches_free_their_admission_slots(f: Fixture) {
    let (gate, gate_h) = GateTool::new("gate", false, true);
    let r = Runtime::open(
        f.journal.clone(),
        RuntimeOptions::default()
            .tools(agent_runtime::demo::registry())
            .max_in_flight(2)
            .tools(ToolRegistry::new().with(gate)),
    );
    let t = r.start("a").await.unwrap();
    gate_h.open();
    for polls in 0..DROP_POINTS {
        let call_id = format!("c{polls}");
        poll_then_drop(r.launch("a", &t, &call_id, "gate", json!({})), polls).await;
        // The abandoned launch finishes on its own; its result comes like any other.
        let key = JobKey {
            thread: "a".into(),
            turn: t.clone(),
            call_id: call_id.clone(),
        };
        let result = match r.result("a", &t, &key).await {
            Ok(result) => result,
            // Never polled (or dropped before admission): nothing was launched.
            Err(RuntimeError::UnknownCall { .. }) => {
                let key = r
                    .launch("a", &t, &call_id, "gate", json!({}))
                    .await
                    .unwrap();
                r.result("a", &t, &key).await.unwrap()
            }
            Err(err) => panic!("{polls}: {err}"),
        };
        assert!(result.ok);
        assert_eq!(r.jobs_in_memory(), 0, "{polls}");
    }
    r.close().await;
    assert_one_terminal_each(&replay(&f.journal, "a").await);
}

/// A `result` abandoned after any number of polls changes nothing: the call goes on and a
/// later `result` returns its outcome.
async fn dropped_results_leave_the_call_running(f: Fixture) {
    let (gate, mut gate_h) = GateTool::new("gate", false, true);
    let r = Runtime::open(
        f.journal.clone(),
        RuntimeOptions::default().tools(ToolRegistry::new().with(gate)),
    );
    let t = r.start("a").await.unwrap();
    let key = r.launch("a", &t, "c", "gate", json!({})).await.unwrap();
    gate_h.wait_started(1).await;
    for polls in 0..DROP_POINTS {
        assert!(
            poll_then_drop(r.result("a", &t, &key), polls)
                .await
                .is_none()
        );
    }
    assert_eq!(r.jobs_in_memory(), 1);
    gate_h.open();
    let result = r.result("a", &t, &key).await.unwrap();
    assert!(result.ok);
    assert_eq!(r.jobs_in_memory(), 0);
    // Once settled, a dropped result is no different.
    for polls in 0..4 {
        if let Some(done) = poll_then_drop(r.result("a", &t, &key), polls).await {
            assert!(done.unwrap().ok);
        }
    }
    r.close().await;
    assert_one_terminal_each(&replay(&f.journal, "a").await);
}
