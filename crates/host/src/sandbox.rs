//! The sandbox a run's commands get: what `run.created` records, and the probe that decides
//! it at the start of a run.
//!
//! Invariants:
//! - A run's sandbox is fixed in `run.created`; a resume rebuilds the same policy from it
//!   (not from today's configuration), so a resume never weakens a run.
//! - A run recorded before sandboxes existed reads as `off`: that is how it ran.
//! - Never unsandboxed without asking: under `off` (chosen, or fallen back to) `shell` and
//!   `write_file` ask unless `--approval` or a tool policy says otherwise.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};

pub use agent_sandbox::{Mode, Policy, SandboxError};

/// A run's sandbox, as `run.created` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// The mode its commands run under.
    pub mode: Mode,
    /// Whether they may use the network.
    #[serde(default)]
    pub network: bool,
    /// Directories writable besides the workspace (`workspace-write`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable_roots: Vec<PathBuf>,
    /// Paths hidden besides the default credential stores.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_read: Vec<PathBuf>,
    /// Set when the default mode could not be had and the run fell back to `off`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

impl Default for SandboxSpec {
    /// `off`: how every run recorded before sandboxes ran.
    fn default() -> SandboxSpec {
        SandboxSpec::of(Mode::Off)
    }
}

impl SandboxSpec {
    /// `mode` with no network and no extra paths.
    pub fn of(mode: Mode) -> SandboxSpec {
        SandboxSpec {
            mode,
            network: false,
            writable_roots: Vec::new(),
            deny_read: Vec::new(),
            fallback: None,
        }
    }

    /// The policy of one command in `workspace`, with `tmpdir` its private temp dir.
    pub fn policy(&self, workspace: &Path, tmpdir: Option<&Path>) -> Policy {
        let mut policy = Policy::new(self.mode, workspace, dirs_home().as_deref());
        policy.network = self.network;
        policy.writable_roots = self.writable_roots.clone();
        policy.deny_read.extend(self.deny_read.iter().cloned());
        policy.tmpdir = tmpdir.map(Path::to_path_buf);
        if let Some(state) = state_dir() {
            policy.deny_read.push(state);
        }
        policy
    }
}

fn dirs_home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// agentctl's data directory (its default database), hidden from every command.
fn state_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .map(|d| d.join("agentctl"))
}

/// The binary that serves as the sandbox's entry point: this process's own (`agentctl`).
pub fn launcher() -> Result<PathBuf, SandboxError> {
    std::env::current_exe()
        .map_err(|err| SandboxError::Unsupported(format!("cannot find the agentctl binary: {err}")))
}

/// Whether commands can run under `spec` in `workspace` here: one `true` through the entry
/// point with the whole policy applied. `Ok` for `off`.
pub fn probe(spec: &SandboxSpec, workspace: &Path) -> Result<(), SandboxError> {
    if !spec.mode.is_sandboxed() {
        return Ok(());
    }
    #[cfg(feature = "test-hooks")]
    if std::env::var_os("AGENTCTL_TEST_SANDBOX_UNSUPPORTED").is_some() {
        return Err(SandboxError::Probe("a test made the probe fail".into()));
    }
    let tmp = tempfile::tempdir()
        .map_err(|err| SandboxError::Unsupported(format!("no temp dir: {err}")))?;
    let policy = spec.policy(workspace, Some(tmp.path()));
    let args = agent_sandbox::entry_args(&policy, "true".as_ref(), &[])?;
    let out = std::process::Command::new(launcher()?)
        .args(args)
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|err| SandboxError::Unsupported(format!("cannot start the probe: {err}")))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let said = said.trim().trim_start_matches("error: agentctl sandbox: ");
    Err(SandboxError::Probe(
        said.lines()
            .next()
            .unwrap_or("the probe failed")
            .to_string(),
    ))
}
