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
use std::os::unix::ffi::OsStringExt as _;
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
///
/// Deepest first: a hidden path beneath another (the database file in the hidden state dir,
/// or in a workspace kept inside it) is covered before the directory above it, whose cover
/// would otherwise leave nothing at that path to cover, and a kept path is bound back with
/// the covers beneath it.
pub(crate) fn hide(paths: &[PathBuf], reachable: &[PathBuf]) -> Result<(), SandboxError> {
    let mut paths: Vec<&PathBuf> = paths.iter().collect();
    paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for path in paths {
        let inside: Vec<&PathBuf> = reachable.iter().filter(|r| r.starts_with(path)).collect();
        if inside.contains(&path) {
            continue;
        }
        // Gone since the list was made (a database's side file, a socket): nothing there to
        // read, and nothing to fail the whole sandbox for.
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        if !meta.is_dir() {
            cover_file(path)?;
        } else if inside.is_empty() {
            cover(path, c"mode=000,size=4k", MountFlags::RDONLY)?;
        } else {
            cover_around(path, &inside)?;
        }
    }
    Ok(())
}

/// Makes every directory between a writable path and a hidden path beneath it (the
/// workspace is your home, the hidden `~/.config/gcloud`) a mount point of its own, bound
/// over itself, so that the command cannot rename it: a cover moves with a rename of its
/// parent, and the next command, which hides by name, would find nothing at the old name
/// while the old contents read under the new one. A mount point cannot be renamed (EBUSY);
/// its contents stay writable ([`seal`] leaves mounts under a writable path as they are).
///
/// Before [`hide`], shallowest first, with plain binds: the covers then go on top of them.
pub(crate) fn pin_ancestors(hidden: &[PathBuf], writable: &[PathBuf]) -> Result<(), SandboxError> {
    let mut pins: Vec<&Path> = Vec::new();
    for path in hidden {
        for root in writable
            .iter()
            .filter(|w| path.starts_with(w) && path != *w)
        {
            pins.extend(
                path.ancestors()
                    .skip(1)
                    .take_while(|dir| *dir != root.as_path() && dir.starts_with(root)),
            );
        }
    }
    // Path order puts a directory before everything beneath it.
    pins.sort();
    pins.dedup();
    for dir in pins {
        bind_unless_gone(dir, dir, "pin a directory above a hidden path")?;
    }
    Ok(())
}

/// Covers the file at `path` with `/dev/null`, bound read-only: the bind is the host's own
/// `/dev/null`, and one left writable (a hidden file inside a writable path, which [`seal`]
/// leaves as it is) would let the command change its mode, owner, times or extended
/// attributes on the host. Reads and writes of a device are not writes to its mount, so the
/// cover still reads empty and swallows writes.
fn cover_file(path: &Path) -> Result<(), SandboxError> {
    match mount_bind(Path::new("/dev/null"), path) {
        Ok(()) => remount_read_only(path).map_err(|err| SandboxError::Apply {
            step: "make a hidden file's cover read-only",
            reason: format!("{}: {err}", path.display()),
        }),
        Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(err) => Err(apply_err("hide a file")(io(err))),
    }
}

/// Binds `source` over `target`, unless `target` is gone by now (nothing there to cover).
fn bind_unless_gone(source: &Path, target: &Path, step: &'static str) -> Result<(), SandboxError> {
    match mount_bind(source, target) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(err) => Err(apply_err(step)(io(err))),
    }
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
        mount_bind(path, path)
            .map_err(io)
            .map_err(apply_err("bind .git read-only"))?;
        remount_read_only(path).map_err(apply_err("remount .git read-only"))?;
    }
    Ok(())
}

/// Every mount read-only except `writable` (existing, canonical paths, each bound over
/// itself first so that it is a mount of its own) with what lies beneath them, and
/// `/proc`. Landlock already refuses writes to file contents and names outside `writable`;
/// a read-only mount also refuses what Landlock does not govern: a file's mode, owner,
/// times and extended attributes, which a process may change on every file its user owns
/// (as root, most of the system, capabilities or not). Writes to devices are not writes to
/// their mount, so `/dev/null` and terminals keep working. `/proc` is left as it is: its
/// files' access is the kernel's own, per process.
pub(crate) fn seal(writable: &[PathBuf]) -> Result<(), SandboxError> {
    for path in writable {
        mount_bind_recursive(path.as_path(), path.as_path())
            .map_err(io)
            .map_err(apply_err("bind a writable path"))?;
    }
    let table = std::fs::read("/proc/self/mountinfo").map_err(apply_err("read the mount table"))?;
    let mut points = mount_points(&table);
    // A path mounted over twice is one mount to change: the one on top.
    points.sort();
    points.dedup();
    for point in points {
        if point.starts_with("/proc") || writable.iter().any(|w| point.starts_with(w)) {
            continue;
        }
        match remount_read_only(&point) {
            Ok(()) => {}
            // Not a mount point any more where the path now leads: covered by a hidden
            // path's tmpfs, or beneath a mount made since.
            Err(err) if matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) => {}
            Err(err) => {
                return Err(SandboxError::Apply {
                    step: "make the file system read-only",
                    reason: format!("{}: {err}", point.display()),
                });
            }
        }
    }
    Ok(())
}

/// Mounts a devpts instance of the sandbox's own at `/dev/pts` (after [`seal`], so that it
/// stays writable): the command may open pseudo-terminals (`script`, `expect`, a REPL's
/// tests), and no longer sees the host's. `/dev/ptmx` needs no change: the kernel opens
/// the instance at `pts` beside it. Whether it is in place: without it (no `/dev/pts`, or
/// the kernel refused the mount) the command gets no terminal it did not inherit, and
/// Landlock keeps both paths read-only.
pub(crate) fn private_ptys() -> bool {
    let pts = Path::new("/dev/pts");
    let ptmx = Path::new("/dev/ptmx");
    if !pts.is_dir() || !ptmx.exists() {
        return false;
    }
    mount(
        "devpts",
        pts,
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        Some(c"newinstance,ptmxmode=0666,mode=0600"),
    )
    .is_ok()
}

/// The mount point of each line of a `/proc/<pid>/mountinfo` table: its fifth field, with
/// the kernel's octal escapes (of space, tab, newline and backslash) undone.
fn mount_points(table: &[u8]) -> Vec<PathBuf> {
    table
        .split(|b| *b == b'\n')
        .filter_map(|line| line.split(|b| *b == b' ').nth(4))
        .map(|field| PathBuf::from(std::ffi::OsString::from_vec(unescape(field))))
        .collect()
}

fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut at = 0;
    while let Some(&byte) = field.get(at) {
        let octal = field
            .get(at + 1..at + 4)
            .filter(|_| byte == b'\\')
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| u8::from_str_radix(digits, 8).ok());
        match octal {
            Some(decoded) => {
                out.push(decoded);
                at += 4;
            }
            None => {
                out.push(byte);
                at += 1;
            }
        }
    }
    out
}

/// Makes the mount at `path` read-only, keeping the flags it is locked with (a remount in
/// a user namespace may not drop them).
fn remount_read_only(path: &Path) -> std::io::Result<()> {
    let locked = statvfs(path).map(|s| s.f_flag).map_err(io)?;
    if locked.contains(StatVfsMountFlags::RDONLY) {
        return Ok(());
    }
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
    mount_remount(path, flags, "").map_err(io)
}

/// A mount namespace of our own, an IPC one (SysV IPC and POSIX message queues that neither
/// outlive the command nor reach the host's) and a PID one for the program the entry point
/// starts next (see `run_sandboxed`); as a user other than root, inside a user namespace that
/// maps the user to itself (so files keep their owner).
#[allow(deprecated)]
fn enter_namespace() -> Result<(), SandboxError> {
    let uid = rustix::process::getuid();
    if uid.is_root() {
        return unshare(UnshareFlags::NEWNS | UnshareFlags::NEWIPC | UnshareFlags::NEWPID)
            .map_err(io)
            .map_err(apply_err("mount namespace"));
    }
    let gid = rustix::process::getgid();
    unshare(
        UnshareFlags::NEWUSER | UnshareFlags::NEWNS | UnshareFlags::NEWIPC | UnshareFlags::NEWPID,
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_read_with_their_escapes_undone() {
        let table = b"22 1 0:21 / /proc rw,relatime shared:5 - proc proc rw\n\
            30 1 8:1 / / rw - ext4 /dev/vda rw\n\
            41 30 0:40 / /mnt/with\\040space\\134and\\011tab rw - tmpfs none rw\n\
            42 30 0:41 / /mnt/caf\xc3\xa9\\ rw - tmpfs none rw\n\
            short line\n";
        let points: Vec<PathBuf> = mount_points(table);
        let want: Vec<PathBuf> = ["/proc", "/", "/mnt/with space\\and\ttab", "/mnt/café\\"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(points, want);
    }

    /// A path listed for hiding that is gone by the time of the mount (a database's side
    /// file, a socket) is skipped: it used to fail the whole sandbox, and a run whose mode
    /// was only the default then ran its commands unsandboxed. No mount is made here.
    #[test]
    fn a_hidden_path_gone_before_its_mount_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let gone = [dir.path().join("j.db-wal"), dir.path().join("d/s.sock")];
        hide(&gone, &[]).unwrap();
    }
}
