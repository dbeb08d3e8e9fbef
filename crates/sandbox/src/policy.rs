//! What a sandboxed command may touch.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The sandbox mode of a run (`--sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Reads as in `workspace-write`; no write anywhere but the private temp dir.
    ReadOnly,
    /// Writes in the workspace (but `.git` and `agentctl.toml`), the temp dir and the
    /// writable roots.
    WorkspaceWrite,
    /// No sandbox: the command runs with the user's rights.
    Off,
}

impl Mode {
    /// Every mode, in the order `--help` lists them.
    pub const ALL: [Mode; 3] = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::Off];

    /// The name used on the command line, in `agentctl.toml` and in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::Off => "off",
        }
    }

    /// Whether commands under this mode are confined.
    pub fn is_sandboxed(self) -> bool {
        self != Mode::Off
    }

    /// Whether this mode confines more than `other` (`read-only` > `workspace-write` >
    /// `off`).
    pub fn is_stricter_than(self, other: Mode) -> bool {
        fn rank(mode: Mode) -> u8 {
            match mode {
                Mode::Off => 0,
                Mode::WorkspaceWrite => 1,
                Mode::ReadOnly => 2,
            }
        }
        rank(self) > rank(other)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!("unknown sandbox mode `{s}` (expected read-only, workspace-write or off)")
            })
    }
}

/// The restrictions of one sandboxed command. Paths are absolute; those that do not exist
/// when the command starts are skipped (nothing there to allow or to hide).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// The mode; [`Mode::Off`] is never handed to the entry point.
    pub mode: Mode,
    /// The workspace: the command's working directory, writable under `workspace-write`.
    pub workspace: PathBuf,
    /// Whether the command may use the network (TCP and every socket family).
    #[serde(default)]
    pub network: bool,
    /// More directories writable under `workspace-write`.
    #[serde(default)]
    pub writable_roots: Vec<PathBuf>,
    /// Paths nothing in the sandbox can read (credential stores, the state dir).
    #[serde(default)]
    pub deny_read: Vec<PathBuf>,
    /// The command's private temp dir (`TMPDIR`), writable in every sandboxed mode.
    #[serde(default)]
    pub tmpdir: Option<PathBuf>,
    /// The command starts in a process group of its own: nothing it runs can then signal
    /// the entry point, which so always gets to put back what it protects. Whoever started
    /// the entry point ends the command by killing the entry's children (the first process
    /// of the command's PID namespace takes the whole namespace with it), not its group.
    /// Off for a command on a terminal, which must stay in the terminal's foreground group.
    #[serde(default)]
    pub own_group: bool,
    /// The command's first process is killed when the entry point dies, however it dies,
    /// and may not change that (a parent-death signal, its change refused by seccomp): for
    /// a long-lived command (an MCP server) whose entry point its owner may kill with a
    /// group the command has left. It costs the command's start a second exec (the entry
    /// binary's `INIT` step), so commands the host ends by killing the entry's children
    /// (a run's `shell`) go without it.
    #[serde(default)]
    pub dies_with_entry: bool,
}

impl Policy {
    /// A policy of `mode` for `workspace` with the default deny list of `home` (the engine
    /// sockets alone without one) and no network.
    pub fn new(mode: Mode, workspace: impl Into<PathBuf>, home: Option<&Path>) -> Policy {
        Policy {
            mode,
            workspace: workspace.into(),
            network: false,
            writable_roots: Vec::new(),
            deny_read: home.map_or_else(engine_sockets, default_deny_read),
            tmpdir: None,
            own_group: false,
            dies_with_entry: false,
        }
    }

    /// Paths inside the workspace that stay read-only under `workspace-write`.
    pub fn protected(&self) -> Vec<PathBuf> {
        // `HEAD`: with `objects/` and `refs/` beside it, git takes the workspace itself for a
        // repository (a bare one), config and hooks included; without it, it does not.
        [".git", "agentctl.toml", "HEAD"]
            .iter()
            .map(|name| self.workspace.join(name))
            .collect()
    }
}

/// The sockets of container engines. Whoever may connect to one commands the engine (as
/// root for a rootful one), whatever else the sandbox refuses; Landlock does not govern
/// connecting to a Unix socket, so they are hidden (a hidden socket refuses connections).
const ENGINE_SOCKETS: [&str; 5] = [
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/crio/crio.sock",
];

/// The same engines' sockets under a user's runtime dir (rootless engines).
const USER_ENGINE_SOCKETS: [&str; 2] = ["docker.sock", "podman/podman.sock"];

/// The credential stores of `home`, agentctl's own state dir and the container engines'
/// sockets (system-wide and under `XDG_RUNTIME_DIR`): what a prompt-injected command would
/// go after first.
pub fn default_deny_read(home: &Path) -> Vec<PathBuf> {
    let mut paths = home_deny_read(home);
    paths.extend(engine_sockets());
    paths
}

/// [`ENGINE_SOCKETS`], and [`USER_ENGINE_SOCKETS`] under `XDG_RUNTIME_DIR` when it is set.
fn engine_sockets() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = ENGINE_SOCKETS.iter().map(PathBuf::from).collect();
    let runtime_dir = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    if let Some(dir) = runtime_dir.filter(|d| d.is_absolute()) {
        paths.extend(USER_ENGINE_SOCKETS.iter().map(|rel| dir.join(rel)));
    }
    paths
}

/// The credential stores of `home` and agentctl's own state dir.
fn home_deny_read(home: &Path) -> Vec<PathBuf> {
    [
        ".ssh",
        ".aws",
        ".gnupg",
        ".config/gcloud",
        ".docker/config.json",
        ".netrc",
        ".git-credentials",
        ".kube",
        ".local/share/agentctl",
        ".config/agentctl",
    ]
    .iter()
    .map(|rel| home.join(rel))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_list_hides_credential_stores_and_engine_sockets() {
        let list = default_deny_read(Path::new("/home/u"));
        for path in [
            "/home/u/.ssh",
            "/home/u/.local/share/agentctl",
            "/run/docker.sock",
            "/var/run/docker.sock",
        ] {
            assert!(list.contains(&PathBuf::from(path)), "{path} in {list:?}");
        }
    }

    #[test]
    fn modes_round_trip_through_their_names() {
        for mode in Mode::ALL {
            assert_eq!(mode.as_str().parse::<Mode>(), Ok(mode));
            let json = serde_json::to_string(&mode).unwrap_or_default();
            assert_eq!(json, format!("\"{mode}\""));
        }
        assert!("danger".parse::<Mode>().is_err());
    }
}
