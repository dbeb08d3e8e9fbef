use agent_journal::Event;
use serde_json::{Value, json};

use super::*;
use crate::run::kinds as k;
use crate::run::test_events::ev;
use agent_runtime::events as rt;

fn created() -> Value {
    json!({"prompt": "p\nsecond line", "model": "m", "workspace": "/w", "tools": [],
           "approval": "default", "budgets": {"max_steps": 5}, "owner": {"host": "h", "pid": 1}})
}

fn completed_with_call(seq: i64, step: u64, call: &str) -> Event {
    ev(
        seq,
        k::MODEL_COMPLETED,
        json!({"step": step, "response_id": "resp",
        "output": [{"type": "function_call", "call_id": call, "name": "shell", "arguments": "{}"}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                  "input_tokens_details": {"cached_tokens": 4}, "output_tokens_details": {"reasoning_tokens": 2}}}),
    )
}

#[test]
fn fold_tracks_steps_usage_and_call_lifecycle() {
    let events = vec![
        ev(1, k::RUN_CREATED, created()),
        ev(2, k::MODEL_REQUESTED, json!({"step": 1, "attempt": 1})),
        completed_with_call(3, 1, "c1"),
        ev(
            4,
            rt::TOOL_SCHEDULED,
            json!({"turn_id": "t1", "call_id": "c1"}),
        ),
        ev(
            5,
            rt::TOOL_STARTED,
            json!({"turn_id": "t1", "call_id": "c1"}),
        ),
    ];
    let mut s = RunState::from_events("r", &events);
    assert_eq!(s.title(), "p");
    assert_eq!(s.status, Some(RunStatus::Running));
    assert!(s.attempts.is_empty(), "step 1 completed: {:?}", s.attempts);
    assert_eq!(s.usage.total_tokens, 15);
    assert_eq!(s.usage.cached_tokens, 4);
    assert_eq!(s.usage.reasoning_tokens, 2);
    assert_eq!(
        s.call("c1").unwrap().progress,
        CallProgress::Scheduled {
            turn: "t1".into(),
            started: true
        }
    );
    // A second completion of the same step changes nothing (the journal's dedup key
    // prevents it; the fold does not count it twice either).
    s.apply(&completed_with_call(6, 1, "c1"));
    assert_eq!(s.steps.len(), 1);
    assert_eq!(s.usage.total_tokens, 15);
    s.apply(&ev(
        7,
        rt::TOOL_COMPLETED,
        json!({"turn_id": "t1", "call_id": "c1", "value": "out"}),
    ));
    assert_eq!(
        s.call("c1").unwrap().progress,
        CallProgress::Done(CallOutput {
            ok: true,
            text: "out".into()
        })
    );
    assert_eq!(s.last_seq, 7);
}

#[test]
fn an_interrupted_call_asks_once_and_a_denial_tells_the_model() {
    let mut s = RunState::from_events(
        "r",
        &[
            ev(1, k::RUN_CREATED, created()),
            completed_with_call(2, 1, "c1"),
            ev(
                3,
                rt::TOOL_SCHEDULED,
                json!({"turn_id": "t1", "call_id": "c1"}),
            ),
            ev(
                4,
                rt::TOOL_INTERRUPTED,
                json!({"turn_id": "t1", "call_id": "c1", "started": true}),
            ),
        ],
    );
    assert_eq!(
        s.call("c1").unwrap().progress,
        CallProgress::Interrupted {
            started: true,
            approval: None
        }
    );
    s.apply(&ev(
        5,
        k::APPROVAL_REQUESTED,
        json!({"call_id": "c1", "round": 0, "reason": "indeterminate", "args_sha256": "h"}),
    ));
    assert_eq!(
        s.call("c1").unwrap().progress,
        CallProgress::Interrupted {
            started: true,
            approval: Some(0)
        }
    );
    assert_eq!(s.pending_approvals().count(), 1);
    s.apply(&ev(
        6,
        k::APPROVAL_DECIDED,
        json!({"call_id": "c1", "round": 0, "approve": false, "reason": "no", "by": "ana"}),
    ));
    // A later decision for the same round does not override the first.
    s.apply(&ev(
        7,
        k::APPROVAL_DECIDED,
        json!({"call_id": "c1", "round": 0, "approve": true, "by": "bob"}),
    ));
    let call = s.call("c1").unwrap();
    assert!(call.pending_approval().is_none());
    assert_eq!(
        call.approvals[0].decision.as_ref().unwrap().by.as_deref(),
        Some("ana")
    );
    match &call.progress {
        CallProgress::Done(out) => {
            assert!(!out.ok);
            assert!(
                out.text.contains("unknown effect") || out.text.contains("may or may not"),
                "{}",
                out.text
            );
            assert!(out.text.contains("ana"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn approve_always_and_stop_events() {
    let mut s = RunState::from_events(
        "r",
        &[
            ev(1, k::RUN_CREATED, created()),
            completed_with_call(2, 1, "c1"),
            ev(
                3,
                k::APPROVAL_REQUESTED,
                json!({"call_id": "c1", "round": 0, "reason": "policy", "args_sha256": "h"}),
            ),
            ev(
                4,
                k::APPROVAL_DECIDED,
                json!({"call_id": "c1", "round": 0, "approve": true, "scope": "run"}),
            ),
            ev(
                5,
                k::RUN_PAUSED,
                json!({"reason": "max_steps", "detail": "d"}),
            ),
        ],
    );
    assert_eq!(s.approved_tools, vec!["shell".to_string()]);
    assert_eq!(s.status, Some(RunStatus::Paused));
    assert_eq!(s.status_detail.as_deref(), Some("max_steps"));
    assert!(s.driver.is_none());
    s.apply(&ev(
        6,
        k::RUN_RESUMED,
        json!({"owner": {"host": "h", "pid": 2}, "budgets": {"max_steps": 9}}),
    ));
    assert_eq!(s.budgets().unwrap().max_steps, 9);
    assert_eq!(s.driver.as_ref().unwrap().pid, 2);
    s.apply(&ev(7, k::RUN_COMPLETED, json!({"text": "fin"})));
    assert_eq!(s.final_text.as_deref(), Some("fin"));
    assert!(s.status.unwrap().is_final());
    // Unknown kinds and malformed payloads are ignored, not fatal.
    s.apply(&ev(8, "something.new", json!(null)));
    s.apply(&ev(9, k::APPROVAL_DECIDED, json!("garbage")));
    assert_eq!(s.last_seq, 9);
}

#[test]
fn a_long_fold_keeps_its_lists_near_their_length_and_finds_every_call() {
    let mut events = vec![ev(1, k::RUN_CREATED, created())];
    for step in 1..=200u64 {
        events.push(completed_with_call(
            step as i64 + 1,
            step,
            &format!("c{step}"),
        ));
    }
    let s = RunState::from_events("r", &events);
    assert_eq!((s.steps.len(), s.calls.len()), (200, 200));
    for list in [s.steps.capacity(), s.calls.capacity()] {
        // Doubling would hold 256.
        assert!(list <= 200 + 200 / 4 + 4, "capacity {list}");
    }
    for step in 1..=200u64 {
        assert_eq!(s.call(&format!("c{step}")).unwrap().step, step);
    }
    assert!(s.call("c0").is_none());
    // A call id the model repeats in a later step is still the first call.
    let mut again = s.clone();
    again.apply(&completed_with_call(300, 201, "c7"));
    assert_eq!(
        (again.calls.len(), again.call("c7").unwrap().step),
        (200, 7)
    );
}

#[test]
fn attempts_are_kept_until_their_step_completes() {
    let mut s = RunState::from_events(
        "r",
        &[
            ev(1, k::RUN_CREATED, created()),
            ev(2, k::MODEL_REQUESTED, json!({"step": 1, "attempt": 1})),
            ev(3, k::MODEL_REQUESTED, json!({"step": 1, "attempt": 2})),
        ],
    );
    assert_eq!(s.attempts.get(&1), Some(&2));
    s.apply(&completed_with_call(4, 1, "c1"));
    assert_eq!(s.attempts.get(&1), None);
    s.apply(&ev(5, k::MODEL_REQUESTED, json!({"step": 2, "attempt": 1})));
    assert_eq!(s.attempts.len(), 1);
    assert_eq!(s.attempts.get(&2), Some(&1));
    // A completion folded twice does not drop the next step's count.
    s.apply(&completed_with_call(6, 1, "c1"));
    assert_eq!(s.attempts.get(&2), Some(&1));
}

#[test]
fn a_fold_keeps_the_spec_it_already_holds_when_run_created_records_the_same() {
    let spec: RunSpec = serde_json::from_value(created()).unwrap();
    let held = Arc::new(spec.clone());
    let mut s = RunState::for_driving("r");
    s.spec = Some(Arc::clone(&held));
    s.apply(&ev(1, k::RUN_CREATED, created()));
    assert!(
        Arc::ptr_eq(s.spec.as_ref().unwrap(), &held),
        "one copy, shared"
    );
    assert_eq!(s.status, Some(RunStatus::Running));
    // A different spec replaces it.
    let mut other = created();
    other["model"] = json!("m2");
    s.apply(&ev(2, k::RUN_CREATED, other));
    assert_eq!(s.spec.as_ref().unwrap().model, "m2");
    assert!(!Arc::ptr_eq(s.spec.as_ref().unwrap(), &held));
}

#[test]
fn a_spec_with_the_builtin_tools_reads_back_equal_from_run_created() {
    // What `Host::start` relies on to share its spec with the fold: the spec it writes
    // into `run.created` is folded back equal.
    let dir = tempfile::tempdir().unwrap();
    let workspace = crate::tools::Workspace::new(dir.path()).unwrap();
    let (tools, _) = crate::tools::builtin(&workspace, crate::tools::ApprovalMode::Default);
    let mut spec: RunSpec = serde_json::from_value(created()).unwrap();
    spec.tools = tools;
    let written = serde_json::to_value(&spec).unwrap();
    let read: RunSpec = serde_json::from_value(written).unwrap();
    assert_eq!(read, spec);
    assert_eq!(read.tools.len(), 4);
}

#[test]
fn a_title_is_the_prompts_first_line_shortened() {
    let long = "é".repeat(TITLE_CHARS + 50);
    let mut spec = created();
    spec["prompt"] = json!(format!("{long}\nsecond line"));
    let s = RunState::from_events("r", &[ev(1, k::RUN_CREATED, spec)]);
    let title = s.title();
    assert_eq!(title.chars().count(), TITLE_CHARS + 3);
    assert!(title.ends_with("..."));
    let s = RunState::from_events("r", &[ev(1, k::RUN_CREATED, created())]);
    assert_eq!(s.title(), "p");
}

/// Many steers, each requested and then applied, fold to each steer's own end. (Found by
/// the `fold` fuzz target: the fold took 14 s here when each steer looked through all the
/// others; steers are now found by an index of their ids. Speed is the benches' to show, so
/// this test does not time it.)
#[test]
fn many_steers_fold_each_to_its_own_end() {
    let n: i64 = 40_000;
    let mut events = Vec::new();
    for i in 0..n {
        events.push(ev(
            i + 1,
            k::STEER_REQUESTED,
            json!({"id": format!("s{i}"), "text": "t"}),
        ));
    }
    for i in 0..n {
        events.push(ev(
            n + i + 1,
            k::STEER_APPLIED,
            json!({"id": format!("s{i}"), "step": i + 1}),
        ));
    }
    // A repeated request and a second end change nothing.
    events.push(ev(
        2 * n + 1,
        k::STEER_REQUESTED,
        json!({"id": "s0", "text": "again"}),
    ));
    events.push(ev(
        2 * n + 2,
        k::STEER_DROPPED,
        json!({"id": "s0", "reason": "late"}),
    ));
    let state = RunState::from_events("r", &events);
    assert_eq!(state.steers.len() as i64, n);
    assert_eq!(state.steers[0].text, "t");
    assert_eq!(state.steers[0].status, SteerStatus::Applied { step: 1 });
    assert_eq!(state.pending_steers().count(), 0);
}

/// Many rejected answers and many sub-agents, each spawned and ended, fold to one count
/// per step and one end per child. (The fold took 21 s here when each looked through all
/// the others; not timed here, see above.)
#[test]
fn many_rejections_and_children_fold_each_once() {
    let n: i64 = 40_000;
    let mut events = Vec::new();
    for i in 0..n {
        events.push(ev(
            3 * i + 1,
            k::OUTPUT_REJECTED,
            json!({"step": i + 1, "retry": 1, "errors": ["e"]}),
        ));
        events.push(ev(
            3 * i + 2,
            k::SUBAGENT_SPAWNED,
            json!({"call_id": "c", "index": 0, "child_run_id": format!("kid{i}")}),
        ));
        events.push(ev(
            3 * i + 3,
            k::SUBAGENT_ENDED,
            json!({"call_id": "c", "index": 0, "child_run_id": format!("kid{i}"),
                   "status": "completed", "usage": {"input_tokens": 1, "cached_tokens": 0,
                   "output_tokens": 0, "reasoning_tokens": 0, "total_tokens": 1}}),
        ));
    }
    // A repeated rejection of a step is not counted again.
    events.push(ev(
        3 * n + 1,
        k::OUTPUT_REJECTED,
        json!({"step": 1, "errors": ["again"]}),
    ));
    let state = RunState::from_events("r", &events);
    assert_eq!(state.output_retries_used(), n as u64);
    assert!(state.rejected(1) && state.rejected(n as u64) && !state.rejected(n as u64 + 1));
    assert_eq!(state.children.len() as i64, n);
    assert!(state.children.iter().all(|c| c.ended.is_some()));
    assert_eq!(state.usage.total_tokens, n as u64);
}

/// An interrupt asked of a queued run whose lease a worker already held (so it could not
/// withdraw the run from the queue) is kept by that worker's claim, a resume with a lease
/// epoch, which then stops at its first step boundary; a person's `resume` (no epoch) is a
/// decision to go on and clears it.
#[test]
fn a_workers_claim_of_a_queued_run_keeps_an_interrupt_asked_before_it() {
    let mut spec = created();
    spec["submitted"] = json!(true);
    let events = [
        ev(1, k::RUN_CREATED, spec),
        ev(2, k::INTERRUPT_REQUESTED, json!({"by": "someone"})),
    ];
    let queued = RunState::from_events("r", &events);
    assert_eq!(queued.status, Some(RunStatus::Queued));
    assert_eq!(queued.interrupt_requested(), Some(2));
    let mut claimed = queued.clone();
    claimed.apply(&ev(
        3,
        k::RUN_RESUMED,
        json!({"owner": {"host": "h", "pid": 2}, "after_seq": 2, "epoch": 2}),
    ));
    assert_eq!(claimed.status, Some(RunStatus::Running));
    assert_eq!(claimed.interrupt_requested(), Some(2));
    let mut resumed = queued;
    resumed.apply(&ev(
        3,
        k::RUN_RESUMED,
        json!({"owner": {"host": "h", "pid": 2}, "after_seq": 2}),
    ));
    assert_eq!(resumed.interrupt_requested(), None);
}

/// A tool approved for the rest of the run under one sandbox is asked for again once the
/// run goes to a weaker one (`resume --sandbox off`), and stays approved under a stricter
/// one.
#[test]
fn a_weaker_sandbox_forgets_the_tools_approved_for_the_run() {
    let folded = |to: &str| {
        let mut created = created();
        created["sandbox"] = json!({"mode": "workspace-write"});
        RunState::from_events(
            "r",
            &[
                ev(1, k::RUN_CREATED, created),
                completed_with_call(2, 1, "c1"),
                ev(
                    3,
                    k::APPROVAL_REQUESTED,
                    json!({"call_id": "c1", "round": 0, "reason": "policy", "args_sha256": "h"}),
                ),
                ev(
                    4,
                    k::APPROVAL_DECIDED,
                    json!({"call_id": "c1", "round": 0, "approve": true, "scope": "run"}),
                ),
                ev(
                    5,
                    k::RUN_SANDBOX_CHANGED,
                    json!({"from": "workspace-write", "sandbox": {"mode": to}, "cause": "flag",
                           "policies": {"shell": "ask"}}),
                ),
            ],
        )
    };
    let off = folded("off");
    assert_eq!(
        off.spec.as_ref().unwrap().sandbox.mode,
        crate::sandbox::Mode::Off
    );
    assert!(off.approved_tools.is_empty(), "{:?}", off.approved_tools);
    let stricter = folded("read-only");
    assert_eq!(stricter.approved_tools, vec!["shell".to_string()]);
}
