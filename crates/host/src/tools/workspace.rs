//! The run's workspace: the one directory the built-in tools may touch.
//!
//! Invariant: every path a tool opens resolves (symlinks followed, `..` applied) to the
//! workspace root or below it. A path that escapes, lexically or through a symlink anywhere
//! on the way (the final component included, dangling or not), is refused before any I/O on
//! the target. What is checked is the file system at the time of the check: a process that
//! swaps a directory for a symlink between the check and the open is outside this model.
//! - A path at or under one of the workspace's hidden paths (the sandbox's list: credential
//!   stores, agentctl's own configuration and data, the run's database, `deny_read`) is
//!   refused too: a workspace at or above the home directory holds them, and the tools run
//!   outside the sandbox, so they must hide what it hides.
//! - A refusal never names where a symlink leads: the host can see what a sandboxed
//!   command cannot, and must not tell the model.

use std::path::{Component, Path, PathBuf};

/// A canonical workspace root.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    /// Paths the tools never touch, as given and, where they exist, canonical.
    hidden: Vec<PathBuf>,
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
        Ok(Workspace {
            root,
            hidden: Vec::new(),
        })
    }

    /// This workspace, with `hidden` (the sandbox's list) refused as well. A hidden path
    /// that holds the workspace (the demo workspace under agentctl's data directory) hides
    /// nothing of it, as the sandbox binds such a workspace back in.
    pub fn hiding(&self, hidden: &[PathBuf]) -> Workspace {
        let mut all = Vec::with_capacity(hidden.len() * 2);
        for path in hidden {
            let real = path.canonicalize().ok();
            if self.root.starts_with(path)
                || real.as_ref().is_some_and(|r| self.root.starts_with(r))
            {
                continue;
            }
            all.push(path.clone());
            if let Some(real) = real.filter(|r| r != path) {
                all.push(real);
            }
        }
        Workspace {
            root: self.root.clone(),
            hidden: all,
        }
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
                            "{path}: resolves through a symlink to a path outside the workspace {}",
                            self.root.display()
                        )));
                    }
                    let mut resolved = real;
                    for part in rest.iter().rev() {
                        resolved.push(part);
                    }
                    if self
                        .hidden
                        .iter()
                        .any(|h| resolved.starts_with(h) || lexical.starts_with(h))
                    {
                        return Err(PathRefused(format!(
                            "{path}: hidden from the run's tools (credentials, agentctl's own \
                             files, the run's database, or a `deny_read` path)"
                        )));
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

    /// The sandbox's hidden paths are refused by the tools too, through a symlink or not;
    /// one that holds the workspace hides nothing of it; refusals name no symlink target.
    #[test]
    fn hidden_paths_are_refused_and_symlink_targets_are_not_named() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path().canonicalize().unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".ssh/id_rsa"), "KEY").unwrap();
        std::fs::create_dir_all(home.join("data/agentctl/workspaces/demo")).unwrap();
        std::os::unix::fs::symlink(home.join(".ssh/id_rsa"), home.join("key")).unwrap();
        let hidden = [
            home.join(".ssh"),
            home.join("data/agentctl"),
            home.join("run.db"),
        ];
        let ws = Workspace::new(&home).unwrap().hiding(&hidden);
        for path in [
            ".ssh/id_rsa",
            ".ssh",
            "key",
            "run.db",
            "run.db/../.ssh/x",
            "data/agentctl/x",
        ] {
            let refused = ws.resolve(path).unwrap_err().0;
            assert!(
                refused.contains("hidden from the run's tools"),
                "{path}: {refused}"
            );
        }
        assert!(ws.resolve("data/other").is_ok());
        // A workspace inside a hidden directory keeps its own files.
        let demo = home.join("data/agentctl/workspaces/demo");
        let ws = Workspace::new(&demo).unwrap().hiding(&hidden);
        assert_eq!(ws.resolve("README.md").unwrap(), demo.join("README.md"));
        // Outside the workspace: refused without saying where the link leads.
        let ws = Workspace::new(&demo).unwrap();
        std::os::unix::fs::symlink(home.join(".ssh"), demo.join("out")).unwrap();
        let refused = ws.resolve("out/id_rsa").unwrap_err().0;
        assert!(!refused.contains(".ssh"), "{refused}");
    }
}
