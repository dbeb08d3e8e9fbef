use agent_journal::Event;
use agent_runtime::events as rt;
use agent_runtime::{CheckpointTurn, ThreadCheckpoint};
use serde_json::{Value, json};

use super::*;
use crate::run::kinds as k;
use crate::run::step_request::build_request;
use crate::run::test_events::ev;

fn runtime() -> ThreadCheckpoint {
    ThreadCheckpoint {
        turn: Some(CheckpointTurn {
            id: "t1".into(),
            revision: 1,
            ended: None,
        }),
    }
}

/// A step whose output is a message and a call, the call's lifecycle, and its result.
fn step(seq: &mut i64, step: u64, call: &str) -> Vec<Event> {
    let mut next = |kind: &str, payload: Value| {
        *seq += 1;
        ev(*seq, kind, payload)
    };
    vec![
        next(k::MODEL_REQUESTED, json!({"step": step, "attempt": 1})),
        next(
            k::MODEL_COMPLETED,
            json!({"step": step, "response_id": format!("resp{step}"),
                   "output": [
                       {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": format!("step {step}")}]},
                       {"type": "function_call", "call_id": call, "name": "shell", "arguments": "{\"cmd\":\"ls\"}"}],
                   "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}),
        ),
        next(
            rt::TOOL_SCHEDULED,
            json!({"turn_id": "t1", "call_id": call}),
        ),
        next(rt::TOOL_STARTED, json!({"turn_id": "t1", "call_id": call})),
        next(
            rt::TOOL_COMPLETED,
            json!({"turn_id": "t1", "call_id": call, "value": format!("out of {call}")}),
        ),
    ]
}

/// A run of three steps with a steer, then a compaction before step 4 (with the checkpoint
/// a driving host would write), then two more steps and a pending steer.
fn run_with_checkpoint() -> (Vec<Event>, usize) {
    let mut seq = 0;
    let mut events = vec![ev(
        1,
        k::RUN_CREATED,
        json!({"prompt": "do it", "model": "m", "workspace": "/w", "tools": [],
               "approval": "default", "budgets": {"max_steps": 50}, "compact_at": 5,
               "owner": {"host": "h", "pid": 1}}),
    )];
    seq += 1;
    events.extend(step(&mut seq, 1, "c1"));
    // A sub-agent of step 1's call: the checkpoint keeps it (and what of it was counted).
    seq += 1;
    events.push(ev(
        seq,
        k::SUBAGENT_SPAWNED,
        json!({"call_id": "c1", "index": 0, "child_run_id": "kid", "prompt": "p"}),
    ));
    seq += 1;
    events.push(ev(
        seq,
        k::SUBAGENT_ENDED,
        json!({"call_id": "c1", "index": 0, "child_run_id": "kid", "status": "paused",
               "error": "paused", "usage": {"input_tokens": 7, "cached_tokens": 0,
               "output_tokens": 0, "reasoning_tokens": 0, "total_tokens": 7}, "child_seq": 3}),
    ));
    seq += 1;
    events.push(ev(
        seq,
        k::STEER_REQUESTED,
        json!({"id": "s1", "text": "use tabs"}),
    ));
    seq += 1;
    events.push(ev(seq, k::STEER_APPLIED, json!({"id": "s1", "step": 2})));
    events.extend(step(&mut seq, 2, "c2"));
    events.extend(step(&mut seq, 3, "c3"));
    let driving = RunState::from_events("r", &events);
    let checkpoint = take(&driving, 4, Some(runtime())).expect("every call is answered");
    seq += 1;
    let at = events.len();
    events.push(ev(
        seq,
        k::CONTEXT_COMPACTED,
        json!({"step": 4, "output": [{"type": "compaction", "encrypted_content": "e"}],
               "covered_steers": ["s1"], "checkpoint": checkpoint}),
    ));
    events.extend(step(&mut seq, 4, "c4"));
    events.extend(step(&mut seq, 5, "c5"));
    seq += 1;
    events.push(ev(
        seq,
        k::STEER_REQUESTED,
        json!({"id": "s2", "text": "stop soon"}),
    ));
    (events, at)
}

fn driving_fold(events: &[Event]) -> RunState {
    let mut state = RunState::for_driving("r");
    for e in events {
        state.apply(e);
    }
    state
}

#[test]
fn a_resume_from_the_checkpoint_reaches_the_driving_hosts_fold() {
    let (events, at) = run_with_checkpoint();
    let live = driving_fold(&events);
    let (mut resumed, rt) = RunState::from_checkpoint("r", &events[at]).unwrap();
    assert_eq!(rt, runtime());
    for e in &events[at + 1..] {
        resumed.apply(e);
    }
    assert_eq!(resumed, live);
    assert_eq!(
        resumed.children.len(),
        1,
        "the sub-agents ride in the checkpoint"
    );
    assert_eq!(resumed.children[0].usage.total_tokens, 7);
    // Right at the checkpoint too.
    assert_eq!(
        RunState::from_checkpoint("r", &events[at]).unwrap().0,
        driving_fold(&events[..=at])
    );
}

#[test]
fn the_driving_fold_holds_only_what_follows_the_checkpoint_and_counts_the_rest() {
    let (events, _) = run_with_checkpoint();
    let live = driving_fold(&events);
    let whole = RunState::from_events("r", &events);
    assert_eq!(
        live.steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        [4, 5]
    );
    assert_eq!(
        live.calls
            .iter()
            .map(|c| c.call_id.as_str())
            .collect::<Vec<_>>(),
        ["c4", "c5"]
    );
    assert!(live.call("c1").is_none() && live.call("c5").is_some());
    assert_eq!(
        live.elided,
        Elided {
            steps: 3,
            calls: 3,
            messages: 3,
            rejections: 0
        }
    );
    assert_eq!(live.step_count(), 5);
    assert_eq!(whole.step_count(), 5);
    assert_eq!(whole.elided, Elided::default());
    assert_eq!(live.usage, whole.usage);
    assert_eq!(live.steers, whole.steers);
    assert_eq!(live.last_seq, whole.last_seq);
    assert_eq!(live.created_at, whole.created_at);
}

#[test]
fn the_next_request_is_the_same_from_the_whole_history_and_from_the_checkpoint() {
    let (events, at) = run_with_checkpoint();
    let whole = RunState::from_events("r", &events);
    let (mut resumed, _) = RunState::from_checkpoint("r", &events[at]).unwrap();
    for e in &events[at + 1..] {
        resumed.apply(e);
    }
    let spec = whole.spec.clone().unwrap();
    let a = serde_json::to_value(build_request(&whole, &spec).unwrap()).unwrap();
    let b = serde_json::to_value(build_request(&resumed, &spec).unwrap()).unwrap();
    assert_eq!(a, b);
    let text = a.to_string();
    assert!(
        text.contains("Done so far: 3 model steps and 3 tool calls"),
        "{text}"
    );
    assert!(
        !text.contains("out of c3"),
        "the compacted history is not sent"
    );
    assert!(text.contains("out of c5"));
}

#[test]
fn no_checkpoint_while_a_call_is_unanswered_or_the_runtime_runs_one() {
    let (events, at) = run_with_checkpoint();
    let before = RunState::from_events("r", &events[..at]);
    assert!(take(&before, 4, None).is_none(), "the runtime runs a call");
    let mut open = before.clone();
    open.apply(&ev(
        999,
        k::MODEL_COMPLETED,
        json!({"step": 4, "output": [{"type": "function_call", "call_id": "c9", "name": "shell", "arguments": "{}"}]}),
    ));
    assert!(take(&open, 5, Some(runtime())).is_none());
    assert!(take(&before, 4, Some(runtime())).is_some());
}

#[test]
fn an_unreadable_or_foreign_checkpoint_is_ignored_and_the_fold_still_trims() {
    let (mut events, at) = run_with_checkpoint();
    let mut payload = events[at].payload.clone();
    payload["checkpoint"]["version"] = json!(99);
    events[at].payload = payload.clone();
    assert!(RunState::from_checkpoint("r", &events[at]).is_none());
    payload["checkpoint"] = json!({"version": 1});
    events[at].payload = payload;
    assert!(RunState::from_checkpoint("r", &events[at]).is_none());
    assert!(RunState::from_checkpoint("r", &events[0]).is_none());
    // A resume then folds the whole thread as a driving host: the same trimmed state.
    let live = driving_fold(&events);
    assert_eq!(live.step_count(), 5);
    assert_eq!(live.steps.len(), 2);
}

/// A checkpoint edited by hand (or gone wrong) that says the run already counted the most
/// steps, calls and items there can be: the counts stop at the limit, and the fold, the
/// next request, the `--json` stream and the next checkpoint are still written.
#[test]
fn counts_at_the_limit_in_a_checkpoint_saturate() {
    let (mut events, at) = run_with_checkpoint();
    for count in ["steps", "calls", "messages", "rejections"] {
        events[at].payload["checkpoint"]["elided"][count] = json!(u64::MAX);
    }
    let (mut resumed, _) = RunState::from_checkpoint("r", &events[at]).unwrap();
    for e in &events[at + 1..] {
        resumed.apply(e);
    }
    assert_eq!(resumed.step_count(), u64::MAX);
    assert_eq!(resumed.next_step(), u64::MAX);
    assert_eq!(resumed.output_retries_used(), u64::MAX);
    let spec = resumed.spec.clone().unwrap();
    let text = serde_json::to_string(&build_request(&resumed, &spec).unwrap()).unwrap();
    assert!(text.contains(&format!("{} tool calls", u64::MAX)), "{text}");
    let mut conv = crate::run::exec_json::ExecJson::resuming(&resumed);
    let step = ev(
        999,
        k::MODEL_COMPLETED,
        json!({"step": 6, "output": [{"type": "message", "role": "assistant", "content": "hi"}]}),
    );
    assert_eq!(conv.convert(&step).len(), 1);
    let next = take(&resumed, 7, Some(runtime())).unwrap();
    assert_eq!(next["elided"]["steps"], json!(u64::MAX));
}
