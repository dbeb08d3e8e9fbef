//! What must never reach stderr or stdout: log lines below `warn` unless `RUST_LOG` asks for
//! them, the API key at any log level, and a database password in any error, log line or
//! help text of the commands that open a database.

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

const PASSWORD: &str = "SECRETPW";

/// Database URLs with [`PASSWORD`] in every place a password can be, all unreachable.
fn secret_urls() -> Vec<String> {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    vec![
        format!("mysql://u:{PASSWORD}@h/x"),
        format!("postgres://u:{PASSWORD}@127.0.0.1:{closed_port}/x"),
        format!("postgresql://u:SEC/RET/{PASSWORD}@127.0.0.1:{closed_port}/x"),
        format!("postgres://u@127.0.0.1:{closed_port}/x?sslmode=disable&password={PASSWORD}"),
        format!("sqlite:///tmp/agentctl-never.db?password={PASSWORD}"),
    ]
}

/// Every command that opens the journal or the context store.
const DB_COMMANDS: &[&[&str]] = &[
    &["history", "search", "--thread", "t", "foo"],
    &["history", "window", "--thread", "t"],
    &["history", "threads"],
    &["history", "append", "--thread", "t", "--unit", "u", "[]"],
    &["memory", "recall", "--project", "p"],
    &[
        "memory",
        "add",
        "--source",
        "s",
        "--project",
        "p",
        "--key",
        "k",
        "--value",
        "v",
    ],
    &["memory", "evidence", "--project", "p"],
    &["memory", "consolidate"],
    &["journal", "threads"],
    &["journal", "replay", "--thread", "t"],
];

fn assert_no_password(what: &str, output: &Output) {
    let (stdout, stderr) = text(output);
    assert!(
        !stdout.contains(PASSWORD) && !stderr.contains(PASSWORD),
        "{what}\nstdout: {stdout}\nstderr: {stderr}"
    );
}

/// The example, exactly: the URL is still shown, with the password masked.
#[test]
fn history_search_masks_the_password_of_an_unsupported_url() {
    let output = agentctl()
        .args(["--db", "mysql://u:SECRETPW@h/x", "history", "search"])
        .args(["--thread", "t", "foo"])
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    // An unknown scheme is a usage error, for `history` as for `journal`.
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("mysql://u:***@h/x"), "{stderr}");
    assert_no_password("history search", &output);
}

/// Errors (and trace logs) of every database command, with the URL from `--db` and from
/// `AGENTCTL_DB`.
#[test]
fn no_database_command_shows_a_password_in_errors_or_logs() {
    for url in secret_urls() {
        for command in DB_COMMANDS {
            let what = format!("{url} {command:?}");
            let output = agentctl()
                .env("RUST_LOG", "trace")
                .args(["--db", &url])
                .args(*command)
                .output()
                .unwrap();
            assert!(!output.status.success(), "{what}");
            assert_no_password(&what, &output);
            let output = agentctl()
                .env("AGENTCTL_DB", &url)
                .args(*command)
                .output()
                .unwrap();
            assert!(!output.status.success(), "{what} (AGENTCTL_DB)");
            assert_no_password(&what, &output);
        }
    }
}

/// Help never shows the database URL (clap would print an env var's value by default).
#[test]
fn help_never_shows_a_password() {
    let url = format!("postgres://u:{PASSWORD}@h/x?password={PASSWORD}");
    let mut helps: Vec<Vec<&str>> = vec![vec![]];
    for command in DB_COMMANDS {
        helps.push(command[..1].to_vec());
        helps.push(command[..2].to_vec());
    }
    for path in helps {
        let output = agentctl()
            .env("AGENTCTL_DB", &url)
            .args(&path)
            .arg("--help")
            .output()
            .unwrap();
        assert!(output.status.success(), "{path:?}");
        assert_no_password(&format!("{path:?} --help"), &output);
        let output = agentctl()
            .args(["--db", &url])
            .args(&path)
            .arg("--help")
            .output()
            .unwrap();
        assert!(output.status.success(), "{path:?}");
        assert_no_password(&format!("--db {path:?} --help"), &output);
    }
}

/// `agentctl mock serve` in `dir` answering every request with HTTP `status` and
/// `message`; the process and its base URL (a line ending in a newline).
fn erring_emulator(
    dir: &std::path::Path,
    status: u16,
    message: &str,
) -> (std::process::Child, String) {
    let script = dir.join(format!("error-{status}.json"));
    let kind = if status >= 500 {
        "server_error"
    } else {
        "invalid_request_error"
    };
    let rules = serde_json::json!({"rules": [{"when": {}, "reply": {"error": {
        "status": status, "message": message, "type": kind}}}]});
    std::fs::write(&script, rules.to_string()).unwrap();
    let mut server = agentctl()
        .args(["mock", "serve", "--script"])
        .arg(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut base_url = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut base_url)
        .unwrap();
    (server, base_url)
}

/// A server that echoes the key in its error message (a proxy quoting the request's
/// header): the run's output, its error and its journal hold `***` instead.
#[test]
fn a_key_the_server_echoes_reaches_no_output_and_no_journal() {
    const KEY: &str = "sk-echoed-by-the-server-91c2";
    let dir = tempfile::tempdir().unwrap();
    let error = format!("bad key {KEY} here");
    let (mut server, base_url) = erring_emulator(dir.path(), 400, &error);
    let db = dir.path().join("runs.db");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let db_arg = format!("sqlite://{}", db.display());
    let mut seen = String::new();
    for json in [false, true] {
        let mut cmd = agentctl();
        cmd.env("OPENAI_API_KEY", KEY)
            .env("HOME", dir.path())
            .args(["--db", &db_arg]);
        if json {
            cmd.arg("--json");
        }
        let output = cmd
            .args(["run", "--base-url", base_url.trim(), "--workspace"])
            .arg(&ws)
            .arg("hi")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let (stdout, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
        seen.push_str(&stdout);
        seen.push_str(&stderr);
    }
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(seen.contains("bad key *** here"), "{seen}");
    assert!(!seen.contains(KEY), "{seen}");
    let journal = std::fs::read(&db).unwrap();
    let wal = std::fs::read(dir.path().join("runs.db-wal")).unwrap_or_default();
    for bytes in [journal, wal] {
        assert!(
            !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "the key is in the database"
        );
    }
}

/// A server error the client retries, quoting the key: the log lines that say so (at the
/// default level) and the failure hold `***`, not the key.
#[test]
fn a_retried_error_quoting_the_key_is_logged_masked() {
    const KEY: &str = "sk-echoed-by-the-server-4d7e";
    let dir = tempfile::tempdir().unwrap();
    let message = format!("upstream failed, auth was Bearer {KEY}");
    let (mut server, base_url) = erring_emulator(dir.path(), 500, &message);
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let output = agentctl()
        .env("OPENAI_API_KEY", KEY)
        .env("HOME", dir.path())
        .env_remove("RUST_LOG")
        .args([
            "--db",
            &format!("sqlite://{}", dir.path().join("r.db").display()),
        ])
        .args(["run", "--base-url", base_url.trim(), "--workspace"])
        .arg(&ws)
        .arg("hi")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let (stdout, stderr) = text(&output);
    assert!(
        stderr.contains("retrying") && stderr.contains("auth was Bearer ***"),
        "{stderr}"
    );
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY),
        "{stdout}\n{stderr}"
    );
}

/// A password that is also a word of the URL or of the message (`postgres`, `data`) is
/// masked where it stands alone, not inside the URL's other parts or other words, and the
/// constant hint is printed as written.
#[test]
fn a_password_that_is_a_common_word_garbles_nothing_else() {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres:postgres@127.0.0.1:{closed_port}/x");
    let output = agentctl()
        .args(["--db", &url, "journal", "threads"])
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "postgres://postgres:***@127.0.0.1:{closed_port}/x"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "\nhint: check --db / AGENTCTL_DB (sqlite://PATH, sqlite::memory:, postgres://USER:PASS@HOST/DB)\n"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains(":postgres@"), "{stderr}");
}

/// The reviewer's server message: a database that does not exist, on the test server
/// (`AGENTCTL_TEST_PG_URL`); the password is still nowhere, the message reads as sent.
#[test]
fn a_missing_postgres_database_reads_as_the_server_said() {
    let Ok(base) = std::env::var("AGENTCTL_TEST_PG_URL") else {
        eprintln!("AGENTCTL_TEST_PG_URL not set: skipped");
        return;
    };
    let Some(password) = agent_redact::passwords(&base)
        .first()
        .map(|p| p.to_string())
    else {
        eprintln!("AGENTCTL_TEST_PG_URL has no password: skipped");
        return;
    };
    let Some((server, _)) = base.rsplit_once('/') else {
        panic!("AGENTCTL_TEST_PG_URL has no database: {base}");
    };
    let url = format!("{server}/nonexistent_db_{}", std::process::id());
    let output = agentctl()
        .args(["--db", &url, "journal", "threads"])
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(stderr.contains(&agent_redact::redact_url(&url)), "{stderr}");
    assert!(stderr.contains("database"), "{stderr}");
    assert!(!stderr.contains(&format!(":{password}@")), "{stderr}");
    assert!(!stderr.contains("***://"), "{stderr}");
}
