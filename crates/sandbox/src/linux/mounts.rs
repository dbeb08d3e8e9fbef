//! The sandbox's private mount namespace (a user namespace too when not root):
//! - `.git` and `agentctl.toml` read-only inside a writable workspace: Landlock cannot take a
//!   right back beneath a tree it grants, so they are bind-mounted read-only over themselves;
//! - hidden paths (`deny_read`) covered: an empty, read-only, mode-000 tmpfs over a
//!   directory, `/dev/null` over a file. Landlock then grants reads on `/` in one rule
//!   instead of one per sibling of every hidden path's ancestors (a third of the entry's
//!   time), and a hidden directory's parent stays listable. A hidden directory that holds
//!   the workspace (or another path the policy names) is covered the same way, and that path
//!   is bound back into place through the cover.
//!
//! What the command cannot undo: it has no capability left, and a Landlock domain forbids
//! changing the mount topology (mount, umount, pivot_root) at all.

use std::ffi::CStr;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, StatVfsMountFlags, open, statvfs};
use rustix::mount::{
    MountFlags, MountPropagationFlags, mount, mount_bind, mount_bind_recursive, mount_change,
    mount_remount,
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
/// that nobody may enter, a file with `/dev/null`. A hidden directory that holds some of
/// `reachable` (the workspace, say) is covered too, and those are bound back into place
/// through it; one that is itself in `reachable` stays as it is.
pub(crate) fn hide(paths: &[PathBuf], reachable: &[PathBuf]) -> Result<(), SandboxError> {
    for path in paths {
        let inside: Vec<&PathBuf> = reachable.iter().filter(|r| r.starts_with(path)).collect();
        if inside.contains(&path) {
            continue;
        }
        if !path.is_dir() {
            mount_bind("/dev/null", path)
                .map_err(io)
                .map_err(apply_err("hide a file"))?;
        } else if inside.is_empty() {
            cover(path, c"mode=000,size=4k", MountFlags::RDONLY)?;
        } else {
            cover_around(path, &inside)?;
        }
    }
    Ok(())
}

fn cover(dir: &Path, options: &CStr, flags: MountFlags) -> Result<(), SandboxError> {
    mount(
        "none",
        dir,
        "tmpfs",
        flags | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        Some(options),
    )
    .map_err(io)
    .map_err(apply_err("hide a directory"))
}

/// Covers `dir` with a tmpfs that holds only the way down to each of `keep`, where each is
/// bound (with what is mounted beneath it) from a handle opened before `dir` was covered.
/// The tmpfs ends read-only and traversable, not listable by others: the names on the way
/// down are all that shows.
fn cover_around(dir: &Path, keep: &[&PathBuf]) -> Result<(), SandboxError> {
    let handles = keep
        .iter()
        .map(|path| {
            let handle = open(
                path.as_path(),
                OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
            )
            .map_err(io)
            .map_err(apply_err("open a path kept inside a hidden directory"))?;
            Ok((*path, handle, path.is_dir()))
        })
        .collect::<Result<Vec<_>, SandboxError>>()?;
    cover(dir, c"mode=711,size=64k", MountFlags::empty())?;
    for (path, handle, is_dir) in &handles {
        let Ok(rel) = path.strip_prefix(dir) else {
            continue;
        };
        let stub = dir.join(rel);
        let made = if *is_dir {
            std::fs::create_dir_all(&stub)
        } else {
            stub.parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::File::create(&stub).map(drop))
        };
        made.map_err(apply_err("make the way to a kept path"))?;
        let source = format!("/proc/self/fd/{}", handle.as_raw_fd());
        mount_bind_recursive(source.as_str(), &stub)
            .map_err(io)
            .map_err(apply_err("bind a kept path back"))?;
    }
    mount_remount(
        dir,
        MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        "",
    )
    .map_err(io)
    .map_err(apply_err("make a hidden directory read-only"))
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
