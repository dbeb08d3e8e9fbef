//! Tool loops against the emulator over real HTTP, including the five API contract tests.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{response_bodies, start, start_with};
use agent_responses::ClientError;
use agent_responses::demo::{self, Mode, ScanTool};
use agent_responses::loops::{self, ExecutorFailure, LoopConfig, LoopError, ToolExecutor};
use agent_responses::sse::{Decoded, SseParser, decode_frame};
use agent_responses::types::{
    Caller, FunctionCall, Input, Item, MessageItem, ProgramCaller, StreamEvent,
};
use agent_responses_mock::{GateHandle, MOCK_API_KEY, MockConfig};
use serde_json::{Value, json};

fn config(mode: Mode) -> LoopConfig {
    LoopConfig::new(
        demo::MODEL,
        Some(demo::INSTRUCTIONS.into()),
        demo::definition(mode),
    )
}

fn prompt() -> Vec<Item> {
    vec![Item::Message(MessageItem::user(demo::LOOP_PROMPT))]
}

/// Counts executions and delegates to the demo `scan` tool.
#[derive(Default)]
struct Counting(AtomicUsize);

impl ToolExecutor for Counting {
    async fn call(
        &self,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> Result<String, ExecutorFailure> {
        self.0.fetch_add(1, Ordering::SeqCst);
        ScanTool.call(call_id, name, arguments).await
    }
    fn failure_output(&self, name: &str, failure: &ExecutorFailure) -> String {
        ScanTool.failure_output(name, failure)
    }
}

// ---- the five API contract tests ----

#[tokio::test]
async fn test_ptc_output_keeps_caller_and_error_shape() {
    let caller = Caller::Program(ProgramCaller {
        caller_id: "program-1".into(),
        extra: Default::default(),
    });
    let call: FunctionCall = serde_json::from_value(json!({"type": "function_call", "name": "scan", "call_id": "c1",
        "arguments": "{\"module\":\"bad\"}", "caller": {"type": "program", "caller_id": "program-1"}})).unwrap();
    let out = loops::output_for(&ScanTool, &call).await;
    assert_eq!(out.caller(), Some(&caller));
    let data: serde_json::Map<String, Value> = serde_json::from_str(&out.text()).unwrap();
    assert_eq!(data["ok"], false);
    let keys: BTreeSet<&str> = data.keys().map(String::as_str).collect();
    let schema = demo::output_schema();
    let required: BTreeSet<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(keys, required);
}

#[test]
fn test_modes_do_not_mix_async_and_ptc() {
    let as_json = |mode| serde_json::to_value(&demo::definition(mode)[0]).unwrap();
    assert_eq!(as_json(Mode::Async)["async"], true);
    assert!(as_json(Mode::Async).get("allowed_callers").is_none());
    assert!(as_json(Mode::Ptc).get("async").is_none());
    assert_eq!(
        as_json(Mode::Ptc)["allowed_callers"],
        json!(["programmatic"])
    );
}

#[test]
fn test_sse_comments_crlf_multiline_and_done() {
    let wire = b": keepalive\r\ndata: {\"type\":\r\ndata: \"demo\"}\r\n\r\ndata: [DONE]\r\n\r\n";
    let mut parser = SseParser::new();
    let mut frames = Vec::new();
    parser.push(wire, &mut frames).unwrap();
    parser.finish(&mut frames).unwrap();
    let decoded: Vec<Decoded> = frames.iter().map(|f| decode_frame(f).unwrap()).collect();
    let events: Vec<Value> = decoded
        .iter()
        .filter_map(|d| match d {
            Decoded::Event(e) => Some(serde_json::to_value(e).unwrap()),
            Decoded::Done => None,
        })
        .collect();
    assert_eq!(events, [json!({"type": "demo"})]);
    assert_eq!(decoded.last(), Some(&Decoded::Done));
}

#[tokio::test]
async fn test_compact_preserves_all_returned_items() {
    let packed = json!([{"type": "message", "role": "user", "content": "retained"},
                        {"type": "compaction", "encrypted_content": "opaque"}]);
    let (server, client) = start(json!({"rules": [
        {"when": {"endpoint": "compact"}, "reply": {"items": packed}},
        {"when": {"endpoint": "responses"}, "reply": {"items": []}}]}))
    .await;
    let outcome = loops::run_compact(
        &client,
        &config(Mode::Compact),
        vec![Item::Message(MessageItem::user(demo::COMPACT_PROMPT))],
        demo::COMPACT_FOLLOW_UP,
    )
    .await
    .unwrap();
    let bodies = response_bodies(&server);
    assert_eq!(bodies.len(), 2);
    let sent = bodies[1]["input"].as_array().unwrap();
    let returned = serde_json::to_value(&outcome.compacted.output).unwrap();
    assert_eq!(Value::Array(sent[..sent.len() - 1].to_vec()), returned);
    assert_eq!(returned[0]["content"], "retained");
    assert_eq!(returned[1]["encrypted_content"], "opaque");
    assert_eq!(sent.last().unwrap()["content"], demo::COMPACT_FOLLOW_UP);
}

/// Opens the emulator's gate when the tool runs: the stream only continues past the call item
/// if the call was dispatched while the stream was still open.
struct OpensGate(GateHandle, Arc<Mutex<Vec<String>>>);

impl ToolExecutor for OpensGate {
    async fn call(
        &self,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> Result<String, ExecutorFailure> {
        self.1.lock().unwrap().push(call_id.to_owned());
        self.0.open("after-call");
        ScanTool.call(call_id, name, arguments).await
    }
}

#[tokio::test]
async fn test_async_dispatch_before_stream_finishes() {
    let mut mock = MockConfig::for_mode("async")
        .unwrap()
        .with_api_key(MOCK_API_KEY);
    // Hold the stream right after the call's output_item.done (events: created, in_progress,
    // added, args delta x2, args done, done = 7) until the tool has been dispatched.
    mock.script.rules[0].fault = Some(
        serde_json::from_value(json!({"after_events": 7, "kind": "gate", "gate": "after-call"}))
            .unwrap(),
    );
    let (server, client) = start_with(mock).await;
    let submitted = Arc::new(Mutex::new(Vec::new()));
    let executor = Arc::new(OpensGate(server.gates(), Arc::clone(&submitted)));
    let mut completed_seen_with = None;
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        loops::run_async(
            &client,
            &config(Mode::Async),
            Input::Text(demo::ASYNC_PROMPT.into()),
            executor,
            |event| {
                if matches!(event, StreamEvent::Completed(_)) {
                    completed_seen_with = Some(submitted.lock().unwrap().clone());
                }
            },
        ),
    )
    .await
    .expect("deadlock: the call was not dispatched before the stream finished")
    .unwrap();
    assert_eq!(completed_seen_with, Some(vec!["call_async_api".to_owned()]));
    let bodies = response_bodies(&server);
    let follow = &bodies[1];
    assert_eq!(follow["previous_response_id"], json!(outcome.first.id));
    assert_eq!(follow["tool_choice"], "none");
    assert_eq!(follow["input"][0]["call_id"], "call_async_api");
    assert!(
        outcome
            .follow
            .output_text()
            .contains("fictional-fixture-v1")
    );
}

/// Never finishes; says when it started and when its future was dropped.
struct Hangs {
    started: Arc<tokio::sync::Notify>,
    dropped: Arc<AtomicUsize>,
}

struct CountsDrop(Arc<AtomicUsize>);

impl Drop for CountsDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl ToolExecutor for Hangs {
    async fn call(&self, _: &str, _: &str, _: &str) -> Result<String, ExecutorFailure> {
        let _dropped = CountsDrop(Arc::clone(&self.dropped));
        self.started.notify_one();
        std::future::pending().await
    }
}

#[tokio::test]
async fn dropping_an_async_run_stops_its_dispatched_calls() {
    let mut mock = MockConfig::for_mode("async")
        .unwrap()
        .with_api_key(MOCK_API_KEY);
    // The stream waits after the call's output_item.done, for a gate nobody opens.
    mock.script.rules[0].fault = Some(
        serde_json::from_value(json!({"after_events": 7, "kind": "gate", "gate": "never"}))
            .unwrap(),
    );
    let (_server, client) = start_with(mock).await;
    let started = Arc::new(tokio::sync::Notify::new());
    let dropped = Arc::new(AtomicUsize::new(0));
    let executor = Arc::new(Hangs {
        started: Arc::clone(&started),
        dropped: Arc::clone(&dropped),
    });
    let config = config(Mode::Async);
    let run = loops::run_async(
        &client,
        &config,
        Input::Text(demo::ASYNC_PROMPT.into()),
        executor,
        |_| {},
    );
    tokio::select! {
        _ = run => panic!("the run cannot finish: its stream waits at a closed gate"),
        () = started.notified() => {}
    }
    // The run's future is dropped; its dispatched call must stop, not run on detached.
    tokio::time::timeout(Duration::from_secs(10), async {
        while dropped.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the dispatched call kept running after the run was dropped");
}

// ---- direct / PTC loop ----

#[tokio::test]
async fn direct_fixture_story_keeps_history_verbatim() {
    let (server, client) = start_with(
        MockConfig::for_mode("direct")
            .unwrap()
            .with_api_key(MOCK_API_KEY),
    )
    .await;
    let executor = Counting::default();
    let outcome = loops::run_direct(&client, &config(Mode::Direct), prompt(), &executor)
        .await
        .unwrap();
    assert_eq!(outcome.turns, 2);
    assert_eq!(executor.0.load(Ordering::SeqCst), 2);
    assert!(outcome.response.output_text().contains("high 总数：2"));
    let bodies = response_bodies(&server);
    assert_eq!(bodies[0]["store"], false);
    assert_eq!(bodies[0]["include"], json!(["reasoning.encrypted_content"]));
    // The second request holds the first response's output exactly, then one output per call.
    let first_output = bodies.len();
    assert_eq!(first_output, 2);
    let input = bodies[1]["input"].as_array().unwrap();
    assert_eq!(input[1]["type"], "reasoning");
    assert!(
        input[1]["encrypted_content"]
            .as_str()
            .unwrap()
            .starts_with("enc-")
    );
    let outputs: Vec<&Value> = input
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    assert_eq!(outputs.len(), 2);
    assert!(
        outputs[0]["output"]
            .as_str()
            .unwrap()
            .contains("\"high\":2")
    );
}

#[tokio::test]
async fn repeated_call_id_uses_the_cached_output() {
    let call = json!({"type": "function_call", "call_id": "call_same", "name": "scan", "arguments": "{\"module\":\"api\"}"});
    let (server, client) = start(json!({"rules": [
        {"times": 2, "reply": {"items": [call]}},
        {"reply": {"items": [{"type": "message", "content": [{"type": "output_text", "text": "done"}]}]}}]})).await;
    let executor = Counting::default();
    let outcome = loops::run_direct(&client, &config(Mode::Direct), prompt(), &executor)
        .await
        .unwrap();
    assert_eq!(executor.0.load(Ordering::SeqCst), 1);
    assert_eq!(outcome.executions, 1);
    let bodies = response_bodies(&server);
    let outputs: Vec<Value> = bodies[2]["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .cloned()
        .collect();
    assert_eq!(outputs.len(), 2);
    assert_eq!(outputs[0], outputs[1]);
}

#[tokio::test]
async fn repeated_call_id_with_other_arguments_is_an_error() {
    let (_server, client) = start(json!({"rules": [
        {"times": 1, "reply": {"items": [{"type": "function_call", "call_id": "call_same", "name": "scan", "arguments": "{\"module\":\"api\"}"}]}},
        {"reply": {"items": [{"type": "function_call", "call_id": "call_same", "name": "scan", "arguments": "{\"module\":\"ui\"}"}]}}]})).await;
    let err = loops::run_direct(
        &client,
        &config(Mode::Direct),
        prompt(),
        &Counting::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, LoopError::CallIdCollision { ref call_id } if call_id == "call_same"),
        "{err}"
    );
}

#[tokio::test]
async fn the_turn_budget_is_twelve_model_turns() {
    let (server, client) = start(json!({"rules": [
        {"reply": {"items": [{"type": "function_call", "name": "scan", "arguments": "{\"module\":\"api\"}"}]}}]})).await;
    let err = loops::run_direct(
        &client,
        &config(Mode::Direct),
        prompt(),
        &Counting::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, LoopError::TurnBudget(12)), "{err}");
    assert_eq!(response_bodies(&server).len(), 12);
}

#[tokio::test]
async fn a_failing_tool_is_reported_as_a_failure() {
    let (server, client) = start(json!({"rules": [
        {"when": {"has_tool_outputs": false}, "reply": {"items": [
            {"type": "function_call", "call_id": "c_bad", "name": "scan", "arguments": "{\"module\":\"bad\"}"},
            {"type": "function_call", "call_id": "c_unknown", "name": "rm_rf", "arguments": "{}"}]}},
        {"reply": {"items": [{"type": "message", "content": [{"type": "output_text", "text": "工具失败：{{outputs}}"}]}]}}]})).await;
    let outcome = loops::run_direct(&client, &config(Mode::Direct), prompt(), &ScanTool)
        .await
        .unwrap();
    let bodies = response_bodies(&server);
    let outputs: Vec<Value> = bodies[1]["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| serde_json::from_str(i["output"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(
        outputs[0],
        json!({"ok": false, "module": "", "high": 0, "error": "invalid module", "source": "local-dispatcher"})
    );
    assert_eq!(outputs[1]["error"], "unknown tool");
    assert!(outcome.response.output_text().contains("invalid module"));
}

#[tokio::test]
async fn a_non_completed_response_stops_the_loop() {
    let (_server, client) =
        start(json!({"rules": [{"reply": {"items": [], "status": "incomplete"}}]})).await;
    let err = loops::run_direct(&client, &config(Mode::Direct), prompt(), &ScanTool)
        .await
        .unwrap_err();
    assert!(
        matches!(err, LoopError::NotCompleted { ref status } if status == "incomplete"),
        "{err}"
    );
}

#[tokio::test]
async fn ptc_echoes_the_caller_and_round_trips_the_program() {
    let (server, client) = start_with(
        MockConfig::for_mode("ptc")
            .unwrap()
            .with_api_key(MOCK_API_KEY),
    )
    .await;
    let outcome = loops::run_direct(&client, &config(Mode::Ptc), prompt(), &ScanTool)
        .await
        .unwrap();
    assert!(outcome.response.output_text().contains("high 总数：2"));
    assert!(
        outcome
            .history
            .iter()
            .any(|i| matches!(i, Item::ProgramOutput(_)))
    );
    let bodies = response_bodies(&server);
    assert_eq!(
        bodies[0]["tools"][1],
        json!({"type": "programmatic_tool_calling"})
    );
    let input = bodies[1]["input"].as_array().unwrap();
    let program = input.iter().find(|i| i["type"] == "program").unwrap();
    assert_eq!(program["fingerprint"], "fp_ptc_demo_0001");
    for out in input.iter().filter(|i| i["type"] == "function_call_output") {
        assert_eq!(
            out["caller"],
            json!({"type": "program", "caller_id": "call_prog_1"})
        );
    }
}

#[tokio::test]
async fn the_emulator_refuses_a_dropped_caller_or_a_changed_fingerprint() {
    let (_server, client) = start_with(
        MockConfig::for_mode("ptc")
            .unwrap()
            .with_api_key(MOCK_API_KEY),
    )
    .await;
    let mut request =
        agent_responses::types::CreateResponse::new(demo::MODEL, Input::Items(prompt()));
    request.tools = Some(demo::definition(Mode::Ptc));
    let first = client.create(&request).await.unwrap();
    let mut history = prompt();
    history.extend(first.output.clone());
    for item in &first.output {
        if let Item::FunctionCall(call) = item {
            history.push(Item::FunctionCallOutput(
                agent_responses::types::FunctionCallOutput::new(call.call_id.clone(), "{}", None),
            ));
        }
    }
    request.input = Some(Input::Items(history.clone()));
    let api = client
        .create(&request)
        .await
        .unwrap_err()
        .api()
        .unwrap()
        .clone();
    assert!(
        api.message.contains("must echo the caller"),
        "{}",
        api.message
    );
    let mut tampered = first.output.clone();
    for item in &mut tampered {
        if let Item::Program(p) = item {
            p.fingerprint = "fp_other".into();
        }
    }
    let mut history = prompt();
    history.extend(tampered);
    request.input = Some(Input::Items(history));
    let api = client
        .create(&request)
        .await
        .unwrap_err()
        .api()
        .unwrap()
        .clone();
    assert!(api.message.contains("fingerprint"), "{}", api.message);
}

// ---- async loop errors ----

async fn async_error(script: Value) -> LoopError {
    let (_server, client) = start(script).await;
    loops::run_async(
        &client,
        &config(Mode::Async),
        Input::Text("go".into()),
        Arc::new(ScanTool),
        |_| {},
    )
    .await
    .unwrap_err()
}

#[tokio::test]
async fn async_mode_stops_on_every_bad_stream() {
    let call = |id: &str, is_async: bool| json!({"type": "function_call", "call_id": id, "name": "scan", "arguments": "{\"module\":\"api\"}", "async": is_async});
    let err = async_error(json!({"rules": [{"reply": {"items": [call("c1", false)]}}]})).await;
    assert!(matches!(err, LoopError::NotAsync { .. }), "{err}");
    let err =
        async_error(json!({"rules": [{"reply": {"items": [call("c1", true), call("c1", true)]}}]}))
            .await;
    assert!(
        matches!(err, LoopError::DuplicateStreamCall { .. }),
        "{err}"
    );
    let err = async_error(
        json!({"rules": [{"reply": {"items": [call("c1", true)], "status": "failed"}}]}),
    )
    .await;
    assert!(
        matches!(err, LoopError::StreamFailed { ref event_type } if event_type == "response.failed"),
        "{err}"
    );
    let err = async_error(
        json!({"rules": [{"reply": {"items": [call("c1", true)], "status": "incomplete"}}]}),
    )
    .await;
    assert!(
        matches!(err, LoopError::StreamFailed { ref event_type } if event_type == "response.incomplete"),
        "{err}"
    );
    let err = async_error(json!({"rules": [{"reply": {"items": [call("c1", true)]}, "fault": {"after_events": 4, "kind": "error_event"}}]})).await;
    assert!(
        matches!(err, LoopError::Client(ClientError::StreamError(_))),
        "{err}"
    );
    let err = async_error(json!({"rules": [{"reply": {"items": [{"type": "message", "content": [{"type": "output_text", "text": "no call"}]}]}}]})).await;
    // A completed answer without a call is said as such, not as nothing observed.
    assert!(matches!(err, LoopError::NoAsyncCall), "{err}");
}

#[tokio::test]
async fn compact_fixture_story_lists_the_three_constraints() {
    let (server, client) = start_with(
        MockConfig::for_mode("compact")
            .unwrap()
            .with_api_key(MOCK_API_KEY),
    )
    .await;
    let outcome = loops::run_compact(
        &client,
        &config(Mode::Compact),
        vec![Item::Message(MessageItem::user(demo::COMPACT_PROMPT))],
        demo::COMPACT_FOLLOW_UP,
    )
    .await
    .unwrap();
    let text = outcome.follow.output_text();
    for constraint in ["Python 标准库", "只读分析", "不要修改任何文件"] {
        assert!(text.contains(constraint), "{text}");
    }
    assert!(
        matches!(outcome.follow_input.last(), Some(Item::Message(m)) if m.text() == demo::COMPACT_FOLLOW_UP)
    );
    let compact_body = server
        .requests()
        .into_iter()
        .find(|r| r.path == "/v1/responses/compact")
        .unwrap()
        .body;
    assert_eq!(
        compact_body["input"].as_array().unwrap().len(),
        3,
        "user message + reasoning + message"
    );
}
