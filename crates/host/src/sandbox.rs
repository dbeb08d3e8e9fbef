//! The sandbox a run's commands get: what `run.created` records, and the probe that decides
//! it at the start of a run.
//!
//! Invariants:
//! - A run's sandbox is fixed in `run.created`; a resume rebuilds the same policy from it
//!   (not from today's configuration), so a resume never weakens a run.
//! - A run recorded before sandboxes existed reads as `off`: that is how it ran.
//! - Never unsandboxed without asking unless a person chose it: under `off`, `shell` and
//!   `write_file` ask unless `--approval` or a tool policy says otherwise, and a run that
//!   fell back to `off` (`fallback` set) asks for them whatever those say.
//! - Only a system that cannot sandbox at all falls back: when the mode alone works here but
//!   not with the `[sandbox]` settings, the settings are at fault and nothing runs
//!   ([`Unavailable::Settings`]), so a workspace's file cannot turn the sandbox off.
//! - A fallback keeps every setting but the mode (hidden paths, writable roots, network):
//!   the host's file tools and the MCP servers still hide what the run hides.

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
    /// The home directory of the user who started the run: its credential stores stay
    /// hidden also when the run is driven under another `HOME` (`sudo`, cron, a worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<PathBuf>,
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
            home: None,
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
        // a resume by someone else, with their own `AGENTCTL_CONFIG_DIR` or database).
        policy.deny_read.extend(state_dir());
        policy.deny_read.extend(moved_config_dir());
        let driver = DRIVER_HIDDEN.get().into_iter().flatten().cloned();
        let starter = self
            .home
            .iter()
            .flat_map(|home| agent_sandbox::default_deny_read(home));
        for path in driver.chain(starter) {
            // Usually the recorded database and today's home: listed once.
            if !policy.deny_read.contains(&path) {
                policy.deny_read.push(path);
            }
        }
        policy
    }
}

/// What the driving process hides from every run it drives, besides each run's recorded
/// paths: set once by the program (agentctl: the files of the database it journals in,
/// wherever a run's own database was when it was recorded).
static DRIVER_HIDDEN: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();

/// Hides `paths` from the commands and file tools of every run this process drives (see
/// [`SandboxSpec::policy`]); the first call wins.
pub fn hide_from_every_run(paths: Vec<PathBuf>) {
    let _ = DRIVER_HIDDEN.set(paths);
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

/// Why a run cannot have the sandbox it asks for.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// This system cannot give the mode at all (its bare form fails too): a mode nobody
    /// asked for falls back to `off`.
    #[error("{0}")]
    System(SandboxError),
    /// The mode works here, but not with the `[sandbox]` settings (`deny_read`,
    /// `writable_roots`, `network`): they are at fault, and nothing falls back.
    #[error("the [sandbox] settings (deny_read, writable_roots, network) cannot be applied: {0}")]
    Settings(SandboxError),
    /// The probe itself could not run (no temp dir, no process: a full disk, too few file
    /// descriptors or processes): nothing says the system cannot sandbox, and a passing
    /// shortage must not turn a run's sandbox off for good, so nothing falls back.
    #[error("the sandbox could not be probed: {0}")]
    Probing(SandboxError),
}

/// [`probe`], and when it fails, whose fault it is: the mode's with only `own` hidden
/// (agentctl's own paths, the run database's files) is probed too; when that one works,
/// the rest of `spec` (the configured settings) is at fault.
pub fn probe_blaming(
    spec: &SandboxSpec,
    own: &[PathBuf],
    workspace: &Path,
) -> Result<(), Unavailable> {
    let Err(err) = probe(spec, workspace) else {
        return Ok(());
    };
    if !matches!(err, SandboxError::Probe(_)) {
        return Err(Unavailable::Probing(err));
    }
    let bare = SandboxSpec {
        deny_read: own.to_vec(),
        ..SandboxSpec::of(spec.mode)
    };
    // Nothing configured: the probe that failed was the bare one.
    let unset = SandboxSpec {
        fallback: None,
        ..spec.clone()
    };
    if unset == bare {
        return Err(Unavailable::System(err));
    }
    match probe(&bare, workspace) {
        Ok(()) => Err(Unavailable::Settings(err)),
        Err(_) => Err(Unavailable::System(err)),
    }
}

/// Why a resumed run's sandbox changed (`run.sandbox_changed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxCause {
    /// `resume --sandbox MODE`: a person asked for it.
    Flag,
    /// The driving worker's `--sandbox` is stricter than the run's mode, or its user's
    /// configuration hides paths the run did not.
    WorkerFloor,
    /// The system cannot give the run's mode: it falls back to `off`, where `shell` and
    /// `write_file` ask whatever `--approval` says.
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

/// Who drives a resumed run, and what they hold it to.
#[derive(Debug, Clone, Default)]
pub struct Driver {
    /// An explicit `--sandbox`: replaces the recorded mode (and ends a fallback).
    pub asked: Option<Mode>,
    /// A worker's `--sandbox`: the least confinement it drives a run under.
    pub floor: Option<Mode>,
    /// Paths the driver's own configuration hides (a worker's user's `deny_read`), added to
    /// the run's.
    pub deny_read: Vec<PathBuf>,
    /// agentctl's own paths this driver hides (its database's files): what the bare probe
    /// of [`probe_blaming`] keeps.
    pub own: Vec<PathBuf>,
}

/// The sandbox a resumed run is driven under, when it is not the one recorded: an asked
/// mode replaces the recorded one; otherwise a floor stricter than it tightens it; the
/// driver's hidden paths add to the run's. The result is probed in `workspace`
/// ([`probe_blaming`]): settings it cannot apply are an error (nothing runs); a mode the
/// system cannot give is an error when asked for, and otherwise falls back to `off` with
/// the reason and every other setting kept, so the run is never driven unsandboxed without
/// asking.
///
/// A run that fell back earlier stays so unless a mode is asked for: a resume on another
/// machine does not silently change how its commands are approved.
pub fn for_resume(
    recorded: &SandboxSpec,
    driver: &Driver,
    workspace: &Path,
) -> Result<Option<SandboxChange>, Unavailable> {
    let (mode, mut cause) = match (driver.asked, driver.floor) {
        (Some(mode), _) => (mode, SandboxCause::Flag),
        (None, Some(floor)) if floor.is_stricter_than(recorded.mode) => {
            (floor, SandboxCause::WorkerFloor)
        }
        _ => (recorded.mode, SandboxCause::Unsupported),
    };
    let mut wanted = recorded.clone();
    if mode != recorded.mode || driver.asked.is_some() {
        wanted.mode = mode;
        wanted.fallback = None;
    }
    let missing: Vec<PathBuf> = driver
        .deny_read
        .iter()
        .filter(|path| !wanted.deny_read.contains(path))
        .cloned()
        .collect();
    if !missing.is_empty() {
        wanted.deny_read.extend(missing);
        if cause == SandboxCause::Unsupported {
            cause = SandboxCause::WorkerFloor;
        }
    }
    // A missing workspace is the host's error to report, not the sandbox's.
    if mode.is_sandboxed() && workspace.is_dir() {
        match probe_blaming(&wanted, &driver.own, workspace) {
            Ok(()) => {}
            Err(Unavailable::System(err)) if driver.asked.is_none() => {
                let off = SandboxSpec {
                    mode: Mode::Off,
                    fallback: Some(err.to_string()),
                    ..wanted
                };
                return Ok(Some(SandboxChange {
                    sandbox: off,
                    cause: SandboxCause::Unsupported,
                }));
            }
            Err(err) => return Err(err),
        }
    }
    Ok((wanted != *recorded).then_some(SandboxChange {
        sandbox: wanted,
        cause,
    }))
}
