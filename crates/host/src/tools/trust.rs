//! Trust in a workspace's `agentctl.toml`.
//!
//! The file comes with the workspace: a repository someone else wrote can ship one. What it
//! asks that lowers a run's protections (an MCP server, which is a program started with the
//! run; the sandbox off or weaker; the network; more writable paths; a tool that stops
//! asking) is used only once the user has trusted that file as it reads now, with
//! `agentctl trust`; what only tightens (a stricter mode, more hidden paths, a tool that
//! asks or is refused) needs no trust.
//!
//! What needs trust is judged against the user's own `config.toml`: the workspace's file is
//! laid over it, so asking for `workspace-write` where the user's file says `read-only`, or
//! for a tool to ask where the user's file refuses it, lowers a protection too. Hidden paths
//! (`deny_read`) add to the user's; they never replace them.
//!
//! Invariants:
//! - Trust names a workspace's file by its workspace's canonical path and the file's
//!   content's SHA-256: any change to the file (a `git pull`) needs trusting again, and a
//!   file trusted in one workspace is not trusted in another that links to it (what it
//!   starts, `command` and `args`, is resolved in the workspace that reads it).
//! - The store is changed under a lock (`TRUST_FILE.lock`), read and rewritten whole, so
//!   two `agentctl trust` at once each keep the other's change.
//! - The store is the user's (beside `config.toml`, hidden from sandboxed commands with the
//!   rest of agentctl's configuration); a line that cannot be read is ignored, never trusted.

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::config::{ServerConfig, ToolConfig};
use super::{Policy, WORKSPACE_FILE};
use crate::sandbox::Mode as SandboxMode;

/// The store's file name, in the user's configuration directory.
pub const TRUST_FILE: &str = "trusted-workspaces";

/// Why a workspace's configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The file asks for what needs trust, and is not trusted as it reads now.
    #[error(
        "{file} asks to {}; it came with the workspace and is not trusted as it reads now: read it, then run `agentctl trust {workspace}`",
        asks.join("; ")
    )]
    Untrusted {
        /// The workspace's configuration file.
        file: String,
        /// Its workspace, as given.
        workspace: String,
        /// What it asks that needs trust, one phrase each.
        asks: Vec<String>,
    },
    /// The workspace's file or the store cannot be read or written.
    #[error("{file}: {reason}")]
    Io {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
}

/// What `config` (a workspace's file) asks that lowers a run's protections from what `user`
/// (the user's own file, the layer under it) sets, one phrase each; empty when it only
/// tightens them.
pub fn loosening(config: &ToolConfig, user: &ToolConfig) -> Vec<String> {
    let mut asks = Vec::new();
    for server in config.servers.values() {
        asks.push(starts(server));
    }
    let theirs = user.sandbox.mode.unwrap_or(SandboxMode::WorkspaceWrite);
    match config.sandbox.mode {
        Some(SandboxMode::Off) if theirs != SandboxMode::Off => {
            asks.push("turn the sandbox off".into());
        }
        Some(mode) if theirs.is_stricter_than(mode) => asks.push(format!(
            "run commands in `{mode}` where your configuration says `{theirs}`"
        )),
        Some(_) | None => {}
    }
    if config.sandbox.network == Some(true) && user.sandbox.network != Some(true) {
        asks.push("give commands the network".into());
    }
    let their_roots = user.sandbox.writable_roots.as_deref().unwrap_or_default();
    for root in config.sandbox.writable_roots.iter().flatten() {
        if !their_roots.contains(root) {
            asks.push(format!("let commands write {}", root.display()));
        }
    }
    for (tool, policy) in &config.policies {
        let theirs = user.policies.get(tool);
        match policy {
            Policy::Auto if theirs != Some(&Policy::Auto) => {
                asks.push(format!("run the tool `{tool}` without asking"));
            }
            Policy::Ask if theirs == Some(&Policy::Deny) => asks.push(format!(
                "offer the tool `{tool}`, which your configuration refuses"
            )),
            Policy::Auto | Policy::Ask | Policy::Deny => {}
        }
    }
    asks
}

/// What starting `server` does, whole: its command line, its sandbox and its environment,
/// every word shown so that one with spaces, or none, can be told apart (`-- "  " /`).
fn starts(server: &ServerConfig) -> String {
    let line = std::iter::once(&server.command)
        .chain(&server.args)
        .map(|word| word_shown(word))
        .collect::<Vec<_>>()
        .join(" ");
    let mut phrase = format!(
        "start the MCP server `{}` ({line}) with each run, sandbox `{}`",
        server.name, server.sandbox
    );
    if !server.env.is_empty() {
        let env = server
            .env
            .iter()
            .map(|(name, value)| format!("{}={}", word_shown(name), word_shown(value)))
            .collect::<Vec<_>>()
            .join(" ");
        phrase.push_str(&format!(", env {env}"));
    }
    phrase
}

/// `word` as it reads, or in double quotes when it is empty or holds a space, a quote, a
/// backslash or an invisible character (those written as escapes: `\n`, `\u{200b}`).
/// Control and bidirectional characters are left to the output, which escapes them.
fn word_shown(word: &str) -> String {
    let invisible = |c: char| {
        (c.is_whitespace() && c != ' ')
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2060}'..='\u{2064}' | '\u{feff}')
    };
    let plain = |c: char| !(c == ' ' || c == '"' || c == '\'' || c == '\\' || invisible(c));
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    let mut shown = String::from("\"");
    for c in word.chars() {
        match c {
            '"' | '\\' => {
                shown.push('\\');
                shown.push(c);
            }
            '\n' => shown.push_str("\\n"),
            '\t' => shown.push_str("\\t"),
            '\r' => shown.push_str("\\r"),
            c if invisible(c) => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => shown.push(c),
        }
    }
    shown.push('"');
    shown
}

/// The user's record of trusted workspace files (`TRUST_FILE` in their configuration
/// directory).
#[derive(Debug, Clone)]
pub struct TrustStore {
    path: PathBuf,
}

impl TrustStore {
    /// The store in `config_dir` (created when something is first trusted).
    pub fn in_dir(config_dir: &Path) -> TrustStore {
        TrustStore {
            path: config_dir.join(TRUST_FILE),
        }
    }

    /// Where it is kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `workspace`'s configuration, read from `workspace`'s `agentctl.toml` (absent: none),
    /// if it needs no trust over `user` (the user's own file, see [`loosening`]) or is
    /// trusted as it reads now.
    pub fn check(
        &self,
        workspace: &Path,
        user: &ToolConfig,
    ) -> Result<Option<ToolConfig>, crate::HostError> {
        let file = workspace.join(WORKSPACE_FILE);
        let Some(text) = read_optional(&file)? else {
            return Ok(None);
        };
        let config = ToolConfig::parse(&text, &file.display().to_string())?;
        let asks = loosening(&config, user);
        if asks.is_empty() || self.trusts(workspace, &text)? {
            return Ok(Some(config));
        }
        Err(TrustError::Untrusted {
            file: file.display().to_string(),
            workspace: workspace.display().to_string(),
            asks,
        }
        .into())
    }

    /// Records `workspace`'s `agentctl.toml` as it reads now; returns its path, its digest
    /// and what it asks that needs trust over `user` (the user's own file).
    pub fn trust(&self, workspace: &Path, user: &ToolConfig) -> Result<Trusted, crate::HostError> {
        let file = canonical_file(workspace)?;
        let text = read_optional(&file)?.ok_or_else(|| TrustError::Io {
            file: file.display().to_string(),
            reason:
                "no such file: there is nothing to trust (a workspace without one needs no trust)"
                    .into(),
        })?;
        let config = ToolConfig::parse(&text, &file.display().to_string())?;
        let key = line_key(&file)?;
        let digest = digest(&text);
        self.update(|lines| {
            let mut lines = others(lines, key);
            lines.push(format!("{digest}\t{key}"));
            (Some(lines), ())
        })?;
        Ok(Trusted {
            file,
            digest,
            asks: loosening(&config, user),
        })
    }

    /// Forgets `workspace`'s file; whether it was trusted. `workspace` may also be a link
    /// to a workspace deleted since, or the file's path as [`list`](Self::list) shows it.
    pub fn forget(&self, workspace: &Path) -> Result<bool, crate::HostError> {
        let file = canonical_file(workspace)?;
        let mut keys = vec![line_key(&file)?.to_string()];
        for other in other_names(workspace) {
            if let Ok(key) = line_key(&other)
                && !keys.iter().any(|k| k == key)
            {
                keys.push(key.to_string());
            }
        }
        self.update(|lines| {
            let count = lines.len();
            let kept = keys.iter().fold(lines, |lines, key| others(lines, key));
            let forgot = kept.len() != count;
            (forgot.then_some(kept), forgot)
        })
    }

    /// Every trusted file: its digest and path.
    pub fn list(&self) -> Result<Vec<(String, PathBuf)>, crate::HostError> {
        Ok(self
            .lines()?
            .iter()
            .filter_map(|l| l.split_once('\t'))
            .map(|(d, p)| (d.to_string(), PathBuf::from(p)))
            .collect())
    }

    fn trusts(&self, workspace: &Path, text: &str) -> Result<bool, crate::HostError> {
        let Ok(dir) = std::fs::canonicalize(workspace) else {
            return Ok(false);
        };
        let file = dir.join(WORKSPACE_FILE);
        let Some(key) = file.to_str() else {
            return Ok(false);
        };
        let want = digest(text);
        Ok(self
            .lines()?
            .iter()
            .filter_map(|l| l.split_once('\t'))
            .any(|(d, p)| p == key && d == want))
    }

    fn lines(&self) -> Result<Vec<String>, crate::HostError> {
        Ok(read_optional(&self.path)?
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect())
    }

    /// Changes the store under its lock: `change` gets its lines and returns the new ones
    /// (`None`: unchanged) and its answer. The new store is a temp file renamed over the
    /// old, so a reader, who takes no lock, never sees half of it.
    fn update<R>(
        &self,
        change: impl FnOnce(Vec<String>) -> (Option<Vec<String>>, R),
    ) -> Result<R, crate::HostError> {
        let io = |reason: std::io::Error| TrustError::Io {
            file: self.path.display().to_string(),
            reason: reason.to_string(),
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.path.with_extension("lock"))
            .map_err(io)?;
        lock.lock().map_err(io)?;
        let (lines, answer) = change(self.lines()?);
        if let Some(lines) = lines {
            let mut text = lines.join("\n");
            text.push('\n');
            let tmp = self.path.with_extension("tmp");
            std::fs::write(&tmp, text).map_err(io)?;
            std::fs::rename(&tmp, &self.path).map_err(io)?;
        }
        // Dropping `lock` closes it, which releases the lock.
        Ok(answer)
    }
}

/// A file just trusted.
#[derive(Debug, Clone)]
pub struct Trusted {
    /// The file, canonical.
    pub file: PathBuf,
    /// Its content's SHA-256, hex.
    pub digest: String,
    /// What it asks that needed trust (empty: it needed none).
    pub asks: Vec<String>,
}

/// The store's `lines` but the one of `key`.
fn others(lines: Vec<String>, key: &str) -> Vec<String> {
    lines
        .into_iter()
        .filter(|l| l.split_once('\t').is_none_or(|(_, p)| p != key))
        .collect()
}

fn digest(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The store's name for `workspace`'s file: its canonical workspace, and the file's name
/// in it (a link is not followed: the file is the workspace's).
fn canonical_file(workspace: &Path) -> Result<PathBuf, TrustError> {
    let io = |at: &Path, err: std::io::Error| TrustError::Io {
        file: at.display().to_string(),
        reason: err.to_string(),
    };
    match std::fs::canonicalize(workspace) {
        Ok(dir) => Ok(dir.join(WORKSPACE_FILE)),
        // No workspace: where it would be, so that a file trusted and deleted since can
        // still be forgotten, and trusting it says there is nothing.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            match crate::paths::as_far_as_exists(workspace) {
                Some(dir) => Ok(dir.join(WORKSPACE_FILE)),
                None => Err(io(workspace, err)),
            }
        }
        Err(err) => Err(io(workspace, err)),
    }
}

/// Other names the store may know `workspace`'s file by, for [`TrustStore::forget`]: where
/// the link `workspace` pointed, when its target is gone (a link to a workspace deleted
/// since it was trusted); and the file itself when `workspace` names it (the path `list`
/// shows).
fn other_names(workspace: &Path) -> Vec<PathBuf> {
    let mut names = Vec::new();
    if let Some((end, hops)) = crate::paths::followed(workspace)
        && hops > 0
    {
        names.push(end.join(WORKSPACE_FILE));
    }
    if workspace.file_name() == Some(WORKSPACE_FILE.as_ref())
        && !workspace.is_dir()
        && let Some(dir) = workspace.parent()
        && let Some(dir) = crate::paths::as_far_as_exists(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
    {
        names.push(dir.join(WORKSPACE_FILE));
    }
    names
}

/// The store's key for `file`: its path, which must be text without tabs or line breaks.
fn line_key(file: &Path) -> Result<&str, TrustError> {
    file.to_str()
        .filter(|p| !p.contains(['\t', '\n', '\r']))
        .ok_or_else(|| TrustError::Io {
            file: file.display().to_string(),
            reason: "a path that is not text, or holds a tab or line break, cannot be trusted"
                .into(),
        })
}

fn read_optional(path: &Path) -> Result<Option<String>, TrustError> {
    super::small_file::read_optional(path).map_err(|reason| TrustError::Io {
        file: path.display().to_string(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ToolConfig {
        ToolConfig::parse(text, "agentctl.toml").unwrap()
    }

    #[test]
    fn only_what_lowers_protections_needs_trust() {
        let tight = parse(
            "[sandbox]\nmode = \"read-only\"\ndeny_read = [\"/x\"]\n\
             [tools.shell]\napproval = \"ask\"\n[tools.write_file]\napproval = \"deny\"\n",
        );
        assert!(loosening(&tight, &ToolConfig::default()).is_empty());
        let loose = parse(
            "[mcp_servers.h]\ncommand = \"sh\"\nargs = [\"-c\", \"touch /pwned\"]\n\
             [sandbox]\nmode = \"off\"\nnetwork = true\nwritable_roots = [\"/etc\"]\n\
             [tools.shell]\napproval = \"auto\"\n",
        );
        let asks = loosening(&loose, &ToolConfig::default());
        assert_eq!(asks.len(), 5, "{asks:?}");
        assert!(asks[0].contains("`h` (sh -c \"touch /pwned\")"), "{asks:?}");
    }

    /// What a server starts is shown whole: every argument (one of spaces, a trailing `/`
    /// past 80 characters), its environment (`NODE_OPTIONS` runs code) and its sandbox.
    #[test]
    fn a_server_is_shown_whole_with_its_env_and_sandbox() {
        let config = parse(
            "[mcp_servers.fs]\ncommand = \"npx\"\n\
             args = [\"-y\", \"@modelcontextprotocol/server-filesystem\", \".\", \"--\", \"                              \", \"/\", \"\", \"a\\nb\", \"q\\\"\\u200b\"]\n\
             env = { NODE_OPTIONS = \"--require=/tmp/evil.js\", B = \"two words\" }\n\
             [mcp_servers.ro]\ncommand = \"srv\"\nsandbox = \"read-only\"\n",
        );
        let asks = loosening(&config, &ToolConfig::default());
        assert_eq!(
            asks,
            [
                "start the MCP server `fs` (npx -y @modelcontextprotocol/server-filesystem . -- \
                 \"                              \" / \"\" \"a\\nb\" \"q\\\"\\u{200b}\") with each run, \
                 sandbox `off`, env B=\"two words\" NODE_OPTIONS=--require=/tmp/evil.js",
                "start the MCP server `ro` (srv) with each run, sandbox `read-only`",
            ]
        );
    }

    /// `--forget` finds the entry of a workspace deleted since it was trusted through a
    /// link to it, and by the file's path as `list` shows it.
    #[test]
    fn forget_finds_a_deleted_workspace_by_a_link_or_by_its_listed_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let store = TrustStore::in_dir(&root.join("config"));
        let none = ToolConfig::default();
        for name in ["a", "b"] {
            let ws = root.join(name);
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::write(ws.join(WORKSPACE_FILE), "[sandbox]\nnetwork = true\n").unwrap();
            store.trust(&ws, &none).unwrap();
        }
        let link = root.join("link");
        std::os::unix::fs::symlink(root.join("a"), &link).unwrap();
        std::fs::remove_dir_all(root.join("a")).unwrap();
        assert!(store.forget(&link).unwrap(), "not found through the link");
        let listed = store.list().unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].1, root.join("b").join(WORKSPACE_FILE));
        // The path as listed, also once the workspace is gone.
        std::fs::remove_dir_all(root.join("b")).unwrap();
        assert!(
            store.forget(&listed[0].1).unwrap(),
            "not found by its listed path"
        );
        assert!(store.list().unwrap().is_empty());
    }

    #[test]
    fn trust_binds_the_file_as_it_reads_and_can_be_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let store = TrustStore::in_dir(&dir.path().join("config"));
        let none = ToolConfig::default();
        assert!(
            store.check(&ws, &none).unwrap().is_none(),
            "no file, no config"
        );
        std::fs::write(ws.join(WORKSPACE_FILE), "[sandbox]\nmode = \"read-only\"\n").unwrap();
        assert!(
            store.check(&ws, &none).unwrap().is_some(),
            "tightening needs no trust"
        );
        std::fs::write(ws.join(WORKSPACE_FILE), "[sandbox]\nnetwork = true\n").unwrap();
        let err = store.check(&ws, &none).unwrap_err().to_string();
        assert!(err.contains("give commands the network"), "{err}");
        assert!(err.contains("agentctl trust"), "{err}");
        let trusted = store.trust(&ws, &none).unwrap();
        assert_eq!(trusted.asks, ["give commands the network"]);
        assert!(store.check(&ws, &none).unwrap().is_some());
        // Any change needs trusting again.
        std::fs::write(ws.join(WORKSPACE_FILE), "[sandbox]\nnetwork = true\n\n").unwrap();
        assert!(store.check(&ws, &none).is_err());
        store.trust(&ws, &none).unwrap();
        assert_eq!(store.list().unwrap().len(), 1, "one line per file");
        assert!(store.forget(&ws).unwrap());
        assert!(!store.forget(&ws).unwrap());
        assert!(store.check(&ws, &none).is_err());
    }

    /// The workspace's file is judged over the user's own: asking for a weaker mode than
    /// theirs, or for a tool they refuse, needs trust; hidden paths add to theirs.
    #[test]
    fn loosening_is_judged_over_the_users_file() {
        let user = parse(
            "[sandbox]\nmode = \"read-only\"\ndeny_read = [\"/secret\"]\nwritable_roots = [\"/data\"]\n\
             [tools.write_file]\napproval = \"deny\"\n[tools.shell]\napproval = \"auto\"\n",
        );
        let ws = parse(
            "[sandbox]\nmode = \"workspace-write\"\ndeny_read = [\"/other\"]\nwritable_roots = [\"/data\"]\n\
             [tools.write_file]\napproval = \"ask\"\n[tools.shell]\napproval = \"auto\"\n",
        );
        let asks = loosening(&ws, &user);
        assert_eq!(
            asks,
            [
                "run commands in `workspace-write` where your configuration says `read-only`",
                "offer the tool `write_file`, which your configuration refuses",
            ],
            "{asks:?}"
        );
        // Without the user's file, the same workspace file only tightens, but the
        // policies it relaxes from the tools' own.
        let none = ToolConfig::default();
        assert_eq!(
            loosening(&ws, &none),
            [
                "let commands write /data",
                "run the tool `shell` without asking"
            ]
        );
        // Laid over the user's file, the hidden paths add up.
        let mut merged = user.clone();
        merged.overlay(ws);
        assert_eq!(
            merged.sandbox.deny_read,
            Some(vec![PathBuf::from("/secret"), PathBuf::from("/other")])
        );
    }

    /// A workspace whose `agentctl.toml` links to a trusted workspace's file is not
    /// trusted: what the file starts is resolved in the workspace that reads it.
    #[test]
    fn trust_is_of_the_workspace_not_of_a_file_it_links_to() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(
            a.join(WORKSPACE_FILE),
            "[mcp_servers.h]\ncommand = \"sh\"\nargs = [\"./start.sh\"]\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(a.join(WORKSPACE_FILE), b.join(WORKSPACE_FILE)).unwrap();
        let store = TrustStore::in_dir(&dir.path().join("config"));
        let none = ToolConfig::default();
        store.trust(&a, &none).unwrap();
        assert!(store.check(&a, &none).unwrap().is_some());
        let err = store.check(&b, &none).unwrap_err().to_string();
        assert!(err.contains("not trusted"), "{err}");
        // Trusted there too, by name: both are, each for its own workspace.
        let trusted = store.trust(&b, &none).unwrap();
        assert_eq!(trusted.file, b.canonicalize().unwrap().join(WORKSPACE_FILE));
        assert!(store.check(&b, &none).unwrap().is_some());
        assert_eq!(store.list().unwrap().len(), 2);
    }

    /// Many `trust` and `forget` at once: every change is kept (each one reads and
    /// rewrites the whole store, under its lock).
    #[test]
    fn concurrent_changes_to_the_store_are_all_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = TrustStore::in_dir(&dir.path().join("config"));
        let none = ToolConfig::default();
        let workspaces: Vec<PathBuf> = (0..16)
            .map(|i| {
                let ws = dir.path().join(format!("ws{i}"));
                std::fs::create_dir_all(&ws).unwrap();
                std::fs::write(ws.join(WORKSPACE_FILE), "[sandbox]\nnetwork = true\n").unwrap();
                ws
            })
            .collect();
        // The odd ones are trusted first, then forgotten while the even ones are trusted.
        for ws in workspaces.iter().skip(1).step_by(2) {
            store.trust(ws, &none).unwrap();
        }
        std::thread::scope(|scope| {
            for (i, ws) in workspaces.iter().enumerate() {
                let (store, none) = (&store, &none);
                scope.spawn(move || {
                    for _ in 0..5 {
                        if i % 2 == 0 {
                            store.trust(ws, none).unwrap();
                        } else {
                            store.forget(ws).unwrap();
                        }
                    }
                });
            }
        });
        for (i, ws) in workspaces.iter().enumerate() {
            assert_eq!(store.check(ws, &none).is_ok(), i % 2 == 0, "workspace {i}");
        }
        assert_eq!(store.list().unwrap().len(), 8);
    }
}
