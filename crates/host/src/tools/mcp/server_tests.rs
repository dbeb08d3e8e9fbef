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
