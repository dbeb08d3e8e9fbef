//! The sandbox's private mount namespace (a user namespace too when not root):
//! - `.git` and `agentctl.toml` read-only inside a writable workspace: Landlock cannot take a
//!   right back beneath a tree it grants, so they are bind-mounted read-only over themselves;
//! - hidden paths (`deny_read`) covered: an empty, read-only, mode-000 tmpfs over a
//!   directory, `/dev/null` over a file. Landlock then grants reads on `/` in one rule
//!   instead of one per sibling of every hidden path's ancestors (a third of the entry's
//!   time), and a hidden directory's parent stays listable.
//!
//! What the command cannot undo: it has no capability left, and a Landlock domain forbids
//! changing the mount topology (mount, umount, pivot_root) at all.

use std::path::PathBuf;

use rustix::fs::{StatVfsMountFlags, statvfs};
use rustix::mount::{
    MountFlags, MountPropagationFlags, mount, mount_bind, mount_change, mount_remount,
};
// `unshare` is deprecated for flags that split state shared with other threads (files,
// fs); NEWNS and NEWUSER are not among them, and the entry point calls it single-threaded
// (the kernel refuses NEWUSER otherwise).
#[allow(deprecated)]
use rustix::thread::{UnshareFlags, unshare};

use super::apply_err;
use crate::SandboxError;

/// Enters a mount namespace of our own whose mounts do not propagate back.
pub(crate) fn enter_private() -> Result<(), SandboxError> {
    enter_namespace()?;
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(io)
    .map_err(apply_err("private mounts"))
}

/// Covers each of `paths` (existing, canonical): a directory with an empty read-only tmpfs
/// that nobody may enter, a file with `/dev/null`.
pub(crate) fn hide(paths: &[PathBuf]) -> Result<(), SandboxError> {
    for path in paths {
        if path.is_dir() {
            mount(
                "none",
                path,
                "tmpfs",
                MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                Some(c"mode=000,size=4k"),
            )
            .map_err(io)
            .map_err(apply_err("hide a directory"))?;
        } else {
            mount_bind("/dev/null", path)
                .map_err(io)
                .map_err(apply_err("hide a file"))?;
        }
    }
    Ok(())
}

/// `.git` and `agentctl.toml` (`paths`) read-only, in the namespace [`enter_private`] made.
pub(crate) fn read_only_binds(paths: &[PathBuf]) -> Result<(), SandboxError> {
    for path in paths {
        // A remount in a user namespace must keep the flags the mount is locked with.
        let locked = statvfs(path)
            .map(|s| s.f_flag)
            .map_err(io)
            .map_err(apply_err("statvfs"))?;
        let mut flags = MountFlags::BIND | MountFlags::RDONLY;
        for (have, keep) in [
            (StatVfsMountFlags::NOSUID, MountFlags::NOSUID),
            (StatVfsMountFlags::NODEV, MountFlags::NODEV),
            (StatVfsMountFlags::NOEXEC, MountFlags::NOEXEC),
            (StatVfsMountFlags::NOATIME, MountFlags::NOATIME),
            (StatVfsMountFlags::NODIRATIME, MountFlags::NODIRATIME),
            (StatVfsMountFlags::RELATIME, MountFlags::RELATIME),
        ] {
            if locked.contains(have) {
                flags |= keep;
            }
        }
        mount_bind(path, path)
            .map_err(io)
            .map_err(apply_err("bind .git read-only"))?;
        mount_remount(path, flags, "")
            .map_err(io)
            .map_err(apply_err("remount .git read-only"))?;
    }
    Ok(())
}

/// A mount namespace of our own; as a user other than root, inside a user namespace that
/// maps the user to itself (so files keep their owner).
#[allow(deprecated)]
fn enter_namespace() -> Result<(), SandboxError> {
    let uid = rustix::process::getuid();
    if uid.is_root() {
        return unshare(UnshareFlags::NEWNS)
            .map_err(io)
            .map_err(apply_err("mount namespace"));
    }
    let gid = rustix::process::getgid();
    unshare(UnshareFlags::NEWUSER | UnshareFlags::NEWNS)
        .map_err(io)
        .map_err(|err| SandboxError::Unsupported(format!("no user namespace: {err}")))?;
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(apply_err("user namespace map"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{0} {0} 1", uid.as_raw()))?;
    write("/proc/self/gid_map", format!("{0} {0} 1", gid.as_raw()))
}

fn io(err: rustix::io::Errno) -> std::io::Error {
    err.into()
}
