//! The client against the test MCP server of `agent-testkit` (its misbehaviours are chosen
//! by environment variables; build it with `cargo build -p agent-testkit --bins`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_runtime::{CancellationToken, JobKey, Tool as _, ToolContext, ToolFailure};
use serde_json::json;

use super::client::{CallError, ServerHandle};
use super::listing::ListError;
use super::tool::McpTool;
use super::*;
use crate::tools::ServerConfig;

fn config(env: &[(&str, &str)], timeout: Duration) -> ServerConfig {
    ServerConfig {
        name: "t".into(),
        command: agent_testkit::test_mcp_server().display().to_string(),
        args: Vec::new(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        sandbox: Mode::Off,
        tool_timeout: timeout,
        source: "test".into(),
    }
}

fn handle(dir: &Path, env: &[(&str, &str)], timeout: Duration) -> Arc<ServerHandle> {
    ServerHandle::new(config(env, timeout), SandboxSpec::default(), dir)
}

async fn discovered(dir: &Path, env: &[(&str, &str)]) -> Discovered {
    let tools = ToolConfig {
        servers: BTreeMap::from([("t".into(), config(env, Duration::from_secs(20)))]),
        ..ToolConfig::default()
    };
    discover(
        &tools,
        dir,
        ApprovalMode::Default,
        &SandboxSpec::default(),
        &CancellationToken::new(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn tools_are_strict_only_when_their_schema_qualifies() {
    let dir = tempfile::tempdir().unwrap();
    let found = discovered(dir.path(), &[]).await;
    let spec = |name: &str| found.specs.iter().find(|s| s.name == name).unwrap();
    // `lookup`'s schema closes its object and requires every property; `delete_item`'s
    // leaves `additionalProperties` open, which the API refuses under `strict`.
    assert!(spec("t__lookup").strict);
    assert!(!spec("t__delete_item").strict);
    assert!(!spec("t__wait_idem").strict);
    // As `run.created` records them: a resume reads back what was sent; a tool recorded
    // before the choice (no `strict`) reads as strict, as it was sent then.
    let recorded = serde_json::to_value(spec("t__delete_item")).unwrap();
    assert_eq!(recorded["strict"], false);
    let back: ToolSpec = serde_json::from_value(recorded.clone()).unwrap();
    assert!(!back.strict);
    let mut old = recorded;
    old.as_object_mut().unwrap().remove("strict");
    assert!(serde_json::from_value::<ToolSpec>(old).unwrap().strict);
    found.servers.shutdown().await;
}

#[tokio::test]
async fn a_tool_without_schema_is_skipped_and_the_others_kept() {
    let dir = tempfile::tempdir().unwrap();
    let found = discovered(dir.path(), &[("AGENTCTL_TEST_MCP_LIST", "no_schema")]).await;
    let names: Vec<&str> = found.specs.iter().map(|s| &*s.name).collect();
    assert!(names.contains(&"t__lookup"), "{names:?}");
    assert!(!names.contains(&"t__no_schema"), "{names:?}");
    assert_eq!(found.tools.len(), found.specs.len());
    found.servers.shutdown().await;
}

#[tokio::test]
async fn listing_ends_on_a_hang_a_repeated_cursor_and_endless_pages() {
    let dir = tempfile::tempdir().unwrap();
    let list = |mode: &'static str, timeout: Duration| {
        let h = handle(dir.path(), &[("AGENTCTL_TEST_MCP_LIST", mode)], timeout);
        async move {
            let started = Instant::now();
            let listed = h.list_tools().await;
            h.shutdown().await;
            (listed, started.elapsed())
        }
    };
    let (hung, took) = list("hang", Duration::from_secs(1)).await;
    let err = hung.unwrap_err();
    assert!(
        matches!(err, ListError::TimedOut { pages: 0, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("within 1 s"), "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");

    let (same, _) = list("same_cursor", Duration::from_secs(20)).await;
    assert!(
        matches!(same, Err(ListError::RepeatedCursor { page: 2 })),
        "{same:?}"
    );
    let (endless, _) = list("endless_cursor", Duration::from_secs(20)).await;
    let err = endless.unwrap_err();
    assert!(matches!(err, ListError::TooManyPages), "{err:?}");
    assert!(err.to_string().contains("nextCursor"), "{err}");
}

fn context() -> ToolContext {
    ToolContext {
        key: Arc::new(JobKey {
            thread: "th".into(),
            turn: "tu".into(),
            call_id: "c".into(),
        }),
        revision: 0,
        cancel: CancellationToken::new(),
    }
}

#[tokio::test]
async fn a_huge_json_rpc_error_is_capped() {
    let dir = tempfile::tempdir().unwrap();
    let server = handle(
        dir.path(),
        &[("AGENTCTL_TEST_MCP_RPC_ERROR_BYTES", "3000000")],
        Duration::from_secs(20),
    );
    let tool = McpTool {
        name: "t__rpc_error".into(),
        remote: "rpc_error".into(),
        server: server.clone(),
        retry_safe: true,
    };
    let failed = tool.call(json!({}), context()).await;
    server.shutdown().await;
    let Err(ToolFailure(text)) = failed else {
        panic!("{failed:?}")
    };
    assert!(text.len() <= RESULT_CAP + 1024, "{} bytes", text.len());
    assert!(
        text.contains("JSON-RPC error -32000: xxx"),
        "{}",
        &text[..200]
    );
    assert!(text.ends_with("bytes of the result truncated ...]"));
}

/// The processes whose working directory is `dir` (every process a server started there,
/// its watchdog included).
fn processes_in(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd == dir) {
            let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(format!(
                "{pid} {}",
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            ));
        }
    }
    found
}

/// A server whose handle is dropped without `shutdown` (a drive dropped mid-run: a worker
/// that lost the run's lease) leaves no process behind while the host lives on: its whole
/// group is killed, the watchdog included, not only the process the handle started.
#[tokio::test]
async fn a_server_dropped_without_shutdown_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    for _ in 0..3 {
        let server = handle(&cwd, &[], Duration::from_secs(20));
        server.list_tools().await.unwrap();
        assert!(!processes_in(&cwd).is_empty(), "the server runs in {cwd:?}");
        drop(server);
    }
    // A bound for a broken build, not a measure of speed.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut left = processes_in(&cwd);
    while !left.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = processes_in(&cwd);
    }
    assert!(left.is_empty(), "left behind: {left:#?}");
}

/// Waits until `file` in `dir` holds `text` (a bound for a broken build only).
async fn wait_for(dir: &Path, file: &str, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(dir.join(file)).is_ok_and(|t| t.contains(text)) {
        assert!(Instant::now() < deadline, "{file} never held {text:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until no process runs in `dir` (a bound for a broken build only), else fails
/// listing them.
async fn assert_none_left(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut left = processes_in(dir);
    while !left.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = processes_in(dir);
    }
    assert!(left.is_empty(), "left behind: {left:#?}");
}

/// An interrupted call stops its effect, as `shell` does its command's: the server is
/// killed (group and all) as soon as the call gives up, not when the run's shutdown gets to
/// it, so a destructive tool does not finish its work; the next call starts it again.
#[tokio::test]
async fn an_interrupted_call_kills_the_server_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let server = handle(
        &cwd,
        &[("AGENTCTL_TEST_MCP_GRANDCHILD", "1")],
        Duration::from_secs(600),
    );
    let cancel = CancellationToken::new();
    let interrupt = {
        let (cwd, cancel) = (cwd.clone(), cancel.clone());
        tokio::spawn(async move {
            wait_for(&cwd, "mcp-calls.log", "start deploy").await;
            cancel.cancel();
        })
    };
    let args = json!({"tag": "deploy", "ms": 120_000});
    let called = server
        .call("wait_write", args.as_object().unwrap().clone(), &cancel)
        .await;
    interrupt.await.unwrap();
    assert!(matches!(called, Err(CallError::Cancelled)), "{called:?}");
    // The handle is still held (no shutdown yet): nothing of the server runs on.
    assert_none_left(&cwd).await;
    let log = std::fs::read_to_string(cwd.join("mcp-calls.log")).unwrap();
    assert!(!log.contains("end deploy"), "{log}");

    let args = json!({"key": "k"});
    let again = server
        .call(
            "lookup",
            args.as_object().unwrap().clone(),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(result_text(&again), "value of k: k-42");
    let pids = std::fs::read_to_string(cwd.join("mcp-pids.log")).unwrap();
    assert_eq!(pids.lines().count(), 2, "{pids}");
    server.shutdown().await;
}

/// A call interrupted while its server starts (it hangs in `initialize`) leaves no process
/// of it: the watchdog and what the server started die with the start given up, not only
/// the process the handle spawned.
#[tokio::test]
async fn a_start_interrupted_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let server = handle(
        &cwd,
        &[
            ("AGENTCTL_TEST_MCP_INIT", "hang"),
            ("AGENTCTL_TEST_MCP_GRANDCHILD", "1"),
        ],
        Duration::from_secs(600),
    );
    let cancel = CancellationToken::new();
    let interrupt = {
        let (cwd, cancel) = (cwd.clone(), cancel.clone());
        tokio::spawn(async move {
            // The server runs, and so does what it started.
            wait_for(&cwd, "mcp-grandchildren.log", "\n").await;
            cancel.cancel();
        })
    };
    let called = server.call("lookup", serde_json::Map::new(), &cancel).await;
    interrupt.await.unwrap();
    assert!(matches!(called, Err(CallError::Cancelled)), "{called:?}");
    assert_none_left(&cwd).await;
    drop(server);
}

/// An interrupt (Ctrl-C, SIGTERM) while a new run starts its servers ends the start at once
/// (a server hanging in `initialize` does not hold it off for its 30 s): the error says no
/// run exists, and no process of the server is left.
#[tokio::test]
async fn an_interrupt_while_a_run_starts_its_servers_ends_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let env = [
        ("AGENTCTL_TEST_MCP_INIT", "hang"),
        ("AGENTCTL_TEST_MCP_GRANDCHILD", "1"),
    ];
    let tools = ToolConfig {
        servers: BTreeMap::from([("t".into(), config(&env, Duration::from_secs(600)))]),
        ..ToolConfig::default()
    };
    let key = agent_responses::ApiKey::new("sk-never-used").unwrap();
    let client = agent_responses::Client::new(agent_responses::ClientConfig::new(
        "http://127.0.0.1:9/v1".to_string(),
        key,
    ))
    .unwrap();
    let journal = agent_journal::Journal::open("memory:").await.unwrap();
    let host = crate::run::Host::new(journal, client).with_tools(tools);
    let opts = crate::run::DriveOptions::default();
    let interrupt = {
        let (cwd, cancel) = (cwd.clone(), opts.cancel.clone());
        tokio::spawn(async move {
            wait_for(&cwd, "mcp-grandchildren.log", "\n").await;
            cancel.cancel();
        })
    };
    let started = host.start(crate::run::NewRun::new("hi", &cwd), opts).await;
    interrupt.await.unwrap();
    let Err(err) = started else {
        panic!("a run was started")
    };
    assert!(
        matches!(err, crate::HostError::McpStart { ref server, .. } if server == "t"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("interrupted while it was starting") && text.contains("no run was created"),
        "{text}"
    );
    assert_none_left(&cwd).await;
}

/// An answer rmcp's codec would drop without a word (and the call wait out its timeout, its
/// effect "unknown") reaches the call: a lone surrogate escape mended to U+FFFD, an answer
/// over 16 MiB as an error saying so.
#[tokio::test]
async fn answers_rmcp_would_drop_reach_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let args = || json!({"key": "k"}).as_object().unwrap().clone();
    let cut = handle(
        dir.path(),
        &[("AGENTCTL_TEST_MCP_LONE_SURROGATE", "1")],
        Duration::from_secs(20),
    );
    let answer = cut.call("lookup", args(), &CancellationToken::new()).await;
    cut.shutdown().await;
    assert_eq!(result_text(&answer.unwrap()), "cut \u{fffd}");

    let huge = handle(
        dir.path(),
        &[("AGENTCTL_TEST_MCP_LOOKUP_BYTES", "17000000")],
        Duration::from_secs(20),
    );
    let answer = huge.call("lookup", args(), &CancellationToken::new()).await;
    let Err(CallError::Answered(text)) = answer else {
        panic!("{answer:?}")
    };
    assert!(
        text.contains("16 MiB") && text.contains("the call ran"),
        "{text}"
    );
    // The connection stays: the next call is answered by the same server.
    let next = huge
        .call("fail", serde_json::Map::new(), &CancellationToken::new())
        .await;
    assert_eq!(next.unwrap().is_error, Some(true));
    huge.shutdown().await;
    let pids = std::fs::read_to_string(dir.path().join("mcp-pids.log")).unwrap();
    assert_eq!(pids.lines().count(), 2, "{pids}");
}
