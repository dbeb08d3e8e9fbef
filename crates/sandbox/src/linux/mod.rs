//! Applying a [`Policy`] to the calling process (Linux).

mod landlock_rules;
mod mounts;
mod privileges;
mod seccomp;
mod sockets;

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
    // rule by rule, as long as nothing needs a mount (see `Resolved::needs_mounts`). Every
    // mount but the writable paths is then made read-only, which stops what Landlock does
    // not govern (mode, owner, times and extended attributes of files outside them).
    // Pseudo-terminals come from an instance of the sandbox's own, when one could be
    // mounted.
    let (namespaced, ptys) = match mounts::enter_private() {
        Ok(()) => {
            // Hidden first: a workspace inside a hidden directory is bound back into
            // place by `hide`, and its `.git` must be made read-only where it ends up.
            // Without the network the host's Unix sockets are hidden too.
            let mut hidden = resolved.deny_read.clone();
            if !policy.network {
                hidden.extend(sockets::host_sockets(&resolved.reachable)?);
                hidden.sort();
                hidden.dedup();
            }
            mounts::pin_ancestors(&hidden, &resolved.writable)?;
            mounts::hide(&hidden, &resolved.reachable)?;
            if protect {
                mounts::read_only_binds(&resolved.protected)?;
            }
            mounts::seal(&resolved.writable)?;
            let ptys = mounts::private_ptys();
            reenter_working_dir()?;
            (true, ptys)
        }
        Err(SandboxError::Unsupported(why)) => match resolved.needs_mounts(protect) {
            Some(what) => {
                return Err(SandboxError::Unsupported(format!(
                    "{what}, which needs a mount namespace, and this system does not allow \
                     this user one ({why})"
                )));
            }
            None => (false, false),
        },
        Err(err) => return Err(err),
    };
    landlock_rules::apply(policy, &resolved, namespaced, ptys)?;
    seccomp::restrict(&seccomp::Refuse {
        sockets: !policy.network,
        sysv_ipc: !namespaced,
        other_scheduling: !namespaced,
        other_death_signal: policy.dies_with_entry,
    })?;
    privileges::drop_all()
}

/// Closes every descriptor above stderr that this process inherited (from whoever started
/// `agentctl`: a shell's `exec 7<>file`, a harness's descriptor of the host's `/dev/null`),
/// so that the program gets none of them: a descriptor opened outside the sandbox is not
/// checked again, neither by Landlock nor by the read-only mounts, so writing through it, or
/// changing its file's mode or times, would reach files the policy keeps out of reach.
/// The entry point holds nothing of its own open at this point.
pub(crate) fn close_inherited() -> Result<(), SandboxError> {
    let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map_err(apply_err("list the inherited descriptors"))?
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    // The listing's own descriptor is among them, closed already with the listing: EBADF.
    for fd in open {
        let _ = nix::unistd::close(fd);
    }
    Ok(())
}

/// Resolves the working directory again, through the mounts just made. The one the entry was
/// started in is a place on the filesystem beneath them: kept, a relative path would still
/// reach what a cover hides (the workspace's siblings inside a hidden directory) and miss
/// the read-only `.git` bound over a kept workspace.
fn reenter_working_dir() -> Result<(), SandboxError> {
    let dir = std::env::current_dir().map_err(apply_err("working directory"))?;
    std::env::set_current_dir(&dir).map_err(apply_err("re-enter the working directory"))
}

/// The policy's paths as the kernel will see them: canonical, existing ones only.
pub(crate) struct Resolved {
    pub workspace: PathBuf,
    pub writable: Vec<PathBuf>,
    pub deny_read: Vec<PathBuf>,
    /// Every hidden path, those not there yet too (a run's database before its first
    /// write), as it would resolve: the canonical path of its nearest existing ancestor
    /// with the rest appended.
    pub deny_read_named: Vec<PathBuf>,
    pub protected: Vec<PathBuf>,
    /// What the policy itself names (the workspace, the writable roots, the temp dir), with
    /// no entry beneath another: these stay reachable even inside a hidden directory, since
    /// the user chose them, while the rest of that directory stays hidden.
    pub reachable: Vec<PathBuf>,
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
        let deny_read: Vec<PathBuf> = policy
            .deny_read
            .iter()
            .filter_map(|p| canonical(p))
            .collect();
        let deny_read_named = policy
            .deny_read
            .iter()
            .filter_map(|p| canonical_to_be(p))
            .collect();
        if let Some(root) = deny_read.iter().find(|p| p.parent().is_none()) {
            return Err(SandboxError::Path {
                path: root.clone(),
                reason: "cannot be hidden: it is the whole file system".into(),
            });
        }
        let protected = policy
            .protected()
            .iter()
            .filter_map(|p| canonical(p))
            .collect();
        let mut named = writable.clone();
        named.push(workspace.clone());
        let reachable = outermost(named);
        Ok(Resolved {
            workspace,
            writable,
            deny_read,
            deny_read_named,
            protected,
            reachable,
        })
    }

    /// What this policy needs a mount namespace for, said as the start of a sentence (the
    /// first such path); `None` when Landlock alone can give it all.
    ///
    /// - A hidden path beneath a path the command may reach (your home as the workspace, a
    ///   database file in it): Landlock's rules add up, so the grant on the workspace would
    ///   open everything beneath it, the hidden path included. (A reachable path inside a
    ///   hidden one is fine: Landlock grants it and not its siblings.)
    /// - `protect`: a protected path (`.git`) in a writable workspace, which Landlock cannot
    ///   take back beneath the workspace's grant either.
    fn needs_mounts(&self, protect: bool) -> Option<String> {
        let hidden = self.deny_read_named.iter().find_map(|hidden| {
            let root = self
                .reachable
                .iter()
                .find(|root| hidden != *root && hidden.starts_with(root))?;
            let place = if *root == self.workspace {
                "the workspace".to_string()
            } else {
                format!("`{}`, which the command may write,", root.display())
            };
            Some(format!(
                "`{}` is inside {place} and must be hidden",
                hidden.display()
            ))
        });
        let protected = || {
            let path = self.protected.first().filter(|_| protect)?;
            Some(format!(
                "`{}` is in the workspace and must stay read-only",
                path.display()
            ))
        };
        hidden.or_else(protected)
    }
}

/// `paths` without duplicates and without any path beneath another one of them.
fn outermost(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    let all = paths.clone();
    paths.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    paths
}

fn canonical(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// `path` canonical, or when it does not exist (yet), the canonical path of its nearest
/// existing ancestor with the rest of `path` appended; `None` for a relative path or one
/// whose missing rest climbs (`..`).
fn canonical_to_be(path: &Path) -> Option<PathBuf> {
    if let Some(found) = canonical(path) {
        return Some(found);
    }
    let climbs = path
        .components()
        .any(|c| c == std::path::Component::ParentDir);
    if !path.is_absolute() || climbs {
        return None;
    }
    Some(canonical_to_be(path.parent()?)?.join(path.file_name()?))
}

pub(crate) fn apply_err(step: &'static str) -> impl Fn(std::io::Error) -> SandboxError {
    move |err| SandboxError::Apply {
        step,
        reason: err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outermost_keeps_only_the_top_of_nested_paths() {
        let paths = ["/a/b", "/a", "/c/d", "/a/b/c", "/c/d", "/cd"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let want: Vec<PathBuf> = ["/a", "/c/d", "/cd"].iter().map(PathBuf::from).collect();
        assert_eq!(outermost(paths), want);
    }

    fn resolved(workspace: &str, writable: &[&str], deny_read: &[&str]) -> Resolved {
        let paths = |list: &[&str]| list.iter().map(PathBuf::from).collect::<Vec<_>>();
        let mut named = paths(writable);
        named.push(PathBuf::from(workspace));
        Resolved {
            workspace: PathBuf::from(workspace),
            writable: paths(writable),
            deny_read: paths(deny_read),
            deny_read_named: paths(deny_read),
            protected: vec![PathBuf::from(workspace).join(".git")],
            reachable: outermost(named),
        }
    }

    #[test]
    fn a_path_not_there_yet_resolves_through_its_nearest_existing_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("ws")).unwrap();
        std::os::unix::fs::symlink(real.join("ws"), real.join("link")).unwrap();
        assert_eq!(
            canonical_to_be(&real.join("link/db/j.db")),
            Some(real.join("ws/db/j.db"))
        );
        assert_eq!(canonical_to_be(&real.join("link")), Some(real.join("ws")));
        assert_eq!(canonical_to_be(&real.join("nope/../ws/x")), None);
        assert_eq!(canonical_to_be(Path::new("relative/x")), None);
    }

    /// Without a mount namespace, a hidden path beneath the workspace, a writable root or
    /// the temp dir cannot be hidden (Landlock's grants add up); one above them, or beside
    /// them, can.
    #[test]
    fn a_hidden_path_beneath_a_reachable_one_needs_mounts() {
        let home = resolved("/home/u", &["/tmp/t"], &["/home/u/.ssh", "/etc/x"]);
        assert_eq!(
            home.needs_mounts(false).as_deref(),
            Some("`/home/u/.ssh` is inside the workspace and must be hidden")
        );
        let root = resolved("/w", &["/tmp/t", "/data"], &["/data/j.db"]);
        let said = root.needs_mounts(false).unwrap_or_default();
        assert_eq!(
            said,
            "`/data/j.db` is inside `/data`, which the command may write, and must be hidden"
        );
        let kept = resolved(
            "/home/u/.local/share/agentctl/ws/demo",
            &["/tmp/t"],
            &["/home/u/.local/share/agentctl", "/home/u/.ssh", "/w"],
        );
        assert_eq!(kept.needs_mounts(false), None);
        // The workspace itself listed as hidden stays reachable, as with mounts.
        let itself = resolved("/w", &[], &["/w"]);
        assert_eq!(itself.needs_mounts(false), None);
        assert_eq!(
            itself.needs_mounts(true).as_deref(),
            Some("`/w/.git` is in the workspace and must stay read-only")
        );
    }
}
