//! `agentctl api steer`: the WebSocket steering story, end to end as a child process.

// Test helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use assert_cmd::Command;

const STEER: &str = "新增约束：一个人两天完成，只保留最小功能。";

fn agentctl() -> Command {
    let mut cmd = Command::cargo_bin("agentctl").unwrap();
    cmd.env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("RUST_LOG", "warn");
    cmd
}

#[test]
fn steer_mock_prints_accepted_commit_and_the_successor_text() {
    let output = agentctl()
        .args(["api", "steer", "--mock"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("queued, not yet applied steer_"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("steering committed to successor resp_"),
        "{stdout}"
    );
    assert!(lines[2..].join("\n").contains(STEER), "{stdout}");
}

#[test]
fn steer_mock_json_is_one_object_per_line() {
    let output = agentctl()
        .args(["--json", "api", "steer", "--mock"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["steer.accepted", "steer.committed", "completed"]);
    assert!(
        events.iter().all(|e| e.get("event").is_none()),
        "one name for the kind: {events:?}"
    );
    assert_eq!(events[1]["successor"], events[2]["response_id"]);
}

#[test]
fn steer_without_key_fails_with_a_hint() {
    let output = agentctl().args(["api", "steer"]).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("OPENAI_API_KEY is not set"), "{stderr}");
    assert!(stderr.contains("--mock"), "{stderr}");
    assert!(output.stdout.is_empty());
}

/// `api steer` against 127.0.0.1:`port` with the key `sk-secret-should-not-appear` and
/// `RUST_LOG=rust_log`.
fn steer_with_secret_key(port: u16, rust_log: &str) -> std::process::Output {
    agentctl()
        .env("OPENAI_API_KEY", "sk-secret-should-not-appear")
        .env("RUST_LOG", rust_log)
        .args([
            "api",
            "steer",
            "--base-url",
            &format!("http://127.0.0.1:{port}/v1"),
        ])
        .output()
        .unwrap()
}

#[test]
fn steer_against_a_closed_port_fails_without_leaking_the_key() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let output = steer_with_secret_key(port, "warn");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot open the WebSocket"), "{stderr}");
    assert!(!stderr.contains("sk-secret-should-not-appear"));
}

#[test]
fn steer_mock_with_runtime_bumps_the_revision_and_refuses_the_superseded_proposal() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("steer.db").display());
    let output = agentctl()
        .args(["--db", &db, "api", "steer", "--mock", "--runtime"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("runtime turn revision bumped to 1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("runtime refused the superseded proposal"),
        "{stdout}"
    );
    assert!(
        stdout.contains("runtime committed the successor at revision 1"),
        "{stdout}"
    );
    assert!(stdout.contains(STEER), "{stdout}");
}

#[test]
fn a_timeout_out_of_range_is_a_usage_error_not_a_panic() {
    for timeout in ["0", "604801", "18446744073709551615"] {
        let output = agentctl()
            .args(["api", "steer", "--mock", "--timeout", timeout])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{timeout}: {stderr}");
        assert!(stderr.contains("--timeout"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// tungstenite traces the handshake request verbatim; even `RUST_LOG=trace` must not show
/// the key.
#[test]
fn steer_at_trace_level_does_not_log_the_key() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Reads the handshake request, then hangs up without answering.
    let server = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = std::io::Read::read(&mut socket, &mut request);
    });
    let output = steer_with_secret_key(port, "trace");
    server.join().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("TRACE"), "trace logging is on: {stderr}");
    assert!(!stderr.contains("sk-secret-should-not-appear"), "{stderr}");
}
