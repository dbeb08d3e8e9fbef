//! `RuntimeExecutor` against the real runtime, on a SQLite journal file and on `memory:`:
//! the model's call_id is the runtime's idempotency key, so a tool runs once per call_id,
//! also across a new runtime over the same journal; failures stay failures.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_host::executor::RuntimeExecutor;
use agent_journal::Journal;
use agent_responses::loops::{ExecutorFailure, ToolExecutor};
use agent_runtime::{Runtime, RuntimeOptions, Tool, ToolContext, ToolRegistry};
use futures::future::BoxFuture;
use serde_json::{Value, json};

/// `count {"n": N}`: returns `{"n": N, "run": K}` where K counts its runs.
struct Counting(Arc<AtomicUsize>);

impl Tool for Counting {
    fn name(&self) -> &str {
        "count"
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        match args.get("n") {
            Some(Value::Number(_)) => Ok(()),
            _ => Err("`n` must be a number".into()),
        }
    }

    fn call(
        &self,
        args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, agent_runtime::ToolFailure>> {
        let run = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move { Ok(json!({"n": args["n"], "run": run})) })
    }
}

/// `broken`: always fails, counting its runs.
struct Broken(Arc<AtomicUsize>);

impl Tool for Broken {
    fn name(&self) -> &str {
        "broken"
    }

    fn validate(&self, _args: &Value) -> Result<(), String> {
        Ok(())
    }

    fn call(
        &self,
        _args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, agent_runtime::ToolFailure>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Err(agent_runtime::ToolFailure("disk on fire".into())) })
    }
}

#[derive(Clone, Default)]
struct Runs {
    count: Arc<AtomicUsize>,
    broken: Arc<AtomicUsize>,
}

impl Runs {
    fn options(&self) -> RuntimeOptions {
        RuntimeOptions::default().tools(
            ToolRegistry::new()
                .with(Counting(self.count.clone()))
                .with(Broken(self.broken.clone())),
        )
    }
}

const THREAD: &str = "responses-loop";

/// A runtime over `journal` with a running turn, and an executor for that turn.
async fn started(journal: &Journal, runs: &Runs) -> (Runtime, RuntimeExecutor) {
    let runtime = Runtime::recover(journal.clone(), runs.options())
        .await
        .unwrap();
    let turn = runtime.start(THREAD).await.unwrap();
    let executor = RuntimeExecutor::new(runtime.clone(), THREAD, turn);
    (runtime, executor)
}

/// The same call_id twice runs the tool once and answers the same output; other
/// arguments under that call_id are refused; failures are failures.
async fn runs_once_per_call_id(journal: &Journal, runs: &Runs) -> (Runtime, RuntimeExecutor) {
    let (runtime, executor) = started(journal, runs).await;
    let first = executor
        .call("call_1", "count", r#"{"n": 7}"#)
        .await
        .unwrap();
    let again = executor
        .call("call_1", "count", r#"{ "n" : 7 }"#)
        .await
        .unwrap();
    assert_eq!(first, again);
    assert_eq!(
        serde_json::from_str::<Value>(&first).unwrap(),
        json!({"n": 7, "run": 1})
    );
    assert_eq!(runs.count.load(Ordering::SeqCst), 1);

    let collision = executor
        .call("call_1", "count", r#"{"n": 8}"#)
        .await
        .unwrap_err();
    assert!(collision.message.contains("call_1"), "{collision}");
    assert_eq!(runs.count.load(Ordering::SeqCst), 1);

    let other = executor
        .call("call_2", "count", r#"{"n": 8}"#)
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&other).unwrap(),
        json!({"n": 8, "run": 2})
    );

    for _ in 0..2 {
        let failure = executor.call("call_3", "broken", "{}").await.unwrap_err();
        assert_eq!(failure, ExecutorFailure::new("disk on fire"));
    }
    assert_eq!(
        runs.broken.load(Ordering::SeqCst),
        1,
        "a failed call is not re-run either"
    );

    let unknown = executor.call("call_4", "rm", "{}").await.unwrap_err();
    assert!(unknown.message.contains("not allowed"), "{unknown}");
    let invalid = executor
        .call("call_5", "count", r#"{"n": "x"}"#)
        .await
        .unwrap_err();
    assert!(
        invalid.message.contains("`n` must be a number"),
        "{invalid}"
    );
    let malformed = executor
        .call("call_6", "count", "{not json")
        .await
        .unwrap_err();
    assert!(
        malformed.message.starts_with("invalid arguments"),
        "{malformed}"
    );
    assert_eq!(runs.count.load(Ordering::SeqCst), 2);

    // Every call is on record: scheduled, then its one terminal event.
    let kinds: Vec<String> = journal
        .replay(THREAD, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind.to_string())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "tool.scheduled").count(),
        3,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "tool.completed").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "tool.failed").count(),
        1,
        "{kinds:?}"
    );
    (runtime, executor)
}

/// After a restart, the recorded calls answer from the journal without running again.
async fn answers_from_the_journal_after_a_restart(
    journal: &Journal,
    runs: &Runs,
    turn_of: &RuntimeExecutor,
    first: &str,
) {
    let runtime = Runtime::recover(journal.clone(), runs.options())
        .await
        .unwrap();
    let executor = RuntimeExecutor::new(runtime.clone(), turn_of.thread(), turn_of.turn());
    let replayed = executor
        .call("call_1", "count", r#"{"n": 7}"#)
        .await
        .unwrap();
    assert_eq!(replayed, first);
    let failure = executor.call("call_3", "broken", "{}").await.unwrap_err();
    assert_eq!(failure, ExecutorFailure::new("disk on fire"));
    assert_eq!(runs.count.load(Ordering::SeqCst), 2);
    assert_eq!(runs.broken.load(Ordering::SeqCst), 1);
    // The old turn was interrupted by the restart: a new call in it is refused, not run.
    let refused = executor
        .call("call_7", "count", r#"{"n": 1}"#)
        .await
        .unwrap_err();
    assert!(refused.message.contains("inactive turn"), "{refused}");
    assert_eq!(runs.count.load(Ordering::SeqCst), 2);
    runtime.close().await;
}

#[tokio::test]
async fn sqlite_a_call_id_runs_once_also_across_a_new_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("journal.db").display());
    let runs = Runs::default();
    let journal = Journal::open(&url).await.unwrap();
    let (runtime, executor) = runs_once_per_call_id(&journal, &runs).await;
    let first = executor
        .call("call_1", "count", r#"{"n": 7}"#)
        .await
        .unwrap();
    runtime.close().await;
    journal.close().await;

    // A new process: the same file, a recovered runtime.
    let journal = Journal::open(&url).await.unwrap();
    answers_from_the_journal_after_a_restart(&journal, &runs, &executor, &first).await;
    journal.close().await;
}

#[tokio::test]
async fn memory_a_call_id_runs_once_also_across_a_new_runtime() {
    let runs = Runs::default();
    let journal = Journal::open("memory:").await.unwrap();
    let (runtime, executor) = runs_once_per_call_id(&journal, &runs).await;
    let first = executor
        .call("call_1", "count", r#"{"n": 7}"#)
        .await
        .unwrap();
    runtime.close().await;
    // `memory:` lives as long as its handle: a new runtime over the same journal.
    answers_from_the_journal_after_a_restart(&journal, &runs, &executor, &first).await;
    journal.close().await;
}

#[tokio::test]
async fn concurrent_calls_with_one_call_id_run_the_tool_once() {
    let runs = Runs::default();
    let journal = Journal::open("memory:").await.unwrap();
    let (runtime, executor) = started(&journal, &runs).await;
    let calls = (0..8).map(|_| executor.call("call_same", "count", r#"{"n": 1}"#));
    let outputs = futures::future::join_all(calls).await;
    let first = outputs[0].clone().unwrap();
    assert!(outputs.iter().all(|o| o.as_ref() == Ok(&first)));
    assert_eq!(runs.count.load(Ordering::SeqCst), 1);
    runtime.close().await;
    journal.close().await;
}

/// A Responses direct loop over real HTTP (the emulator) with the runtime executor: the
/// model's call is journaled under its call_id, and a second loop that repeats that
/// call_id, from a new runtime over the same journal, gets the recorded output without a
/// second run.
#[tokio::test]
async fn a_responses_loop_runs_model_calls_through_the_runtime() {
    use agent_responses::loops::{LoopConfig, run_direct};
    use agent_responses::types::{FunctionTool, Item, MessageItem, ToolDefinition};
    use agent_responses::{ApiKey, Client, ClientConfig};
    use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};

    let script: Script = serde_json::from_value(json!({"rules": [
        {"times": 1, "reply": {"items": [{"type": "function_call", "call_id": "call_model_1",
            "name": "count", "arguments": "{\"n\":7}"}]}},
        {"reply": {"items": [{"type": "message", "content": [{"type": "output_text", "text": "done"}]}]}}]}))
    .unwrap();
    let config = LoopConfig::new(
        "gpt-test",
        None,
        vec![ToolDefinition::Function(FunctionTool::new(
            "count",
            "counts",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        ))],
    );
    let runs = Runs::default();
    let journal = Journal::open("memory:").await.unwrap();
    let mut turn = None;
    for round in 0..2 {
        let server = MockServer::start(MockConfig::new(script.clone()).with_api_key(MOCK_API_KEY))
            .await
            .unwrap();
        let client = Client::new(ClientConfig::new(
            server.base_url(),
            ApiKey::new(MOCK_API_KEY).unwrap(),
        ))
        .unwrap();
        let runtime = Runtime::recover(journal.clone(), runs.options())
            .await
            .unwrap();
        let turn_id = match &turn {
            Some(turn) => String::clone(turn),
            None => runtime.start(THREAD).await.unwrap(),
        };
        turn = Some(turn_id.clone());
        let executor = RuntimeExecutor::new(runtime.clone(), THREAD, turn_id);
        let input = vec![Item::Message(MessageItem::user("count seven"))];
        let outcome = run_direct(&client, &config, input, &executor)
            .await
            .unwrap();
        assert_eq!(outcome.response.output_text(), "done", "round {round}");
        let sent: Vec<Value> = server
            .requests()
            .into_iter()
            .filter(|r| r.path == "/v1/responses")
            .flat_map(|r| r.body["input"].as_array().cloned().unwrap_or_default())
            .filter(|i| i["type"] == "function_call_output")
            .collect();
        assert_eq!(sent.len(), 1, "round {round}");
        assert_eq!(sent[0]["call_id"], "call_model_1");
        let output: Value = serde_json::from_str(sent[0]["output"].as_str().unwrap()).unwrap();
        assert_eq!(output, json!({"n": 7, "run": 1}), "round {round}");
        runtime.close().await;
    }
    assert_eq!(runs.count.load(Ordering::SeqCst), 1);
    journal.close().await;
}
