//! Applying a [`Policy`] to the calling process (Linux).

mod landlock_rules;
mod mounts;
mod privileges;
mod seccomp;

use std::path::{Path, PathBuf};

use crate::{Mode, Policy, SandboxError};

/// Restricts this process, and so every program it execs, to `policy`. Nothing is run on
/// failure; a failure after some steps leaves the process partly restricted, and the caller
/// exits.
pub(crate) fn restrict_self(policy: &Policy) -> Result<(), SandboxError> {
    let resolved = Resolved::of(policy)?;
    let protect = policy.mode == Mode::WorkspaceWrite && !resolved.protected.is_empty();
    // Hidden paths are covered by mounts when a mount namespace can be had; without one
    // (a user other than root where user namespaces are off) Landlock hides them alone,
    // rule by rule, as long as nothing needs protecting read-only.
    let mut hidden_by_mounts = false;
    if protect || !resolved.deny_read.is_empty() {
        match mounts::enter_private() {
            Ok(()) => {
                if protect {
                    mounts::read_only_binds(&resolved.protected)?;
                }
                mounts::hide(&resolved.deny_read)?;
                hidden_by_mounts = true;
            }
            Err(err @ SandboxError::Unsupported(_)) if protect => return Err(err),
            Err(SandboxError::Unsupported(_)) => {}
            Err(err) => return Err(err),
        }
    }
    landlock_rules::apply(policy, &resolved, hidden_by_mounts)?;
    if !policy.network {
        seccomp::deny_sockets()?;
    }
    privileges::drop_all()
}

/// The policy's paths as the kernel will see them: canonical, existing ones only.
pub(crate) struct Resolved {
    pub writable: Vec<PathBuf>,
    pub deny_read: Vec<PathBuf>,
    pub protected: Vec<PathBuf>,
}

impl Resolved {
    fn of(policy: &Policy) -> Result<Resolved, SandboxError> {
        let workspace = canonical(&policy.workspace).ok_or_else(|| SandboxError::Path {
            path: policy.workspace.clone(),
            reason: "the workspace does not exist".into(),
        })?;
        let mut writable: Vec<PathBuf> =
            policy.tmpdir.iter().filter_map(|p| canonical(p)).collect();
        if policy.mode == Mode::WorkspaceWrite {
            writable.push(workspace.clone());
            writable.extend(policy.writable_roots.iter().filter_map(|p| canonical(p)));
        }
        let deny_read = policy
            .deny_read
            .iter()
            .filter_map(|p| canonical(p))
            .collect();
        let protected = policy
            .protected()
            .iter()
            .filter_map(|p| canonical(p))
            .collect();
        Ok(Resolved {
            writable,
            deny_read,
            protected,
        })
    }
}

fn canonical(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

pub(crate) fn apply_err(step: &'static str) -> impl Fn(std::io::Error) -> SandboxError {
    move |err| SandboxError::Apply {
        step,
        reason: err.to_string(),
    }
}
