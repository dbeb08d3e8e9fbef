//! The runtime's contracts, on SQLite and on PostgreSQL alike: the six original
//! runtime contracts, then recovery, idempotency across restarts, deadlines, admission
//! control, bounded cancellation and memory bounds.

use std::time::Duration;

use agent_runtime::{
    CallStatus, DeadlinePhase, Deadlines, Runtime, RuntimeError, RuntimeOptions, RuntimeTurnStatus,
    ToolRegistry,
};
use serde_json::json;

use crate::common::{GateTool, SizedTool, count, kinds, replay, terminals_of};
use crate::support::{self, Fixture};

agent_testkit::backend_tests!(
    support,
    [sqlite, postgres]:
    steering_fences_a_stale_commit,
    idempotency_and_argument_collision,
    owner_isolation,
    timeout_and_failure,
    cancel_and_stale_turn,
    real_overlap_without_timing_threshold,
    overlap_proven_by_a_barrier,
    start_refuses_while_running_and_finish_allows_the_next_turn,
    ended_turn_is_refused_everywhere,
    allowlist_and_argument_validation_journal_nothing,
    queue_and_run_deadlines_are_reported_separately,
    admission_control_refuses_with_a_typed_error,
    cancel_is_bounded_for_a_tool_that_ignores_cancellation,
    deadlines_and_grace_too_long_for_an_instant_mean_no_limit,
    finish_cancels_pending_calls_so_none_is_orphaned,
    finished_jobs_leave_memory_and_results_come_from_the_journal,
    recovery_interrupts_turns_and_unfinished_calls_and_reruns_retry_safe_ones,
    relaunch_after_restart_returns_the_recorded_result_without_rerunning,
    close_settles_every_pending_call,
    an_outcome_the_journal_refuses_is_recorded_as_failed,
);

async fn demo_runtime(f: &Fixture) -> Runtime {
    Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default().tools(agent_runtime::demo::registry()),
    )
    .await
    .unwrap()
}

async fn steering_fences_a_stale_commit(f: Fixture) {
    let r = demo_runtime(&f).await;
    let t = r.start("a").await.unwrap();
    let key = r
        .launch("a", &t, "c", "read_docs", json!({"delay": 0.01}))
        .await
        .unwrap();
    assert_eq!(r.steer("a", &t, "read only").await.unwrap(), 1);
    let result = r.result("a", &t, &key).await.unwrap();
    assert!(result.stale);
    assert!(result.ok);
    let err = r.commit("a", &t, 0, "old").await.unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::StaleRevision {
                given: 0,
                current: 1
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("revalidate first"));
    r.commit("a", &t, 1, "revalidated").await.unwrap();
    let events = replay(&f.journal, "a").await;
    assert_eq!(count(&events, "steer.accepted"), 1);
    let commits: Vec<_> = events
        .iter()
        .filter(|e| &*e.kind == "proposal.committed")
        .collect();
    assert_eq!(commits.len(), 1);
    assert_eq!(commits[0].payload["revision"], 1);
    r.close().await;
}

async fn idempotency_and_argument_collision(f: Fixture) {
    let r = demo_runtime(&f).await;
    let t = r.start("a").await.unwrap();
    let key = r
        .launch("a", &t, "c", "read_docs", json!({}))
        .await
        .unwrap();
    assert_eq!(
        key,
        r.launch("a", &t, "c", "read_docs", json!({}))
            .await
            .unwrap()
    );
    let err = r
        .launch("a", &t, "c", "run_tests", json!({}))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::CallIdCollision { .. }), "{err}");
    r.result("a", &t, &key).await.unwrap();
    // After the job left memory the journal still answers: same job, no second run.
    assert_eq!(
        key,
        r.launch("a", &t, "c", "read_docs", json!({}))
            .await
            .unwrap()
    );
    let err = r
        .launch("a", &t, "c", "read_docs", json!({"delay": 0}))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::CallIdCollision { .. }), "{err}");
    let events = replay(&f.journal, "a").await;
    assert_eq!(count(&events, "tool.started"), 1);
    assert_eq!(count(&events, "tool.scheduled"), 1);
    r.close().await;
}

async fn owner_isolation(f: Fixture) {
    let r = demo_runtime(&f).await;
    let t = r.start("a").await.unwrap();
    let other = r.start("b").await.unwrap();
    let key = r
        .launch("a", &t, "c", "read_docs", json!({}))
        .await
        .unwrap();
    let err = r.result("b", &other, &key).await.unwrap_err();
    assert!(matches!(err, RuntimeError::PermissionDenied), "{err}");
    // Same thread, other turn id: also refused.
    let err = r.result("a", &other, &key).await.unwrap_err();
    assert!(matches!(err, RuntimeError::PermissionDenied), "{err}");
    r.result("a", &t, &key).await.unwrap();
    r.close().await;
}

async fn timeout_and_failure(f: Fixture) {
    let r = demo_runtime(&f).await;
    let t = r.start("a").await.unwrap();
    let slow = r
        .launch_with(
            "a",
            &t,
            "s",
            "read_docs",
            json!({"delay": 0.2}),
            Deadlines::run(Duration::from_millis(10)),
        )
        .await
        .unwrap();
    let failed = r.launch("a", &t, "f", "fail", json!({})).await.unwrap();
    let slow = r.result("a", &t, &slow).await.unwrap();
    assert_eq!(slow.error.as_deref(), Some("timeout"));
    assert_eq!(slow.phase, Some(DeadlinePhase::Run));
    assert!(slow.started);
    let failed = r.result("a", &t, &failed).await.unwrap();
    assert!(!failed.ok);
    assert_eq!(failed.status, CallStatus::Failed);
    assert_eq!(failed.error.as_deref(), Some("synthetic tool error"));
    let events = replay(&f.journal, "a").await;
    assert_eq!(terminals_of(&events, "s"), ["tool.timeout"]);
    assert_eq!(terminals_of(&events, "f"), ["tool.failed"]);
    r.close().await;
}

async fn cancel_and_stale_turn(f: Fixture) {
    let r = demo_runtime(&f).await;
    let t = r.start("a").await.unwrap();
    let key = r
        .launch("a", &t, "c", "read_docs", json!({"delay": 0.2}))
        .await
        .unwrap();
    tokio::task::yield_now().await;
    r.cancel("a", &t).await.unwrap();
    let result = r.result("a", &t, &key).await.unwrap();
    assert_eq!(result.status, CallStatus::Cancelled);
    let err = r.steer("a", &t, "too late").await.unwrap_err();
    assert!(matches!(err, RuntimeError::TurnNotActive { .. }), "{err}");
    let events = replay(&f.journal, "a").await;
    assert_eq!(terminals_of(&events, "c"), ["tool.cancelled"]);
    assert_eq!(kinds(&events).last(), Some(&"turn.cancelled"));
    r.close().await;
}

async fn real_overlap_without_timing_threshold(f: Fixture) {
    let r = demo_runtime(&f).await;
    let t = r.start("a").await.unwrap();
    // A synchronous launcher would start them one by one; ours awaits a durable `tool.scheduled`, so both
    // launches go out together (one group commit) and the delay leaves room for a slow
    // commit. `overlap_proven_by_a_barrier` proves overlap without any timing at all.
    let (a, b) = tokio::join!(
        r.launch("a", &t, "0", "read_docs", json!({"delay": 0.2})),
        r.launch("a", &t, "1", "read_docs", json!({"delay": 0.2}))
    );
    let keys = [a.unwrap(), b.unwrap()];
    for k in &keys {
        r.result("a", &t, k).await.unwrap();
    }
    let events = replay(&f.journal, "a").await;
    let kinds = kinds(&events);
    let second_start = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| **k == "tool.started")
        .nth(1)
        .unwrap()
        .0;
    let first_end = kinds.iter().position(|k| *k == "tool.completed").unwrap();
    assert!(second_start < first_end, "{kinds:?}");
    r.close().await;
}

async fn overlap_proven_by_a_barrier(f: Fixture) {
    // Neither call can finish before both have started: only real overlap completes.
    let (gate, mut handle) = GateTool::new("gate", false, true);
    let r = Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default().tools(ToolRegistry::new().with(gate)),
    )
    .await
    .unwrap();
    let t = r.start("a").await.unwrap();
    let k1 = r.launch("a", &t, "1", "gate", json!({})).await.unwrap();
    let k2 = r.launch("a", &t, "2", "gate", json!({})).await.unwrap();
    handle.wait_started(2).await;
    handle.open();
    assert!(r.result("a", &t, &k1).await.unwrap().ok);
    assert!(r.result("a", &t, &k2).await.unwrap().ok);
    let events = replay(&f.journal, "a").await;
    let kinds = kinds(&events);
    let last_start = kinds.iter().rposition(|k| *k == "tool.started").unwrap();
    let first_end = kinds.iter().position(|k| *k == "tool.completed").unwrap();
    assert!(last_start < first_end, "{kinds:?}");
    r.close().await;
}

async fn start_refuses_while_running_and_finish_allows_the_next_turn(f: Fixture) {
    let r = demo_runtime(&f).await;
    let t = r.start("a").await.unwrap();
    let err = r.start("a").await.unwrap_err();
    assert!(matches!(err, RuntimeError::TurnActive { .. }), "{err}");
    // Other threads are independent.
    r.start("b").await.unwrap();
    r.finish("a", &t).await.unwrap();
    assert_eq!(r.turn_status("a").unwrap().2, RuntimeTurnStatus::Completed);
    let t2 = r.start("a").await.unwrap();
    assert_ne!(t, t2);
    let events = replay(&f.journal, "a").await;
    assert_eq!(
        kinds(&events),
        ["turn.started", "turn.completed", "turn.started"]
    );
    r.close().await;
}

async fn ended_turn_is_refused_everywhere(f: Fixture) {
    let r = demo_runtime(&f).await;
    let t = r.start("a").await.unwrap();
    r.finish("a", &t).await.unwrap();
    let not_active = |e: RuntimeError| matches!(e, RuntimeError::TurnNotActive { .. });
    assert!(not_active(r.steer("a", &t, "x").await.unwrap_err()));
    assert!(not_active(r.commit("a", &t, 0, "p").await.unwrap_err()));
    assert!(not_active(
        r.launch("a", &t, "new", "read_docs", json!({}))
            .await
            .unwrap_err()
    ));
    assert!(not_active(r.cancel("a", &t).await.unwrap_err()));
    assert!(not_active(r.finish("a", &t).await.unwrap_err()));
    // A made-up turn id is refused the same way.
    assert!(not_active(r.steer("a", "nope", "x").await.unwrap_err()));
    let events = replay(&f.journal, "a").await;
    assert_eq!(kinds(&events), ["turn.started", "turn.completed"]);
    r.close().await;
}

async fn allowlist_and_argument_validation_journal_nothing(f: Fixture) {
    let r = demo_runtime(&f).await;
    let t = r.start("a").await.unwrap();
    let err = r
        .launch("a", &t, "c", "rm_rf", json!({}))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::ToolNotAllowed(_)), "{err}");
    for bad in [
        json!({"delay": true}),
        json!({"delay": 3}),
        json!({"delay": -1}),
        json!({"delay": "1"}),
        json!([]),
    ] {
        let err = r
            .launch("a", &t, "c", "read_docs", bad.clone())
            .await
            .unwrap_err();
        assert!(
            matches!(err, RuntimeError::InvalidArgs { .. }),
            "{bad}: {err}"
        );
    }
    let events = replay(&f.journal, "a").await;
    assert_eq!(kinds(&events), ["turn.started"]);
    r.close().await;
}

async fn queue_and_run_deadlines_are_reported_separately(f: Fixture) {
    let (gate, mut handle) = GateTool::new("gate", false, true);
    let r = Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default()
            .tools(agent_runtime::demo::registry())
            .concurrency(1)
            .tools(agent_runtime::demo::registry().with(gate)),
    )
    .await
    .unwrap();
    let t = r.start("a").await.unwrap();
    // The gate holds the only slot until opened.
    let busy = r
        .launch_with("a", &t, "busy", "gate", json!({}), Deadlines::none())
        .await
        .unwrap();
    handle.wait_started(1).await;
    let queued = r
        .launch_with(
            "a",
            &t,
            "queued",
            "read_docs",
            json!({"delay": 0}),
            Deadlines::none().with_queue(Duration::from_millis(20)),
        )
        .await
        .unwrap();
    let queued = r.result("a", &t, &queued).await.unwrap();
    assert_eq!(queued.status, CallStatus::Timeout);
    assert_eq!(queued.error.as_deref(), Some("timeout"));
    assert_eq!(queued.phase, Some(DeadlinePhase::Queue));
    assert!(!queued.started, "a queue timeout never started");
    handle.open();
    assert!(r.result("a", &t, &busy).await.unwrap().ok);
    // A long queue deadline does not eat the run: the run deadline expires on its own.
    let slow = r
        .launch_with(
            "a",
            &t,
            "slow",
            "read_docs",
            json!({"delay": 2}),
            Deadlines::run(Duration::from_millis(20)).with_queue(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let slow = r.result("a", &t, &slow).await.unwrap();
    assert_eq!(slow.phase, Some(DeadlinePhase::Run));
    assert!(slow.started);
    let events = replay(&f.journal, "a").await;
    assert_eq!(terminals_of(&events, "queued"), ["tool.timeout"]);
    let queued_events: Vec<_> = events
        .iter()
        .filter(|e| e.payload["call_id"] == "queued")
        .collect();
    assert!(!queued_events.iter().any(|e| &*e.kind == "tool.started"));
    let timeout = queued_events
        .iter()
        .find(|e| &*e.kind == "tool.timeout")
        .unwrap();
    assert_eq!(timeout.payload["phase"], "queue");
    assert_eq!(timeout.payload["started"], false);
    r.close().await;
}

async fn admission_control_refuses_with_a_typed_error(f: Fixture) {
    let (gate, mut handle) = GateTool::new("gate", false, true);
    let r = Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default()
            .tools(agent_runtime::demo::registry())
            .max_in_flight(2)
            .tools(ToolRegistry::new().with(gate)),
    )
    .await
    .unwrap();
    let t = r.start("a").await.unwrap();
    let a = r.launch("a", &t, "1", "gate", json!({})).await.unwrap();
    let b = r.launch("a", &t, "2", "gate", json!({})).await.unwrap();
    let err = r.launch("a", &t, "3", "gate", json!({})).await.unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::Overloaded {
                in_flight: 2,
                limit: 2
            }
        ),
        "{err}"
    );
    // An idempotent relaunch of an admitted call is not new work: still answered.
    assert_eq!(a, r.launch("a", &t, "1", "gate", json!({})).await.unwrap());
    handle.wait_started(2).await;
    handle.open();
    r.result("a", &t, &a).await.unwrap();
    r.result("a", &t, &b).await.unwrap();
    // Capacity is back once the jobs are settled.
    let c = r.launch("a", &t, "3", "gate", json!({})).await.unwrap();
    assert!(r.result("a", &t, &c).await.unwrap().ok);
    let events = replay(&f.journal, "a").await;
    assert_eq!(count(&events, "tool.scheduled"), 3);
    r.close().await;
}

/// `Instant + Duration` panics on overflow; the largest durations mean "no limit" instead.
async fn deadlines_and_grace_too_long_for_an_instant_mean_no_limit(f: Fixture) {
    let r = Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default()
            .tools(agent_runtime::demo::registry())
            .cancel_grace(Duration::MAX)
            .tools(agent_runtime::demo::registry()),
    )
    .await
    .unwrap();
    let t = r.start("a").await.unwrap();
    let forever = Deadlines::run(Duration::MAX).with_queue(Duration::MAX);
    let done = r
        .launch_with("a", &t, "d", "read_docs", json!({}), forever)
        .await
        .unwrap();
    assert_eq!(
        r.result("a", &t, &done).await.unwrap().status,
        CallStatus::Completed
    );
    let running = r
        .launch_with("a", &t, "c", "read_docs", json!({"delay": 2}), forever)
        .await
        .unwrap();
    r.cancel("a", &t).await.unwrap();
    assert_eq!(
        r.result("a", &t, &running).await.unwrap().status,
        CallStatus::Cancelled
    );
    r.close().await;
}

async fn cancel_is_bounded_for_a_tool_that_ignores_cancellation(f: Fixture) {
    let (stubborn, mut handle) = GateTool::new("stubborn", false, false);
    let r = Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default()
            .tools(agent_runtime::demo::registry())
            .cancel_grace(Duration::from_millis(50))
            .tools(agent_runtime::demo::registry().with(stubborn)),
    )
    .await
    .unwrap();
    let t = r.start("a").await.unwrap();
    let key = r
        .launch_with("a", &t, "s", "stubborn", json!({}), Deadlines::none())
        .await
        .unwrap();
    let queued = r
        .launch_with(
            "a",
            &t,
            "q",
            "read_docs",
            json!({"delay": 1}),
            Deadlines::none(),
        )
        .await
        .unwrap();
    handle.wait_started(1).await;
    // The gate is never opened: the tool would run forever. Cancel still returns.
    r.cancel("a", &t).await.unwrap();
    let result = r.result("a", &t, &key).await.unwrap();
    assert_eq!(result.status, CallStatus::Cancelled);
    assert!(result.started);
    assert_eq!(
        r.result("a", &t, &queued).await.unwrap().status,
        CallStatus::Cancelled
    );
    assert_eq!(r.jobs_in_memory(), 0);
    let events = replay(&f.journal, "a").await;
    assert_eq!(terminals_of(&events, "s"), ["tool.cancelled"]);
    assert_eq!(terminals_of(&events, "q"), ["tool.cancelled"]);
    assert_eq!(kinds(&events).last(), Some(&"turn.cancelled"));
    r.close().await;
}

async fn finish_cancels_pending_calls_so_none_is_orphaned(f: Fixture) {
    let (gate, mut handle) = GateTool::new("gate", false, true);
    let r = Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default().tools(ToolRegistry::new().with(gate)),
    )
    .await
    .unwrap();
    let t = r.start("a").await.unwrap();
    let k = r.launch("a", &t, "g", "gate", json!({})).await.unwrap();
    handle.wait_started(1).await;
    r.finish("a", &t).await.unwrap();
    assert_eq!(
        r.result("a", &t, &k).await.unwrap().status,
        CallStatus::Cancelled
    );
    let events = replay(&f.journal, "a").await;
    assert_eq!(terminals_of(&events, "g"), ["tool.cancelled"]);
    assert_eq!(kinds(&events).last(), Some(&"turn.completed"));
    r.close().await;
}

async fn finished_jobs_leave_memory_and_results_come_from_the_journal(f: Fixture) {
    let r = demo_runtime(&f).await;
    let t = r.start("a").await.unwrap();
    let mut keys = Vec::new();
    for i in 0..200 {
        keys.push(
            r.launch("a", &t, &format!("c{i}"), "read_docs", json!({"delay": 0}))
                .await
                .unwrap(),
        );
    }
    let mut first = Vec::new();
    for k in &keys {
        first.push(r.result("a", &t, k).await.unwrap());
    }
    assert!(first.iter().all(|r| r.ok));
    assert_eq!(r.jobs_in_memory(), 0);
    for (k, before) in keys.iter().zip(&first) {
        assert_eq!(&r.result("a", &t, k).await.unwrap(), before);
    }
    r.close().await;
}

async fn recovery_interrupts_turns_and_unfinished_calls_and_reruns_retry_safe_ones(f: Fixture) {
    let (effect, mut effect_h) = GateTool::new("effect", false, true);
    let (lookup, mut lookup_h) = GateTool::new("lookup", true, true);
    let tools = ToolRegistry::new()
        .with(effect.clone())
        .with(lookup.clone());
    let opts = RuntimeOptions::default()
        .tools(agent_runtime::demo::registry())
        .concurrency(2)
        .deadlines(Deadlines::none())
        .tools(tools);
    let r = Runtime::recover(f.journal.clone(), opts.clone())
        .await
        .unwrap();
    let t = r.start("a").await.unwrap();
    r.steer("a", &t, "narrow it down").await.unwrap();
    r.launch("a", &t, "effect", "effect", json!({}))
        .await
        .unwrap();
    r.launch("a", &t, "lookup", "lookup", json!({"q": 1}))
        .await
        .unwrap();
    effect_h.wait_started(1).await;
    lookup_h.wait_started(1).await;
    // Both slots are taken: this one is scheduled but never starts.
    r.launch("a", &t, "queued", "effect", json!({}))
        .await
        .unwrap();
    r.crash();

    let journal = f.reopen().await;
    let r2 = Runtime::recover(journal.clone(), opts).await.unwrap();
    let report = r2.recovery_report();
    assert_eq!(report.turns_interrupted, 1);
    assert_eq!(report.calls_interrupted, 2);
    assert_eq!(report.calls_retried, 1);
    assert_eq!(
        r2.turn_status("a").unwrap(),
        (t.clone(), 1, RuntimeTurnStatus::Interrupted)
    );
    // The retry-safe call runs again and settles; its result is readable.
    lookup_h.wait_started(1).await;
    lookup_h.open();
    let key = agent_runtime::JobKey {
        thread: "a".into(),
        turn: t.clone(),
        call_id: "lookup".into(),
    };
    let res = r2.result("a", &t, &key).await.unwrap();
    assert!(res.ok);
    assert!(
        !res.stale,
        "launched at revision 1, the turn's final revision"
    );
    assert_eq!(lookup_h.calls(), 2);
    assert_eq!(effect_h.calls(), 1, "an at-most-once tool never runs again");
    let events = replay(&journal, "a").await;
    assert_eq!(terminals_of(&events, "effect"), ["tool.interrupted"]);
    assert_eq!(terminals_of(&events, "queued"), ["tool.interrupted"]);
    assert_eq!(terminals_of(&events, "lookup"), ["tool.completed"]);
    let interrupted = |id: &str| {
        events
            .iter()
            .find(|e| &*e.kind == "tool.interrupted" && e.payload["call_id"] == id)
            .unwrap()
            .payload["started"]
            .clone()
    };
    assert_eq!(interrupted("effect"), true);
    assert_eq!(interrupted("queued"), false);
    assert_eq!(count(&events, "turn.interrupted"), 1);
    // The thread is free again.
    let t2 = r2.start("a").await.unwrap();
    assert_ne!(t, t2);
    // Recovering once more changes nothing.
    r2.close().await;
    let r3 = Runtime::recover(
        journal.clone(),
        RuntimeOptions::default().tools(agent_runtime::demo::registry()),
    )
    .await
    .unwrap();
    let again = r3.recovery_report();
    assert_eq!(again.calls_interrupted + again.calls_retried, 0);
    assert_eq!(again.turns_interrupted, 1, "the new, still running turn t2");
    effect_h.open();
    drop(effect);
    drop(lookup);
}

async fn relaunch_after_restart_returns_the_recorded_result_without_rerunning(f: Fixture) {
    let (once, mut once_h) = GateTool::new("once", false, true);
    let opts = RuntimeOptions::default().tools(ToolRegistry::new().with(once));
    let r = Runtime::recover(f.journal.clone(), opts.clone())
        .await
        .unwrap();
    let t = r.start("a").await.unwrap();
    once_h.open();
    let key = r
        .launch("a", &t, "c", "once", json!({"a": 1, "b": {"x": 1, "y": 2}}))
        .await
        .unwrap();
    let first = r.result("a", &t, &key).await.unwrap();
    assert!(first.ok);
    once_h.wait_started(1).await;
    // The process dies: the runtime and the journal handle go away.
    r.crash();
    drop(r);
    f.journal.close().await;

    let journal = f.reopen().await;
    let r2 = Runtime::recover(journal.clone(), opts).await.unwrap();
    // Same call, keys in another order: the recorded job, not a new run.
    let again = r2
        .launch("a", &t, "c", "once", json!({"b": {"y": 2, "x": 1}, "a": 1}))
        .await
        .unwrap();
    assert_eq!(again, key);
    let recorded = r2.result("a", &t, &again).await.unwrap();
    assert_eq!(recorded.value, first.value);
    assert!(recorded.ok);
    assert_eq!(once_h.calls(), 1, "the tool did not run again");
    let err = r2
        .launch("a", &t, "c", "once", json!({"a": 2}))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::CallIdCollision { .. }), "{err}");
    // A call id never recorded in that (now interrupted) turn is refused.
    let err = r2
        .launch("a", &t, "new", "once", json!({}))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::TurnNotActive { .. }), "{err}");
    let events = replay(&journal, "a").await;
    assert_eq!(count(&events, "tool.started"), 1);
    assert_eq!(count(&events, "tool.scheduled"), 1);
    assert_eq!(terminals_of(&events, "c"), ["tool.completed"]);
    r2.close().await;
}

async fn close_settles_every_pending_call(f: Fixture) {
    let (gate, mut handle) = GateTool::new("gate", false, true);
    let r = Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default()
            .tools(agent_runtime::demo::registry())
            .concurrency(1)
            .tools(ToolRegistry::new().with(gate)),
    )
    .await
    .unwrap();
    let t = r.start("a").await.unwrap();
    r.launch("a", &t, "1", "gate", json!({})).await.unwrap();
    r.launch("a", &t, "2", "gate", json!({})).await.unwrap();
    handle.wait_started(1).await;
    r.close().await;
    assert_eq!(r.jobs_in_memory(), 0);
    let err = r.start("b").await.unwrap_err();
    assert!(matches!(err, RuntimeError::Closed), "{err}");
    let events = replay(&f.journal, "a").await;
    assert_eq!(terminals_of(&events, "1"), ["tool.cancelled"]);
    assert_eq!(terminals_of(&events, "2"), ["tool.cancelled"]);
}

/// A tool value too large or too deep to journal: the call fails with the reason, the
/// journal records that failure (not nothing, which would read as interrupted after a
/// restart), and a recovered runtime returns the same outcome. One holding NUL is kept,
/// with U+FFFD in its place.
async fn an_outcome_the_journal_refuses_is_recorded_as_failed(f: Fixture) {
    let opts = RuntimeOptions::default().tools(ToolRegistry::new().with(SizedTool));
    let r = Runtime::recover(f.journal.clone(), opts.clone())
        .await
        .unwrap();
    let t = r.start("a").await.unwrap();
    let big = json!({"bytes": agent_journal::MAX_PAYLOAD_BYTES + 1});
    let deep = json!({"depth": 200});
    let small = json!({"bytes": 10});
    let binary = json!({"binary": "x"});
    let fail_binary = json!({"fail_binary": "y"});
    let mut live = Vec::new();
    for (call, args) in [
        ("big", big),
        ("deep", deep),
        ("small", small),
        ("binary", binary),
        ("fail_binary", fail_binary),
    ] {
        let key = r.launch("a", &t, call, "sized", args).await.unwrap();
        live.push((key.clone(), r.result("a", &t, &key).await.unwrap()));
    }
    for (key, result) in &live[..2] {
        assert_eq!(result.status, CallStatus::Failed, "{}", key.call_id);
        assert!(result.started);
        let error = result.error.as_deref().unwrap();
        assert!(
            error.starts_with("the tool's outcome could not be journaled: invalid payload"),
            "{error}"
        );
    }
    assert!(live[0].1.error.as_deref().unwrap().contains("limit"));
    assert!(live[1].1.error.as_deref().unwrap().contains("nest"));
    assert_eq!(live[2].1.status, CallStatus::Completed);
    // NUL, which the journal cannot store, is recorded and answered as U+FFFD, not lost.
    assert_eq!(live[3].1.status, CallStatus::Completed);
    assert_eq!(
        live[3].1.value,
        Some(json!({"out\u{FFFD}": "x\u{FFFD}end"}))
    );
    assert_eq!(live[4].1.status, CallStatus::Failed);
    assert_eq!(live[4].1.error.as_deref(), Some("y\u{FFFD}end"));
    let events = replay(&f.journal, "a").await;
    assert_eq!(terminals_of(&events, "big"), ["tool.failed"]);
    assert_eq!(terminals_of(&events, "deep"), ["tool.failed"]);
    assert_eq!(terminals_of(&events, "small"), ["tool.completed"]);
    assert_eq!(terminals_of(&events, "binary"), ["tool.completed"]);
    assert_eq!(terminals_of(&events, "fail_binary"), ["tool.failed"]);

    r.crash();
    drop(r);
    f.journal.close().await;
    let journal = f.reopen().await;
    let r2 = Runtime::recover(journal, opts).await.unwrap();
    for (key, result) in &live {
        let recorded = r2.result("a", &t, key).await.unwrap();
        assert_eq!(recorded.status, result.status, "{}", key.call_id);
        assert_eq!(recorded.error, result.error);
        assert_eq!(recorded.value, result.value);
    }
}
