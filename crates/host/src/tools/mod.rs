//! The built-in tools, MCP tools, tools written in Rust ([`RustTool`]) and their policies.
//!
//! Each tool is an [`agent_runtime::Tool`], so every call is journaled and idempotent by
//! the model's `call_id`. MCP servers and per-tool policy overrides come from
//! [`ToolConfig`] (`agentctl.toml`). A tool's [`Policy`] says whether it runs, asks a human first, or
//! is refused; the run's [`ApprovalMode`] can override it for every tool.

mod beneath;
mod config;
mod file_threads;
mod files;
pub mod mcp;
mod read_window;
pub(crate) mod result_cap;
mod rust_tool;
mod scratch;
pub(crate) mod secrets;
mod shell;
mod small_file;
mod trust;
mod watchdog;
mod workspace;

use agent_responses::types::text_format::strict_schema_problem;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use agent_runtime::ToolRegistry;

use crate::RawJson;
use crate::sandbox::{Mode as SandboxMode, SandboxSpec};

pub use config::{
    ConfigError, DEFAULT_TOOL_TIMEOUT, SandboxConfig, ServerConfig, ToolConfig, USER_FILE,
    WORKSPACE_FILE,
};
pub use files::{ListDir, ReadFile, WriteFile};
pub use rust_tool::{RustTool, ToolCall};
pub use secrets::{HIDDEN_ENV, StreamMask, api_key, mask_key};
pub use shell::{ESCALATE, OUTPUT_CAP, Shell, asks_escalation};
pub use trust::{TRUST_FILE, TrustError, TrustStore, Trusted, loosening};
pub use workspace::{PathRefused, Workspace};

/// What happens when the model calls a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Runs without asking.
    Auto,
    /// Waits for a human's decision (`approval.requested`).
    Ask,
    /// Refused; the model is told.
    Deny,
}

/// The run-wide override of tool policies (`--approval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// Each tool's own policy.
    #[default]
    Default,
    /// Every call asks.
    Ask,
    /// Every call runs.
    Auto,
    /// Side-effecting tools are refused; reads run.
    Deny,
}

impl ApprovalMode {
    /// The policy a call of a tool with `own` policy gets; `side_effects` is whether the
    /// tool changes anything.
    pub fn apply(self, own: Policy, side_effects: bool) -> Policy {
        match self {
            ApprovalMode::Default => own,
            ApprovalMode::Ask => Policy::Ask,
            ApprovalMode::Auto => Policy::Auto,
            ApprovalMode::Deny if side_effects => Policy::Deny,
            ApprovalMode::Deny => own,
        }
    }
}

/// A tool as the run records it in `run.created` and offers it to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What the model is told it does.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: RawJson,
    /// The policy in force for this run (after the run's approval mode).
    pub policy: Policy,
    /// Running it twice is harmless: a call cut off by a crash runs again on resume.
    pub retry_safe: bool,
    /// For an MCP tool: its server and its name there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<mcp::McpOrigin>,
    /// Whether its schema is sent `strict` (absent: true, as every tool recorded before
    /// Rust tools was).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub strict: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// The built-in tools of `workspace`, unsandboxed: their specs (under `mode`) and the
/// runtime allowlist.
pub fn builtin(workspace: &Workspace, mode: ApprovalMode) -> (Vec<ToolSpec>, ToolRegistry) {
    builtin_with(
        workspace,
        mode,
        &ToolConfig::default(),
        &SandboxSpec::default(),
    )
}

/// As [`builtin`], with the policies of `config` replacing the tools' own, and `shell`
/// confined by `sandbox`. The sandbox sets the tools' own policies, as in Codex: sandboxed,
/// `shell` runs without asking (and `write_file` too under `workspace-write`, while
/// `read-only` refuses it); under `off` both ask, and under a fallback to `off`
/// ([`SandboxSpec::fallback`]) both ask whatever `mode` and `config` say (`deny` stays).
pub fn builtin_with(
    workspace: &Workspace,
    mode: ApprovalMode,
    config: &ToolConfig,
    sandbox: &SandboxSpec,
) -> (Vec<ToolSpec>, ToolRegistry) {
    let (shell_own, write_own) = match sandbox.mode {
        SandboxMode::Off => (Policy::Ask, Policy::Ask),
        SandboxMode::WorkspaceWrite => (Policy::Auto, Policy::Auto),
        SandboxMode::ReadOnly => (Policy::Auto, Policy::Deny),
    };
    // A run that fell back to `off` (nobody chose it) never runs a command or a write
    // (the side-effecting built-ins) unsandboxed without asking: no `--approval auto` or
    // tool policy lifts it.
    let fallen_back = |policy: Policy, side_effects: bool| match policy {
        Policy::Auto if side_effects && sandbox.fallback.is_some() => Policy::Ask,
        Policy::Auto | Policy::Ask | Policy::Deny => policy,
    };
    let spec = |name: &str, description: &str, parameters: Value, own, side_effects, retry_safe| {
        let own = config.policies.get(name).copied().unwrap_or(own);
        ToolSpec {
            name: name.into(),
            description: description.into(),
            // Sent strict only when the schema keeps the API's strict rules, which the API
            // checks before the first step (the built-ins' schemas do: a unit test holds it).
            strict: strict_schema_problem(&parameters).is_none(),
            parameters: RawJson::from_value(&parameters),
            policy: fallen_back(mode.apply(own, side_effects), side_effects),
            retry_safe,
            mcp: None,
        }
    };
    let specs = vec![
        spec(
            "shell",
            "Run a bash command in the workspace directory. Returns the exit code and the \
             combined stdout/stderr (long output keeps its head and tail).",
            shell_parameters(sandbox.mode.is_sandboxed()),
            shell_own,
            true,
            false,
        ),
        spec(
            "read_file",
            "Read a text file of the workspace, by lines.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "offset": {"type": ["integer", "null"], "description": "first line, 1-based (null: 1)"},
                "limit": {"type": ["integer", "null"], "description": "number of lines (null: to the end)"}},
                "required": ["path", "offset", "limit"], "additionalProperties": false}),
            Policy::Auto,
            false,
            true,
        ),
        {
            let mut write = spec(
                "write_file",
                "Create or replace a file of the workspace with the given content.",
                json!({"type": "object", "properties": {
                    "path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"], "additionalProperties": false}),
                write_own,
                true,
                true,
            );
            // The `read-only` sandbox is a floor, as leaving the sandbox always asks: no
            // `--approval` or tool policy makes the host write for the model there.
            if sandbox.mode == SandboxMode::ReadOnly {
                write.policy = Policy::Deny;
            }
            write
        },
        spec(
            "list_dir",
            "List a directory of the workspace (default: its root).",
            json!({"type": "object", "properties": {
                "path": {"type": ["string", "null"], "description": "null: the workspace's root"}},
                "required": ["path"], "additionalProperties": false}),
            Policy::Auto,
            false,
            true,
        ),
    ];
    // The file tools run in the host, outside the sandbox: they hide what it hides, in every
    // mode (under `off` too: reading a credential store is the shell's, asked first).
    let files = workspace.hiding(&sandbox.policy(workspace.root(), None).deny_read);
    let registry = ToolRegistry::new()
        .with(Shell {
            workspace: workspace.clone(),
            sandbox: sandbox.mode.is_sandboxed().then(|| sandbox.clone()),
        })
        .with(ReadFile {
            workspace: files.clone(),
        })
        .with(WriteFile {
            workspace: files.clone(),
        })
        .with(ListDir { workspace: files });
    (specs, registry)
}

/// The shell tool's arguments; sandboxed, it also offers to ask for an escalation.
fn shell_parameters(sandboxed: bool) -> Value {
    let mut properties = json!({
        "command": {"type": "string", "description": "bash command line"},
        "timeout_ms": {"type": ["integer", "null"], "description": "kill it after this many ms (null: 60000)"}});
    if sandboxed && let Some(props) = properties.as_object_mut() {
        props.insert("sandbox_permissions".into(), json!({"type": ["string", "null"],
            "enum": ["use_default", "require_escalated", null],
            "description": "require_escalated: run outside the sandbox (no network and writes only in the workspace inside it); a human must approve (null: use_default)"}));
        props.insert("justification".into(), json!({"type": ["string", "null"],
            "description": "with require_escalated: one line saying why, shown to the human who decides"}));
    }
    // Strict (every property required, the optional ones nullable): the API holds the
    // model's arguments to the schema.
    let required: Vec<&String> = properties
        .as_object()
        .map_or(Vec::new(), |p| p.keys().collect());
    json!({"type": "object", "properties": properties,
        "required": required, "additionalProperties": false})
}

/// Refuses a key of `obj` that is not in `known`, naming it escaped: the built-in tools'
/// schemas allow no other (`additionalProperties: false`), and one the tool ignored could
/// make a person approve arguments that read as others (`"cоmmand"` with a Cyrillic `о`, or
/// a zero-width space, beside the `command` that runs).
pub(crate) fn only_keys(obj: &Map<String, Value>, known: &[&str]) -> Result<(), String> {
    match obj.keys().find(|key| !known.contains(&key.as_str())) {
        None => Ok(()),
        Some(key) => Err(format!(
            "unknown argument {} (this tool takes {})",
            escaped(key),
            known.join(", ")
        )),
    }
}

/// `key` quoted with every character outside printable ASCII written as `\u{..}`, so that
/// a lookalike or an invisible character shows in the message.
fn escaped(key: &str) -> String {
    let mut shown = String::from("\"");
    for c in key.chars().take(64) {
        if c.is_ascii_graphic() || c == ' ' {
            shown.push(c);
        } else {
            shown.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        }
    }
    shown.push('"');
    shown
}

pub(crate) fn object(args: &Value) -> Result<&Map<String, Value>, String> {
    args.as_object()
        .ok_or_else(|| "arguments must be a JSON object".to_string())
}

pub(crate) fn arg_str<'a>(
    obj: &'a Map<String, Value>,
    name: &str,
) -> Result<Option<&'a str>, String> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("`{name}` must be a string")),
    }
}

pub(crate) fn arg_u64(obj: &Map<String, Value>, name: &str) -> Result<Option<u64>, String> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{name}` must be a non-negative integer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_schema_keeps_the_strict_rules_it_is_sent_under() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        for mode in [
            SandboxMode::Off,
            SandboxMode::ReadOnly,
            SandboxMode::WorkspaceWrite,
        ] {
            let sandbox = SandboxSpec {
                mode,
                ..SandboxSpec::default()
            };
            let config = ToolConfig::default();
            let (specs, _) = builtin_with(&workspace, ApprovalMode::default(), &config, &sandbox);
            for spec in specs {
                let schema = spec.parameters.to_value().unwrap();
                // The API refuses a whole request whose strict tool breaks a rule.
                assert_eq!(strict_schema_problem(&schema), None, "{}", spec.name);
                assert!(spec.strict, "{}", spec.name);
            }
        }
    }

    /// A run that fell back to `off` (nobody chose it) asks before every `shell` and
    /// `write_file` call whatever `--approval` or a tool policy says, `deny` kept; an
    /// explicit `off` follows them; the reads run either way.
    #[test]
    fn a_fallback_asks_before_commands_and_writes_whatever_approval_says() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        let policy_of =
            |specs: &[ToolSpec], name: &str| specs.iter().find(|s| s.name == name).unwrap().policy;
        let mut config = ToolConfig::default();
        config.policies.insert("shell".into(), Policy::Auto);
        let fallen = SandboxSpec {
            fallback: Some("no namespaces".into()),
            ..SandboxSpec::default()
        };
        for mode in [ApprovalMode::Auto, ApprovalMode::Default] {
            let (specs, _) = builtin_with(&workspace, mode, &config, &fallen);
            assert_eq!(policy_of(&specs, "shell"), Policy::Ask, "{mode:?}");
            assert_eq!(policy_of(&specs, "write_file"), Policy::Ask, "{mode:?}");
            assert_eq!(policy_of(&specs, "read_file"), Policy::Auto, "{mode:?}");
            assert_eq!(policy_of(&specs, "list_dir"), Policy::Auto, "{mode:?}");
        }
        let (specs, _) = builtin_with(&workspace, ApprovalMode::Deny, &config, &fallen);
        assert_eq!(policy_of(&specs, "shell"), Policy::Deny);
        assert_eq!(policy_of(&specs, "write_file"), Policy::Deny);
        let chosen = SandboxSpec::default();
        let (specs, _) = builtin_with(&workspace, ApprovalMode::Auto, &config, &chosen);
        assert_eq!(policy_of(&specs, "shell"), Policy::Auto);
        assert_eq!(policy_of(&specs, "write_file"), Policy::Auto);
    }

    #[test]
    fn null_stands_for_an_optional_argument() {
        let args = json!({"path": "a", "offset": null, "limit": 3});
        let obj = object(&args).unwrap();
        assert_eq!(arg_u64(obj, "offset"), Ok(None));
        assert_eq!(arg_u64(obj, "limit"), Ok(Some(3)));
        assert_eq!(arg_str(obj, "offset"), Ok(None));
    }

    /// A key the tool does not take is refused, shown so that a lookalike (a Cyrillic `о`)
    /// or an invisible character (a zero-width space) can be told from the real one: the
    /// console's card showed `"command": "ls"` beside the `command` that ran.
    #[test]
    fn a_key_a_tool_does_not_take_is_refused_and_shown() {
        let known = ["command", "timeout_ms"];
        let args = json!({"command": "echo real", "c\u{43e}mmand": "ls"});
        let err = only_keys(args.as_object().unwrap(), &known).unwrap_err();
        assert!(err.contains("\"c\\u{43e}mmand\""), "{err}");
        let args = json!({"command": "echo real", "command\u{200b}": "ls"});
        let err = only_keys(args.as_object().unwrap(), &known).unwrap_err();
        assert!(err.contains("\"command\\u{200b}\""), "{err}");
        let args = json!({"command": "ls", "timeout_ms": null});
        assert_eq!(only_keys(args.as_object().unwrap(), &known), Ok(()));
    }
}
