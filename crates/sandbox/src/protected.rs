//! `.git`, `agentctl.toml` and `HEAD` that a sandboxed command created.
//!
//! Under `workspace-write` the ones that exist are bound read-only, but one that does not
//! exist cannot be: a mount needs something to cover, and Landlock grants rights on whole
//! directories, not on names within them. A command could then create the workspace's
//! `agentctl.toml` (an MCP server, or `sandbox = "off"`, for the next run) or `.git` (a hook
//! or `core.fsmonitor` that the user's next `git status` runs, unsandboxed), or `HEAD` beside
//! `objects/` and `refs/` (the workspace itself then reads to git as a bare repository).
//!
//! Invariants:
//! - After the command and everything it started are gone (the entry point waits for the
//!   command, the first process of a PID namespace whose end kills the rest), each such
//!   path that did not exist before is moved aside to `<name>.sandbox-refused[-N]`, never
//!   deleted, and the command's stderr says so. A command killed with its entry point (a
//!   timeout, an interrupt, the host gone) is not there to do it: the host, outside the
//!   sandbox, does it with the list it took before the start (`agent-host`'s shell tool and
//!   MCP servers, and the shell's watchdog).
//! - What the command finds in the workspace while it runs is what it made; the window
//!   where another process (the user's own `git`) could read such a file is the command's
//!   lifetime.

use std::path::{Path, PathBuf};

use crate::{Mode, Policy};

/// The protected paths of `policy` that do not exist now (none outside `workspace-write`,
/// where the workspace is not writable).
pub fn missing(policy: &Policy) -> Vec<PathBuf> {
    if policy.mode != Mode::WorkspaceWrite {
        return Vec::new();
    }
    policy
        .protected()
        .into_iter()
        .filter(|path| std::fs::symlink_metadata(path).is_err())
        .collect()
}

/// Moves aside each of `were_missing` that exists now; returns what was moved, and where,
/// with the paths that could not be moved.
pub fn move_aside(were_missing: &[PathBuf]) -> Vec<Refused> {
    were_missing
        .iter()
        .filter(|path| std::fs::symlink_metadata(path).is_ok())
        .map(|path| match aside(path) {
            Some(to) => match std::fs::rename(path, &to) {
                Ok(()) => Refused::Moved {
                    from: path.clone(),
                    to,
                },
                Err(err) => Refused::Stuck {
                    path: path.clone(),
                    reason: err.to_string(),
                },
            },
            None => Refused::Stuck {
                path: path.clone(),
                reason: "no free name to move it to".into(),
            },
        })
        .collect()
}

/// What [`move_aside`] did with one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Moved from `from` to `to`.
    Moved { from: PathBuf, to: PathBuf },
    /// Left at `path`: it could not be moved.
    Stuck { path: PathBuf, reason: String },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Moved { from, to } => write!(
                f,
                "the command created {}, which a sandboxed command may not (a program there \
                 could run outside the sandbox later); it was moved to {}",
                name(from),
                name(to)
            ),
            Refused::Stuck { path, reason } => write!(
                f,
                "the command created {}, which a sandboxed command may not, and it could not be \
                 moved aside ({reason}); remove it before running git or agentctl here",
                path.display()
            ),
        }
    }
}

fn name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// A free name beside `path`: `<name>.sandbox-refused`, then `-2`, `-3`, ...
fn aside(path: &Path) -> Option<PathBuf> {
    let file = path.file_name()?.to_string_lossy().into_owned();
    (1..1000)
        .map(|n| match n {
            1 => path.with_file_name(format!("{file}.sandbox-refused")),
            n => path.with_file_name(format!("{file}.sandbox-refused-{n}")),
        })
        .find(|candidate| std::fs::symlink_metadata(candidate).is_err())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_missing_and_appeared_is_moved_aside_under_a_free_name() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let policy = Policy::new(Mode::WorkspaceWrite, ws, None);
        std::fs::write(ws.join("agentctl.toml"), "kept").unwrap();
        let missing = missing(&policy);
        assert_eq!(missing, vec![ws.join(".git"), ws.join("HEAD")]);
        assert!(missing_under_read_only(ws).is_empty());

        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::write(ws.join(".git.sandbox-refused"), "taken").unwrap();
        let refused = move_aside(&missing);
        let to = ws.join(".git.sandbox-refused-2");
        assert_eq!(
            refused,
            vec![Refused::Moved {
                from: ws.join(".git"),
                to: to.clone()
            }]
        );
        assert!(to.join("hooks").is_dir());
        assert!(!ws.join(".git").exists());
        assert_eq!(
            std::fs::read_to_string(ws.join("agentctl.toml")).unwrap(),
            "kept"
        );
        assert!(
            refused[0]
                .to_string()
                .contains("moved to .git.sandbox-refused-2")
        );
        // Nothing appeared: nothing to do.
        assert!(move_aside(&missing).is_empty());
    }

    fn missing_under_read_only(ws: &Path) -> Vec<PathBuf> {
        missing(&Policy::new(Mode::ReadOnly, ws, None))
    }
}
