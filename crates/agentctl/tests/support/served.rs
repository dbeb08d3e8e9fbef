//! A real `agentctl serve` for the serve tests: started on 127.0.0.1:0 with a token file,
//! its address read from its `serve.listening` line, killed when dropped.

#![allow(dead_code)] // each test binary uses part of it

use std::io::BufRead as _;
use std::process::{Child, Stdio};

use serde_json::Value;

use crate::host::agentctl;

/// The token every served test signs in with.
pub const TOKEN: &str = "test-token-0123456789abcdef0123456789abcdef";

/// A running `agentctl serve` and where it listens.
pub struct Served {
    pub child: Child,
    /// `http://ADDR`.
    pub base: String,
    /// `ADDR` (what its `Host` header must say).
    pub host: String,
}

/// A process of a test (an `agentctl run`, a worker) killed when the test ends.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `agentctl --json serve --listen 127.0.0.1:0 --token-file DIR/token EXTRA`, once it listens.
pub fn serve(db: &str, dir: &std::path::Path, extra: &[&str]) -> Served {
    serve_from(agentctl(db), dir, extra)
}

/// [`serve`] under a shell that first runs `setup` (`ulimit -n 128`), then execs
/// `agentctl` as [`agentctl`] would run it.
pub fn serve_after(setup: &str, db: &str, dir: &std::path::Path, extra: &[&str]) -> Served {
    let plain = agentctl(db);
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c")
        .arg(format!("{setup}; exec \"$@\""))
        .arg("bash")
        .arg(plain.get_program())
        .args(plain.get_args())
        .stdin(Stdio::null());
    for (key, value) in plain.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    serve_from(cmd, dir, extra)
}

/// [`serve`] with `cmd` (an `agentctl` with its `--db`) as the command.
fn serve_from(mut cmd: std::process::Command, dir: &std::path::Path, extra: &[&str]) -> Served {
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut child = cmd
        .args(["--json", "serve", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(&token_file)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    let listening: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("{line}"));
    assert_eq!(listening["type"], "serve.listening");
    let addr = listening["addr"].as_str().unwrap().to_string();
    assert!(listening["url"].as_str().unwrap().ends_with(TOKEN));
    Served {
        child,
        base: format!("http://{addr}"),
        host: addr,
    }
}
