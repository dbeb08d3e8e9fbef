use agent_responses::types::{FunctionCallOutput, FunctionTool, ToolDefinition};
use agent_runtime::events as rt;
use serde_json::{Value, json};

use super::*;
use crate::run::kinds as k;
use crate::run::state::SteerStatus;
use crate::run::test_events::ev;
use crate::tools::{Policy, ToolSpec};

/// Two steps, each a call and its result; a steer applied before step 2 and one before
/// step 3; instructions and one tool.
fn two_steps() -> (RunState, RunSpec) {
    let call = |step: u64| {
        json!({"type": "function_call", "id": format!("fc{step}"), "call_id": format!("c{step}"),
               "name": "list_dir", "arguments": "{\"path\":\".\"}", "status": "completed"})
    };
    let mut seq = 0;
    let mut next = |kind: &str, payload: Value| {
        seq += 1;
        ev(seq, kind, payload)
    };
    let mut events = vec![next(
        k::RUN_CREATED,
        json!({"prompt": "do it", "model": "m", "instructions": "be brief", "workspace": "/w",
               "tools": [], "approval": "default", "budgets": {"max_steps": 50},
               "owner": {"host": "h", "pid": 1}}),
    )];
    for step in 1..=2u64 {
        if step == 2 {
            events.push(next(
                k::STEER_REQUESTED,
                json!({"id": "s1", "text": "use tabs"}),
            ));
            events.push(next(k::STEER_APPLIED, json!({"id": "s1", "step": 2})));
        }
        let (c, fc) = (format!("c{step}"), call(step));
        events.push(next(
            k::MODEL_REQUESTED,
            json!({"step": step, "attempt": 1}),
        ));
        events.push(next(
            k::MODEL_COMPLETED,
            json!({"step": step, "response_id": format!("resp{step}"), "output": [fc]}),
        ));
        events.push(next(
            rt::TOOL_SCHEDULED,
            json!({"turn_id": "t1", "call_id": c}),
        ));
        events.push(next(
            rt::TOOL_COMPLETED,
            json!({"turn_id": "t1", "call_id": c, "value": format!("out of {c}")}),
        ));
    }
    events.push(next(
        k::STEER_REQUESTED,
        json!({"id": "s2", "text": "wrap up"}),
    ));
    events.push(next(k::STEER_APPLIED, json!({"id": "s2", "step": 3})));
    let state = RunState::from_events("r", &events);
    let mut spec = RunSpec::clone(state.spec.as_deref().expect("the run's spec"));
    spec.tools.push(ToolSpec {
        name: "list_dir".into(),
        description: "List a directory.".into(),
        parameters: crate::RawJson::from_value(
            &json!({"type": "object", "properties": {"path": {"type": ["string", "null"]}},
                "required": ["path"], "additionalProperties": false}),
        ),
        policy: Policy::Auto,
        retry_safe: true,
        mcp: None,
        strict: true,
    });
    (state, spec)
}

#[test]
fn the_body_sends_the_history_in_order_with_the_typed_shapes_of_its_parts() {
    let (state, spec) = two_steps();
    let body: Value = serde_json::from_slice(&request_body(&state, &spec, true).unwrap()).unwrap();
    let output = |c: &str| {
        serde_json::to_value(Item::FunctionCallOutput(FunctionCallOutput::new(
            c,
            format!("out of {c}"),
            None,
        )))
        .unwrap()
    };
    let user = |text: &str| serde_json::to_value(Item::Message(MessageItem::user(text))).unwrap();
    let fc = |step: u64| state.steps[step as usize - 1].output[0].to_value().unwrap();
    assert_eq!(
        body["input"],
        json!([
            user("do it"),
            fc(1),
            output("c1"),
            user("use tabs"),
            fc(2),
            output("c2"),
            user("wrap up")
        ])
    );
    let tool = ToolDefinition::Function(FunctionTool::new(
        "list_dir",
        "List a directory.",
        spec.tools[0].parameters.to_value().unwrap(),
    ));
    assert_eq!(body["tools"], json!([serde_json::to_value(tool).unwrap()]));
    assert_eq!(body["model"], "m");
    assert_eq!(body["instructions"], "be brief");
    assert_eq!(body["stream"], true);
    assert_eq!(body.as_object().unwrap().len(), 5, "{body}");
}

#[test]
fn the_typed_request_is_the_body_without_stream() {
    let (state, spec) = two_steps();
    let typed = serde_json::to_value(build_request(&state, &spec).unwrap()).unwrap();
    let mut body: Value =
        serde_json::from_slice(&request_body(&state, &spec, true).unwrap()).unwrap();
    body.as_object_mut().unwrap().remove("stream");
    assert_eq!(typed, body);
}

#[test]
fn the_body_is_held_in_a_buffer_of_its_exact_size() {
    let (state, spec) = two_steps();
    for stream in [false, true] {
        let body = request_body(&state, &spec, stream).unwrap();
        assert_eq!(body.capacity(), body.len());
        assert!(serde_json::from_slice::<Value>(&body).is_ok());
    }
}

#[test]
fn the_digest_is_of_the_bytes_the_body_encodes() {
    let (state, spec) = two_steps();
    for stream in [false, true] {
        let body = request_body(&state, &spec, stream).unwrap();
        let digest = request_digest(&state, &spec, stream).unwrap();
        assert_eq!(digest.len, body.len());
        assert_eq!(digest.sha256, crate::run::digest::sha256_hex(&body));
        assert_eq!(digest.sha256.len(), 64);
        let sized = encode_sized(&state, &spec, stream, digest.len).unwrap();
        assert_eq!((sized.len(), sized.capacity()), (body.len(), body.len()));
    }
    // A different history is a different digest.
    let (mut later, _) = two_steps();
    later.steps.pop();
    assert_ne!(
        request_digest(&later, &spec, true).unwrap(),
        request_digest(&state, &spec, true).unwrap()
    );
}

#[test]
fn hashes_are_lowercase_hex_sha256() {
    assert_eq!(
        crate::run::digest::sha256_hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

/// A long run steered before every step, and every answer rejected: the request is written
/// whole, the last steer in it, its length the digest's. (It took seconds here when every
/// step looked through every steer and every rejection; speed is the benches' to show, so
/// this test does not time it.)
#[test]
fn a_request_after_many_steers_is_written_whole() {
    let n: u64 = 60_000;
    let (mut state, spec) = two_steps();
    state.calls.clear();
    state.steps = (1..=n)
        .map(|step| crate::run::state::StepRecord {
            step,
            response_id: format!("resp{step}"),
            output: Vec::new(),
            usage: Default::default(),
            incomplete: None,
        })
        .collect();
    state.steers = (1..=n + 1)
        .map(|step| crate::run::SteerRecord {
            id: format!("s{step}"),
            text: format!("steer {step}"),
            status: SteerStatus::Applied { step },
        })
        .collect();
    state.rejections = (1..=n)
        .map(|step| crate::run::state::RejectionRecord {
            step,
            errors: vec![format!("error {step}")],
        })
        .collect();
    let digest = request_digest(&state, &spec, false).unwrap();
    let body = request_body(&state, &spec, false).unwrap();
    assert_eq!(body.len(), digest.len);
    let text = String::from_utf8(body).unwrap();
    let last = format!("steer {}", n + 1);
    assert!(
        text.contains(&last),
        "the steer before the next step is sent"
    );
}
