//! Each payload type writes the bytes the host journaled before the typed model existed
//! (the `json!` shapes they replace), and reads back what it wrote.

use serde_json::{Value, json};

use super::*;
use crate::run::owner::Owner;
use crate::run::spec::{Budgets, TokenUsage};

/// The payload text `event` is journaled as.
fn text(event: &impl HostEvent) -> String {
    let event = event.to_event("run:r").unwrap();
    serde_json::to_string(&event.payload.to_value().unwrap()).unwrap()
}

fn parse<'a>(kind: &str, payload: &'a Value) -> RunEvent<'a> {
    RunEvent::parse(kind, payload).unwrap().unwrap()
}

#[test]
fn payloads_keep_the_shapes_journaled_before() {
    let usage = TokenUsage {
        input_tokens: 10,
        cached_tokens: 4,
        output_tokens: 5,
        reasoning_tokens: 2,
        total_tokens: 15,
    };
    let cases: Vec<(String, Value)> = vec![
        (
            text(&RunPaused {
                reason: PauseReason::MaxSteps,
                detail: "7 of 5 steps used".into(),
            }),
            json!({"reason": "max_steps", "detail": "7 of 5 steps used"}),
        ),
        (
            text(&ApprovalRequested {
                call_id: "c1".into(),
                tool: "shell".into(),
                arguments: "{}".into(),
                args_sha256: "h".into(),
                reason: ApprovalReason::Policy,
                round: 0,
            }),
            json!({"call_id": "c1", "tool": "shell", "arguments": "{}", "args_sha256": "h",
                   "reason": "policy", "round": 0}),
        ),
        (
            text(&ApprovalDecided::new(
                "c1",
                2,
                "h",
                Decision {
                    approve: true,
                    reason: None,
                    by: Some("u@h".into()),
                    scope: Some(DecisionScope::Run),
                },
            )),
            json!({"approve": true, "reason": null, "by": "u@h", "scope": "run",
                   "call_id": "c1", "round": 2, "args_sha256": "h", "decision": "approve"}),
        ),
        (
            text(&ModelRequested {
                step: 3,
                attempt: 2,
                model: "m".into(),
                request_sha256: "s".into(),
            }),
            json!({"step": 3, "attempt": 2, "model": "m", "request_sha256": "s"}),
        ),
        (
            text(&SteerApplied {
                id: "s1".into(),
                step: 2,
                revision: 1,
                via: None,
                response_id: None,
            }),
            json!({"id": "s1", "step": 2, "revision": 1}),
        ),
        (
            text(&SteerApplied {
                id: "s1".into(),
                step: 2,
                revision: 1,
                via: Some(SteerVia::ResponseSteer),
                response_id: Some("resp_1".into()),
            }),
            json!({"id": "s1", "step": 2, "revision": 1, "via": "response.steer",
                   "response_id": "resp_1"}),
        ),
        (
            text(&RunCompleted {
                text: "done".into(),
                usage,
                steps: 4,
                structured: false,
                output: None,
            }),
            json!({"text": "done", "usage": usage, "steps": 4}),
        ),
        (
            // The parsed answer is the text: it is not written twice (`output` is only
            // read, from older journals).
            text(&RunCompleted {
                text: "{\"n\":1}".into(),
                usage,
                steps: 2,
                structured: true,
                output: Some(json!({"n": 1})),
            }),
            json!({"text": "{\"n\":1}", "usage": usage, "steps": 2, "structured": true}),
        ),
        (
            text(&OutputRejected {
                step: 3,
                retry: 1,
                errors: vec!["/n: \"x\" is not of type \"integer\"".into()],
            }),
            json!({"step": 3, "retry": 1, "errors": ["/n: \"x\" is not of type \"integer\""]}),
        ),
        (
            text(&RunFailed {
                error: "e".into(),
                usage,
            }),
            json!({"error": "e", "usage": usage}),
        ),
        (
            text(&RunResumed {
                owner: Some(Owner {
                    host: "h".into(),
                    pid: 7,
                    started: Some(9),
                }),
                budgets: Some(Budgets {
                    max_steps: 5,
                    max_tokens: None,
                }),
                after_seq: 12,
                epoch: None,
            }),
            json!({"owner": {"host": "h", "pid": 7, "started": 9},
                   "budgets": {"max_steps": 5, "max_tokens": null}, "after_seq": 12,
                   "epoch": null}),
        ),
        (
            text(&ToolRefused {
                call_id: "c1".into(),
                tool: "nope".into(),
                message: "unknown tool".into(),
            }),
            json!({"call_id": "c1", "tool": "nope", "message": "unknown tool"}),
        ),
        (
            text(&RunInterrupted {
                cancelled: vec!["c1".into()],
            }),
            json!({"cancelled": ["c1"]}),
        ),
    ];
    for (written, before) in cases {
        assert_eq!(written, before.to_string());
    }
    let output = vec![json!({"type": "message", "content": "hi"})];
    let api_usage = json!({"input_tokens": 1});
    let completed = ModelCompleted {
        step: 1,
        attempt: 1,
        response_id: "resp".into(),
        status: Some("completed".into()),
        usage: &api_usage,
        output: &output,
        steered: None,
        incomplete_reason: None,
    };
    assert_eq!(
        text(&completed),
        json!({"step": 1, "attempt": 1, "response_id": "resp", "status": "completed",
               "usage": api_usage, "output": output})
        .to_string()
    );
}

#[test]
fn dedup_keys_come_with_the_payload_type() {
    let key = |event: &dyn Fn() -> NewEvent| event().dedup_key;
    assert_eq!(
        key(&|| RunCompleted {
            text: String::new(),
            usage: TokenUsage::default(),
            steps: 0,
            structured: false,
            output: None,
        }
        .to_event("t")
        .unwrap()),
        Some(RUN_END_KEY.to_string())
    );
    assert_eq!(
        RunFailed {
            error: String::new(),
            usage: TokenUsage::default()
        }
        .dedup_key(),
        Some("run-end".into())
    );
    assert_eq!(
        ApprovalDecided::new(
            "c",
            1,
            "h",
            Decision {
                approve: false,
                reason: None,
                by: None,
                scope: None
            }
        )
        .dedup_key(),
        Some("approval:c:1".into())
    );
    assert_eq!(
        SteerDropped {
            id: "s".into(),
            reason: String::new()
        }
        .dedup_key(),
        Some("steer-end:s".into())
    );
    assert_eq!(
        OutputRejected {
            step: 4,
            retry: 2,
            errors: Vec::new()
        }
        .dedup_key(),
        Some("output-rejected:4".into())
    );
    assert_eq!(
        RunPaused {
            reason: PauseReason::Approval,
            detail: String::new()
        }
        .dedup_key(),
        None
    );
}

#[test]
fn reading_is_lenient_on_added_fields_and_strict_on_what_readers_need() {
    // A boundary steer journaled before `via` existed reads with none.
    let applied = json!({"id": "s1", "step": 2, "revision": 1});
    assert_eq!(
        parse(crate::run::kinds::STEER_APPLIED, &applied),
        RunEvent::SteerApplied(SteerApplied {
            id: "s1".into(),
            step: 2,
            revision: 1,
            via: None,
            response_id: None
        })
    );
    // A run's end whose usage lacks a count (another version's, or edited) still ends the
    // run: the missing count reads as 0, as a response's missing details do.
    let completed = json!({"text": "done", "usage": {"input_tokens": 5}, "steps": 1});
    let RunEvent::Completed(read) = parse(crate::run::kinds::RUN_COMPLETED, &completed) else {
        panic!("not a run.completed");
    };
    assert_eq!(read.usage.input_tokens, 5);
    assert_eq!(read.usage.total_tokens, 0);
    let failed = json!({"error": "gone", "usage": {}});
    assert!(matches!(
        parse(crate::run::kinds::RUN_FAILED, &failed),
        RunEvent::Failed(_)
    ));
    // A pause whose reason no version wrote is an error, not a guess.
    let paused = json!({"reason": "coffee", "detail": ""});
    assert!(RunEvent::parse(crate::run::kinds::RUN_PAUSED, &paused).is_err());
    // A kind the host does not read is none of its business.
    assert!(
        RunEvent::parse("turn.started", &json!({}))
            .unwrap()
            .is_none()
    );
    // A step's output is borrowed, not copied.
    let completed = json!({"step": 1, "output": [{"type": "function_call", "call_id": "c1",
        "name": "shell", "arguments": "{}"}]});
    let RunEvent::ModelCompleted(read) = parse(crate::run::kinds::MODEL_COMPLETED, &completed)
    else {
        panic!("not a model.completed");
    };
    assert!(std::ptr::eq(
        read.output.as_ptr(),
        completed["output"].as_array().unwrap().as_ptr()
    ));
    let calls: Vec<_> = read.function_calls().map(|c| c.call_id).collect();
    assert_eq!(calls, ["c1"]);
    // A compaction's checkpoint is noticed, not copied.
    let compacted = json!({"step": 3, "output": [], "checkpoint": {"version": 1}});
    let RunEvent::ContextCompacted(read) = parse(crate::run::kinds::CONTEXT_COMPACTED, &compacted)
    else {
        panic!("not a context.compacted");
    };
    assert!(read.carries_checkpoint);
    assert!(read.checkpoint.is_none());
}

#[test]
fn run_created_flattens_the_spec_and_reads_it_back() {
    let created = json!({"prompt": "p", "model": "m", "workspace": "/w",
        "tools": [{"name": "shell", "description": "d", "parameters": {"type": "object"},
                   "policy": "ask", "retry_safe": false}],
        "approval": "default", "budgets": {"max_steps": 5}, "run_id": "r",
        "owner": {"host": "h", "pid": 1}});
    let RunEvent::Created(read) = parse(crate::run::kinds::RUN_CREATED, &created) else {
        panic!("not a run.created");
    };
    assert_eq!(read.run_id, "r");
    assert_eq!(read.spec.tools.len(), 1);
    assert_eq!(read.spec.transport, crate::run::Transport::Http);
    assert_eq!(read.owner.as_ref().map(|o| o.pid), Some(1));
    let again: Value = serde_json::from_str(&text(&*read)).unwrap();
    assert_eq!(again["transport"], "http");
    assert_eq!(again["run_id"], "r");
}

/// Values a run journals verbatim (a tool's value or error, a structured answer, a
/// compaction's or a steered response's items, an API's error and usage) read back as
/// written, also an object whose first key is one of `serde_json`'s private tokens (which
/// a Rust tool's map keyed by file names can start with): `serde_json` alone reads it as
/// the JSON its string holds, or refuses the event.
#[test]
fn verbatim_values_read_back_as_written() {
    use crate::run::kinds as k;
    let odd = json!({"$serde_json::private::RawValue": "not json", "b": 1});
    let completed = json!({"call_id": "c1", "started": true, "value": odd});
    let RunEvent::ToolEnded(ended) = parse("tool.completed", &completed) else {
        panic!("not a tool.completed");
    };
    assert_eq!(ended.value.as_ref(), Some(&odd));
    let failed = json!({"call_id": "c1", "error": odd});
    let RunEvent::ToolEnded(ended) = parse("tool.failed", &failed) else {
        panic!("not a tool.failed");
    };
    assert_eq!(ended.error.as_ref(), Some(&odd));
    let run = json!({"text": "", "output": odd});
    let RunEvent::Completed(run) = parse(k::RUN_COMPLETED, &run) else {
        panic!("not a run.completed");
    };
    assert_eq!(run.output.as_ref(), Some(&odd));
    let model = json!({"message": "", "error": odd, "usage": odd});
    let RunEvent::ModelFailed(model) = parse(k::MODEL_FAILED, &model) else {
        panic!("not a model.failed");
    };
    assert_eq!(
        (model.error.as_ref(), model.usage.as_ref()),
        (Some(&odd), Some(&odd))
    );
    let compacted = json!({"step": 3, "output": [odd]});
    let RunEvent::ContextCompacted(compacted) = parse(k::CONTEXT_COMPACTED, &compacted) else {
        panic!("not a context.compacted");
    };
    assert_eq!(compacted.output, std::slice::from_ref(&odd));
    let steered = json!({"step": 1, "output": [],
        "steered": {"parent_response_id": "r0", "parent_output": [odd]}});
    let RunEvent::ModelCompleted(step) = parse(k::MODEL_COMPLETED, &steered) else {
        panic!("not a model.completed");
    };
    assert_eq!(step.steered.map(|s| s.parent_output), Some(vec![odd]));
}

#[test]
fn a_structured_answer_is_its_text_and_an_older_journals_parsed_output_still_reads() {
    let RunEvent::Completed(run) = parse(
        k::RUN_COMPLETED,
        &json!({"text": "{ \"n\": 12345678901234567890123 }", "structured": true}),
    ) else {
        panic!("not a run.completed");
    };
    assert_eq!(
        run.answer().unwrap().get(),
        r#"{"n":12345678901234567890123}"#
    );
    let RunEvent::Completed(old) = parse(
        k::RUN_COMPLETED,
        &json!({"text": "{\"n\": 1}", "output": {"n": 1}}),
    ) else {
        panic!("not a run.completed");
    };
    assert_eq!(old.answer().unwrap().get(), r#"{"n":1}"#);
    let RunEvent::Completed(plain) = parse(k::RUN_COMPLETED, &json!({"text": "{}"})) else {
        panic!("not a run.completed");
    };
    assert!(plain.answer().is_none());
}
