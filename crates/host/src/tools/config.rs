//! `agentctl.toml`: the MCP servers a run may use and per-tool policies.
//!
//! The shape is Codex's `config.toml` (`[mcp_servers.NAME] command, args, env,
//! tool_timeout_sec`, and our `sandbox`), plus
//! `[tools."NAME"] approval = "auto|ask|deny"` for any tool (built-in or `SERVER__TOOL`).
//!
//! Invariants:
//! - Parsing never panics; every error names the file (or `--mcp`) and the key.
//! - Layers merge per entry: a later layer (the workspace file, then `--mcp`) replaces a
//!   server or a tool policy of an earlier one (the user file) as a whole; hidden paths
//!   (`[sandbox] deny_read`) add up.
//! - Keys this host does not know are ignored (a Codex config may carry many), but a known
//!   key of the wrong type is an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::Policy;

/// The file looked for in the workspace directory.
pub const WORKSPACE_FILE: &str = "agentctl.toml";

/// The user's own file, in their configuration directory.
pub const USER_FILE: &str = "config.toml";

/// How long an MCP call may take unless its server says otherwise (Codex's default).
pub const DEFAULT_TOOL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// How one MCP server is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Its name: the prefix of its tools (`NAME__TOOL`).
    pub name: String,
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set for it (on top of this process's environment minus the API key).
    pub env: BTreeMap<String, String>,
    /// `sandbox = "read-only" | "workspace-write" | "off"` (default `off`, as in Codex:
    /// many servers need the network). A sandboxed server gets the run's `[sandbox]`
    /// settings with this mode.
    pub sandbox: agent_sandbox::Mode,
    /// `tool_timeout_sec`: how long a call may take before it fails and the server is
    /// stopped (the next call starts it again). Default [`DEFAULT_TOOL_TIMEOUT`].
    pub tool_timeout: std::time::Duration,
    /// Where it was declared (a file, or `--mcp`), for messages.
    pub source: String,
}

/// MCP servers and tool policies, merged from every layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolConfig {
    /// The servers by name.
    pub servers: BTreeMap<String, ServerConfig>,
    /// Policies that replace a tool's own, by tool name.
    pub policies: BTreeMap<String, Policy>,
    /// `[sandbox]`: what a later layer sets replaces an earlier one's (`deny_read` adds).
    pub sandbox: SandboxConfig,
}

/// `[sandbox] mode, network, writable_roots, deny_read`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxConfig {
    /// `mode = "read-only" | "workspace-write" | "off"`.
    pub mode: Option<agent_sandbox::Mode>,
    /// `network = true | false`.
    pub network: Option<bool>,
    /// `writable_roots = ["/abs/dir", ...]`.
    pub writable_roots: Option<Vec<PathBuf>>,
    /// `deny_read = ["/abs/path", ...]` (on top of the default credential stores).
    pub deny_read: Option<Vec<PathBuf>>,
}

impl SandboxConfig {
    fn parse(
        value: &Value,
        invalid: &dyn Fn(String, &str) -> ConfigError,
    ) -> Result<SandboxConfig, ConfigError> {
        let table = value
            .as_table()
            .ok_or_else(|| invalid("sandbox".into(), "must be a table"))?;
        let mut out = SandboxConfig::default();
        if let Some(mode) = table.get("mode") {
            let mode = mode.as_str().and_then(|m| m.parse().ok()).ok_or_else(|| {
                invalid(
                    "sandbox.mode".into(),
                    "must be \"read-only\", \"workspace-write\" or \"off\"",
                )
            })?;
            out.mode = Some(mode);
        }
        if let Some(network) = table.get("network") {
            let network = network
                .as_bool()
                .ok_or_else(|| invalid("sandbox.network".into(), "must be true or false"))?;
            out.network = Some(network);
        }
        let paths = |key: &str| -> Result<Option<Vec<PathBuf>>, ConfigError> {
            let Some(list) = table.get(key) else {
                return Ok(None);
            };
            let bad = || invalid(format!("sandbox.{key}"), "must be a list of absolute paths");
            let list = list.as_array().ok_or_else(bad)?;
            list.iter()
                .map(|v| {
                    v.as_str()
                        .map(PathBuf::from)
                        .filter(|p| p.is_absolute())
                        .ok_or_else(bad)
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
        };
        out.writable_roots = paths("writable_roots")?;
        out.deny_read = paths("deny_read")?;
        Ok(out)
    }

    /// `other` laid over this: what it sets replaces this one's, but `deny_read`, which it
    /// adds to (a later layer never shows what an earlier one hides).
    fn overlay(&mut self, other: SandboxConfig) {
        self.mode = other.mode.or(self.mode);
        self.network = other.network.or(self.network);
        self.writable_roots = other.writable_roots.or(self.writable_roots.take());
        self.deny_read = match (self.deny_read.take(), other.deny_read) {
            (Some(mut mine), Some(theirs)) => {
                for path in theirs {
                    if !mine.contains(&path) {
                        mine.push(path);
                    }
                }
                Some(mine)
            }
            (mine, theirs) => theirs.or(mine),
        };
    }
}

/// A configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("{file}: cannot read it: {reason}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// The file is not TOML.
    #[error("{file}: not valid TOML: {reason}")]
    Syntax {
        /// The file.
        file: String,
        /// The parser's message.
        reason: String,
    },
    /// A key holds something this host cannot use.
    #[error("{file}: `{key}`: {reason}")]
    Invalid {
        /// The file, or `--mcp`.
        file: String,
        /// The dotted key.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// Where byte `at` of `text` is, as an editor counts: "line L, column C" (both from 1,
/// columns in characters).
fn place(text: &str, at: usize) -> String {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit_once('\n')
        .map_or(before, |(_, last)| last)
        .chars()
        .count()
        + 1;
    format!("line {line}, column {column}")
}

impl ToolConfig {
    /// The configuration in `text`, read from `file` (named in errors).
    pub fn parse(text: &str, file: &str) -> Result<ToolConfig, ConfigError> {
        let table: Table = text
            .parse()
            .map_err(|err: toml::de::Error| ConfigError::Syntax {
                file: file.into(),
                reason: match err.span() {
                    Some(span) => format!("{} ({})", err.message(), place(text, span.start)),
                    None => err.message().to_string(),
                },
            })?;
        let invalid = |key: String, reason: &str| ConfigError::Invalid {
            file: file.into(),
            key,
            reason: reason.into(),
        };
        let mut config = ToolConfig::default();
        if let Some(servers) = table.get("mcp_servers") {
            let servers = servers
                .as_table()
                .ok_or_else(|| invalid("mcp_servers".into(), "must be a table of servers"))?;
            for (name, server) in servers {
                let key = |k: &str| format!("mcp_servers.{name}{k}");
                check_server_name(name).map_err(|reason| invalid(key(""), &reason))?;
                let server = server
                    .as_table()
                    .ok_or_else(|| invalid(key(""), "must be a table"))?;
                let command = match server.get("command") {
                    Some(Value::String(c)) if !c.trim().is_empty() => c.clone(),
                    Some(Value::String(_)) => return Err(invalid(key(".command"), "is empty")),
                    Some(_) => return Err(invalid(key(".command"), "must be a string")),
                    None => return Err(invalid(key(".command"), "is missing")),
                };
                let args = match server.get("args") {
                    None => Vec::new(),
                    Some(Value::Array(items)) => items
                        .iter()
                        .map(|a| a.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| invalid(key(".args"), "must be an array of strings"))?,
                    Some(_) => return Err(invalid(key(".args"), "must be an array of strings")),
                };
                let mut env = BTreeMap::new();
                match server.get("env") {
                    None => {}
                    Some(Value::Table(vars)) => {
                        for (var, value) in vars {
                            let value = value.as_str().ok_or_else(|| {
                                invalid(key(&format!(".env.{var}")), "must be a string")
                            })?;
                            env.insert(var.clone(), value.to_string());
                        }
                    }
                    Some(_) => return Err(invalid(key(".env"), "must be a table of strings")),
                }
                let sandbox = match server.get("sandbox") {
                    None => agent_sandbox::Mode::Off,
                    Some(mode) => mode.as_str().and_then(|m| m.parse().ok()).ok_or_else(|| {
                        invalid(
                            key(".sandbox"),
                            "must be \"read-only\", \"workspace-write\" or \"off\"",
                        )
                    })?,
                };
                let tool_timeout = match server.get("tool_timeout_sec") {
                    None => DEFAULT_TOOL_TIMEOUT,
                    Some(secs) => secs
                        .as_float()
                        // An integer reads as the same float would (what is too large
                        // for a duration is refused either way).
                        .or_else(|| secs.as_integer().map(|i| i as f64))
                        .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
                        .filter(|d| !d.is_zero())
                        .ok_or_else(|| {
                            invalid(
                                key(".tool_timeout_sec"),
                                "must be a positive number of seconds",
                            )
                        })?,
                };
                for unknown in server.keys().filter(|k| {
                    !matches!(
                        k.as_str(),
                        "command" | "args" | "env" | "sandbox" | "tool_timeout_sec"
                    )
                }) {
                    tracing::warn!(
                        file,
                        "`{}` is not used by agentctl; ignored",
                        key(&format!(".{unknown}"))
                    );
                }
                config.servers.insert(
                    name.clone(),
                    ServerConfig {
                        name: name.clone(),
                        command,
                        args,
                        env,
                        sandbox,
                        tool_timeout,
                        source: file.into(),
                    },
                );
            }
        }
        if let Some(sandbox) = table.get("sandbox") {
            config.sandbox = SandboxConfig::parse(sandbox, &invalid)?;
        }
        if let Some(tools) = table.get("tools") {
            let tools = tools
                .as_table()
                .ok_or_else(|| invalid("tools".into(), "must be a table of tools"))?;
            for (name, tool) in tools {
                let key = format!("tools.{}.approval", quoted(name));
                let approval = tool
                    .as_table()
                    .and_then(|t| t.get("approval"))
                    .ok_or_else(|| invalid(key.clone(), "is missing (auto, ask or deny)"))?;
                let policy = match approval.as_str() {
                    Some("auto") => Policy::Auto,
                    Some("ask") => Policy::Ask,
                    Some("deny") => Policy::Deny,
                    _ => return Err(invalid(key, "must be \"auto\", \"ask\" or \"deny\"")),
                };
                config.policies.insert(name.clone(), policy);
            }
        }
        Ok(config)
    }

    /// The configuration in `path`; `None` when there is no such file.
    pub fn read(path: &Path) -> Result<Option<ToolConfig>, ConfigError> {
        let file = path.display().to_string();
        match super::small_file::read_optional(path) {
            Ok(Some(text)) => ToolConfig::parse(&text, &file).map(Some),
            Ok(None) => Ok(None),
            Err(reason) => Err(ConfigError::Read { file, reason }),
        }
    }

    /// `config.toml` of the user's configuration directory `config_dir` (if given), overlaid
    /// with `agentctl.toml` of `workspace` where that needs no trust or is trusted as it
    /// reads now by the store in `config_dir` ([`TrustStore::check`]); without a
    /// configuration directory nothing is trusted.
    ///
    /// [`TrustStore::check`]: super::TrustStore::check
    pub fn load(
        workspace: &Path,
        config_dir: Option<&Path>,
    ) -> Result<ToolConfig, crate::HostError> {
        let mut config = ToolConfig::default();
        let user = config_dir.map(|dir| ToolConfig::read(&dir.join(USER_FILE)));
        if let Some(user) = user.transpose()?.flatten() {
            config.overlay(user);
        }
        // No directory: a store that does not exist, which trusts nothing.
        let store = super::TrustStore::in_dir(config_dir.unwrap_or(Path::new("/nonexistent")));
        if let Some(local) = store.check(workspace, &config)? {
            config.overlay(local);
        }
        Ok(config)
    }

    /// Adds `other`'s servers and policies, replacing entries of the same name.
    pub fn overlay(&mut self, other: ToolConfig) {
        self.servers.extend(other.servers);
        self.policies.extend(other.policies);
        self.sandbox.overlay(other.sandbox);
    }

    /// Adds a server from `--mcp NAME='COMMAND ARGS'` (words split on blanks; single or
    /// double quotes keep blanks in a word), replacing one of the same name.
    pub fn add_cli_server(&mut self, spec: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: &str| ConfigError::Invalid {
            file: "--mcp".into(),
            key: key.into(),
            reason: reason.into(),
        };
        let (name, command) = spec
            .split_once('=')
            .ok_or_else(|| invalid(spec, "expected NAME='COMMAND ARGS'"))?;
        let name = name.trim();
        check_server_name(name).map_err(|reason| invalid(name, &reason))?;
        let mut words = split_words(command).map_err(|reason| invalid(name, &reason))?;
        if words.is_empty() {
            return Err(invalid(name, "the command is empty"));
        }
        let command = words.remove(0);
        self.servers.insert(
            name.to_string(),
            ServerConfig {
                name: name.to_string(),
                command,
                args: words,
                env: BTreeMap::new(),
                sandbox: agent_sandbox::Mode::Off,
                tool_timeout: DEFAULT_TOOL_TIMEOUT,
                source: "--mcp".into(),
            },
        );
        Ok(())
    }
}

/// A server name is the prefix of its tools' names: letters, digits, `-` and `_`, without
/// `__` (the separator) and without `_` at either end (then `SERVER__TOOL` names one
/// server's tool only).
fn check_server_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the server name is empty".into());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err("a server name may only hold letters, digits, `-` and `_`".into());
    }
    if name.contains("__") {
        return Err("a server name may not contain `__` (it separates server and tool)".into());
    }
    // `a_` + `__` + `x` would be `a` + `__` + `_x`: two servers' tools, one name.
    if name.starts_with('_') || name.ends_with('_') {
        return Err(
            "a server name may not start or end with `_` (its tools' names could clash with another server's)"
                .into(),
        );
    }
    if name.len() > 32 {
        return Err("a server name is at most 32 characters".into());
    }
    Ok(())
}

fn quoted(name: &str) -> String {
    if name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}

/// `words` as [`split_words`] reads them back: a word with a blank, a quote or nothing in
/// it is quoted (single quotes, or double ones with `\"` and `\\` when it holds a `'`).
pub(crate) fn join_words<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    let quote = |word: &str| {
        if !word.is_empty()
            && !word
                .chars()
                .any(|c| c.is_whitespace() || c == '\'' || c == '"')
        {
            word.to_string()
        } else if !word.contains('\'') {
            format!("'{word}'")
        } else {
            format!("\"{}\"", word.replace('\\', "\\\\").replace('"', "\\\""))
        }
    };
    words.into_iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// Blank-separated words; quotes group (no escapes inside single quotes, `\"` inside double).
fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => word.push(c),
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// What a run recorded of a `--mcp` server, printed back as `--mcp`, declares the same
    /// server (the command a paused or interrupted run prints to resume it).
    #[test]
    fn a_recorded_server_reads_back_as_the_same_mcp_flag() {
        let words = [
            "/opt/my server/bin",
            "-y",
            "",
            "it's",
            "say \"hi\"",
            "back\\slash",
            "a'b\"c\\d",
            "tab\there",
            "plain=x",
        ];
        let record = crate::tools::mcp::McpServerRecord {
            name: "m-1".into(),
            command: words[0].into(),
            args: words[1..].iter().map(|w| w.to_string()).collect(),
            env_keys: Vec::new(),
            sandbox: agent_sandbox::Mode::Off,
        };
        let spec = record.cli_spec();
        assert!(
            spec.starts_with("m-1='/opt/my server/bin' -y '' "),
            "{spec}"
        );
        let mut config = ToolConfig::default();
        config.add_cli_server(&spec).unwrap();
        let server = &config.servers["m-1"];
        assert_eq!(server.command, words[0]);
        assert_eq!(server.args, words[1..]);
    }

    #[test]
    fn parses_servers_and_policies() {
        let c = ToolConfig::parse(
            r#"
model = "ignored"
[mcp_servers.fs]
command = "npx"
args = ["-y", "server"]
env = { TOKEN = "x" }
[tools."fs__write"]
approval = "deny"
[tools.shell]
approval = "auto"
"#,
            "agentctl.toml",
        )
        .unwrap();
        let fs = &c.servers["fs"];
        assert_eq!(fs.command, "npx");
        assert_eq!(fs.args, ["-y", "server"]);
        assert_eq!(fs.env["TOKEN"], "x");
        assert_eq!(c.policies["fs__write"], Policy::Deny);
        assert_eq!(c.policies["shell"], Policy::Auto);
        assert_eq!(fs.sandbox, agent_sandbox::Mode::Off);
        assert_eq!(fs.tool_timeout, DEFAULT_TOOL_TIMEOUT);
    }

    #[test]
    fn a_server_sandbox_and_timeout_are_checked() {
        let c = ToolConfig::parse(
            "[mcp_servers.a]\ncommand = \"x\"\nsandbox = \"read-only\"\ntool_timeout_sec = 2\n\
             [mcp_servers.b]\ncommand = \"y\"\ntool_timeout_sec = 0.25\n",
            "agentctl.toml",
        )
        .unwrap();
        assert_eq!(c.servers["a"].sandbox, agent_sandbox::Mode::ReadOnly);
        assert_eq!(
            c.servers["a"].tool_timeout,
            std::time::Duration::from_secs(2)
        );
        assert_eq!(
            c.servers["b"].tool_timeout,
            std::time::Duration::from_millis(250)
        );
        for (bad, key) in [
            ("sandbox = \"maybe\"", "mcp_servers.a.sandbox"),
            ("sandbox = true", "mcp_servers.a.sandbox"),
            ("tool_timeout_sec = 0", "mcp_servers.a.tool_timeout_sec"),
            ("tool_timeout_sec = -1.0", "mcp_servers.a.tool_timeout_sec"),
            ("tool_timeout_sec = \"5\"", "mcp_servers.a.tool_timeout_sec"),
        ] {
            let text = format!("[mcp_servers.a]\ncommand = \"x\"\n{bad}\n");
            let err = ToolConfig::parse(&text, "agentctl.toml").unwrap_err();
            assert!(err.to_string().contains(key), "{bad}: {err}");
        }
    }

    #[test]
    fn errors_name_file_and_key() {
        let cases = [
            (
                "[mcp_servers.fs]\nargs = []",
                "a.toml: `mcp_servers.fs.command`: is missing",
            ),
            (
                "[mcp_servers.fs]\ncommand = 3",
                "`mcp_servers.fs.command`: must be a string",
            ),
            (
                "[mcp_servers.fs]\ncommand = \"x\"\nargs = [1]",
                "`mcp_servers.fs.args`",
            ),
            (
                "[mcp_servers.fs]\ncommand = \"x\"\nenv = { A = 1 }",
                "`mcp_servers.fs.env.A`",
            ),
            ("[mcp_servers.\"a b\"]\ncommand = \"x\"", "letters, digits"),
            (
                "[tools.shell]\napproval = \"maybe\"",
                "`tools.shell.approval`: must be",
            ),
            (
                "[tools.\"fs.x\"]\n",
                "`tools.\"fs.x\".approval`: is missing",
            ),
            ("mcp_servers = 1", "`mcp_servers`"),
            ("[mcp_servers", "a.toml: not valid TOML"),
        ];
        for (text, want) in cases {
            let err = ToolConfig::parse(text, "a.toml").unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    /// A syntax error says where it is: the parser's message alone ("duplicate key") left
    /// the reader to search the file.
    #[test]
    fn a_syntax_error_names_its_line_and_column() {
        let text = "[sandbox]\nmode = \"off\"\n  mode = \"read-only\"\n";
        let err = ToolConfig::parse(text, "a.toml").unwrap_err().to_string();
        assert!(err.starts_with("a.toml: not valid TOML: "), "{err}");
        assert!(err.contains("duplicate key"), "{err}");
        assert!(err.contains("(line 3, column 3)"), "{err}");
        // Columns count characters, not bytes.
        let err = ToolConfig::parse("t = { \"é\" = 1, \"é\" = 2 }\n", "a.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("(line 1, column 16)"), "{err}");
    }

    #[test]
    fn sandbox_section_parses_and_layers() {
        let user = ToolConfig::parse(
            "[sandbox]\nmode = \"read-only\"\nnetwork = true\ndeny_read = [\"/srv/keys\"]",
            "u.toml",
        )
        .unwrap();
        let mut c = user.clone();
        c.overlay(ToolConfig::parse("[sandbox]\nmode = \"workspace-write\"", "w.toml").unwrap());
        assert_eq!(c.sandbox.mode, Some(agent_sandbox::Mode::WorkspaceWrite));
        assert_eq!(c.sandbox.network, Some(true));
        assert_eq!(c.sandbox.deny_read, Some(vec![PathBuf::from("/srv/keys")]));
        for (text, key) in [
            ("[sandbox]\nmode = \"danger\"", "`sandbox.mode`"),
            ("[sandbox]\nnetwork = \"yes\"", "`sandbox.network`"),
            (
                "[sandbox]\nwritable_roots = [\"rel\"]",
                "`sandbox.writable_roots`",
            ),
            ("sandbox = 1", "`sandbox`"),
        ] {
            let err = ToolConfig::parse(text, "a.toml").unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn cli_servers_and_layers() {
        let mut c = ToolConfig::parse(
            "[mcp_servers.a]\ncommand = \"old\"\n[mcp_servers.b]\ncommand = \"b\"",
            "user",
        )
        .unwrap();
        c.add_cli_server("a=node 'my server.js' --flag \"x y\"")
            .unwrap();
        assert_eq!(c.servers["a"].command, "node");
        assert_eq!(c.servers["a"].args, ["my server.js", "--flag", "x y"]);
        assert_eq!(c.servers["b"].command, "b");
        assert!(c.add_cli_server("nocommand").is_err());
        assert!(c.add_cli_server("x=").is_err());
        assert!(c.add_cli_server("x='open").is_err());
        assert!(c.add_cli_server("a__b=cmd").is_err());
    }

    /// `a_` + `__` + `x` and `a` + `__` + `_x` would be one name: a server name neither
    /// starts nor ends with `_`, in a file (naming the key) or on the command line.
    #[test]
    fn a_server_name_does_not_start_or_end_with_an_underscore() {
        for name in ["a_", "_a", "_"] {
            let text = format!("[mcp_servers.{name}]\ncommand = \"x\"\n");
            let err = ToolConfig::parse(&text, "a.toml").unwrap_err().to_string();
            assert!(
                err.contains(&format!("`mcp_servers.{name}`")) && err.contains("start or end"),
                "{err}"
            );
            let mut c = ToolConfig::default();
            let err = c.add_cli_server(&format!("{name}=cmd")).unwrap_err();
            assert!(err.to_string().contains("start or end"), "{err}");
        }
        let ok = ToolConfig::parse("[mcp_servers.a_b-c]\ncommand = \"x\"\n", "a.toml");
        assert!(ok.is_ok(), "{ok:?}");
    }

    /// An integer `tool_timeout_sec` reads as the same float does, however large.
    #[test]
    fn an_integer_timeout_reads_as_the_float() {
        for secs in ["5000000000", "4294967296", "86400"] {
            let parse = |value: &str| {
                let text =
                    format!("[mcp_servers.a]\ncommand = \"x\"\ntool_timeout_sec = {value}\n");
                ToolConfig::parse(&text, "a.toml").map(|c| c.servers["a"].tool_timeout)
            };
            let integer = parse(secs).unwrap();
            assert_eq!(integer, parse(&format!("{secs}.0")).unwrap(), "{secs}");
            assert_eq!(integer.as_secs().to_string(), secs);
        }
    }
}
