//! Fuzz target `fold`: a run's journal as the host reads it back. The events of real runs
//! (`fixtures/fuzz/fold/*.json`, captured from runs the emulator drove, see [`capture`];
//! plus hand-made events of the kinds those runs do not write) are mutated the ways a
//! hand-edited journal or another version's may differ: reordered, duplicated, dropped,
//! truncated, spliced from another run; seq, time, step, attempt, round, index and call id
//! numbers set to extremes; any payload field replaced with a value of another type, a
//! huge string or odd unicode; kinds changed to other known or unknown ones.
//!
//! Properties, for every sequence, in bounded time and without a panic:
//! 1. The fold (a reader's, a driving host's, a resume's from the latest checkpoint) and
//!    every query of it: status, step count, title, budgets, calls by id, pending
//!    approvals and steers, `runs show --json`'s view, the runs table's row, the history
//!    units, the `--json` stream (from the start and resuming from the fold), and the next
//!    model request, whose body is the one its recorded hash and length describe; neither
//!    the request nor the history units outgrow the events by more than a constant factor.
//! 2. Folding a prefix and then the rest is folding the whole.
//! 3. A checkpoint a driving host takes of its fold, read back by a resume, is the fold a
//!    driving host holds after the same compaction.
//!
//! The corpus test also checks, on the runs as recorded, that the `--json` stream of a
//! converter resuming from a fold of a prefix is the one a converter of the whole printed.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agent_fuzzkit::{config, corpus, corpus_dir, json_value, keep_if_failing, within};
use agent_host::fuzzing::{checkpoint, next_request, resume_fold, table_row};
use agent_host::run::exec_json::{ExecJson, ExecLine};
use agent_host::run::history::units_of;
use agent_host::run::state::TITLE_CHARS;
use agent_host::run::view::{RunSummary, RunView};
use agent_host::run::{RunState, kinds};
use agent_journal::Event;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

const TARGET: &str = "fold";
const RUN: &str = "r";
const BOUND: Duration = Duration::from_secs(20);

// ---- material ----

/// Event `seq` of run `r`, with a payload given as JSON.
fn event(seq: i64, kind: &str, payload: Value) -> Event {
    Event {
        seq,
        thread: kinds::thread_of(RUN).into(),
        kind: kind.into(),
        payload,
        at: seq.saturating_add(1_700_000_000_000),
        dedup_key: None,
        epoch: None,
    }
}

/// Events of the kinds the captured runs do not write, in a plausible order after one
/// step that made two calls.
fn handmade() -> Vec<Event> {
    let created = json!({"prompt": "line one\nline two", "model": "m", "workspace": "/w",
        "tools": [{"name": "shell", "description": "d", "parameters": {"type": "object"},
                   "policy": "ask", "retry_safe": true}],
        "approval": "default", "budgets": {"max_steps": 5, "max_tokens": 100},
        "run_id": RUN, "owner": {"host": "elsewhere", "pid": 1, "started": 5}});
    let call = |id: &str| {
        json!({"type": "function_call", "call_id": id, "name": "shell",
        "arguments": "{\"command\":\"ls\"}"})
    };
    let step = json!({"step": 1, "attempt": 1, "response_id": "resp_1",
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        "output": [{"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": "hi"}]},
                   {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
                   call("c1"), call("c2")]});
    let kinds = [
        (kinds::RUN_CREATED, created),
        (
            kinds::MODEL_REQUESTED,
            json!({"step": 1, "attempt": 1, "model": "m"}),
        ),
        (
            kinds::MODEL_FAILED,
            json!({"step": 1, "attempt": 1, "message": "boom",
            "retryable": true, "usage": {"input_tokens": 3, "total_tokens": 3}}),
        ),
        (
            kinds::MODEL_REQUESTED,
            json!({"step": 1, "attempt": 2, "model": "m"}),
        ),
        (kinds::MODEL_COMPLETED, step),
        (
            kinds::APPROVAL_REQUESTED,
            json!({"call_id": "c1", "tool": "shell",
            "arguments": "{}", "args_sha256": "ab", "reason": "policy", "round": 0}),
        ),
        (
            kinds::TOOL_REFUSED,
            json!({"call_id": "c2", "tool": "shell", "message": "no"}),
        ),
        (kinds::STEER_REQUESTED, json!({"id": "s1", "text": "go on"})),
        (kinds::STEER_DROPPED, json!({"id": "s1", "reason": "ended"})),
        (kinds::INTERRUPT_REQUESTED, json!({"by": "u@h"})),
        (kinds::RUN_INTERRUPTED, json!({"cancelled": ["c1"]})),
        (
            kinds::RUN_RESUMED,
            json!({"owner": null, "budgets": {"max_steps": 9},
            "after_seq": 3, "epoch": 2}),
        ),
        (
            kinds::RUN_SANDBOX_CHANGED,
            json!({"from": "off",
            "sandbox": {"mode": "read-only"}, "cause": "flag",
            "policies": {"shell": "auto"}}),
        ),
        (
            kinds::APPROVAL_DECIDED,
            json!({"approve": true, "scope": "run", "by": "u",
            "call_id": "c1", "round": 0, "decision": "approve"}),
        ),
        (
            "tool.cancelled",
            json!({"call_id": "c1", "started": true,
            "error": {"message": "cancelled"}}),
        ),
        (
            kinds::SUBAGENT_SPAWNED,
            json!({"call_id": "c1", "index": 0,
            "child_run_id": "r.c1.0", "prompt": "child"}),
        ),
        (
            kinds::SUBAGENT_ENDED,
            json!({"call_id": "c1", "index": 0, "child_run_id": "r.c1.0",
            "status": "completed", "answer": "done",
            "usage": {"input_tokens": 4, "cached_tokens": 0, "output_tokens": 0,
                      "reasoning_tokens": 0, "total_tokens": 4}, "child_seq": 7}),
        ),
        (
            kinds::OUTPUT_REJECTED,
            json!({"step": 1, "retry": 1, "errors": ["not an object"]}),
        ),
        (
            kinds::RUN_PAUSED,
            json!({"reason": "cannot_drive", "detail": "tool gone"}),
        ),
        (
            kinds::RUN_REQUEUED,
            json!({"budgets": {"max_steps": 7}, "by": "u"}),
        ),
        (
            kinds::RUN_FAILED,
            json!({"error": "gave up",
            "usage": {"input_tokens": 1, "cached_tokens": 0, "output_tokens": 0,
                      "reasoning_tokens": 0, "total_tokens": 1}}),
        ),
        (
            kinds::RUN_COMPLETED,
            json!({"text": "{\"a\":1}", "steps": 1, "structured": true,
            "output": {"a": 1}}),
        ),
    ];
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, (kind, payload))| event(i as i64 + 1, kind, payload))
        .collect()
}

/// The runs to mutate: the captured ones of the corpus (and any regression case saved
/// there), then the hand-made events.
fn bases() -> &'static [Vec<Event>] {
    static BASES: OnceLock<Vec<Vec<Event>>> = OnceLock::new();
    BASES.get_or_init(|| {
        let mut bases: Vec<Vec<Event>> = corpus(TARGET, 3)
            .into_iter()
            .map(|(name, bytes)| {
                serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"))
            })
            .collect();
        bases.push(handmade());
        bases
    })
}

// ---- mutations ----

/// Field names the host counts with, finds calls and steers by, or shows.
const NUMBERED: &[&str] = &[
    "step",
    "attempt",
    "round",
    "index",
    "retry",
    "revision",
    "items_replaced",
    "after_seq",
    "epoch",
    "child_seq",
    "steps",
    "max_steps",
    "max_tokens",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "pid",
    "started",
    "created_at",
    "call_id",
    "id",
    "child_run_id",
    "prompt",
    "text",
    "arguments",
    "output",
    "checkpoint",
    "elided",
    "attempts",
];

/// Where a checkpoint keeps what a resume counts with (any other value is reached too).
const CHECKPOINT_FIELDS: &[&str] = &[
    "/elided/steps",
    "/elided/calls",
    "/elided/messages",
    "/elided/rejections",
    "/attempts",
    "/created_at",
    "/interrupt_requested",
    "/usage/total_tokens",
    "/usage/input_tokens",
    "/steers",
    "/children",
    "/version",
    "/status",
    "/budgets",
    "/driver",
    "/spec/budgets/max_steps",
    "/spec/prompt",
];

fn extreme() -> impl Strategy<Value = Value> {
    prop_oneof![
        5 => prop::sample::select(vec![
            json!(0), json!(1), json!(-1), json!(u64::MAX), json!(u64::MAX - 1),
            json!(i64::MAX), json!(i64::MIN), json!(u32::MAX), json!(u64::from(u32::MAX) + 1),
        ]),
        3 => prop::sample::select(vec![
            json!(2), json!(1.5), json!(1e300), json!(-0.0), json!(null), json!(true),
            json!(""), json!([]), json!({}), json!("c1"), json!("call_list"),
            json!("\u{202e}\u{fffd}😀"), json!("\u{1b}[2J"), json!("a\u{0300}\u{0301}\u{0302}"),
            json!({"steps": u64::MAX}), json!([[u64::MAX, u32::MAX]]),
            json!([{"id": "s1", "text": "t", "status": {"applied": {"step": u64::MAX}}}]),
            json!("x".repeat(70_000)), json!("é\n".repeat(300)), json!(["a", 1, null]),
        ]),
        1 => json_value(),
    ]
}

/// Numbers set on a whole event: its seq or its time.
fn extreme_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => prop::sample::select(vec![0, 1, -1, i64::MAX, i64::MIN, i64::MAX - 1, 1 << 53]),
        1 => any::<i64>(),
    ]
}

fn kind() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        kinds::RUN_CREATED,
        kinds::RUN_RESUMED,
        kinds::RUN_REQUEUED,
        kinds::RUN_SANDBOX_CHANGED,
        kinds::MODEL_REQUESTED,
        kinds::MODEL_COMPLETED,
        kinds::MODEL_FAILED,
        "tool.scheduled",
        "tool.started",
        "tool.completed",
        "tool.failed",
        "tool.timeout",
        "tool.cancelled",
        "tool.interrupted",
        kinds::TOOL_REFUSED,
        kinds::APPROVAL_REQUESTED,
        kinds::APPROVAL_DECIDED,
        kinds::INTERRUPT_REQUESTED,
        kinds::STEER_REQUESTED,
        kinds::STEER_APPLIED,
        kinds::STEER_DROPPED,
        kinds::CONTEXT_COMPACTED,
        kinds::OUTPUT_REJECTED,
        kinds::RUN_INTERRUPTED,
        kinds::RUN_PAUSED,
        kinds::RUN_COMPLETED,
        kinds::RUN_FAILED,
        kinds::SUBAGENT_SPAWNED,
        kinds::SUBAGENT_ENDED,
        "turn.started",
        "run.future_kind",
        "",
        "RUN.CREATED",
        "run.created\0",
    ])
    .prop_map(str::to_owned)
}

#[derive(Debug, Clone)]
enum Mutation {
    Drop(Index),
    Duplicate(Index),
    Swap(Index, Index),
    Truncate(Index),
    /// An event of another base run, inserted.
    Splice(Index, Index, Index),
    Seq(Index, i64),
    At(Index, i64),
    Kind(Index, String),
    /// A field named in [`NUMBERED`], wherever it is in the payload (or added at the top).
    Named(Index, Index, Value),
    /// Any value of the payload, found by its place in a walk of the payload.
    Anywhere(Index, Index, Value),
    Payload(Index, Value),
    /// A field named in [`NUMBERED`], in every event.
    NamedAll(Index, Value),
    /// A value of the checkpoint of the latest compaction that carries one: any, by its
    /// place in a walk, or (`None`) one of [`CHECKPOINT_FIELDS`].
    InCheckpoint(Option<Index>, Index, Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let i = any::<Index>;
    prop_oneof![
        2 => i().prop_map(Mutation::Drop),
        2 => i().prop_map(Mutation::Duplicate),
        2 => (i(), i()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        1 => i().prop_map(Mutation::Truncate),
        2 => (i(), i(), i()).prop_map(|(a, b, c)| Mutation::Splice(a, b, c)),
        1 => (i(), extreme_i64()).prop_map(|(a, n)| Mutation::Seq(a, n)),
        1 => (i(), extreme_i64()).prop_map(|(a, n)| Mutation::At(a, n)),
        1 => (i(), kind()).prop_map(|(a, k)| Mutation::Kind(a, k)),
        6 => (i(), i(), extreme()).prop_map(|(a, f, v)| Mutation::Named(a, f, v)),
        4 => (i(), i(), extreme()).prop_map(|(a, f, v)| Mutation::Anywhere(a, f, v)),
        1 => (i(), extreme()).prop_map(|(a, v)| Mutation::Payload(a, v)),
        3 => (i(), extreme()).prop_map(|(f, v)| Mutation::NamedAll(f, v)),
        4 => (any::<Option<Index>>(), i(), extreme())
            .prop_map(|(a, f, v)| Mutation::InCheckpoint(a, f, v)),
    ]
}

/// The JSON pointers of every value of `v` (itself included), in a walk's order.
fn pointers(v: &Value) -> Vec<String> {
    fn go(v: &Value, at: String, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    let k = k.replace('~', "~0").replace('/', "~1");
                    go(child, format!("{at}/{k}"), out);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    go(child, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
        out.push(at);
    }
    let mut out = Vec::new();
    go(v, String::new(), &mut out);
    out
}

impl Mutation {
    fn apply(&self, events: &mut Vec<Event>) {
        let n = events.len();
        let pick = |i: &Index| (n > 0).then(|| i.index(n));
        match self {
            Mutation::Drop(i) => {
                if let Some(i) = pick(i) {
                    events.remove(i);
                }
            }
            Mutation::Duplicate(i) => {
                if let Some(i) = pick(i) {
                    events.insert(i, events[i].clone());
                }
            }
            Mutation::Swap(a, b) => {
                if let (Some(a), Some(b)) = (pick(a), pick(b)) {
                    events.swap(a, b);
                }
            }
            Mutation::Truncate(i) => events.truncate(i.index(n + 1)),
            Mutation::Splice(base, from, to) => {
                let bases = bases();
                let other = &bases[base.index(bases.len())];
                if !other.is_empty() {
                    let e = other[from.index(other.len())].clone();
                    events.insert(to.index(n + 1), e);
                }
            }
            Mutation::Seq(i, seq) => {
                if let Some(i) = pick(i) {
                    events[i].seq = *seq;
                }
            }
            Mutation::At(i, at) => {
                if let Some(i) = pick(i) {
                    events[i].at = *at;
                }
            }
            Mutation::Kind(i, kind) => {
                if let Some(i) = pick(i) {
                    events[i].kind = kind.as_str().into();
                }
            }
            Mutation::Named(i, field, value) => {
                if let Some(i) = pick(i) {
                    let name = NUMBERED[field.index(NUMBERED.len())];
                    set_named(&mut events[i].payload, name, value);
                }
            }
            Mutation::Anywhere(i, at, value) => {
                if let Some(i) = pick(i) {
                    let payload = &mut events[i].payload;
                    let all = pointers(payload);
                    if let Some(v) = payload.pointer_mut(&all[at.index(all.len())]) {
                        *v = value.clone();
                    }
                }
            }
            Mutation::Payload(i, value) => {
                if let Some(i) = pick(i) {
                    events[i].payload = value.clone();
                }
            }
            Mutation::NamedAll(field, value) => {
                let name = NUMBERED[field.index(NUMBERED.len())];
                for e in events.iter_mut() {
                    set_named(&mut e.payload, name, value);
                }
            }
            Mutation::InCheckpoint(at, field, value) => {
                let latest = events
                    .iter_mut()
                    .rev()
                    .filter_map(|e| e.payload.get_mut("checkpoint"))
                    .find(|c| c.is_object());
                if let Some(checkpoint) = latest {
                    let pointer = match at {
                        Some(at) => {
                            let all = pointers(checkpoint);
                            all[at.index(all.len())].clone()
                        }
                        None => CHECKPOINT_FIELDS[field.index(CHECKPOINT_FIELDS.len())].into(),
                    };
                    if let Some(v) = checkpoint.pointer_mut(&pointer) {
                        *v = value.clone();
                    }
                }
            }
        }
    }
}

/// Sets every field `name` in `payload` to `value`, or adds it at the top when there is none.
fn set_named(payload: &mut Value, name: &str, value: &Value) {
    fn go(v: &mut Value, name: &str, value: &Value) -> bool {
        match v {
            Value::Object(map) => {
                let mut found = false;
                for (k, child) in map.iter_mut() {
                    if k == name {
                        *child = value.clone();
                        found = true;
                    } else {
                        found |= go(child, name, value);
                    }
                }
                found
            }
            Value::Array(items) => items.iter_mut().fold(false, |f, c| go(c, name, value) | f),
            _ => false,
        }
    }
    if !go(payload, name, value)
        && let Value::Object(map) = payload
    {
        map.insert(name.to_owned(), value.clone());
    }
}

// ---- properties ----

/// Every query of `state`, checked where its answer is cheap to state; `input` is the size
/// of the events it was folded from, which nothing built from it may outgrow by much.
fn queries(state: &RunState, input: usize) -> Result<(), TestCaseError> {
    let bound = 4 * input + (64 << 10);
    let status = state.status();
    prop_assert!(state.step_count() >= state.steps().len() as u64);
    prop_assert!(state.title().chars().count() <= TITLE_CHARS + 3);
    let _ = (state.budgets(), state.output_retries_used(), state.usage());
    for call in state.calls() {
        let found = state.call(&call.call_id);
        prop_assert!(found.is_some_and(|c| c.call_id == call.call_id));
        let _ = state.rejected(call.step);
    }
    let pending = state.pending_approvals().count();
    prop_assert!(pending <= state.calls().len());
    let _ = state.pending_steers().count();
    // The clock is the reader's own; the times in the journal are what is fuzzed.
    for now in [0, 1_700_000_000_000, agent_host::run::view::now_ms()] {
        let view = RunView::of(state, status, now);
        prop_assert!(view.summary.age_seconds >= 0);
        prop_assert_eq!(view.pending_approvals.len(), pending);
        serde_json::to_string(&view).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let summary = RunSummary::of(state, status, now);
        serde_json::to_string(&summary).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    let units = units_of(state);
    for unit in &units {
        prop_assert!(!unit.id.is_empty());
    }
    let units_size = serde_json::to_vec(&units.iter().map(|u| &u.items).collect::<Vec<_>>())
        .map_err(|e| TestCaseError::fail(e.to_string()))?
        .len();
    prop_assert!(units_size <= bound, "history units of {units_size} bytes");
    prop_assert!(table_row(state).is_object());
    let _ = ExecJson::resuming(state);
    if let Some(Ok(request)) = next_request(state) {
        prop_assert_eq!(request.body.len(), request.len);
        prop_assert!(request.len <= bound, "a request of {} bytes", request.len);
        prop_assert_eq!(
            agent_host::run::digest::sha256_hex(&request.body),
            request.sha256
        );
        let body: Value = serde_json::from_slice(&request.body)
            .map_err(|e| TestCaseError::fail(format!("unreadable request: {e}")))?;
        prop_assert!(body["input"].is_array());
    }
    Ok(())
}

/// The `--json` lines of `events` from a converter that has seen `conv`'s past.
fn exec_lines(conv: &mut ExecJson, events: &[Event]) -> Result<Vec<ExecLine>, TestCaseError> {
    let mut out = Vec::new();
    for e in events {
        for line in conv.convert(e) {
            serde_json::to_string(&line).map_err(|e| TestCaseError::fail(e.to_string()))?;
            out.push(line);
        }
    }
    Ok(out)
}

/// Property 3: a checkpoint of `driving` (a driving host's fold), written into a
/// compaction and read back, is `driving` after that compaction.
fn checkpoint_round_trip(driving: &RunState) -> Result<(), TestCaseError> {
    let recorded = driving
        .steps()
        .iter()
        .map(|s| s.step)
        .chain(driving.calls().iter().map(|c| c.step))
        .chain(driving.rejections().iter().map(|r| r.step))
        .max()
        .unwrap_or(0);
    let (Some(before), Some(seq)) = (
        recorded.max(driving.step_count()).checked_add(1),
        driving.last_seq().checked_add(1),
    ) else {
        return Ok(());
    };
    let Some(cp) = checkpoint(driving, before) else {
        return Ok(());
    };
    let compacted = event(
        seq,
        kinds::CONTEXT_COMPACTED,
        json!({"step": before, "items_replaced": 1, "response_id": "cmp",
               "output": [{"type": "compaction", "encrypted_content": "x"}],
               "covered_steers": [], "checkpoint": cp}),
    );
    let mut whole = driving.clone();
    whole.apply(&compacted);
    let resumed = resume_fold(RUN, std::slice::from_ref(&compacted));
    // A checkpoint is taken of a run still going: the final answer is not in it.
    if whole.final_text().is_none() && whole.final_output().is_none() {
        prop_assert_eq!(&resumed, &whole);
    }
    queries(&resumed, compacted.payload.to_string().len())
}

fn check(events: &[Event], split: usize) -> Result<(), TestCaseError> {
    let start = Instant::now();
    let full = RunState::from_events(RUN, events);
    let (head, tail) = events.split_at(split.min(events.len()));
    let mut parts = RunState::from_events(RUN, head);
    for e in tail {
        parts.apply(e);
    }
    prop_assert_eq!(&parts, &full);
    let mut driving = RunState::for_driving(RUN);
    for e in events {
        driving.apply(e);
    }
    let resumed = resume_fold(RUN, events);
    let input: usize = events.iter().map(|e| e.payload.to_string().len()).sum();
    for state in [&full, &driving, &resumed] {
        queries(state, input)?;
    }
    exec_lines(&mut ExecJson::new(RUN), events)?;
    exec_lines(&mut ExecJson::resuming(&parts), tail)?;
    checkpoint_round_trip(&driving)?;
    within(start, BOUND, "folding and reading")
}

fn case() -> impl Strategy<Value = (Vec<Event>, usize)> {
    (
        any::<Index>(),
        prop::collection::vec(mutation(), 0..12),
        any::<Index>(),
    )
        .prop_map(|(base, mutations, split)| {
            let bases = bases();
            let mut events = bases[base.index(bases.len())].clone();
            for m in &mutations {
                m.apply(&mut events);
            }
            let split = split.index(events.len() + 1);
            (events, split)
        })
}

fn keep(events: &[Event], result: Result<(), TestCaseError>) -> Result<(), TestCaseError> {
    let text = serde_json::to_vec_pretty(events).unwrap_or_default();
    keep_if_failing("fold", "json", &text, result)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn folding_any_journal_never_panics((events, split) in case()) {
        keep(&events, check(&events, split))?;
    }
}

#[test]
fn corpus_replays() {
    for (i, base) in bases().iter().enumerate() {
        for split in 0..=base.len() {
            check(base, split).unwrap_or_else(|e| panic!("base {i}, split {split}: {e}"));
        }
    }
}

/// The hand-made events are material only if the host reads them as they stand.
#[test]
fn handmade_events_are_read() {
    for e in handmade() {
        let parsed = agent_host::run::events::RunEvent::parse(&e.kind, &e.payload);
        assert!(matches!(parsed, Ok(Some(_))), "{}: {parsed:?}", e.kind);
    }
}

/// On a run as recorded, the `--json` lines after any point are the same from a converter
/// resuming from the fold of the events before it as from one that saw them all.
#[test]
fn resumed_exec_json_continues_the_whole() {
    for (i, base) in bases().iter().enumerate() {
        let whole = exec_per_event(&mut ExecJson::new(RUN), base);
        for split in 0..=base.len() {
            let (head, tail) = base.split_at(split);
            let mut conv = ExecJson::resuming(&RunState::from_events(RUN, head));
            let resumed = exec_per_event(&mut conv, tail);
            assert_eq!(resumed, whole[split..], "base {i}, split {split}");
        }
    }
}

fn exec_per_event(conv: &mut ExecJson, events: &[Event]) -> Vec<Vec<ExecLine>> {
    events.iter().map(|e| conv.convert(e)).collect()
}

// ---- capture ----

/// Drives the emulator's runs whose events are the corpus and writes them to
/// `fixtures/fuzz/fold/` (`cargo test -p agent-host --test all -- --ignored fuzz_fold::capture`).
#[tokio::test]
#[ignore = "writes the corpus"]
async fn capture() {
    use agent_host::run::{
        Budgets, Decision, DecisionRequest, DriveOptions, Host, NewRun, OutputSchema, ResumeChange,
        decide, request_steer,
    };
    use agent_host::tools::ApprovalMode;
    use agent_journal::Journal;

    let workspace = tempfile::tempdir().unwrap();
    let ws = workspace.path();
    let runs = [
        (
            "loop-compact",
            NewRun::new("loop=long; call list_dir until told otherwise", ws)
                .compact_at(Some(1))
                .approval(ApprovalMode::Auto)
                .budgets(Budgets {
                    max_steps: 4,
                    max_tokens: None,
                }),
        ),
        (
            "schema-rejected",
            NewRun::new("loop=1; then answer", ws)
                .output_schema(Some(
                    OutputSchema::new(json!({"type": "object"}))
                        .unwrap()
                        .retries(1),
                ))
                .approval(ApprovalMode::Auto),
        ),
        (
            "approval-waiting",
            NewRun::new("loop=long; call list_dir", ws)
                .approval(ApprovalMode::Ask)
                .budgets(Budgets {
                    max_steps: 2,
                    max_tokens: None,
                }),
        ),
    ];
    for (name, run) in runs {
        let (_server, client) = crate::bench_script::serve().await;
        let journal = Journal::open("memory:").await.unwrap();
        let host = Host::new(journal.clone(), client);
        let mut report = host.start(run, DriveOptions::default()).await.unwrap();
        // A run waiting for a decision: approved "for the run" and steered from outside,
        // then resumed to its step budget.
        let pending = report
            .state
            .pending_approvals()
            .next()
            .map(|c| c.call_id.clone());
        if let Some(call_id) = pending {
            let request = DecisionRequest {
                call_id,
                decision: Decision {
                    approve: true,
                    reason: Some("fine".into()),
                    by: Some("u@h".into()),
                    scope: Some(agent_host::run::events::DecisionScope::Run),
                },
                args_sha256: None,
                round: None,
            };
            let run_id = report.run_id.clone();
            decide(&journal, &run_id, request).await.unwrap();
            request_steer(&journal, &run_id, "and then stop", Some("s1".into()))
                .await
                .unwrap();
            report = host
                .resume(&run_id, ResumeChange::default(), DriveOptions::default())
                .await
                .unwrap();
        }
        let events = journal
            .replay(&kinds::thread_of(&report.run_id), 0)
            .await
            .unwrap();
        let path = corpus_dir(TARGET).join(format!("{name}.json"));
        std::fs::create_dir_all(corpus_dir(TARGET)).unwrap();
        std::fs::write(&path, serde_json::to_vec_pretty(&events).unwrap()).unwrap();
        eprintln!("{name}: {:?}, {} events", report.end, events.len());
    }
}

/// A long run with many of every record the fold keeps (steps, calls, approvals, steers,
/// rejections, children): read in bounded time, for no query may look through one list
/// once per entry of another. Sized for a debug build under `cargo test` (about 3 s); the
/// per-record tests of the crate (`many_steers_fold_in_linear_time` and the like) hold
/// tens of thousands.
#[test]
fn a_long_run_of_every_kind_is_read_in_bounded_time() {
    let n: i64 = 5_000;
    let mut events = vec![handmade()[0].clone()];
    let mut seq = 1;
    let mut push = |kind: &str, payload: Value| {
        seq += 1;
        events.push(event(seq, kind, payload));
    };
    for i in 1..=n {
        let (call, steer, child) = (format!("c{i}"), format!("s{i}"), format!("r.c{i}"));
        push(kinds::STEER_REQUESTED, json!({"id": steer, "text": "t"}));
        push(kinds::STEER_APPLIED, json!({"id": steer, "step": i}));
        push(
            kinds::MODEL_COMPLETED,
            json!({"step": i, "attempt": 1, "response_id": "r",
            "usage": {}, "output": [{"type": "message", "role": "assistant", "content": "m"},
            {"type": "function_call", "call_id": call, "name": "shell", "arguments": "{}"}]}),
        );
        push(
            kinds::APPROVAL_REQUESTED,
            json!({"call_id": call, "tool": "shell",
            "arguments": "{}", "args_sha256": "ab", "reason": "policy", "round": 0}),
        );
        push(
            kinds::APPROVAL_DECIDED,
            json!({"approve": true, "call_id": call, "round": 0}),
        );
        push(
            "tool.completed",
            json!({"call_id": call, "started": true, "value": "ok"}),
        );
        push(
            kinds::OUTPUT_REJECTED,
            json!({"step": i, "retry": 1, "errors": ["e"]}),
        );
        push(
            kinds::SUBAGENT_SPAWNED,
            json!({"call_id": call, "index": 0,
            "child_run_id": child, "prompt": "p"}),
        );
        push(
            kinds::SUBAGENT_ENDED,
            json!({"call_id": call, "index": 0, "child_run_id": child,
            "status": "completed", "answer": "a", "child_seq": 1}),
        );
    }
    check(&events, events.len() / 2).unwrap();
}
