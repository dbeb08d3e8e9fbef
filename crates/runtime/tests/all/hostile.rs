//! Hostile inputs through the public API: tools that panic, journals whose last events
//! were duplicated, odd ids. Each case once broke a contract: no panic reaches the caller,
//! every scheduled call gets one terminal event, a call runs at most once per key.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_journal::NewEvent;
use agent_runtime::{
    CallStatus, CheckpointTurn, JobKey, Runtime, RuntimeError, RuntimeOptions, RuntimeTurnStatus,
    ThreadCheckpoint, Tool, ToolContext, ToolFailure, ToolRegistry,
};
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::common::{GateHandle, GateTool, count, replay, terminals_of};
use crate::support::{self, Fixture};

agent_testkit::backend_tests!(
    support,
    [sqlite, postgres]:
    a_panicking_tool_fails_its_call_and_leaves_memory,
    duplicated_last_events_are_recovered_once,
    a_panicking_argument_check_refuses_the_launch,
    a_closed_or_abandoned_runtime_journals_no_turn_operation,
    adopting_from_a_checkpoint_with_nothing_after_it_interrupts_the_open_turn,
    a_checkpoint_naming_a_running_turn_is_adopted_as_open,
    record_refuses_the_runtime_s_own_kinds,
    a_concurrency_beyond_what_a_semaphore_holds_is_no_limit,
    recovery_reruns_only_calls_whose_arguments_the_tool_still_takes,
    a_launch_future_kept_but_not_polled_does_not_block_the_turn_end,
    a_launch_future_dropped_after_the_turn_end_took_it_over_leaves_nothing,
    a_launch_future_kept_but_not_polled_does_not_block_close,
    a_commit_future_kept_but_not_polled_does_not_block_its_thread,
    a_tool_future_that_panics_when_dropped_still_ends_its_call,
);

/// A generous guard against a hang: no timing is asserted, only that the test ends.
async fn guard<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .expect("hung")
}

/// A tool that panics: in `call` itself (`{"sync": true}`) or in its future, or in its
/// argument check (`{"validate": true}`).
#[derive(Clone, Default)]
struct PanicTool {
    calls: Arc<AtomicUsize>,
}

impl Tool for PanicTool {
    fn name(&self) -> &str {
        "panic"
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        if args["validate"] == true {
            panic!("argument check panicked");
        }
        Ok(())
    }

    fn call(
        &self,
        args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if args["sync"] == true {
            panic!("tool panicked before returning its future");
        }
        Box::pin(async move {
            tokio::task::yield_now().await;
            panic!("tool panicked while running");
        })
    }
}

async fn a_panicking_tool_fails_its_call_and_leaves_memory(f: Fixture) {
    let tool = PanicTool::default();
    let calls = Arc::clone(&tool.calls);
    let r = Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default().tools(ToolRegistry::new().with(tool)),
    )
    .await
    .unwrap();
    let t = r.start("a").await.unwrap();
    for (call, args) in [("async", json!({})), ("sync", json!({"sync": true}))] {
        let key = r
            .launch("a", &t, call, "panic", args.clone())
            .await
            .unwrap();
        let result = guard(r.result("a", &t, &key)).await.unwrap();
        assert_eq!(result.status, CallStatus::Failed, "{call}");
        assert!(result.started);
        assert!(
            result.error.as_deref().unwrap().contains("panicked"),
            "{result:?}"
        );
        // The same key again is the same call: its recorded failure, not a second run.
        let again = r.launch("a", &t, call, "panic", args).await.unwrap();
        assert_eq!(guard(r.result("a", &t, &again)).await.unwrap(), result);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(r.jobs_in_memory(), 0);
    assert!(r.checkpoint("a").is_some());
    guard(r.finish("a", &t)).await.unwrap();
    let events = replay(&f.journal, "a").await;
    assert_eq!(terminals_of(&events, "async"), ["tool.failed"]);
    assert_eq!(terminals_of(&events, "sync"), ["tool.failed"]);
    r.close().await;
}

/// The events of a call as the runtime writes them, without their dedup keys: what a
/// journal copied twice (a replayed import, a retried replication) holds.
fn scheduled(turn: &str, call: &str, name: &str) -> NewEvent {
    NewEvent::new(
        "dup",
        "tool.scheduled",
        json!({
            "turn_id": turn, "call_id": call, "name": name, "args": {},
            "signature": agent_runtime::signature(name, &json!({})), "revision": 0,
        }),
    )
}

async fn duplicated_last_events_are_recovered_once(f: Fixture) {
    let turn_started = || NewEvent::new("dup", "turn.started", json!({"turn_id": "T"}));
    let j = &f.journal;
    j.append(turn_started()).await.unwrap();
    // A retry-safe call that completed, then its scheduled event again.
    j.append(scheduled("T", "done", "safe")).await.unwrap();
    j.append(NewEvent::new(
        "dup",
        "tool.completed",
        json!({"turn_id": "T", "call_id": "done", "revision": 0, "started": true, "value": 1}),
    ))
    .await
    .unwrap();
    j.append(scheduled("T", "done", "safe")).await.unwrap();
    // An unfinished call, scheduled twice; then the turn's start twice.
    j.append(scheduled("T", "open", "gate")).await.unwrap();
    j.append(scheduled("T", "open", "gate")).await.unwrap();
    j.append(turn_started()).await.unwrap();
    j.append(turn_started()).await.unwrap();

    let (safe, safe_handle) = GateTool::new("safe", true, true);
    safe_handle.open();
    let (gate, _gate_handle) = GateTool::new("gate", false, true);
    let r = guard(Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default().tools(ToolRegistry::new().with(safe).with(gate)),
    ))
    .await
    .unwrap();
    let report = r.recovery_report();
    assert_eq!(report.calls_retried, 0, "{report:?}");
    assert_eq!(report.calls_interrupted, 1, "{report:?}");
    assert_eq!(report.turns_interrupted, 1, "{report:?}");
    r.close().await;
    assert_eq!(safe_handle.calls(), 0);
    let events = replay(&f.journal, "dup").await;
    assert_eq!(terminals_of(&events, "done"), ["tool.completed"]);
    assert_eq!(terminals_of(&events, "open"), ["tool.interrupted"]);
    assert_eq!(count(&events, "turn.interrupted"), 1);
}

async fn a_panicking_argument_check_refuses_the_launch(f: Fixture) {
    let tool = PanicTool::default();
    let calls = Arc::clone(&tool.calls);
    let r = Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default().tools(ToolRegistry::new().with(tool)),
    )
    .await
    .unwrap();
    let t = r.start("a").await.unwrap();
    let err = r
        .launch("a", &t, "v", "panic", json!({"validate": true}))
        .await
        .unwrap_err();
    match err {
        agent_runtime::RuntimeError::InvalidArgs { tool, reason } => {
            assert_eq!(tool, "panic");
            assert!(reason.contains("argument check panicked"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(r.jobs_in_memory(), 0);
    guard(r.finish("a", &t)).await.unwrap();
    assert_eq!(count(&replay(&f.journal, "a").await, "tool.scheduled"), 0);
    r.close().await;
}

fn closed<T: std::fmt::Debug>(r: Result<T, agent_runtime::RuntimeError>) {
    assert!(
        matches!(r, Err(agent_runtime::RuntimeError::Closed)),
        "{r:?}"
    );
}

/// After `abandon` another process may adopt the thread (ending the turn there): a late
/// steer, commit or finish of the old runtime must not be journaled into the ended turn,
/// nor a finish be acknowledged as completed when the journal says interrupted.
async fn a_closed_or_abandoned_runtime_journals_no_turn_operation(f: Fixture) {
    let r = Runtime::recover(f.journal.clone(), RuntimeOptions::default())
        .await
        .unwrap();
    let t = r.start("a").await.unwrap();
    r.abandon();
    let other = Runtime::open(f.journal.clone(), RuntimeOptions::default());
    assert_eq!(other.adopt("a").await.unwrap().turns_interrupted, 1);
    let before = replay(&f.journal, "a").await.len();
    closed(r.steer("a", &t, "late").await);
    closed(r.commit("a", &t, 0, json!("late")).await);
    closed(r.commit("a", &t, 1, json!("late")).await);
    closed(guard(r.finish("a", &t)).await);
    closed(guard(r.cancel("a", &t)).await);
    let events = replay(&f.journal, "a").await;
    assert_eq!(events.len(), before, "{:?}", crate::common::kinds(&events));

    // The same after an orderly close.
    let t = other.start("b").await.unwrap();
    other.close().await;
    closed(other.steer("b", &t, "late").await);
    closed(other.commit("b", &t, 0, json!("late")).await);
    closed(guard(other.finish("b", &t)).await);
    assert_eq!(
        crate::common::kinds(&replay(&f.journal, "b").await),
        ["turn.started"]
    );
}

/// A checkpoint taken while the turn ran (`ended: None`), then the process died with
/// nothing written after it: adopting from it must interrupt the turn. The terminal append
/// expected the thread to be empty (no event read after the checkpoint) and conflicted on
/// every attempt.
async fn adopting_from_a_checkpoint_with_nothing_after_it_interrupts_the_open_turn(f: Fixture) {
    let r = Runtime::recover(f.journal.clone(), RuntimeOptions::default())
        .await
        .unwrap();
    let t = r.start("a").await.unwrap();
    let checkpoint = r.checkpoint("a").unwrap();
    let seq = f.journal.last_seq("a").await.unwrap().unwrap();
    r.abandon();
    let other = Runtime::open(f.journal.clone(), RuntimeOptions::default());
    let report = guard(other.adopt_after("a", checkpoint, seq, Vec::new()))
        .await
        .unwrap();
    assert_eq!(report.turns_interrupted, 1);
    assert_eq!(
        other.turn_status("a"),
        Some((t, 0, RuntimeTurnStatus::Interrupted))
    );
    assert!(other.start("a").await.is_ok());
    other.close().await;
    let events = replay(&f.journal, "a").await;
    assert_eq!(
        crate::common::kinds(&events),
        ["turn.started", "turn.interrupted", "turn.started"]
    );
}

/// `checkpoint` writes an open turn as `ended: None`; a stored one that says `running`
/// (hand-made, or edited) must not make the adopting runtime drive a turn it never
/// started, with no `turn.interrupted` for it.
async fn a_checkpoint_naming_a_running_turn_is_adopted_as_open(f: Fixture) {
    let r = Runtime::recover(f.journal.clone(), RuntimeOptions::default())
        .await
        .unwrap();
    let t = r.start("a").await.unwrap();
    let seq = f.journal.last_seq("a").await.unwrap().unwrap();
    r.abandon();
    for status in [RuntimeTurnStatus::Running, RuntimeTurnStatus::Ending] {
        let other = Runtime::open(f.journal.clone(), RuntimeOptions::default());
        let checkpoint = ThreadCheckpoint {
            turn: Some(CheckpointTurn {
                id: t.clone(),
                revision: 0,
                ended: Some(status),
            }),
        };
        other
            .adopt_after("a", checkpoint, seq, Vec::new())
            .await
            .unwrap();
        assert_eq!(other.running_turn("a"), None, "{status:?}");
        assert_eq!(
            other.turn_status("a").map(|(_, _, s)| s),
            Some(RuntimeTurnStatus::Interrupted)
        );
        not_active(other.steer("a", &t, "late").await);
        other.close().await;
    }
    let events = replay(&f.journal, "a").await;
    assert_eq!(
        crate::common::kinds(&events),
        ["turn.started", "turn.interrupted"]
    );
}

fn not_active<T: std::fmt::Debug>(r: Result<T, agent_runtime::RuntimeError>) {
    assert!(
        matches!(r, Err(agent_runtime::RuntimeError::TurnNotActive { .. })),
        "{r:?}"
    );
}

/// `record` is for the host's own events. A `turn.started` without its turn id recorded
/// through it made every later recovery of the journal fail (`CorruptEvent`); a recorded
/// `proposal.committed` skipped the revision fence of `commit`.
async fn record_refuses_the_runtime_s_own_kinds(f: Fixture) {
    let r = Runtime::recover(f.journal.clone(), RuntimeOptions::default())
        .await
        .unwrap();
    let t = r.start("a").await.unwrap();
    r.steer("a", &t, "new input").await.unwrap();
    for kind in agent_runtime::events::RUNTIME_KINDS {
        let err = r.record("a", kind, json!({})).await.unwrap_err();
        assert!(
            matches!(&err, agent_runtime::RuntimeError::ReservedKind(k) if k == kind),
            "{err:?}"
        );
    }
    let stale = json!({"turn_id": t, "revision": 0, "proposal": "stale"});
    assert!(r.record("a", "proposal.committed", stale).await.is_err());
    r.record("a", "independent.work", json!({"turn_id": t}))
        .await
        .unwrap();
    r.crash();
    let events = replay(&f.journal, "a").await;
    assert_eq!(
        crate::common::kinds(&events),
        ["turn.started", "steer.accepted", "independent.work"]
    );
    let again = Runtime::recover(f.journal.clone(), RuntimeOptions::default())
        .await
        .unwrap();
    assert_eq!(again.recovery_report().turns_interrupted, 1);
    again.close().await;
}

/// `concurrency(usize::MAX)` reads as "no limit"; tokio's semaphore panics above its
/// `MAX_PERMITS`, and `open`/`recover` panicked with it.
async fn a_concurrency_beyond_what_a_semaphore_holds_is_no_limit(f: Fixture) {
    let tool = PanicTool::default();
    let options = RuntimeOptions::default()
        .concurrency(usize::MAX)
        .tools(ToolRegistry::new().with(tool));
    let r = Runtime::recover(f.journal.clone(), options).await.unwrap();
    let t = r.start("a").await.unwrap();
    let key = r.launch("a", &t, "c", "panic", json!({})).await.unwrap();
    assert_eq!(
        guard(r.result("a", &t, &key)).await.unwrap().status,
        CallStatus::Failed
    );
    r.close().await;
}

/// Recovery re-runs an unfinished retry-safe call with its journaled arguments. Arguments
/// the tool no longer takes (it changed its check since, or the event was written by
/// someone else) were passed to it unchecked; such a call is interrupted instead.
async fn recovery_reruns_only_calls_whose_arguments_the_tool_still_takes(f: Fixture) {
    let t = "T";
    f.journal
        .append(NewEvent::new("r", "turn.started", json!({"turn_id": t})))
        .await
        .unwrap();
    for (call, args) in [("valid", json!({})), ("invalid", json!("not an object"))] {
        let payload = json!({
            "turn_id": t, "call_id": call, "name": "safe", "args": args,
            "signature": agent_runtime::signature("safe", &args), "revision": 0,
        });
        f.journal
            .append(NewEvent::new("r", "tool.scheduled", payload))
            .await
            .unwrap();
    }
    let (safe, mut handle) = GateTool::new("safe", true, true);
    handle.open();
    let r = Runtime::recover(
        f.journal.clone(),
        RuntimeOptions::default().tools(ToolRegistry::new().with(safe)),
    )
    .await
    .unwrap();
    let report = r.recovery_report();
    assert_eq!(report.calls_retried, 1, "{report:?}");
    assert_eq!(report.calls_interrupted, 1, "{report:?}");
    assert_eq!(report.interrupted[0].call_id, "invalid");
    assert_eq!(guard(handle.wait_started(1)).await, ["valid"]);
    // The re-run call ends before the runtime closes: closing cancels what still runs (a
    // CI run closed it between the call's start and its end, `tool.cancelled`).
    guard(async {
        while terminals_of(&replay(&f.journal, "r").await, "valid").is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    r.close().await;
    assert_eq!(handle.calls(), 1);
    let events = replay(&f.journal, "r").await;
    assert_eq!(terminals_of(&events, "valid"), ["tool.completed"]);
    assert_eq!(terminals_of(&events, "invalid"), ["tool.interrupted"]);
}

/// A launch polled once and then kept: its call admitted, its `tool.scheduled` handed to
/// the journal and not answered yet.
struct InFlight {
    runtime: Runtime,
    gate: GateHandle,
    thread: String,
    turn: String,
    launch: Pin<Box<dyn Future<Output = Result<JobKey, RuntimeError>> + Send>>,
}

/// Launches call `c` of a gate tool in a turn of a fresh thread and polls it once, until a
/// launch is left in flight. A journal may answer within that one poll (PostgreSQL's direct
/// write sometimes does): that attempt's turn is cancelled and another thread tried.
async fn launch_in_flight(f: &Fixture) -> InFlight {
    for attempt in 0..50 {
        let (tool, gate) = GateTool::new("gate", false, true);
        let runtime = Runtime::recover(
            f.journal.clone(),
            RuntimeOptions::default().tools(ToolRegistry::new().with(tool)),
        )
        .await
        .unwrap();
        let thread = format!("a{attempt}");
        let turn = runtime.start(&thread).await.unwrap();
        let (r, th, tu) = (runtime.clone(), thread.clone(), turn.clone());
        let mut launch: Pin<Box<dyn Future<Output = _> + Send>> =
            Box::pin(async move { r.launch(&th, &tu, "c", "gate", json!({})).await });
        if futures::poll!(&mut launch).is_pending() {
            return InFlight {
                runtime,
                gate,
                thread,
                turn,
                launch,
            };
        }
        guard(runtime.cancel(&thread, &turn)).await.unwrap();
        runtime.close().await;
    }
    panic!("the journal answered every launch within its first poll");
}

/// A caller that keeps a launch future it no longer polls (pinned outside a `select!`
/// whose other branch cancels the turn) must not block the turn's end: `cancel` waited for
/// the call to settle, and the call's scheduling lived in that future.
async fn a_launch_future_kept_but_not_polled_does_not_block_the_turn_end(f: Fixture) {
    cancel_beside_a_kept_launch(&f, true).await;
}

/// The turn's end takes the scheduling over from the launch future; dropping that future
/// afterwards, never polled again, changes nothing.
async fn a_launch_future_dropped_after_the_turn_end_took_it_over_leaves_nothing(f: Fixture) {
    cancel_beside_a_kept_launch(&f, false).await;
}

/// Cancels the turn of a launch kept in flight, then polls the launch again (`poll_again`)
/// or drops it: either way the call ends cancelled, once, its tool never run and no entry
/// left.
async fn cancel_beside_a_kept_launch(f: &Fixture, poll_again: bool) {
    let InFlight {
        runtime: r,
        gate,
        thread,
        turn: t,
        launch,
    } = launch_in_flight(f).await;
    guard(r.cancel(&thread, &t)).await.unwrap();
    if poll_again {
        // The launch, polled again, answers for the cancelled call.
        let key = guard(launch).await.unwrap();
        let result = guard(r.result(&thread, &t, &key)).await.unwrap();
        assert_eq!(result.status, CallStatus::Cancelled);
    } else {
        drop(launch);
    }
    assert_eq!(gate.calls(), 0);
    assert_eq!(r.jobs_in_memory(), 0);
    r.close().await;
    let events = replay(&f.journal, &thread).await;
    assert_eq!(terminals_of(&events, "c"), ["tool.cancelled"]);
    assert_eq!(
        crate::common::kinds(&events).last(),
        Some(&"turn.cancelled")
    );
}

/// `close` waits for every call to settle; a launch future kept but not polled held its
/// call's scheduling. Once closed, the launch answers `Closed` and nothing runs.
async fn a_launch_future_kept_but_not_polled_does_not_block_close(f: Fixture) {
    let InFlight {
        runtime: r,
        gate,
        launch,
        ..
    } = launch_in_flight(&f).await;
    guard(r.close()).await;
    let answer = guard(launch).await;
    assert!(matches!(answer, Err(RuntimeError::Closed)), "{answer:?}");
    assert_eq!(r.jobs_in_memory(), 0);
    assert_eq!(gate.calls(), 0);
}

/// The same for `commit`: one polled once (holding the thread's turn lock, or queued for
/// it) and then kept without being polled blocked every later steer, commit and end of its
/// thread.
async fn a_commit_future_kept_but_not_polled_does_not_block_its_thread(f: Fixture) {
    let r = Runtime::recover(f.journal.clone(), RuntimeOptions::default())
        .await
        .unwrap();
    let t = r.start("a").await.unwrap();
    let commit = r.commit("a", &t, 0, json!("plan"));
    tokio::pin!(commit);
    assert!(futures::poll!(&mut commit).is_pending());
    assert_eq!(guard(r.steer("a", &t, "new input")).await.unwrap(), 1);
    guard(r.finish("a", &t)).await.unwrap();
    // Polled again, the commit answers: it was recorded at revision 0, before the steer.
    let seq = guard(commit).await.unwrap();
    let events = replay(&f.journal, "a").await;
    assert_eq!(
        crate::common::kinds(&events),
        [
            "turn.started",
            "proposal.committed",
            "steer.accepted",
            "turn.completed"
        ]
    );
    assert_eq!(events[1].seq, seq);
    r.close().await;
}

/// A turn's end that could not be journaled left the turn `Completed` in memory, so a new
/// turn could start on the thread after a turn the journal still showed open. Now the turn
/// stays `Ending` (no new turn, no steer), and a later `finish` writes the one end event.
/// SQLite only: another connection holding the write lock past `busy_timeout` fails an
/// append without latching the writer, so the retry can succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_turn_end_the_journal_refused_keeps_the_turn_ending_until_written() {
    let f = support::sqlite_with(agent_journal::JournalOptions {
        busy_timeout: Duration::from_millis(50),
        ..Default::default()
    })
    .await;
    let r = Runtime::recover(f.journal.clone(), RuntimeOptions::default())
        .await
        .unwrap();
    let t = r.start("a").await.unwrap();
    let lock = rusqlite::Connection::open(f.url.strip_prefix("sqlite://").unwrap()).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();

    let refused = guard(r.finish("a", &t)).await;
    assert!(
        matches!(refused, Err(RuntimeError::Journal(_))),
        "{refused:?}"
    );
    assert!(
        matches!(r.turn_status("a"), Some((id, _, RuntimeTurnStatus::Ending)) if id == t),
        "{:?}",
        r.turn_status("a")
    );
    // Nothing may follow a turn the journal still shows open.
    let second = guard(r.start("a")).await;
    assert!(
        matches!(&second, Err(RuntimeError::TurnActive { turn, .. }) if *turn == t),
        "{second:?}"
    );
    let steer = r.steer("a", &t, "late").await;
    assert!(
        matches!(steer, Err(RuntimeError::TurnNotActive { .. })),
        "{steer:?}"
    );

    lock.execute_batch("ROLLBACK").unwrap();
    guard(r.finish("a", &t)).await.unwrap();
    assert!(matches!(
        r.turn_status("a"),
        Some((_, _, RuntimeTurnStatus::Completed))
    ));
    // Ended once: a third end is refused, and the next turn starts.
    let again = guard(r.cancel("a", &t)).await;
    assert!(
        matches!(again, Err(RuntimeError::TurnNotActive { .. })),
        "{again:?}"
    );
    let next = guard(r.start("a")).await.unwrap();
    assert_ne!(next, t);
    let events = replay(&f.journal, "a").await;
    assert_eq!(
        crate::common::kinds(&events),
        ["turn.started", "turn.completed", "turn.started"]
    );

    // Meanwhile another process took the thread over and interrupted the turn: the retry
    // finds that end (the same dedup key) and the turn is what the journal says.
    let t = r.start("b").await.unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    assert!(guard(r.finish("b", &t)).await.is_err());
    lock.execute_batch("ROLLBACK").unwrap();
    let other = Runtime::open(f.journal.clone(), RuntimeOptions::default());
    assert_eq!(other.adopt("b").await.unwrap().turns_interrupted, 1);
    guard(r.finish("b", &t)).await.unwrap();
    assert!(
        matches!(
            r.turn_status("b"),
            Some((_, _, RuntimeTurnStatus::Interrupted))
        ),
        "{:?}",
        r.turn_status("b")
    );
    let events = replay(&f.journal, "b").await;
    assert_eq!(
        crate::common::kinds(&events),
        ["turn.started", "turn.interrupted"]
    );
}

/// A tool whose future ignores cancellation and panics in its destructor.
struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("the tool's future panicked when dropped");
    }
}

/// Its futures say when they first run (`polled`).
#[derive(Clone, Default)]
struct StubbornTool {
    polled: Arc<tokio::sync::Notify>,
}

impl Tool for StubbornTool {
    fn name(&self) -> &str {
        "stubborn"
    }

    fn validate(&self, _args: &Value) -> Result<(), String> {
        Ok(())
    }

    fn call(
        &self,
        _args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        let polled = Arc::clone(&self.polled);
        Box::pin(async move {
            let _guard = PanicOnDrop;
            polled.notify_one();
            std::future::pending::<()>().await;
            Ok(Value::Null)
        })
    }
}

/// The job task dropped such a future after its deadline, or after the grace period of a
/// cancel, and the panic ended the task before it wrote the call's terminal event: a timed
/// out call never got its result (nothing else ends it before the turn does).
async fn a_tool_future_that_panics_when_dropped_still_ends_its_call(f: Fixture) {
    // A runtime with only that tool, and a turn started on it.
    let tool = StubbornTool::default();
    let start = |deadlines: agent_runtime::Deadlines| {
        let journal = f.journal.clone();
        let tool = tool.clone();
        async move {
            let r = Runtime::recover(
                journal,
                RuntimeOptions::default()
                    .tools(ToolRegistry::new().with(tool))
                    .deadlines(deadlines)
                    .cancel_grace(Duration::from_millis(50)),
            )
            .await
            .unwrap();
            let t = r.start("a").await.unwrap();
            (r, t)
        }
    };
    // Timed out: the future is dropped at its deadline.
    let (r, t) = start(agent_runtime::Deadlines::run(Duration::from_millis(50))).await;
    let key = r
        .launch("a", &t, "late", "stubborn", json!({}))
        .await
        .unwrap();
    guard(tool.polled.notified()).await;
    let result = guard(r.result("a", &t, &key)).await.unwrap();
    assert_eq!(result.status, CallStatus::Timeout, "{result:?}");
    assert_eq!(r.jobs_in_memory(), 0);
    guard(r.finish("a", &t)).await.unwrap();

    // Cancelled by the turn's end: the future is dropped after the grace period.
    let (r, t) = start(agent_runtime::Deadlines::none()).await;
    let key = r
        .launch("a", &t, "stuck", "stubborn", json!({}))
        .await
        .unwrap();
    // Its future exists (a call cancelled before it starts never makes one).
    guard(tool.polled.notified()).await;
    guard(r.cancel("a", &t)).await.unwrap();
    let result = guard(r.result("a", &t, &key)).await.unwrap();
    assert_eq!(result.status, CallStatus::Cancelled, "{result:?}");
    assert_eq!(r.jobs_in_memory(), 0);
    let events = replay(&f.journal, "a").await;
    assert_eq!(terminals_of(&events, "late"), ["tool.timeout"]);
    assert_eq!(terminals_of(&events, "stuck"), ["tool.cancelled"]);
    r.close().await;
}
