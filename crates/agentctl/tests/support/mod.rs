#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! Running the `agentctl` binary in CLI tests.

#![allow(dead_code)]

use assert_cmd::Command;
use serde_json::Value;

/// `agentctl --db DB`, ignoring any `AGENTCTL_DB` of the environment.
pub fn agentctl(db: &str) -> Command {
    let mut cmd = Command::cargo_bin("agentctl").unwrap();
    cmd.env_remove("AGENTCTL_DB").args(["--db", db]);
    cmd
}

/// A fresh SQLite database URL (`name` in a temp dir that lives as long as the guard).
pub fn temp_db(name: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join(name).display());
    (dir, url)
}

/// Runs `cmd`, requires success, returns its stdout.
pub fn stdout_ok(cmd: &mut Command) -> Vec<u8> {
    cmd.assert().success().get_output().stdout.clone()
}

/// Every stdout line parsed as JSON.
pub fn json_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The single JSON object on stdout.
pub fn one_json(out: &[u8]) -> Value {
    let text = String::from_utf8(out.to_vec()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON object: {text}");
    serde_json::from_str(lines[0]).unwrap()
}
