//! A small MCP server over stdio for the host tests (hand-written newline-delimited
//! JSON-RPC: rmcp's server side would pull schemars and macros into the build).
//!
//! It runs in the run's workspace (its cwd) and leaves traces there: `mcp-pids.log` (one
//! pid per start, as the machine sees it, sandboxed or not, to check that no process outlives the run) and `mcp-calls.log` (`start
//! TAG` / `end TAG` lines of the `wait_*` tools, `cancelled ID` for each
//! `notifications/cancelled`). It ends when its stdin closes.
//!
//! Tools: `lookup` (read-only), `delete_item` (destructive: appends to `deleted.txt`),
//! `fail` (answers `isError`), `rpc_error` (answers a JSON-RPC error), `crash` (exits
//! mid-call), `env_probe` (read-only: which secrets it sees), `wait_idem` (idempotent) and
//! `wait_write` (destructive), both sleeping `ms` milliseconds, and `write_path`
//! (destructive: writes `text` to the absolute `path`, an error if it cannot).
//!
//! With `AGENTCTL_TEST_MCP_GRANDCHILD` set it starts a `sleep` that ignores stdin (as `npx`
//! leaves a grandchild) and logs its pid to `mcp-grandchildren.log`.
//!
//! Misbehaviours, by environment variable:
//! - `AGENTCTL_TEST_MCP_INIT=hang`: `initialize` is never answered.
//! - `AGENTCTL_TEST_MCP_LIST`: how `tools/list` goes wrong: `hang` (never answered),
//!   `same_cursor` (every page has `nextCursor: "again"`), `endless_cursor` (a new
//!   `nextCursor` on every page), `no_schema` (one more tool, `no_schema`, without
//!   `inputSchema`).
//! - `AGENTCTL_TEST_MCP_RPC_ERROR_BYTES=N`: `rpc_error`'s message is `N` bytes long.
//! - `AGENTCTL_TEST_MCP_LOOKUP_BYTES=N`: `lookup` answers `N` bytes of text (one line of
//!   JSON-RPC of about that size).
//! - `AGENTCTL_TEST_MCP_LONE_SURROGATE`: `lookup` answers the text `cut \ud83c`, a lone
//!   UTF-16 surrogate escape (a JavaScript server that cut an emoji in half).
//!
//! `lookup`'s input schema follows the Responses API's strict rules; the others' do not.

use std::io::{BufRead as _, Write as _};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

fn main() {
    append("mcp-pids.log", &machine_pid().to_string());
    if std::env::var_os("AGENTCTL_TEST_MCP_GRANDCHILD").is_some() {
        // The shell logs its own pid as the machine sees it, then becomes the `sleep`.
        let _ = std::process::Command::new("sh")
            .args([
                "-c",
                "read -r pid rest < /proc/self/stat; echo \"$pid\" >> mcp-grandchildren.log; \
                 exec sleep 600",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
    let out = Arc::new(Mutex::new(std::io::stdout()));
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            eprintln!("test server: not JSON: {line}");
            continue;
        };
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        let Some(id) = msg.get("id").cloned() else {
            // A notification: only a cancellation leaves a trace.
            if method == "notifications/cancelled" {
                let request = msg.pointer("/params/requestId").cloned();
                append(
                    "mcp-calls.log",
                    &format!("cancelled {}", request.unwrap_or_default()),
                );
            }
            continue;
        };
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let out = out.clone();
        match method {
            "initialize" => {
                // `hang`: never answered (a server that hangs while it starts).
                if std::env::var("AGENTCTL_TEST_MCP_INIT").as_deref() != Ok("hang") {
                    send(&out, &id, Ok(initialize()));
                }
            }
            "tools/list" => {
                // `None` (`hang`): never answered.
                if let Some(page) = list_page(&params) {
                    send(&out, &id, Ok(page));
                }
            }
            "tools/call"
                if std::env::var_os("AGENTCTL_TEST_MCP_LONE_SURROGATE").is_some()
                    && params.get("name") == Some(&json!("lookup")) =>
            {
                // Written by hand: serde_json writes no lone surrogate.
                let line = format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":\
                     [{{\"type\":\"text\",\"text\":\"cut \\ud83c\"}}]}}}}"
                );
                if let Ok(mut out) = out.lock() {
                    let _ = writeln!(out, "{line}");
                    let _ = out.flush();
                }
            }
            "tools/call" => {
                // Calls run concurrently, as a real server's would.
                std::thread::spawn(move || {
                    let answer = call(&params);
                    send(&out, &id, answer);
                });
            }
            "ping" => send(&out, &id, Ok(json!({}))),
            _ => send(&out, &id, Err((-32601, format!("no method {method}")))),
        }
    }
}

fn initialize() -> Value {
    json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
           "serverInfo": {"name": "agentctl-test-mcp-server", "version": "0.1.0"}})
}

/// The answer to `tools/list` (`None`: none, ever), as `AGENTCTL_TEST_MCP_LIST` has it.
fn list_page(params: &Value) -> Option<Value> {
    let mode = std::env::var("AGENTCTL_TEST_MCP_LIST").unwrap_or_default();
    let mut tools = tools();
    let page = |tools: Value, cursor: String| json!({"tools": tools, "nextCursor": cursor});
    match mode.as_str() {
        "hang" => None,
        "same_cursor" => Some(page(tools, "again".into())),
        "endless_cursor" => {
            let n = params
                .get("cursor")
                .and_then(Value::as_str)
                .and_then(|c| c.parse::<u64>().ok())
                .unwrap_or(0);
            Some(page(json!([]), (n + 1).to_string()))
        }
        "no_schema" => {
            if let Value::Array(list) = &mut tools {
                list.insert(
                    0,
                    json!({"name": "no_schema", "description": "No inputSchema."}),
                );
            }
            Some(json!({"tools": tools}))
        }
        _ => Some(json!({"tools": tools})),
    }
}

/// A string of `bytes` bytes as the variable `var` asks, or `default`.
fn sized(var: &str, default: String) -> String {
    match std::env::var(var)
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        Some(bytes) => "x".repeat(bytes),
        None => default,
    }
}

fn tools() -> Value {
    let obj = |props: Value, required: Value| json!({"type": "object", "properties": props, "required": required});
    let wait = obj(
        json!({"tag": {"type": "string"}, "ms": {"type": "integer"}}),
        json!(["tag", "ms"]),
    );
    json!([
        {"name": "lookup", "description": "Look a key up.",
         "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}},
                         "required": ["key"], "additionalProperties": false},
         "annotations": {"readOnlyHint": true}},
        {"name": "delete_item", "description": "Delete an item.",
         "inputSchema": obj(json!({"item": {"type": "string"}}), json!(["item"])),
         "annotations": {"destructiveHint": true}},
        {"name": "fail", "description": "Always reports an error.",
         "inputSchema": obj(json!({}), json!([])), "annotations": {"readOnlyHint": true}},
        {"name": "rpc_error", "description": "Answers a JSON-RPC error.",
         "inputSchema": obj(json!({}), json!([])), "annotations": {"readOnlyHint": true}},
        {"name": "crash", "description": "Exits in the middle of the call.",
         "inputSchema": obj(json!({}), json!([])), "annotations": {"readOnlyHint": true}},
        {"name": "env_probe", "description": "Which secrets the server sees.",
         "inputSchema": obj(json!({}), json!([])), "annotations": {"readOnlyHint": true}},
        {"name": "wait_idem", "description": "Sleeps (idempotent).", "inputSchema": wait,
         "annotations": {"idempotentHint": true, "destructiveHint": false}},
        {"name": "wait_write", "description": "Sleeps (destructive).", "inputSchema": wait,
         "annotations": {"destructiveHint": true}},
        {"name": "write_path", "description": "Writes a file.",
         "inputSchema": obj(json!({"path": {"type": "string"}, "text": {"type": "string"}}),
                            json!(["path", "text"])),
         "annotations": {"destructiveHint": true}},
    ])
}

fn call(params: &Value) -> Result<Value, (i64, String)> {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    let args = params.get("arguments").cloned().unwrap_or(json!({}));
    let arg = |n: &str| {
        args.get(n)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let text = |t: String| json!({"content": [{"type": "text", "text": t}]});
    match name {
        "lookup" => Ok(text(sized(
            "AGENTCTL_TEST_MCP_LOOKUP_BYTES",
            format!("value of {}: {}-42", arg("key"), arg("key")),
        ))),
        "delete_item" => {
            append("deleted.txt", &arg("item"));
            Ok(text(format!("deleted {}", arg("item"))))
        }
        "fail" => Ok(
            json!({"content": [{"type": "text", "text": "the item does not exist"}],
                            "isError": true}),
        ),
        "rpc_error" => Err((
            -32000,
            sized(
                "AGENTCTL_TEST_MCP_RPC_ERROR_BYTES",
                "the backend is unavailable".into(),
            ),
        )),
        "crash" => {
            eprintln!("test server: crashing on purpose");
            std::process::exit(3);
        }
        "env_probe" => {
            let seen = |var: &str| {
                if std::env::var_os(var).is_some() {
                    "present"
                } else {
                    "absent"
                }
            };
            Ok(text(format!(
                "OPENAI_API_KEY={} SECRET_TOKEN={}",
                seen("OPENAI_API_KEY"),
                seen("SECRET_TOKEN")
            )))
        }
        "wait_idem" | "wait_write" => {
            let tag = arg("tag");
            append("mcp-calls.log", &format!("start {tag}"));
            let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
            std::thread::sleep(std::time::Duration::from_millis(ms));
            append("mcp-calls.log", &format!("end {tag}"));
            Ok(text(format!("waited {tag}")))
        }
        "write_path" => match std::fs::write(arg("path"), arg("text")) {
            Ok(()) => Ok(text(format!("wrote {}", arg("path")))),
            Err(err) => Ok(json!({"content": [{"type": "text",
                "text": format!("cannot write {}: {err}", arg("path"))}], "isError": true})),
        },
        other => Err((-32602, format!("no tool {other}"))),
    }
}

fn send(out: &Mutex<std::io::Stdout>, id: &Value, answer: Result<Value, (i64, String)>) {
    let msg = match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    };
    if let Ok(mut out) = out.lock() {
        let _ = writeln!(out, "{msg}");
        let _ = out.flush();
    }
}

/// This process's id as the machine sees it (`/proc/self` names it in the PID namespace of
/// the `/proc` mounted, the host's), where `getpid` answers in a sandbox's own namespace.
fn machine_pid() -> u32 {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(std::process::id)
}

fn append(file: &str, line: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
    {
        let _ = writeln!(f, "{line}");
    }
}
