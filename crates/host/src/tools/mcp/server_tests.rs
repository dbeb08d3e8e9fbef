//! The client against the test MCP server of `agent-testkit` (its misbehaviours are chosen
//! by environment variables; build it with `cargo build -p agent-testkit --bins`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_runtime::{CancellationToken, JobKey, Tool as _, ToolContext, ToolFailure};
use serde_json::json;

use super::client::ServerHandle;
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
    discover(&tools, dir, ApprovalMode::Default, &SandboxSpec::default())
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
