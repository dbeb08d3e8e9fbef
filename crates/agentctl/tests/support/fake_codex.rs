//! What the tests against a fake `codex app-server` share: the fake (a Python script
//! written executable into a temporary directory, its behaviour chosen by `FAKE_MODE`) and
//! a running `agentctl` whose stdout is read line by line.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Guards against a hang turning into a stuck test run; not a timing assertion.
pub const HANG_GUARD: Duration = Duration::from_secs(90);

/// A fake app-server script, written executable into a fresh temporary directory (where
/// it writes its files).
pub struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    /// `script` (a Python program) as the fake.
    pub fn new(script: &str) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let fake = Fake { dir };
        agent_testkit::write_executable(&fake.script(), script);
        fake
    }

    pub fn script(&self) -> PathBuf {
        self.dir.path().join("fake-codex.py")
    }

    /// The fake's directory.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// A file in the fake's directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `agentctl ARGS`, the fake in `mode` as CODEX_BIN, no `RUST_LOG`, no `AGENTCTL_DB`.
    pub fn agentctl(&self, mode: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentctl"));
        cmd.args(args)
            .env("CODEX_BIN", self.script())
            .env("FAKE_MODE", mode)
            .env_remove("RUST_LOG")
            .env_remove("AGENTCTL_DB");
        cmd
    }
}

/// A running `agentctl` in a process group of its own (as a shell's job is): its stdout
/// line by line, its stderr whole at the end.
pub struct Running {
    child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Running {
    pub fn start(mut cmd: Command) -> Running {
        use std::os::unix::process::CommandExt as _;
        let mut child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, stdout) = mpsc::channel();
        let out = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        Running {
            child,
            stdout,
            stderr,
        }
    }

    /// Waits for a stdout line equal to `line`.
    pub fn wait_for_line(&self, line: &str) {
        loop {
            match self.stdout.recv_timeout(HANG_GUARD) {
                Ok(got) if got == line => return,
                Ok(_) => {}
                Err(err) => panic!("no stdout line {line:?}: {err}"),
            }
        }
    }

    /// Sends `signal` to the process (`-INT`), or to its whole group (`-INT`, group).
    pub fn signal(&self, signal: &str, group: bool) {
        let target = if group {
            format!("-{}", self.child.id())
        } else {
            self.child.id().to_string()
        };
        let sent = Command::new("kill")
            .args([signal, "--", &target])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// SIGINT to the process alone.
    pub fn interrupt(&self) {
        self.signal("-INT", false);
    }

    /// Waits for the exit (killing the process and failing after [`HANG_GUARD`]); returns
    /// the status and stderr.
    pub fn finish(mut self) -> (ExitStatus, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > HANG_GUARD {
                self.child.kill().unwrap();
                self.child.wait().unwrap();
                panic!(
                    "still running after {HANG_GUARD:?}; stderr: {}",
                    self.stderr.join().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        (status, self.stderr.join().unwrap())
    }
}
