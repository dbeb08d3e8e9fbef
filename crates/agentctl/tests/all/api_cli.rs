//! `agentctl api <mode> --mock` runs each mode's story offline and prints the model's answer;
//! without a key and without `--mock` it fails with a hint.

// Test helpers outside `#[test]` functions may unwrap and panic too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use assert_cmd::Command;

fn agentctl() -> Command {
    let mut cmd = Command::cargo_bin("agentctl").expect("agentctl binary");
    cmd.env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("RUST_LOG", "warn");
    cmd
}

fn stdout_of(args: &[&str]) -> String {
    let output = agentctl().args(args).output().expect("run agentctl");
    assert!(
        output.status.success(),
        "agentctl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 stdout")
}

#[test]
fn direct_mock_prints_the_high_total_with_its_source() {
    let out = stdout_of(&["api", "direct", "--mock"]);
    assert!(out.contains("high 总数：2"), "{out}");
    assert!(out.contains("fictional-fixture-v1"), "{out}");
}

#[test]
fn ptc_mock_prints_the_high_total_with_its_source() {
    let out = stdout_of(&["api", "ptc", "--mock"]);
    assert!(out.contains("high 总数：2"), "{out}");
    assert!(out.contains("fictional-fixture-v1"), "{out}");
}

#[test]
fn async_mock_prints_the_explanation_then_the_tool_results() {
    let out = stdout_of(&["api", "async", "--mock"]);
    let explanation = out.find("单元测试").expect("explanation streamed");
    let results = out.find("风险统计").expect("follow-up printed");
    assert!(explanation < results, "{out}");
    assert!(
        out.contains("\\\"high\\\":2") || out.contains("\"high\":2"),
        "tool result shown: {out}"
    );
}

#[test]
fn compact_mock_lists_the_three_constraints() {
    let out = stdout_of(&["api", "compact", "--mock"]);
    for constraint in ["Python 标准库", "只读分析", "不要修改任何文件"] {
        assert!(out.contains(constraint), "{out}");
    }
}

#[test]
fn json_output_is_one_object_per_line() {
    let out = stdout_of(&["--json", "api", "direct", "--mock"]);
    let value: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON line");
    assert_eq!(value["mode"], "direct");
    assert_eq!(value["tool_executions"], 2);
}

#[test]
fn without_a_key_or_mock_it_says_how_to_fix_it() {
    let output = agentctl()
        .args(["api", "direct"])
        .output()
        .expect("run agentctl");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("OPENAI_API_KEY"), "{err}");
    assert!(err.contains("--mock"), "{err}");
}

#[test]
fn an_empty_required_key_is_refused_before_the_emulator_starts() {
    let output = agentctl()
        .env_remove("AGENTCTL_MOCK_KEY")
        .args(["mock", "serve", "--require-key", ""])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--require-key"), "{stderr}");
}

#[test]
fn codex_run_with_a_missing_working_directory_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let output = agentctl()
        .args(["--db", "memory:", "codex", "run", "--mock", "--cwd"])
        .arg(&missing)
        .arg("hi")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Bad input, as `run --workspace` on a missing directory: exit 2.
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --cwd `") && stderr.contains("is not a directory"),
        "{stderr}"
    );
}

/// `mock serve` stops on SIGTERM (what `kill`, systemd and container runtimes send) as it
/// does on SIGINT, exiting 0; SIGTERM killed it (exit 143).
#[test]
fn mock_serve_stops_on_sigint_and_sigterm() {
    use std::io::{BufRead as _, BufReader};
    for sig in ["INT", "TERM"] {
        let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .args(["mock", "serve"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut base = String::new();
        BufReader::new(server.stdout.take().unwrap())
            .read_line(&mut base)
            .unwrap();
        assert!(base.starts_with("http://"), "{base}");
        let killed = std::process::Command::new("kill")
            .args([format!("-{sig}"), server.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        // Not a timing check: a server that ignored the signal would hang the test.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(status) = server.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                server.kill().unwrap();
                panic!("SIG{sig}: mock serve did not stop");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert_eq!(status.code(), Some(0), "SIG{sig}: {status}");
    }
}

/// `mock serve --first-token-ms` holds a reply that long; a rate that is not positive is a
/// usage error.
#[test]
fn mock_serve_takes_the_model_latency_it_is_given() {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    let output = agentctl()
        .args(["mock", "serve", "--tokens-per-second", "0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("tokens per second"), "{stderr}");

    let bin = env!("CARGO_BIN_EXE_agentctl");
    let mut server = std::process::Command::new(bin)
        .args(["mock", "serve", "--first-token-ms", "400"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut base = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut base)
        .unwrap();
    let addr = base
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    let body = r#"{"model":"m","input":"hi"}"#;
    let started = std::time::Instant::now();
    let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        tcp,
        "POST /v1/responses HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer sk-x\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    tcp.read_to_string(&mut reply).unwrap();
    let elapsed = started.elapsed();
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        elapsed >= std::time::Duration::from_millis(400),
        "{elapsed:?}"
    );
}

/// Bad input to the emulator and the stories is a usage error (2) that names it, refused
/// before anything listens or connects: a non-loopback or unparsable `--addr`, an unknown
/// fixture, a script that does not parse (named by its file), a base URL no client can use
/// (a WebSocket URL with a port out of range used to dial the scheme's default port).
#[test]
fn bad_input_to_the_emulator_and_the_stories_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("broken.json");
    std::fs::write(&script, "{\"bogus\": 1}").unwrap();
    let script = script.to_string_lossy().into_owned();
    let cases: [(&[&str], &str); 8] = [
        (
            &["mock", "serve", "--tokens-per-second", "1e-300"],
            "slower than the slowest",
        ),
        (&["mock", "serve", "--addr", "0.0.0.0:0"], "loopback only"),
        (&["mock", "serve", "--addr", "garbage"], "--addr `garbage`"),
        (&["mock", "serve", "--fixture", "nope"], "nope"),
        (
            &["mock", "serve", "--script", &script],
            "broken.json: invalid script",
        ),
        (
            &["api", "direct", "--base-url", "not a url"],
            "invalid base URL",
        ),
        (
            &[
                "api",
                "steer",
                "--base-url",
                "http://127.0.0.1:83686/v1",
                "--timeout",
                "5",
            ],
            "invalid base URL",
        ),
        (
            &["api", "steer", "--base-url", "ftp://x/v1"],
            "invalid base URL",
        ),
    ];
    for (args, says) in cases {
        let output = agentctl()
            .env("OPENAI_API_KEY", "sk-test-usage")
            .args(args)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// `mock serve --steer-window-ms` shapes the echo conversation only: with a script or a
/// fixture it was ignored without a word, and is now refused, exit 2 (the default alone
/// is no conflict).
#[test]
fn mock_serve_refuses_a_steer_window_it_would_ignore() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s.json");
    std::fs::write(&script, "{\"rules\": []}").unwrap();
    let script = script.to_string_lossy().into_owned();
    for with in [["--fixture", "direct"], ["--script", script.as_str()]] {
        let output = agentctl()
            .args(["mock", "serve", "--steer-window-ms", "10"])
            .args(with)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{with:?}: {stderr}");
        assert!(stderr.contains("--steer-window-ms"), "{with:?}: {stderr}");
    }
}

/// `mock serve --help` names every built-in fixture `--fixture` takes (it left out `run`,
/// which the error for an unknown one lists).
#[test]
fn mock_serve_help_names_every_fixture() {
    let refused = agentctl()
        .args(["mock", "serve", "--fixture", "nope"])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let listed = stderr
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(list, _)| list)
        .unwrap_or_else(|| panic!("{stderr}"));
    let help = agentctl()
        .args(["mock", "serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let fixture: String = help
        .split("--fixture <MODE>")
        .nth(1)
        .and_then(|rest| rest.split("\n      --").next())
        .unwrap_or_else(|| panic!("{help}"))
        .to_string();
    for mode in listed.split(", ") {
        assert!(
            fixture
                .split(|c: char| !c.is_ascii_alphanumeric())
                .any(|w| w == mode),
            "`{mode}` is not in the --fixture help: {fixture}"
        );
    }
}

/// A port another process listens on: `mock serve` and `serve` say what to do about it
/// (the hint was "RUST_LOG=debug shows details"), naming the flag that picks the address.
#[test]
fn a_port_in_use_is_said_with_the_flag_that_moves_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("p.db").display());
    for (args, flag) in [
        (vec!["mock", "serve", "--addr", addr.as_str()], "--addr"),
        (
            vec!["--db", db.as_str(), "serve", "--listen", addr.as_str()],
            "--listen",
        ),
    ] {
        let output = agentctl()
            .args(&args)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        let hint = stderr
            .lines()
            .find_map(|l| l.strip_prefix("hint: "))
            .unwrap_or_else(|| panic!("{stderr}"));
        assert!(
            hint.contains(flag) && hint.contains(&addr),
            "{args:?}: {stderr}"
        );
    }
    drop(taken);
}
