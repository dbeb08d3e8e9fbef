use serde_json::json;

use super::*;
use crate::run::TokenUsage;
use crate::run::events::{ChildEnd, HostEvent as _, SubagentEnded, SubagentSpawned};
use crate::run::state::RunState;

const PARENT: &str = "019ae8a4-1a2b-7c3d-8e4f-0123456789ab";

#[test]
fn a_child_id_is_a_function_of_parent_call_and_index() {
    let a = child_run_id(PARENT, "call_1", 0);
    assert_eq!(a, child_run_id(PARENT, "call_1", 0));
    assert_ne!(a, child_run_id(PARENT, "call_1", 1));
    assert_ne!(a, child_run_id(PARENT, "call_2", 0));
    assert_ne!(
        a,
        child_run_id("019ae8a4-1a2b-7c3d-8e4f-0123456789ac", "call_1", 0)
    );
    let uuid = uuid::Uuid::parse_str(&a).unwrap();
    assert_eq!(uuid.get_version_num(), 7);
    // Sorted beside its parent: the same timestamp.
    let parent = uuid::Uuid::parse_str(PARENT).unwrap();
    assert_eq!(uuid.get_timestamp(), parent.get_timestamp());
    // A parent id that is no UUID still names its children.
    assert_eq!(child_run_id("x", "c", 0), child_run_id("x", "c", 0));
}

#[test]
fn limits_bound_the_tree() {
    let root = SubagentLimits::new(3);
    assert!(root.can_spawn());
    assert!(
        !root.child().can_spawn(),
        "depth 1 by default: children cannot spawn"
    );
    let deep = SubagentLimits::new(3).max_depth(2);
    assert!(deep.child().can_spawn());
    assert!(!deep.child().child().can_spawn());
    assert!(!SubagentLimits::new(0).can_spawn());
}

#[test]
fn requests_are_checked_against_limits_and_tools() {
    let limits = SubagentLimits::new(2);
    let offered = vec!["shell".to_string(), "read_file".into(), TOOL_NAME.into()];
    let agent =
        |tools: serde_json::Value| json!({"prompt": "p", "instructions": null, "tools": tools});
    let ok = SpawnRequest::read(
        &json!({"agents": [agent(json!(["shell"])), agent(json!(null))]}),
        &limits,
        &offered,
    )
    .unwrap();
    assert_eq!(ok.agents.len(), 2);
    assert_eq!(
        ok.agents[0].tools.as_deref(),
        Some(&["shell".to_string()][..])
    );
    let read = |args| SpawnRequest::read(&args, &limits, &offered).unwrap_err();
    assert!(read(json!({"agents": []})).contains("at least one"));
    assert!(
        read(json!({"agents": [agent(json!(null)), agent(json!(null)), agent(json!(null))]}))
            .contains("at most 2")
    );
    assert!(
        read(json!({"agents": [agent(json!(["write_file"]))]})).contains("not one of your tools")
    );
    assert!(read(json!({"agents": [agent(json!([TOOL_NAME]))]})).contains("cannot spawn"));
    assert!(read(json!({"agents": [{"prompt": " "}]})).contains("empty"));
    assert!(read(json!({"agents": [{"prompt": "p", "extra": 1}]})).starts_with("unknown field"));
    assert!(read(json!("nope")).starts_with("invalid type"));
    // Deeper trees may pass the tool on.
    let deep = SubagentLimits::new(2).max_depth(2);
    assert!(
        SpawnRequest::read(
            &json!({"agents": [agent(json!([TOOL_NAME]))]}),
            &deep,
            &offered
        )
        .is_ok()
    );
}

#[test]
fn the_tool_schema_is_strict() {
    let spec = tool_spec(&SubagentLimits::new(2), crate::tools::ApprovalMode::Default);
    assert!(spec.strict && spec.retry_safe);
    let schema = spec.parameters.to_value().unwrap();
    assert_eq!(
        agent_responses::types::text_format::strict_schema_problem(&schema),
        None,
        "{schema}"
    );
}

fn event(seq: i64, e: &impl crate::run::events::HostEvent) -> agent_journal::Event {
    let new = e.to_event("run:p").unwrap();
    agent_journal::Event {
        seq,
        thread: "run:p".into(),
        kind: new.kind.as_str().into(),
        payload: new.payload.to_value().unwrap(),
        at: seq,
        dedup_key: new.dedup_key.clone(),
        epoch: None,
    }
}

#[test]
fn the_parent_counts_each_childs_tokens_once() {
    let spawned = SubagentSpawned {
        call_id: "c".into(),
        index: 0,
        child_run_id: "k".into(),
        prompt: "p".into(),
    };
    let usage = |total| TokenUsage {
        input_tokens: total,
        total_tokens: total,
        ..TokenUsage::default()
    };
    let ended = |status, total, seq| SubagentEnded {
        call_id: "c".into(),
        index: 0,
        child_run_id: "k".into(),
        status,
        answer: None,
        error: None,
        usage: usage(total),
        child_seq: seq,
        with_parent: None,
    };
    let mut state = RunState::new("p");
    state.apply(&event(1, &spawned));
    assert_eq!(state.children.len(), 1);
    assert_eq!(state.children[0].ended, None);
    // Paused with 100 tokens used, then driven again to its end at 250 in all.
    state.apply(&event(2, &ended(ChildEnd::Paused, 100, 7)));
    assert_eq!(state.usage.total_tokens, 100);
    // An end that could not read the child (no usage) lowers nothing.
    state.apply(&event(3, &ended(ChildEnd::Failed, 0, 0)));
    assert_eq!(state.usage.total_tokens, 100);
    state.apply(&event(4, &ended(ChildEnd::Completed, 250, 12)));
    assert_eq!(state.usage.total_tokens, 250);
    assert_eq!(state.children[0].ended, Some(ChildEnd::Completed));
    assert_ne!(
        ended(ChildEnd::Paused, 100, 7).dedup_key(),
        ended(ChildEnd::Completed, 250, 12).dedup_key()
    );
}

#[test]
fn a_childs_last_end_has_one_key_whatever_its_seq() {
    let ended = |status, seq| SubagentEnded {
        call_id: "c".into(),
        index: 0,
        child_run_id: "k".into(),
        status,
        answer: None,
        error: None,
        usage: TokenUsage::default(),
        child_seq: seq,
        with_parent: None,
    };
    // A finished child read at its `run.completed` and again, on a resume, after its
    // turn's end: one record.
    assert_eq!(
        ended(ChildEnd::Completed, 26).dedup_key(),
        ended(ChildEnd::Completed, 27).dedup_key()
    );
    assert_eq!(
        ended(ChildEnd::Failed, 26).dedup_key(),
        ended(ChildEnd::Failed, 30).dedup_key()
    );
    // A child that could not be read may end otherwise later; a paused one ends again.
    assert_ne!(
        ended(ChildEnd::Failed, 0).dedup_key(),
        ended(ChildEnd::Completed, 0).dedup_key()
    );
    assert_ne!(
        ended(ChildEnd::Paused, 7).dedup_key(),
        ended(ChildEnd::Paused, 9).dedup_key()
    );
}

#[tokio::test]
async fn a_hold_stops_the_drive_and_names_each_waiting_child() {
    use crate::run::CallRecord;
    use crate::run::state::CallProgress;
    let user = agent_runtime::CancellationToken::new();
    let hold = ChildHold::new(&user);
    let call = CallRecord {
        call_id: "ca1".into(),
        name: "shell".into(),
        arguments: "{}".into(),
        step: 1,
        progress: CallProgress::New,
        approvals: Vec::new(),
    };
    assert!(!hold.token().is_cancelled());
    hold.hold(
        "call_spawn",
        vec![WaitingChild {
            run_id: "kid".into(),
            call,
        }],
    );
    // The drive's cancellation fires, the user's does not: the drive pauses, not stops.
    assert!(hold.token().is_cancelled());
    assert!(!hold.user_cancelled());
    hold.changed().await;
    assert_eq!(hold.held_calls(), ["call_spawn"]);
    assert_eq!(
        waiting_detail(&hold.waiting()),
        "sub-agent kid waits for approval of ca1 (shell)"
    );
    // The user's cancellation is the drive's too.
    let user = agent_runtime::CancellationToken::new();
    let hold = ChildHold::new(&user);
    user.cancel();
    assert!(hold.token().is_cancelled() && hold.user_cancelled());
}

#[test]
fn spawn_agents_asks_under_approval_ask_only() {
    use crate::tools::{ApprovalMode, Policy};
    let limits = SubagentLimits::new(2);
    assert_eq!(tool_spec(&limits, ApprovalMode::Ask).policy, Policy::Ask);
    for mode in [
        ApprovalMode::Default,
        ApprovalMode::Auto,
        ApprovalMode::Deny,
    ] {
        assert_eq!(tool_spec(&limits, mode).policy, Policy::Auto, "{mode:?}");
    }
}

#[test]
fn the_spawn_calls_of_one_step_share_what_the_step_left() {
    use crate::run::CallRecord;
    use crate::run::state::{CallProgress, ChildRecord};
    let call = |id: &str, name: &str, step: u64, n: usize| CallRecord {
        call_id: id.into(),
        name: name.into(),
        arguments:
            json!({"agents": vec![json!({"prompt": "p", "instructions": null, "tools": null}); n]})
                .to_string(),
        step,
        progress: CallProgress::New,
        approvals: Vec::new(),
    };
    let child = |call_id: &str, total: u64| ChildRecord {
        run_id: format!("kid-{call_id}"),
        call_id: call_id.into(),
        index: 0,
        prompt: "p".into(),
        ended: None,
        usage: TokenUsage {
            total_tokens: total,
            ..TokenUsage::default()
        },
    };
    let limits = SubagentLimits::new(3);
    let mut state = RunState::new("p");
    state.calls = vec![
        call("old", TOOL_NAME, 1, 1),
        call("a", TOOL_NAME, 2, 2),
        call("b", TOOL_NAME, 2, 1),
        call("sh", "shell", 2, 5),
    ];
    // 1,000 tokens counted, of which 300 are the step's own children's (the earlier
    // step's child's 50 were spent before the step ended): 700 used, 3 children.
    state.usage.total_tokens = 1_000;
    state.children = vec![child("old", 50), child("a", 200), child("b", 100)];
    let share = |call: &str, own: usize, max: u64| {
        super::share::child_share(&state, call, own, max, &limits, &[])
    };
    assert_eq!(share("a", 2, 10_000), (10_000 - 700) / 3);
    assert_eq!(share("b", 1, 10_000), (10_000 - 700) / 3);
    // A resume that raised the budget: each child's part of the new remainder.
    assert_eq!(share("a", 2, 20_000), (20_000 - 700) / 3);
    // Nothing left.
    assert_eq!(share("a", 2, 600), 0);
}

#[test]
fn the_childrens_answers_are_capped_with_where_to_read_them() {
    use super::tool::{ChildResult, capped};
    use crate::tools::result_cap::RESULT_CAP;
    let big = "x".repeat(1_500_000);
    let agents = (0..3)
        .map(|i| ChildResult {
            run_id: format!("kid-{i}"),
            status: ChildEnd::Completed,
            answer: Some(big.clone()),
            error: None,
        })
        .chain([ChildResult {
            run_id: "kid-short".into(),
            status: ChildEnd::Failed,
            answer: None,
            error: Some("short".into()),
        }])
        .collect();
    let agents = capped(agents);
    let total: usize = agents
        .iter()
        .map(|a| a.answer.as_deref().unwrap_or_default().len())
        .sum();
    assert!(total < RESULT_CAP + 1_000, "{total}");
    for (i, agent) in agents.iter().take(3).enumerate() {
        let answer = agent.answer.as_deref().unwrap();
        assert!(
            answer.ends_with(&format!(
                "`agentctl runs show kid-{i}` shows all of it ...]"
            )),
            "{}",
            &answer[answer.len() - 200..]
        );
    }
    assert_eq!(agents[3].error.as_deref(), Some("short"));
}
