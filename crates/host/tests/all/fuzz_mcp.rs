//! Fuzz target `mcp`: what MCP servers and their configuration hand the host.
//!
//! Properties:
//! 1. Any `tools/call` result (any content blocks, structured content, junk): the text the
//!    model reads is produced without panic, in bounded time, and never longer than the cap
//!    plus its truncation note.
//! 2. Any `tools/list` entry (any name, annotations, schema): the exposed name is a valid
//!    Responses function name (`[A-Za-z0-9_-]{1,64}`, the server's prefix and `__` kept),
//!    the policy follows the annotations (read-only runs, anything else asks), and a call
//!    is retry-safe exactly when read-only or idempotent.
//! 3. Any `agentctl.toml` text and any `--mcp` spec: parsing returns (a config or an error
//!    naming the file) without panic, in bounded time.

use std::time::{Duration, Instant};

use agent_fuzzkit::{config, corpus, json_string, json_text, json_value, keep_if_failing, within};
use agent_host::fuzzing::{mcp_result_text, mcp_tool_offer};
use agent_host::tools::mcp::RESULT_CAP;
use agent_host::tools::{Policy, ToolConfig};
use proptest::prelude::*;
use serde_json::{Value, json};

const TARGET: &str = "mcp";
const BOUND: Duration = Duration::from_secs(5);

fn check_result(json: &str) -> Result<(), TestCaseError> {
    let start = Instant::now();
    if let Some(text) = mcp_result_text(json) {
        prop_assert!(
            text.len() <= RESULT_CAP + 100,
            "{} bytes past the cap",
            text.len() - RESULT_CAP
        );
    }
    within(start, BOUND, "result text")
}

fn check_offer(server: &str, json: &str) -> Result<(), TestCaseError> {
    let start = Instant::now();
    let parsed: Option<Value> = serde_json::from_str(json).ok();
    if let Some((name, policy, retry_safe, schema)) = mcp_tool_offer(server, json) {
        prop_assert!(name.len() <= 64 && !name.is_empty(), "{name:?}");
        prop_assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{name:?}"
        );
        let prefix = format!("{server}__");
        prop_assert!(
            name.starts_with(&prefix[..prefix.len().min(64)]),
            "{name:?}"
        );
        prop_assert!(schema.is_object());
        let hint = |key: &str| {
            parsed
                .as_ref()
                .and_then(|v| v.pointer(&format!("/annotations/{key}")))
                .and_then(Value::as_bool)
                == Some(true)
        };
        let read_only = hint("readOnlyHint");
        prop_assert_eq!(policy, if read_only { Policy::Auto } else { Policy::Ask });
        prop_assert_eq!(retry_safe, read_only || hint("idempotentHint"));
    }
    within(start, BOUND, "tool offer")
}

fn check_config(text: &str) -> Result<(), TestCaseError> {
    let start = Instant::now();
    match ToolConfig::parse(text, "agentctl.toml") {
        Ok(_) => {}
        Err(err) => prop_assert!(err.to_string().contains("agentctl.toml"), "{err}"),
    }
    let mut config = ToolConfig::default();
    let _ = config.add_cli_server(text);
    within(start, BOUND, "config")
}

fn result_value() -> impl Strategy<Value = Value> {
    let block = prop_oneof![
        json_string().prop_map(|t| json!({"type": "text", "text": t})),
        (json_string(), json_string())
            .prop_map(|(d, m)| json!({"type": "image", "data": d, "mimeType": m})),
        json_value(),
    ];
    (
        prop::collection::vec(block, 0..6),
        prop::option::of(json_value()),
        any::<Option<bool>>(),
    )
        .prop_map(|(content, structured, is_error)| {
            let mut v = json!({"content": content});
            if let Some(s) = structured {
                v["structuredContent"] = s;
            }
            if let Some(e) = is_error {
                v["isError"] = json!(e);
            }
            v
        })
}

fn tool_value() -> impl Strategy<Value = Value> {
    let hints = prop::collection::btree_map(
        prop_oneof![
            Just("readOnlyHint".to_string()),
            Just("idempotentHint".to_string()),
            Just("destructiveHint".to_string()),
            Just("openWorldHint".to_string()),
            json_string(),
        ],
        prop_oneof![any::<bool>().prop_map(Value::from), json_value()],
        0..4,
    );
    (
        json_string(),
        prop::option::of(json_string()),
        hints,
        json_value(),
    )
        .prop_map(|(name, description, hints, props)| {
            json!({"name": name, "description": description,
                   "inputSchema": {"type": "object", "properties": props},
                   "annotations": hints})
        })
}

fn toml_text() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("command".to_string()),
        Just("args".to_string()),
        Just("env".to_string()),
        Just("approval".to_string()),
        "[a-z_\"é. ]{0,8}",
    ];
    let value = prop_oneof![
        json_string().prop_map(|s| format!("{s:?}")),
        Just("[\"-y\", 3, { a = 1 }]".to_string()),
        Just("{ K = \"v\" }".to_string()),
        Just("\"auto\"".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        "[^\n]{0,12}",
    ];
    let table = prop_oneof![
        "[a-zA-Z0-9_-]{0,10}".prop_map(|n| format!("[mcp_servers.{n}]")),
        json_string().prop_map(|n| format!("[mcp_servers.{n:?}]")),
        json_string().prop_map(|n| format!("[tools.{n:?}]")),
        Just("[[mcp_servers]]".to_string()),
        "[^\n]{0,16}",
    ];
    prop::collection::vec((table, prop::collection::vec((key, value), 0..4)), 0..4).prop_map(
        |tables| {
            tables
                .into_iter()
                .map(|(t, kvs)| {
                    let body: Vec<String> =
                        kvs.into_iter().map(|(k, v)| format!("{k} = {v}")).collect();
                    format!("{t}\n{}\n", body.join("\n"))
                })
                .collect()
        },
    )
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn any_result_reads_as_capped_text(value in result_value()) {
        let text = value.to_string();
        keep_if_failing("result", "json", text.as_bytes(), check_result(&text))?;
    }

    #[test]
    fn any_result_text_is_handled(text in json_text()) {
        keep_if_failing("result-text", "json", text.as_bytes(), check_result(&text))?;
    }

    #[test]
    fn any_listed_tool_is_offered_under_a_valid_name_and_policy(
        server in "[a-zA-Z0-9-]{1,32}",
        value in tool_value(),
    ) {
        let text = value.to_string();
        keep_if_failing("tool", "json", text.as_bytes(), check_offer(&server, &text))?;
    }

    #[test]
    fn any_config_parses_or_names_the_file(text in toml_text()) {
        keep_if_failing("config", "toml", text.as_bytes(), check_config(&text))?;
    }

    #[test]
    fn any_text_as_config_or_mcp_spec(text in "\\PC{0,80}") {
        keep_if_failing("config-text", "txt", text.as_bytes(), check_config(&text))?;
    }
}

#[test]
fn generated_shapes_are_read_not_refused() {
    // Junk annotation keys and odd names still make a tool: the offer property bites.
    let tool = json!({"name": "x y", "inputSchema": {"type": "object"},
                      "annotations": {"readOnlyHint": true, "zz": [1]}});
    let (name, policy, retry_safe, _) = mcp_tool_offer("fs", &tool.to_string()).unwrap();
    assert_eq!(
        (name.as_str(), policy, retry_safe),
        ("fs__x_y", Policy::Auto, true)
    );
    let result = json!({"content": [{"type": "text", "text": "t"}], "isError": true,
                        "structuredContent": {"deep": [[[]]]}});
    assert!(mcp_result_text(&result.to_string()).is_some());
}

#[test]
fn a_huge_result_is_capped() {
    let text = json!({"content": [{"type": "text", "text": "é".repeat(RESULT_CAP)}]}).to_string();
    let shown = mcp_result_text(&text).unwrap();
    assert!(shown.len() <= RESULT_CAP + 100 && shown.contains("truncated"));
}

#[test]
fn corpus_replays() {
    for (name, bytes) in corpus(TARGET, 8) {
        let text = String::from_utf8_lossy(&bytes);
        if name.starts_with("tool") {
            // The seeds are real listings: the properties are not checked vacuously.
            assert!(
                mcp_tool_offer("fs", &text).is_some(),
                "{name} is not read as a tool"
            );
            check_offer("fs", &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        } else if name.contains("result") {
            assert!(
                mcp_result_text(&text).is_some(),
                "{name} is not read as a result"
            );
            check_result(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        } else {
            check_config(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    for nasty in agent_fuzzkit::nasty_json() {
        check_result(&nasty).unwrap();
        check_offer("fs", &nasty).unwrap();
        check_config(&nasty).unwrap();
    }
}
