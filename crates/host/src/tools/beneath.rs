//! Opening a path of the workspace without following anything that appeared after the
//! check.
//!
//! [`Workspace::resolve`](super::Workspace::resolve) checks a path against the file system
//! as it is at that moment; a sandboxed command running beside the tool (another call, a
//! sub-agent, a leftover process) can swap a directory for a symlink right after. So the
//! tools open what `resolve` returned relative to the workspace root, one component at a
//! time, refusing to follow any symlink (`O_NOFOLLOW`) and creating missing directories
//! with `mkdirat` in the directory already opened.
//!
//! Invariant: every descriptor returned here names an object reached from the workspace
//! root through real directories only; a symlink met anywhere on the way is an error
//! ([`SWAPPED`]), whatever it points to. `resolve` returns canonical paths (no symlink, no
//! `..`), so on an unchanged file system the walk and the check agree.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// The message for a path that changed under the tool between the check and the open.
pub(crate) const SWAPPED: &str =
    "changed while it was being opened (a symlink appeared on the way); refused";

/// Opens directory `rel` (relative to `root`, no `..`), creating missing directories when
/// `create` is set.
pub(crate) fn open_dir(root: &Path, rel: &Path, create: bool) -> io::Result<OwnedFd> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(root, dir_flags, Mode::empty()).map_err(swapped)?;
    for part in rel.components() {
        let name = match part {
            Component::Normal(name) => name,
            Component::CurDir => continue,
            _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, SWAPPED)),
        };
        let next = match rustix::fs::openat(&dir, name, dir_flags, Mode::empty()) {
            Err(rustix::io::Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(err) => return Err(err.into()),
                }
                rustix::fs::openat(&dir, name, dir_flags, Mode::empty())
            }
            other => other,
        };
        dir = match next {
            // `O_DIRECTORY` reports a symlink as "not a directory": tell the two apart.
            Err(rustix::io::Errno::NOTDIR) if is_symlink(&dir, name) => {
                return Err(io::Error::other(SWAPPED));
            }
            other => other.map_err(swapped)?,
        };
    }
    Ok(dir)
}

/// Opens file `rel` (relative to `root`, no `..`) with `flags` (`O_NOFOLLOW`, `O_NONBLOCK`
/// and `O_CLOEXEC` added: a FIFO never blocks the open), creating missing parent
/// directories when `create_dirs` is set. The caller checks the file's type on the
/// descriptor.
pub(crate) fn open_file(
    root: &Path,
    rel: &Path,
    flags: OFlags,
    create_dirs: bool,
) -> io::Result<std::fs::File> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is the workspace itself, not a file",
        ));
    };
    let dir = open_dir(root, parent, create_dirs)?;
    let flags = flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&dir, name, flags, Mode::from_raw_mode(0o666)).map_err(swapped)?;
    Ok(std::fs::File::from(fd))
}

/// The names in an open directory and whether each is a directory (symlinks are not),
/// without `.` and `..`.
pub(crate) fn list(dir: &OwnedFd) -> io::Result<Vec<(String, bool)>> {
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Unknown => {
                rustix::fs::statat(dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
            }
            kind => kind == FileType::Directory,
        };
        out.push((String::from_utf8_lossy(name).into_owned(), is_dir));
    }
    Ok(out)
}

fn is_symlink(dir: &OwnedFd, name: &std::ffi::OsStr) -> bool {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
}

/// `ELOOP` (a symlink met with `O_NOFOLLOW`) as the swap it means; other errors as they are.
fn swapped(err: rustix::io::Errno) -> io::Error {
    if err == rustix::io::Errno::LOOP {
        io::Error::other(SWAPPED)
    } else {
        err.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_real_directories_only() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.txt"), "a").unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("sub"), dir.path().join("in")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        let root = dir.path();
        let mut text = String::new();
        io::Read::read_to_string(
            &mut open_file(root, Path::new("sub/a.txt"), OFlags::RDONLY, false).unwrap(),
            &mut text,
        )
        .unwrap();
        assert_eq!(text, "a");
        for bad in ["out/secret", "in/a.txt", "link"] {
            let err = open_file(root, Path::new(bad), OFlags::RDONLY, false).unwrap_err();
            assert!(err.to_string().contains(SWAPPED), "{bad}: {err}");
        }
        // A write through a symlinked directory creates nothing outside.
        let err = open_file(
            root,
            Path::new("out/new"),
            OFlags::WRONLY | OFlags::CREATE,
            true,
        )
        .unwrap_err();
        assert!(err.to_string().contains(SWAPPED), "{err}");
        assert!(!outside.path().join("new").exists());
        // Missing directories are made inside.
        open_file(
            root,
            Path::new("x/y/z.txt"),
            OFlags::WRONLY | OFlags::CREATE,
            true,
        )
        .unwrap();
        assert!(root.join("x/y/z.txt").is_file());
        let mut names = list(&open_dir(root, Path::new(""), false).unwrap()).unwrap();
        names.sort();
        let want: Vec<(String, bool)> = [
            ("in", false),
            ("link", false),
            ("out", false),
            ("sub", true),
            ("x", true),
        ]
        .iter()
        .map(|(n, d)| (n.to_string(), *d))
        .collect();
        assert_eq!(names, want);
    }
}
