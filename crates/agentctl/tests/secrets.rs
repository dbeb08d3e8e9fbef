//! What must never reach stderr or stdout: log lines below `warn` unless `RUST_LOG` asks for
//! them, and the API key at any log level.

// Test helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Output, Stdio};

use assert_cmd::cargo::CommandCargoExt as _;

/// `agentctl` with no API settings, no database and no `RUST_LOG` from the environment.
fn agentctl() -> Command {
    let mut cmd = Command::cargo_bin("agentctl").unwrap();
    for var in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "AGENTCTL_DB",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// True when `stderr` holds a log line at a level below `warn`.
fn has_quiet_levels(stderr: &str) -> bool {
    stderr.lines().any(|l| {
        [" TRACE ", " DEBUG ", " INFO "]
            .iter()
            .any(|lvl| l.contains(lvl))
    })
}

#[test]
fn a_default_run_logs_nothing_below_warn() {
    let output = agentctl()
        .args(["api", "steer", "--mock"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(!has_quiet_levels(&stderr), "{stderr}");
    assert!(!stderr.contains("handshake"), "{stderr}");
}

#[test]
fn rust_log_debug_still_works_and_trace_never_shows_the_mock_key() {
    let output = agentctl()
        .env("RUST_LOG", "debug")
        .args(["api", "steer", "--mock"])
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains(" DEBUG "), "debug logging is on: {stderr}");

    let output = agentctl()
        .env("RUST_LOG", "trace")
        .args(["api", "steer", "--mock"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains(" TRACE "), "trace logging is on: {stderr}");
    let key = agent_responses_mock::MOCK_API_KEY;
    assert!(!stderr.contains(key) && !stdout.contains(key), "{stderr}");
}

/// A whole steered turn against the emulator in another process, both at `RUST_LOG=trace`:
/// the key shows up in neither log, client nor server.
#[test]
fn the_api_key_reaches_no_log_on_either_side_at_trace() {
    const KEY: &str = "sk-secret-should-not-appear-7f3a";
    let server_log = tempfile::NamedTempFile::new().unwrap();
    let mut server = agentctl()
        .env("RUST_LOG", "trace")
        .args(["mock", "serve", "--require-key", KEY])
        .stdout(Stdio::piped())
        .stderr(server_log.reopen().unwrap())
        .spawn()
        .unwrap();
    let mut base_url = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut base_url)
        .unwrap();
    let output = agentctl()
        .env("RUST_LOG", "trace")
        .env("OPENAI_API_KEY", KEY)
        .args(["api", "steer", "--base-url", base_url.trim()])
        .output()
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains(" TRACE "), "trace logging is on: {stderr}");
    assert!(!stderr.contains(KEY) && !stdout.contains(KEY), "{stderr}");
    let server_stderr = std::fs::read_to_string(server_log.path()).unwrap();
    assert!(server_stderr.contains(" TRACE "), "{server_stderr}");
    assert!(!server_stderr.contains(KEY), "{server_stderr}");
}
