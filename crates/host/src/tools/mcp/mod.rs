//! Tools from MCP servers over stdio (the official SDK, `rmcp`).
//!
//! Lifecycle: a new run starts every configured server at run start (it must list its
//! tools, which `run.created` records); a resumed run takes its tools from `run.created`
//! and starts a server at its first call. Either way every server is stopped when the
//! drive ends ([`McpServers::shutdown`]); a server that broke is restarted by the next
//! call.
//!
//! Invariants:
//! - A tool is offered as `SERVER__TOOL` (characters outside `[A-Za-z0-9_-]` become `_`,
//!   at most 64 characters); its spec keeps the server's own name ([`McpOrigin`]).
//! - Policy from annotations: `readOnlyHint` -> `auto`, anything else -> `ask` (MCP's
//!   default is destructive); `readOnlyHint` or `idempotentHint` -> retry-safe. A
//!   `[tools."SERVER__TOOL"]` entry replaces the own policy; the run's approval mode
//!   applies on top.
//! - `run.created` records each server's name, command, args, env *keys* only, and its
//!   sandbox mode; a resume runs a server at least as confined as recorded.
//! - A tool is sent `strict` exactly when its input schema follows the API's strict rules
//!   (`strict_schema_problem`); the schema is sent as the server gave it. `run.created`
//!   records the choice, and a resume sends what was recorded (a run recorded before this
//!   choice recorded none, which reads as `strict`).

mod client;
mod listing;
mod program;
mod pump;
#[cfg(test)]
mod server_tests;
mod stderr;
mod tool;

use std::path::Path;
use std::sync::Arc;

use rmcp::model::ToolAnnotations;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use agent_responses::types::text_format::strict_schema_problem;
use agent_runtime::{CancellationToken, Tool};

use super::{ApprovalMode, Policy, ToolConfig, ToolSpec};
use crate::RawJson;
use crate::error::HostError;
use crate::sandbox::{Mode, SandboxSpec};
use client::ServerHandle;
use tool::McpTool;

pub use tool::RESULT_CAP;
pub(crate) use tool::result_text;

/// Where an MCP tool comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpOrigin {
    /// The server's configured name.
    pub server: String,
    /// The tool's name on the server.
    pub tool: String,
}

/// A server as `run.created` records it (never the values of its environment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerRecord {
    /// Its configured name.
    pub name: String,
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The names of the variables its config sets.
    pub env_keys: Vec<String>,
    /// Its sandbox (absent: `off`). A resume runs it at least this confined.
    #[serde(default = "no_sandbox", skip_serializing_if = "is_off")]
    pub sandbox: Mode,
}

impl McpServerRecord {
    /// The value of `--mcp` that declares this server as the run started it
    /// (`NAME=COMMAND ARGS`, each word quoted as `--mcp` reads it back); to be quoted for a
    /// shell as one word.
    pub fn cli_spec(&self) -> String {
        let words =
            std::iter::once(self.command.as_str()).chain(self.args.iter().map(String::as_str));
        format!("{}={}", self.name, super::config::join_words(words))
    }
}

fn no_sandbox() -> Mode {
    Mode::Off
}

fn is_off(mode: &Mode) -> bool {
    !mode.is_sandboxed()
}

/// The sandbox a server runs in: the run's settings with the server's own mode.
fn server_sandbox(run: &SandboxSpec, mode: Mode) -> SandboxSpec {
    SandboxSpec {
        mode,
        fallback: None,
        ..run.clone()
    }
}

/// The servers of one drive; stop them with [`shutdown`](Self::shutdown).
#[derive(Debug, Default)]
pub struct McpServers {
    handles: Vec<Arc<ServerHandle>>,
}

impl McpServers {
    /// Stops every server process of this drive.
    ///
    /// # Cancel safety
    /// A server whose stop was under way is killed when its connection is dropped (its own
    /// process only: processes it started may outlive it); a server not reached yet is
    /// stopped by a later call.
    pub async fn shutdown(&self) {
        futures::future::join_all(self.handles.iter().map(|h| h.shutdown())).await;
    }
}

/// The tools of an MCP server, as a new run offers them.
pub(crate) struct Discovered {
    pub(crate) specs: Vec<ToolSpec>,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) records: Vec<McpServerRecord>,
    pub(crate) servers: McpServers,
}

/// Starts every server of `config` in `cwd` and lists its tools (a new run whose
/// commands run under `sandbox`). When `cancel` fires first (Ctrl-C before the run exists),
/// every server started so far is killed (the one starting with its whole group) and the
/// error names the server it was waiting for.
pub(crate) async fn discover(
    config: &ToolConfig,
    cwd: &Path,
    mode: ApprovalMode,
    sandbox: &SandboxSpec,
    cancel: &CancellationToken,
) -> Result<Discovered, HostError> {
    let mut found = Discovered {
        specs: Vec::new(),
        tools: Vec::new(),
        records: Vec::new(),
        servers: McpServers::default(),
    };
    // A program that is not there is the configuration's mistake (a typo, a tool not
    // installed): said as such, before any server starts.
    for server in config.servers.values() {
        if let Some(reason) = program::missing_for(server, cwd) {
            return Err(HostError::McpProgramMissing {
                server: server.name.clone(),
                declared_in: server.source.clone(),
                reason,
            });
        }
    }
    for server in config.servers.values() {
        let handle =
            ServerHandle::new(server.clone(), server_sandbox(sandbox, server.sandbox), cwd);
        found.servers.handles.push(handle.clone());
        let listed = tokio::select! {
            listed = handle.list_tools() => listed,
            () = cancel.cancelled() => {
                // Dropped: every server of `found` is killed, as is the one starting.
                drop(found);
                return Err(HostError::McpStart {
                    server: server.name.clone(),
                    declared_in: server.source.clone(),
                    reason: "interrupted while it was starting (no run was created: \
                             nothing is journaled)"
                        .into(),
                });
            }
        };
        let listed = match listed {
            Ok(listed) => listed,
            Err(reason) => {
                found.servers.shutdown().await;
                return Err(HostError::McpStart {
                    server: server.name.clone(),
                    declared_in: server.source.clone(),
                    reason: reason.to_string(),
                });
            }
        };
        found.records.push(McpServerRecord {
            name: server.name.clone(),
            command: server.command.clone(),
            args: server.args.clone(),
            env_keys: server.env.keys().cloned().collect(),
            sandbox: server.sandbox,
        });
        for info in listed {
            let name = exposed_name(&server.name, &info.name);
            if found.specs.iter().any(|s| s.name == name) {
                tracing::warn!(target: "agent_host::mcp", server = %server.name, tool = %info.name, "a tool of the same name is offered already; skipped");
                continue;
            }
            let hints = Hints::of(info.annotations.as_ref());
            let own = config
                .policies
                .get(&name)
                .copied()
                .unwrap_or(hints.policy());
            let mut description = info.description.as_deref().unwrap_or_default().to_string();
            if description.is_empty() {
                description = format!("Tool `{}` of MCP server `{}`.", info.name, server.name);
            }
            let schema = Value::Object((*info.input_schema).clone());
            // The API refuses a strict function whose schema breaks its strict rules, as
            // most MCP servers' do (optional properties, no `additionalProperties: false`).
            let strict = strict_schema_problem(&schema).is_none();
            found.specs.push(ToolSpec {
                name: name.clone(),
                description,
                parameters: RawJson::from_value(&schema),
                policy: mode.apply(own, !hints.read_only),
                retry_safe: hints.retry_safe(),
                mcp: Some(McpOrigin {
                    server: server.name.clone(),
                    tool: info.name.to_string(),
                }),
                strict,
            });
            found.tools.push(Arc::new(McpTool {
                name,
                remote: info.name.to_string(),
                server: handle.clone(),
                retry_safe: hints.retry_safe(),
            }));
        }
    }
    Ok(found)
}

/// The tools a run recorded, bound to the servers of `config` (a resumed run whose
/// commands run under `sandbox`). Nothing is started; a server the run needs but `config`
/// lacks is an error naming it. A server runs at least as confined as recorded.
pub(crate) fn reattach(
    run_id: &str,
    records: &[McpServerRecord],
    specs: &[ToolSpec],
    config: &ToolConfig,
    cwd: &Path,
    sandbox: &SandboxSpec,
) -> Result<(Vec<Arc<dyn Tool>>, McpServers), HostError> {
    let mut servers = McpServers::default();
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for record in records {
        let Some(server) = config.servers.get(&record.name) else {
            return Err(HostError::McpServerMissing {
                run: run_id.into(),
                server: record.name.clone(),
                command: std::iter::once(record.command.as_str())
                    .chain(record.args.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" "),
            });
        };
        let mode = if record.sandbox.is_stricter_than(server.sandbox) {
            record.sandbox
        } else {
            server.sandbox
        };
        let handle = ServerHandle::new(server.clone(), server_sandbox(sandbox, mode), cwd);
        servers.handles.push(handle.clone());
        for spec in specs {
            if let Some(origin) = spec.mcp.as_ref().filter(|o| o.server == record.name) {
                tools.push(Arc::new(McpTool {
                    name: spec.name.clone(),
                    remote: origin.tool.clone(),
                    server: handle.clone(),
                    retry_safe: spec.retry_safe,
                }));
            }
        }
    }
    if let Some(h) = servers.handles.first() {
        tracing::debug!(target: "agent_host::mcp", first = %h.name(), command = %h.config().command, "servers bound for resume");
    }
    Ok((tools, servers))
}

/// How a listed tool of `server` is offered before the config's policies: its exposed
/// name, its own policy, whether it is retry-safe, and its input schema.
pub(crate) fn offer(server: &str, info: &rmcp::model::Tool) -> (String, Policy, bool, Value) {
    let hints = Hints::of(info.annotations.as_ref());
    (
        exposed_name(server, &info.name),
        hints.policy(),
        hints.retry_safe(),
        Value::Object((*info.input_schema).clone()),
    )
}

/// `SERVER__TOOL`, restricted to what the Responses API accepts as a function name.
fn exposed_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("{server}__{clean}");
    name.truncate(64);
    name
}

/// A tool's MCP annotations as far as policy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hints {
    read_only: bool,
    idempotent: bool,
}

impl Hints {
    fn of(annotations: Option<&ToolAnnotations>) -> Hints {
        Hints {
            read_only: annotations.and_then(|a| a.read_only_hint) == Some(true),
            idempotent: annotations.and_then(|a| a.idempotent_hint) == Some(true),
        }
    }

    /// Reads run; everything else (destructive, or no hint: MCP's default) asks.
    fn policy(self) -> Policy {
        if self.read_only {
            Policy::Auto
        } else {
            Policy::Ask
        }
    }

    fn retry_safe(self) -> bool {
        self.read_only || self.idempotent
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn hints(v: Value) -> Hints {
        let a: ToolAnnotations = serde_json::from_value(v).unwrap();
        Hints::of(Some(&a))
    }

    #[test]
    fn annotations_map_to_policy() {
        let ro = hints(serde_json::json!({"readOnlyHint": true}));
        assert_eq!((ro.policy(), ro.retry_safe()), (Policy::Auto, true));
        let idem = hints(serde_json::json!({"idempotentHint": true, "destructiveHint": false}));
        assert_eq!((idem.policy(), idem.retry_safe()), (Policy::Ask, true));
        let destructive = hints(serde_json::json!({"destructiveHint": true}));
        assert_eq!(
            (destructive.policy(), destructive.retry_safe()),
            (Policy::Ask, false)
        );
        let none = Hints::of(None);
        assert_eq!((none.policy(), none.retry_safe()), (Policy::Ask, false));
    }

    #[test]
    fn exposed_names_are_function_names() {
        assert_eq!(exposed_name("fs", "read_file"), "fs__read_file");
        assert_eq!(exposed_name("fs", "a.b/c"), "fs__a_b_c");
        assert_eq!(exposed_name("fs", &"x".repeat(100)).len(), 64);
    }
}
