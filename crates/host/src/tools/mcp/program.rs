//! Finding a server's program before starting it.
//!
//! A server is started through a `bash` wrapper (see `client.rs`), so spawning never fails
//! for a missing program: bash reports it on the server's stderr, which goes to the log,
//! and the handshake fails with nothing but "connection closed". Looking the program up
//! first, the way `exec` will (a name with a `/` from the server's directory, a bare name
//! on `PATH`), turns the commonest mistake, a typo or a tool that is not installed, into a
//! message that names it.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// Why `server`'s program would not start in `cwd` with the `PATH` it gets (its own, else
/// this process's), or `None` when it names an executable file.
pub(crate) fn missing_for(
    server: &crate::tools::config::ServerConfig,
    cwd: &Path,
) -> Option<String> {
    let path = match server.env.get("PATH") {
        Some(path) => Some(std::ffi::OsString::from(path)),
        None => std::env::var_os("PATH"),
    };
    missing(&server.command, path.as_deref(), cwd)
}

/// Why `command` would not start, or `None` when it names an executable file. `path` is
/// the `PATH` the server gets; `cwd` is the directory it starts in.
pub(crate) fn missing(command: &str, path: Option<&OsStr>, cwd: &Path) -> Option<String> {
    if command.is_empty() {
        return Some("its command is empty".into());
    }
    if command.contains('/') {
        let file = cwd.join(command);
        return match std::fs::metadata(&file) {
            Err(_) => Some(format!("`{command}` does not exist")),
            Ok(meta) if meta.is_dir() => Some(format!("`{command}` is a directory")),
            Ok(meta) if meta.permissions().mode() & 0o111 == 0 => {
                Some(format!("`{command}` is not executable"))
            }
            Ok(_) => None,
        };
    }
    let found = path
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|dir| cwd.join(dir).join(command))
        .any(|file| {
            std::fs::metadata(file)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        });
    (!found).then(|| format!("`{command}` was not found on PATH (is it installed?)"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_what_exec_would_not_find() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let tool = bin.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let plain = bin.join("plain");
        std::fs::write(&plain, "").unwrap();
        let path = bin.as_os_str();

        assert_eq!(missing("tool", Some(path), dir.path()), None);
        assert_eq!(missing("bin/tool", None, dir.path()), None);
        assert_eq!(missing("./bin/tool", None, dir.path()), None);
        assert_eq!(
            missing("tlo", Some(path), dir.path()).unwrap(),
            "`tlo` was not found on PATH (is it installed?)"
        );
        // Not executable, or a directory: exec would fail on them too.
        assert!(missing("plain", Some(path), dir.path()).is_some());
        assert_eq!(
            missing("bin/plain", None, dir.path()).unwrap(),
            "`bin/plain` is not executable"
        );
        assert_eq!(
            missing("./bin", None, dir.path()).unwrap(),
            "`./bin` is a directory"
        );
        assert!(missing("tool", None, dir.path()).is_some());
        assert_eq!(
            missing("", Some(path), dir.path()).unwrap(),
            "its command is empty"
        );
    }
}
