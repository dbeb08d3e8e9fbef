//! The test MCP server answers the handshake and a call over stdio, and leaves its pid in
//! its working directory. Being this crate's integration test also makes `cargo test` build
//! the server binary, where the host tests find it (`agent_testkit::test_mcp_server`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

#[test]
fn the_server_answers_the_handshake_and_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentctl-test-mcp-server"))
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ask = |id: u64, method: &str, params: Value| -> Value {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{msg}").unwrap();
        serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap()
    };
    let init = ask(1, "initialize", json!({"protocolVersion": "2025-06-18"}));
    assert_eq!(init["id"], 1);
    assert_eq!(
        init["result"]["serverInfo"]["name"],
        "agentctl-test-mcp-server"
    );
    let tools = ask(2, "tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"lookup"), "{names:?}");
    let missing = ask(3, "no/such", json!({}));
    assert_eq!(missing["error"]["code"], -32601);
    drop(stdin);
    child.wait().unwrap();
    let pids = std::fs::read_to_string(dir.path().join("mcp-pids.log")).unwrap();
    assert_eq!(pids.trim(), child.id().to_string());
}
