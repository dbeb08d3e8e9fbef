#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! `agentctl journal ...` against a real SQLite file.

use std::io::{BufRead as _, BufReader};
use std::process::{ChildStdout, Command, Stdio};

use agent_journal::{Journal, NewEvent};
use assert_cmd::cargo::CommandCargoExt as _;
use serde_json::{Value, json};

fn agentctl(db: &str) -> Command {
    let mut cmd = Command::cargo_bin("agentctl").unwrap();
    cmd.env_remove("AGENTCTL_DB").args(["--db", db]);
    cmd
}

async fn seeded() -> (tempfile::TempDir, String, Journal) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("j.db").display());
    let journal = Journal::open(&url).await.unwrap();
    for n in 0..3 {
        journal
            .append(NewEvent::new("t1", "step", json!({ "n": n })))
            .await
            .unwrap();
    }
    journal
        .append(NewEvent::new("t2", "step", json!({})))
        .await
        .unwrap();
    (dir, url, journal)
}

#[tokio::test]
async fn threads_and_replay_print_json_lines() {
    let (_dir, url, _journal) = seeded().await;
    let out = agentctl(&url)
        .args(["--json", "journal", "threads"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let threads: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        threads,
        vec![
            json!({"type": "thread", "thread": "t1"}),
            json!({"type": "thread", "thread": "t2"})
        ]
    );

    let out = agentctl(&url)
        .args([
            "--json", "journal", "replay", "--thread", "t1", "--after", "1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let events: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["payload"]["n"], 1);
    assert_eq!(events[1]["kind"], "step");

    // A negative --after is a number (everything), not an unknown flag.
    let out = agentctl(&url)
        .args([
            "--json", "journal", "replay", "--thread", "t1", "--after", "-5",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 3);
}

#[tokio::test]
async fn tail_follows_new_events() {
    let (_dir, url, journal) = seeded().await;
    let mut child = agentctl(&url)
        .args(["--json", "journal", "tail", "--thread", "t1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for n in 0..3 {
        let event: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(event["payload"]["n"], n);
    }
    journal
        .append(NewEvent::new("t1", "late", json!({ "n": 99 })))
        .await
        .unwrap();
    let event: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(event["kind"], "late");
    // SIGTERM (`kill`, a service manager) ends the follow as Ctrl-C does, exit 0 with what
    // was printed standing; it killed the process (143).
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// A stored payload that is not JSON (the file was edited by hand) ends `tail` with the
/// error, as `replay` does, instead of a warning retried forever.
#[tokio::test]
async fn tail_stops_at_a_corrupt_event() {
    let (dir, url, journal) = seeded().await;
    journal.close().await;
    let conn = rusqlite::Connection::open(dir.path().join("j.db")).unwrap();
    let changed = conn
        .execute(
            "UPDATE journal_events SET payload = '{not json' WHERE thread = 't1' AND kind = 'step' \
             AND seq = (SELECT MAX(seq) FROM journal_events WHERE thread = 't1')",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    let mut child = agentctl(&url)
        .args(["--json", "journal", "tail", "--thread", "t1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A guard against the old endless retry, not a timing assertion.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("corrupt payload"), "{stderr}");
    assert!(!stderr.contains("retrying"), "{stderr}");
    // The good events before it were printed first.
    assert_eq!(printed_ns(&out.stdout), [0, 1], "{stderr}");
}

/// The `n` of each event line of `stdout`.
fn printed_ns(stdout: &[u8]) -> Vec<i64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|line| {
            let event: Value = serde_json::from_str(line).unwrap();
            event["payload"]["n"].as_i64().unwrap()
        })
        .collect()
}

/// `replay` of a thread with a corrupt event in its middle prints the events before it,
/// then fails naming it; nothing after it is printed as if the thread ended there. (The
/// whole page used to fail, so a corrupt event hid every good one read with it.)
#[tokio::test]
async fn replay_prints_the_events_before_a_corrupt_one() {
    let (dir, url, journal) = seeded().await;
    journal.close().await;
    let conn = rusqlite::Connection::open(dir.path().join("j.db")).unwrap();
    let changed = conn
        .execute(
            "UPDATE journal_events SET payload = '{not json' WHERE thread = 't1' AND seq = \
             (SELECT seq FROM journal_events WHERE thread = 't1' ORDER BY seq LIMIT 1 OFFSET 1)",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    let out = agentctl(&url)
        .args(["--json", "journal", "replay", "--thread", "t1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("corrupt payload"), "{stderr}");
    assert_eq!(printed_ns(&out.stdout), [0], "{stderr}");
}

/// A thread name the journal would refuse is a usage error, named before anything opens
/// (`tail` used to wait on it for good, then to fail with exit 1).
#[test]
fn a_thread_name_the_journal_refuses_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("j.db").display());
    let long = "t".repeat(300);
    for (cmd, thread) in [("replay", ""), ("tail", ""), ("replay", long.as_str())] {
        let out = agentctl(&url)
            .args(["journal", cmd, "--thread", thread])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd} {thread:?}: {stderr}");
        assert!(stderr.contains("--thread"), "{stderr}");
    }
    assert!(!dir.path().join("j.db").exists(), "nothing was opened");
}

/// `--db` naming a FIFO is refused at once; SQLite's open waited on it for good.
#[test]
fn a_fifo_as_the_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("j.db");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let url = format!("sqlite://{}", fifo.display());
    for args in [
        &["runs", "list"][..],
        &["journal", "threads"],
        &["history", "search", "--thread", "t", "x"],
    ] {
        let mut child = agentctl(&url)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A guard against the old endless wait, not a timing assertion.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("is not a regular file"), "{stderr}");
    }
}

/// An error written to a stderr nobody reads any more (`2>&1 | true`) keeps its exit code:
/// it used to be a panic's 101.
#[test]
fn an_error_on_a_closed_stderr_keeps_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("j.db").display());
    let mut child = agentctl(&url)
        .args(["runs", "show", "no-such-run"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    assert_eq!(child.wait().unwrap().code(), Some(2));
}

#[test]
fn bad_database_url_is_one_line_and_a_hint() {
    let out = agentctl("mysql://nowhere")
        .args(["journal", "threads"])
        .output()
        .unwrap();
    // A URL no journal understands is a usage error, as the README's exit codes say.
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines[0].starts_with("error: invalid journal URL"),
        "{stderr}"
    );
    assert!(lines[1].starts_with("hint: "), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_file_that_is_no_database_is_named_in_the_hint() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "not a database, just text long enough to be read").unwrap();
    let out = agentctl(notes.to_str().unwrap())
        .args(["journal", "threads"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    // Said once, not once more with SQLite's code.
    assert_eq!(
        stderr.matches("file is not a database").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "hint: {} is not a SQLite database",
            notes.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&notes).unwrap(),
        "not a database, just text long enough to be read",
        "the file is left as it was"
    );
}

/// Journals `count` events carrying `text_len` bytes of text each on thread `t`, runs
/// `--json journal replay` on them, lets `read` take what it wants of stdout and closes it
/// (like `| head`), then requires a quiet success: a reader that went away is no failure.
async fn replay_closed_early(
    name: &str,
    count: usize,
    text_len: usize,
    read: impl FnOnce(ChildStdout),
) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join(name).display());
    let journal = Journal::open(&url).await.unwrap();
    let events = (0..count)
        .map(|n| NewEvent::new("t", "step", json!({ "n": n, "text": "x".repeat(text_len) })))
        .collect();
    journal.append_batch(events).await.unwrap();
    let mut child = agentctl(&url)
        .args(["--json", "journal", "replay", "--thread", "t"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    read(child.stdout.take().unwrap());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_reader_that_stops_early_is_not_an_error() {
    // Far more output than a pipe buffers, so the writer meets the closed pipe.
    replay_closed_early("big.db", 4000, 100, |stdout| {
        let mut first = String::new();
        BufReader::new(stdout).read_line(&mut first).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&first).unwrap()["seq"], 1);
    })
    .await;
}

/// A JSON line longer than stdout's buffer is written by the JSON serialiser itself, so the
/// closed pipe comes back wrapped in a serialisation error; it is still not a failure.
#[tokio::test]
async fn a_reader_that_stops_inside_a_long_json_line_is_not_an_error() {
    replay_closed_early("long.db", 4, 200_000, |mut stdout| {
        let mut first = [0u8; 1];
        std::io::Read::read_exact(&mut stdout, &mut first).unwrap();
        assert_eq!(&first, b"{");
    })
    .await;
}

#[test]
fn database_passwords_stay_out_of_help_and_errors() {
    let mut help = Command::cargo_bin("agentctl").unwrap();
    let out = help
        .env("AGENTCTL_DB", "postgres://u:s3cretpw@127.0.0.1:1/x")
        .arg("--help")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("AGENTCTL_DB"), "{stdout}");
    assert!(!stdout.contains("s3cretpw"), "{stdout}");
    for url in [
        "postgres://u:s3cretpw@127.0.0.1:1/x",
        "postgres://127.0.0.1:1/x?user=u&password=s3cretpw",
    ] {
        let out = agentctl(url).args(["journal", "threads"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
        assert!(!stderr.contains("s3cretpw"), "{stderr}");
    }
}

/// An empty `--db` (or `AGENTCTL_DB=`) is refused naming where it came from: it read as
/// `sqlite://` ("invalid journal URL `sqlite://`"), and `--db ' '` created a database file
/// named ` ` in the current directory.
#[test]
fn an_empty_database_url_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for (db, named) in [("", "--db"), (" ", "--db")] {
        for args in [&["runs", "list"][..], &["memory", "consolidate"]] {
            let out = agentctl(db)
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{db:?} {args:?}: {stderr}");
            assert!(
                stderr.contains(&format!("{named} is empty")),
                "{db:?} {args:?}: {stderr}"
            );
        }
    }
    let out = Command::cargo_bin("agentctl")
        .unwrap()
        .env("AGENTCTL_DB", "")
        .args(["runs", "list"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("AGENTCTL_DB is empty"), "{stderr}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a file was created"
    );
}

/// A database holding one finished `--mock` run, and the run's id; `agentctl` with a
/// private data directory under `dir`.
fn mock_run(dir: &std::path::Path, url: &str, prompt: &str) -> String {
    let out = agentctl(url)
        .env("XDG_DATA_HOME", dir)
        .env("HOME", dir)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .args(["--json", "run", "--mock", prompt])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    first["thread_id"].as_str().unwrap().to_owned()
}

/// Exit status, stdout, stderr and how long `agentctl --db url args` took.
fn timed(url: &str, args: &[&str]) -> (Option<i32>, String, String, std::time::Duration) {
    let started = std::time::Instant::now();
    let out = agentctl(url)
        .env_remove("RUST_LOG")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

/// The commands that only read work while another process holds the SQLite write lock
/// (a host writing, a `sqlite3` shell inside `BEGIN IMMEDIATE`): they used to wait the
/// busy timeout (5 s) and fail with "database is locked". `runs search` derives in memory
/// what it cannot catch up in the file, after a short wait, and says so.
#[test]
fn reads_work_while_another_process_holds_the_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let url = format!("sqlite://{}", path.display());
    let first = mock_run(dir.path(), &url, "look around");
    // The first run caught up in the file's history index.
    let (code, _, stderr, _) = timed(&url, &["runs", "search", "--all", "README"]);
    assert_eq!(code, Some(0), "{stderr}");
    let second = mock_run(dir.path(), &url, "look around again");

    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (code, stdout, stderr, took) = timed(&url, &["runs", "search", "--all", "README"]);
    assert_eq!(code, Some(0), "{stderr}");
    for id in [&first, &second] {
        assert!(stdout.contains(id.as_str()), "{id}: {stdout}");
    }
    assert!(
        stderr.contains("write lock") && stderr.contains("1 run(s)"),
        "{stderr}"
    );
    // Not the busy timeout (5 s) before deriving in memory.
    assert!(took < std::time::Duration::from_millis(4500), "{took:?}");
    let thread = format!("run:{first}");
    for args in [
        &["history", "threads"][..],
        &["history", "search", "--thread", &thread, "README"],
        &["history", "window", "--thread", &thread, "--goal", "g"],
        &["memory", "recall", "--project", "p"],
        &["memory", "evidence", "--project", "p"],
        &["runs", "search", &first, "README"],
    ] {
        let (code, _, stderr, _) = timed(&url, args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
    }
    holder.execute_batch("COMMIT").unwrap();
}

/// A search term over the store's limit is bad input to `runs search` as to `history
/// search`: exit 2, not 1.
#[test]
fn a_search_term_over_the_limit_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("j.db").display());
    let id = mock_run(dir.path(), &url, "look around");
    let term = "a".repeat(agent_context::limits::MAX_TERM_BYTES + 1);
    let thread = format!("run:{id}");
    for args in [
        &["runs", "search", "--all", &term][..],
        &["runs", "search", &id, &term],
        &["history", "search", "--thread", &thread, &term],
    ] {
        let (code, _, stderr, _) = timed(&url, args);
        assert_eq!(code, Some(2), "{:?}: {stderr}", &args[..2]);
        assert!(stderr.contains("1025 bytes"), "{stderr}");
    }
}

/// A term of spaces is a term (`history search` searches it too); only an empty one is
/// refused.
#[test]
fn a_search_term_of_spaces_is_searched() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("j.db").display());
    let id = mock_run(dir.path(), &url, "look around");
    let thread = format!("run:{id}");
    let (code, stdout, stderr, _) = timed(&url, &["runs", "search", &id, " "]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(&id), "{stdout}");
    let (code, stdout, stderr, _) = timed(&url, &["history", "search", "--thread", &thread, " "]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.is_empty());
    let (code, _, stderr, _) = timed(&url, &["runs", "search", &id, ""]);
    assert_eq!(code, Some(2), "{stderr}");
}

/// Items on stdin that are not UTF-8 are bad input, as invalid JSON is: exit 2.
#[test]
fn items_on_stdin_that_are_not_utf8_are_a_usage_error() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("j.db").display());
    for (input, what) in [
        (&b"[{\"type\":\"message\",\"text\":\"\xff\"}]"[..], "UTF-8"),
        (&b"[{\"type\":"[..], "not valid JSON"),
    ] {
        let mut child = agentctl(&url)
            .args(["history", "append", "--thread", "t", "--unit", "u", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(stderr.contains(what), "{stderr}");
    }
}

/// Runs whose history is all in the file's index, but recorded through an earlier journal
/// seq (the runs moved on with events that make no history unit), are searched there under
/// another process's write lock, and the search tries to record them caught up only once:
/// each try waits for the lock (it used to be one wait per run).
#[tokio::test]
async fn a_search_under_a_lock_tries_recording_runs_caught_up_once() {
    const RUNS: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let url = format!("sqlite://{}", path.display());
    let ids: Vec<String> = (0..RUNS)
        .map(|n| mock_run(dir.path(), &url, &format!("look around {n}")))
        .collect();
    let (code, _, stderr, _) = timed(&url, &["runs", "search", "--all", "README"]);
    assert_eq!(code, Some(0), "{stderr}");
    let journal = Journal::open(&url).await.unwrap();
    for id in &ids {
        journal
            .append(NewEvent::new(format!("run:{id}"), "test.marker", json!({})))
            .await
            .unwrap();
    }
    journal.close().await;

    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let out = agentctl(&url)
        .env("RUST_LOG", "agent_host::run::history=debug")
        .args(["runs", "search", "--all", "README"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    holder.execute_batch("COMMIT").unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for id in &ids {
        assert!(stdout.contains(id.as_str()), "{id}: {stdout}");
    }
    // One try (one wait of the catch-up's 500 ms), not one per run.
    assert_eq!(
        stderr.matches("history caught up, not recorded").count(),
        1,
        "{stderr}"
    );
}

/// One run whose journal holds an event that is not JSON (written after the runs were
/// listed, so its row must be read again) no longer fails `runs list` and `runs search
/// --all` for every run: the others are listed and searched, the unreadable one listed as
/// last read, and `runs show` of it still says why.
#[tokio::test]
async fn one_unreadable_run_does_not_hide_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("j.db").display());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut runs = Vec::new();
    for prompt in ["first", "second"] {
        let o = crate::host::out(
            crate::host::agentctl(&url)
                .args(["--json", "run", "--mock", "--workspace"])
                .arg(&ws)
                .arg(prompt),
        );
        assert!(o.status.success(), "{}", crate::host::text(&o.stderr));
        let started: Value =
            serde_json::from_str(crate::host::text(&o.stdout).lines().next().unwrap()).unwrap();
        assert_eq!(started["type"], "thread.started", "{started}");
        runs.push(started["thread_id"].as_str().unwrap().to_string());
    }
    let listed = crate::host::out(crate::host::agentctl(&url).args(["--json", "runs", "list"]));
    assert!(listed.status.success());
    let journal = Journal::open(&url).await.unwrap();
    let broken = format!("run:{}", runs[1]);
    journal
        .append(NewEvent::new(&broken, "note", json!({})))
        .await
        .unwrap();
    journal.close().await;
    let conn = rusqlite::Connection::open(dir.path().join("j.db")).unwrap();
    let changed = conn
        .execute(
            "UPDATE journal_events SET payload = '{not json' WHERE thread = ?1 \
             AND seq = (SELECT MAX(seq) FROM journal_events WHERE thread = ?1)",
            [&broken],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    let o = crate::host::out(crate::host::agentctl(&url).args(["--json", "runs", "list"]));
    let said = crate::host::text(&o.stderr);
    assert!(o.status.success(), "{said}");
    let listed: Vec<String> = crate::host::text(&o.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["run_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        listed.contains(&runs[0]) && listed.contains(&runs[1]),
        "{listed:?}"
    );
    let o = crate::host::out(
        crate::host::agentctl(&url).args(["--json", "runs", "search", "--all", "SUMMARY"]),
    );
    let said = crate::host::text(&o.stderr);
    assert!(o.status.success(), "{said}");
    assert!(
        crate::host::text(&o.stdout).contains(&runs[0]),
        "{}",
        crate::host::text(&o.stdout)
    );
    let o = crate::host::out(crate::host::agentctl(&url).args(["runs", "show", &runs[1]]));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        crate::host::text(&o.stderr).contains("corrupt payload"),
        "{}",
        crate::host::text(&o.stderr)
    );
}
