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
        let mut policy = Policy::new(self.mode, workspace, dirs::home_dir().as_deref());
        policy.network = self.network;
        policy.writable_roots = self.writable_roots.clone();
        policy.deny_read.extend(self.deny_read.iter().cloned());
        policy.tmpdir = tmpdir.map(Path::to_path_buf);
        // The driving process's own, also when the run was recorded by another (a worker,
        // a resume by someone else, with their own `AGENTCTL_CONFIG_DIR`).
        policy.deny_read.extend(state_dir());
        policy.deny_read.extend(moved_config_dir());
        policy
    }
}

/// agentctl's configuration directory when `AGENTCTL_CONFIG_DIR` moves it (its trust
/// store and the user's `config.toml`, whose MCP servers' `env` may hold tokens), hidden
/// from every command like the default one, which the sandbox's own list holds.
pub fn moved_config_dir() -> Option<PathBuf> {
    std::env::var_os("AGENTCTL_CONFIG_DIR")
        .filter(|dir| !dir.is_empty())
        .and_then(|dir| std::path::absolute(dir).ok())
}

/// agentctl's data directory (its default database), hidden from every command; found as
/// agentctl finds it, with `dirs` (`HOME` unset or empty included: the password database's
/// home).
fn state_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("agentctl"))
}

/// The binary that serves as the sandbox's entry point: `agentctl-sandbox` beside this
/// process's binary when it is there (it starts in a fraction of `agentctl`'s time), else
/// this process's own binary (`agentctl`, whose `main` dispatches the entry first).
pub fn launcher() -> Result<PathBuf, SandboxError> {
    let exe = std::env::current_exe().map_err(|err| {
        SandboxError::Unsupported(format!("cannot find the agentctl binary: {err}"))
    })?;
    let small = exe.with_file_name(agent_sandbox::ENTRY_BINARY);
    Ok(if small.is_file() { small } else { exe })
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
    let tmp = tempfile::tempdir().map_err(|err| {
        SandboxError::Unsupported(format!("cannot create a temp dir for the probe: {err}"))
    })?;
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

/// Why a resumed run's sandbox changed (`run.sandbox_changed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxCause {
    /// `resume --sandbox MODE`: a person asked for it.
    Flag,
    /// The driving worker's `--sandbox` is stricter than the run's mode.
    WorkerFloor,
    /// The system cannot give the run's mode: it falls back to `off`, where every command
    /// asks.
    Unsupported,
}

/// A resumed run's new sandbox and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxChange {
    /// The sandbox from now on.
    pub sandbox: SandboxSpec,
    /// Why.
    pub cause: SandboxCause,
}

/// The sandbox a resumed run is driven under, when it is not the one recorded: `asked` (an
/// explicit `--sandbox`) replaces the recorded mode; otherwise a `floor` stricter than it
/// (a worker's `--sandbox`) tightens it. The mode is probed in `workspace`: when the system
/// cannot give it, an asked mode is an error (nothing runs) and any other falls back to
/// `off` with the reason, so the run is never driven unsandboxed without asking.
///
/// A run that fell back earlier stays `off` unless a mode is asked for: a resume on another
/// machine does not silently change how its commands are approved.
pub fn for_resume(
    recorded: &SandboxSpec,
    asked: Option<Mode>,
    floor: Option<Mode>,
    workspace: &Path,
) -> Result<Option<SandboxChange>, SandboxError> {
    let (mode, cause) = match (asked, floor) {
        (Some(mode), _) => (mode, SandboxCause::Flag),
        (None, Some(floor)) if floor.is_stricter_than(recorded.mode) => {
            (floor, SandboxCause::WorkerFloor)
        }
        _ => (recorded.mode, SandboxCause::Unsupported),
    };
    let mut wanted = recorded.clone();
    if mode != recorded.mode {
        wanted.mode = mode;
        wanted.fallback = None;
    }
    // A missing workspace is the host's error to report, not the sandbox's.
    if mode.is_sandboxed()
        && workspace.is_dir()
        && let Err(err) = probe(&wanted, workspace)
    {
        if asked.is_some() {
            return Err(err);
        }
        let mut off = SandboxSpec {
            mode: Mode::Off,
            ..wanted
        };
        off.fallback = Some(err.to_string());
        return Ok(Some(SandboxChange {
            sandbox: off,
            cause: SandboxCause::Unsupported,
        }));
    }
    Ok((wanted != *recorded).then_some(SandboxChange {
        sandbox: wanted,
        cause,
    }))
}
