//! Files, TCP, signals and abstract Unix sockets (Landlock). Rights are asked for up to
//! ABI 6 on a best-effort basis: a kernel without some of them enforces the rest (the socket
//! filter still stops every network use), but one without Landlock at all refuses the
//! whole sandbox.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::Resolved;
use crate::{Policy, SandboxError, readable_roots};

/// The newest ABI whose rights this build asks for and was tested with.
const ABI_TESTED: ABI = ABI::V6;

/// Devices every command may write (and read).
const DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Pseudo-terminals: their multiplexer and the devpts instance it opens. Granted only when
/// that instance is the sandbox's own (see `mounts::private_ptys`): the host's holds its
/// other terminals.
const PTYS: [&str; 2] = ["/dev/ptmx", "/dev/pts"];

/// `hidden_by_mounts`: the hidden paths are covered already (see `mounts`), so reads are
/// granted on `/` in one rule; otherwise on every sibling of the hidden paths' ancestors.
/// `private_ptys`: `/dev/pts` is an instance of the sandbox's own.
pub(crate) fn apply(
    policy: &Policy,
    resolved: &Resolved,
    hidden_by_mounts: bool,
    private_ptys: bool,
) -> Result<(), SandboxError> {
    let err = |reason: String| SandboxError::Apply {
        step: "landlock",
        reason,
    };
    let all_fs = AccessFs::from_all(ABI_TESTED);
    // Signals are scoped always; abstract Unix sockets (outside Landlock's file rules) only
    // without the network, which otherwise allows every socket family and so theirs too.
    let scopes = if policy.network {
        Scope::from_all(ABI_TESTED) & Scope::Signal
    } else {
        Scope::from_all(ABI_TESTED)
    };
    let mut ruleset = Ruleset::default()
        .handle_access(all_fs)
        .map_err(|e| err(e.to_string()))?
        .scope(scopes)
        .map_err(|e| err(e.to_string()))?;
    if !policy.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI_TESTED))
            .map_err(|e| err(e.to_string()))?;
    }
    let mut created = ruleset.create().map_err(|e| err(e.to_string()))?;
    let read = AccessFs::from_read(ABI_TESTED);
    let roots = if hidden_by_mounts {
        vec![PathBuf::from("/")]
    } else {
        // What the policy names stays readable even inside a hidden directory.
        let mut roots = readable_roots(Path::new("/"), &resolved.deny_read, &children);
        roots.extend(resolved.reachable.iter().cloned());
        roots
    };
    for root in &roots {
        let rule = match beneath(root, read) {
            Ok(rule) => rule,
            // Listed, then removed (another process's temp file) before it was opened:
            // nothing is left there to allow.
            Err(_) if std::fs::symlink_metadata(root).is_err() => continue,
            Err(e) => return Err(e),
        };
        created = created.add_rule(rule).map_err(|e| err(e.to_string()))?;
    }
    for dir in &resolved.writable {
        created = created
            .add_rule(beneath(dir, all_fs)?)
            .map_err(|e| err(e.to_string()))?;
    }
    let ptys = PTYS.iter().filter(|_| private_ptys);
    for device in DEVICES.iter().chain(ptys) {
        if Path::new(device).exists() {
            created = created
                .add_rule(beneath(Path::new(device), all_fs)?)
                .map_err(|e| err(e.to_string()))?;
        }
    }
    let status = created.restrict_self().map_err(|e| err(e.to_string()))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(SandboxError::Unsupported(
            "Landlock is not enabled in this kernel".into(),
        ));
    }
    Ok(())
}

/// A rule for `path`, its rights cut to what applies to a file when it is not a directory.
fn beneath(path: &Path, access: BitFlags<AccessFs>) -> Result<PathBeneath<PathFd>, SandboxError> {
    let access = if path.is_dir() {
        access
    } else {
        access & AccessFs::from_file(ABI_TESTED)
    };
    let fd = PathFd::new(path).map_err(|e| SandboxError::Path {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(PathBeneath::new(fd, access))
}

/// A directory's entries but symlinks: a symlink's target is reached, and ruled, by its own
/// path, and a rule through the link would open the target (a hidden one too).
fn children(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().map(|t| !t.is_symlink()).unwrap_or(false))
        .map(|e| e.path())
        .collect()
}
