#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! Interop with the real MCP filesystem server (`@modelcontextprotocol/server-filesystem`,
//! pinned in `interop/mcp/package-lock.json`, installed by `cargo xtask interop mcp`): a
//! scripted run on the emulator lists a directory and reads a file through it, and each
//! result reaches the model verbatim.
//!
//! Ignored in the plain test run; `cargo xtask interop mcp` runs it with
//! `--include-ignored` and `MCP_FILESYSTEM_BIN` set. Without the server it fails under
//! `CI=true` and is skipped with a message elsewhere.
//!
//! Also, on the in-tree test server (`cargo build -p agent-testkit --bins`): the command a
//! run given `--mcp` prints to continue it works as printed.

use std::path::PathBuf;
use std::process::Command;

use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use serde_json::{Value, json};

fn server_bin() -> Option<PathBuf> {
    let bin = std::env::var_os("MCP_FILESYSTEM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../interop/mcp/node_modules/.bin/mcp-server-filesystem")
        });
    bin.exists().then_some(bin)
}

fn call(call_id: &str, name: &str, args: Value) -> Value {
    json!({"type": "function_call", "call_id": call_id, "name": name, "arguments": args.to_string()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the npm filesystem server: cargo xtask interop mcp"]
async fn filesystem_server_lists_and_reads() {
    let Some(bin) = server_bin() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!(
                "the MCP filesystem server is not installed (interop/mcp); `cargo xtask interop mcp` installs it"
            );
        }
        eprintln!(
            "SKIPPED: MCP interop: the filesystem server is not installed; run `cargo xtask interop mcp`"
        );
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    let content = "hello from the MCP interop test\nsecond line\n";
    std::fs::write(root.join("hello.txt"), content).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    let file = root.join("hello.txt").display().to_string();
    let dir = root.display().to_string();
    let steps = [
        json!([call("c_list", "fs__list_directory", json!({"path": dir}))]),
        json!([call("c_read", "fs__read_text_file", json!({"path": file}))]),
        json!([{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "FINAL: done"}]}]),
    ];
    let rules: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(n, items)| json!({"when": {"tool_outputs": n}, "reply": {"items": items}}))
        .collect();
    let script = Script::from_json_str(&json!({"rules": rules}).to_string()).unwrap();
    let server = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
        .await
        .unwrap();

    let db = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let mcp = format!("fs={} {}", bin.display(), dir);
    let o = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .env_remove("AGENTCTL_DB")
        .env_remove("OPENAI_BASE_URL")
        .env("OPENAI_API_KEY", MOCK_API_KEY)
        .env("HOME", home.path())
        .args([
            "--db",
            &format!("sqlite://{}", db.path().join("i.db").display()),
        ])
        .args([
            "--json",
            "run",
            "--base-url",
            &server.base_url(),
            "--workspace",
        ])
        .arg(&root)
        .args(["--mcp", &mcp, "list and read"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // What the model was sent as each call's output.
    let last = server
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path.ends_with("/responses"))
        .unwrap()
        .body;
    let output = |id: &str| {
        last["input"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "function_call_output" && i["call_id"] == id)
            .and_then(|i| i["output"].as_str())
            .unwrap_or_else(|| panic!("no output for {id}: {last}"))
            .to_string()
    };
    assert_eq!(output("c_read"), content);
    let listing = output("c_list");
    assert!(
        listing.contains("[FILE] hello.txt") && listing.contains("[DIR] sub"),
        "{listing}"
    );
    assert!(stdout.contains("\"mcp_tool_call\""), "{stdout}");
}

/// A run given `--mcp` (a server no file declares) prints a `resume` that gives the server
/// again, quoted: pasted as printed, it continues the run instead of refusing it (exit 2,
/// "not configured now").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_resume_gives_the_runs_mcp_servers() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    let rules = json!({"rules": [
        {"when": {"tool_outputs": 0}, "reply": {"items": [
            call("c_del", "t__delete_item", json!({"item": "a"}))]}},
        {"when": {"tool_outputs_below": 99}, "reply": {"items": [
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "FINAL: done"}]}]}},
    ]});
    let script = Script::from_json_str(&rules.to_string()).unwrap();
    let server = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
        .await
        .unwrap();
    let db = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_agentctl"));
    let agentctl = |cmd: &mut Command| {
        cmd.env_remove("AGENTCTL_DB")
            .env("OPENAI_API_KEY", MOCK_API_KEY)
            .env("OPENAI_BASE_URL", server.base_url())
            .env("HOME", home.path())
            .env("AGENTCTL_CONFIG_DIR", home.path().join("config"))
            .current_dir(&root)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    // Arguments the test server ignores, with what `--mcp` must quote.
    let mcp = format!(
        "t={} 'two words' \"it's\"",
        agent_testkit::test_mcp_server().display()
    );
    let db_url = format!("sqlite://{}", db.path().join("r.db").display());
    let paused = agentctl(
        Command::new(&bin)
            .args(["--db", &db_url, "run", "--workspace"])
            .arg(&root)
            .args(["--mcp", &mcp, "delete a"]),
    );
    let stderr = String::from_utf8_lossy(&paused.stderr).into_owned();
    assert_eq!(paused.status.code(), Some(3), "{stderr}");
    let printed = stderr
        .lines()
        .find_map(|l| l.split_once("continue with: ").map(|(_, c)| c.to_string()))
        .unwrap_or_else(|| panic!("no command to continue with: {stderr}"));
    assert!(printed.contains(" --mcp "), "{printed}");
    // Pasted as printed (the call still waits for its approval: it pauses again).
    let mut path = std::ffi::OsString::from(bin.parent().unwrap());
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let resumed = agentctl(
        Command::new("bash")
            .args(["-c", &printed])
            .env("PATH", path),
    );
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(
        !stderr.contains("not configured now"),
        "{printed}\n{stderr}"
    );
    assert_eq!(resumed.status.code(), Some(3), "{printed}\n{stderr}");
}
