//! The run's workspace: the one directory the built-in tools may touch.
//!
//! Invariant: every path a tool opens resolves (symlinks followed, `..` applied) to the
//! workspace root or below it. A path that escapes, lexically or through a symlink anywhere
//! on the way (the final component included, dangling or not), is refused before any I/O on
//! the target. What is checked is the file system at the time of the check: a process that
//! swaps a directory for a symlink between the check and the open is outside this model.

use std::path::{Component, Path, PathBuf};

/// A canonical workspace root.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

/// Why a path was refused; the message is what the model reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PathRefused(pub String);

impl Workspace {
    /// The workspace at `dir`, which must exist and be a directory.
    pub fn new(dir: &Path) -> std::io::Result<Workspace> {
        let root = dir.canonicalize()?;
        if !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!("{} is not a directory", dir.display()),
            ));
        }
        Ok(Workspace { root })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves `path` (relative to the root, or absolute inside it) to a path inside the
    /// workspace, or refuses it.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, PathRefused> {
        if path.contains('\0') {
            return Err(PathRefused("path contains a NUL byte".into()));
        }
        let given = Path::new(path);
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        };
        let lexical = normalize(&joined).ok_or_else(|| self.escapes(path))?;
        if !lexical.starts_with(&self.root) {
            return Err(self.escapes(path));
        }
        // Follow symlinks on the part that exists: its real location must stay inside.
        let mut existing = lexical.as_path();
        let mut rest = Vec::new();
        loop {
            match std::fs::symlink_metadata(existing) {
                Ok(meta) => {
                    let real = existing.canonicalize().map_err(|_| {
                        if meta.file_type().is_symlink() {
                            PathRefused(format!(
                                "{path}: a symlink whose target does not exist (refused: it could point outside the workspace)"
                            ))
                        } else {
                            PathRefused(format!("{path}: cannot be resolved"))
                        }
                    })?;
                    if !real.starts_with(&self.root) {
                        return Err(PathRefused(format!(
                            "{path}: resolves through a symlink to {} outside the workspace {}",
                            real.display(),
                            self.root.display()
                        )));
                    }
                    let mut resolved = real;
                    for part in rest.iter().rev() {
                        resolved.push(part);
                    }
                    return Ok(resolved);
                }
                Err(_) => {
                    let (Some(parent), Some(name)) = (existing.parent(), existing.file_name())
                    else {
                        return Err(self.escapes(path));
                    };
                    rest.push(name.to_os_string());
                    existing = parent;
                }
            }
        }
    }

    fn escapes(&self, path: &str) -> PathRefused {
        PathRefused(format!(
            "{path}: outside the workspace {} (paths must stay inside it)",
            self.root.display()
        ))
    }
}

/// `path` with `.` and `..` applied, without touching the file system; `None` when `..`
/// climbs above the file system root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push(Component::RootDir.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(name) => out.push(name),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confines_paths_to_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/x", dir.path().join("dangling")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("sub"), dir.path().join("in")).unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let root = ws.root().to_path_buf();
        assert_eq!(ws.resolve("sub/a.txt").unwrap(), root.join("sub/a.txt"));
        assert_eq!(
            ws.resolve("sub/../sub/new.txt").unwrap(),
            root.join("sub/new.txt")
        );
        assert_eq!(
            ws.resolve("new/deeper/x").unwrap(),
            root.join("new/deeper/x")
        );
        assert_eq!(ws.resolve(".").unwrap(), root);
        assert_eq!(ws.resolve("in/a.txt").unwrap(), root.join("sub/a.txt"));
        let abs = root.join("sub/a.txt");
        assert_eq!(ws.resolve(abs.to_str().unwrap()).unwrap(), abs);
        for bad in [
            "..",
            "../x",
            "sub/../../x",
            "/etc/passwd",
            "out/x",
            "out",
            "dangling",
            "a\0b",
        ] {
            let err = ws.resolve(bad).unwrap_err();
            assert!(
                err.0.contains(bad.split('\0').next().unwrap()),
                "{bad}: {err}"
            );
        }
    }
}
