//! How to start the server and how the client behaves.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The server program: `codex app-server --listen stdio://` by default, any command for tests.
#[derive(Debug, Clone)]
pub struct ServerCommand {
    /// The program to run (a path, or a name looked up in `PATH`).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Extra environment variables for the child (on top of the inherited environment).
    pub env: Vec<(OsString, OsString)>,
    /// Variables of the inherited environment the child does not get (removed before
    /// [`env`](Self::env) is applied).
    pub env_removed: Vec<OsString>,
    /// The child's working directory; the current one when `None`.
    pub cwd: Option<PathBuf>,
    /// Where the child's stderr goes.
    pub stderr: StderrTarget,
}

/// Where the child's stderr goes. Its stdout carries the protocol only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StderrTarget {
    /// Shared with this process.
    Inherit,
    /// Discarded.
    Null,
    /// Appended to a file.
    File(PathBuf),
}

impl ServerCommand {
    /// `<codex> app-server --listen stdio://`.
    pub fn codex(codex_bin: impl Into<OsString>) -> Self {
        ServerCommand::new(codex_bin).args(["app-server", "--listen", "stdio://"])
    }

    /// Any program, with no arguments yet.
    pub fn new(program: impl Into<OsString>) -> Self {
        ServerCommand {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            env_removed: Vec::new(),
            cwd: None,
            stderr: StderrTarget::Inherit,
        }
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the child.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Removes an inherited environment variable from the child's environment.
    pub fn env_remove(mut self, key: impl Into<OsString>) -> Self {
        self.env_removed.push(key.into());
        self
    }

    /// Sets the child's working directory.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Sets where the child's stderr goes.
    pub fn stderr(mut self, target: StderrTarget) -> Self {
        self.stderr = target;
        self
    }

    /// The program to start: a relative path with a directory in it (`bin/codex`) made
    /// absolute against this process's working directory, since with [`cwd`](Self::cwd)
    /// set the child would look for it relative to that directory; a bare name (`codex`,
    /// looked up in `PATH`) and an absolute path as given.
    pub fn resolved_program(&self) -> OsString {
        let path = Path::new(&self.program);
        if self.cwd.is_none() || path.is_absolute() || path.components().count() < 2 {
            return self.program.clone();
        }
        std::path::absolute(path).map_or_else(|_| self.program.clone(), PathBuf::into_os_string)
    }

    /// The program as text, for messages.
    pub fn program_display(&self) -> String {
        self.program.to_string_lossy().into_owned()
    }
}

/// Client behaviour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// How long a call waits for its response (default 15 s).
    pub call_timeout: Duration,
    /// How many server events may wait unconsumed before the reader stops reading
    /// (default 256). Events are never dropped: a full queue applies backpressure.
    pub event_capacity: usize,
    /// The longest line accepted from the server (default 64 MiB).
    pub max_line_bytes: usize,
    /// How long `close` waits after asking the server to stop before it kills it (default 3 s).
    pub close_grace: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            call_timeout: Duration::from_secs(15),
            event_capacity: 256,
            max_line_bytes: 64 * 1024 * 1024,
            close_grace: Duration::from_secs(3),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_relative_program_path_is_resolved_against_our_directory_when_the_server_gets_another() {
        let here = std::env::current_dir().unwrap();
        let cmd = ServerCommand::new("bin/codex").current_dir("/elsewhere");
        assert_eq!(
            cmd.resolved_program(),
            here.join("bin/codex").into_os_string()
        );
        let cmd = ServerCommand::new("./codex").current_dir("/elsewhere");
        assert_eq!(
            PathBuf::from(cmd.resolved_program()),
            std::path::absolute("./codex").unwrap()
        );
        // A bare name is looked up in PATH; without another directory nothing changes.
        let cmd = ServerCommand::new("codex").current_dir("/elsewhere");
        assert_eq!(cmd.resolved_program(), OsString::from("codex"));
        assert_eq!(
            ServerCommand::new("bin/codex").resolved_program(),
            OsString::from("bin/codex")
        );
        assert_eq!(
            ServerCommand::new("/usr/bin/codex")
                .current_dir("/x")
                .resolved_program(),
            OsString::from("/usr/bin/codex")
        );
    }
}
