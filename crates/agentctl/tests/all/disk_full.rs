//! `agentctl` when the disk under its database fills up, on the real kernel: the scenario
//! runs in a child process (this test binary, re-run for one ignored test) inside a mount
//! namespace of its own, where its directory is a small tmpfs; there the real `agentctl`
//! runs an agent whose own `shell` call fills the disk (as a runaway build would), so the
//! host meets ENOSPC when it journals the call's end.
//!
//! What a user must see: one line of error saying the disk is full and a hint to resume,
//! exit status 1, no panic; reads (`runs show`) keep working; other writers (`steer`,
//! `resume`) are refused the same way; the journal stays intact; and once space is freed,
//! `resume` carries the run to its end (the call whose end was lost is an indeterminate
//! one, HOST.md resume rule 4).
//!
//! The namespace needs root, or unprivileged user namespaces (CI runs as root): without it
//! the test says `SKIPPED:` on stderr, and fails under `CI=true`, as the PostgreSQL tests
//! do without a server.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::json;

use agent_testkit::small_disk::{child_dir, fill, on_small_disk, remount};

use crate::served;

/// A model that calls `shell` with a command filling the disk, then answers.
fn filling_script() -> String {
    shell_script("dd if=/dev/zero of=../filler bs=64k 2>/dev/null; echo filled")
}

/// A model that calls `shell` with `command`, then answers.
fn shell_script(command: &str) -> String {
    let fill = json!({ "command": command });
    let call = json!({"type": "function_call", "call_id": "c_fill", "name": "shell", "arguments": fill.to_string()});
    let answer = json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "FINAL done"}]});
    json!({"rules": [
        {"when": {"tool_outputs": 0}, "reply": {"items": [call]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": [answer]}},
    ]})
    .to_string()
}

/// `agentctl --db DB args...`, run to its end, with no inherited settings.
fn agentctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .env_remove("AGENTCTL_DB")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RUST_LOG")
        .env("OPENAI_API_KEY", "sk-unused")
        .env("AGENTCTL_CONFIG_DIR", dir.join("config"))
        .arg("--db")
        .arg(dir.join("j.db"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The error lines of a command refused because the disk is full: it says so, it exits 1,
/// and nothing panicked.
fn refused_for_a_full_disk(what: &str, out: &Output) -> String {
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {said}");
    assert!(said.contains("disk is full"), "{what}: {said}");
    assert!(!said.contains("panicked"), "{what}: {said}");
    said
}

/// The events of the journal at `db`, `(seq, kind)`, read with SQLite itself.
fn events(db: &Path) -> Vec<(i64, String)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let mut select = conn
        .prepare("SELECT seq, kind FROM journal_events ORDER BY seq")
        .unwrap();
    select
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_run_that_fills_the_disk_stops_with_a_hint_and_resumes_once_space_is_freed() {
    on_small_disk("disk_full::a_run_on_a_full_disk_child", "8m");
}

#[test]
#[ignore = "child process of a_run_that_fills_the_disk_stops_with_a_hint_and_resumes_once_space_is_freed"]
fn a_run_on_a_full_disk_child() {
    let Some(dir) = child_dir() else { return };
    let scripts = tempfile::tempdir().unwrap();
    let script = scripts.path().join("script.json");
    std::fs::write(&script, filling_script()).unwrap();
    let script = script.to_str().unwrap();
    let ws = dir.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let mock = ["--mock", "--mock-script", script];

    let mut run = vec!["run", "--sandbox", "off", "--approval", "auto"];
    run.extend(mock);
    run.extend(["--workspace", ws.to_str().unwrap(), "fill the disk"]);
    let stopped = agentctl(&dir, &run);
    let said = refused_for_a_full_disk("run", &stopped);
    assert!(
        said.contains("once the database accepts writes again"),
        "{said}"
    );
    let filler = dir.join("filler");
    assert!(filler.exists(), "the tool did not run: {said}");
    let journaled = events(&dir.join("j.db"));
    let run_id = text(&stopped.stdout)
        .lines()
        .chain(said.lines())
        .find_map(|line| {
            let rest = line.split("run ").nth(1)?;
            rest.split_whitespace().next().map(str::to_string)
        })
        .unwrap();
    // The hint names the run it printed when it started.
    assert!(said.contains(&format!("resume {run_id}`")), "{said}");
    assert!(
        journaled.iter().any(|(_, kind)| kind == "tool.started"),
        "{journaled:?}"
    );

    // Reads work on the full disk.
    let shown = agentctl(&dir, &["runs", "show", &run_id]);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    assert!(text(&shown.stdout).contains(&run_id));

    // Writers are refused, saying why, and write nothing.
    let said = refused_for_a_full_disk("steer", &agentctl(&dir, &["steer", &run_id, "hurry"]));
    assert!(said.contains("once it accepts writes again"), "{said}");
    let mut resume = vec!["resume", &run_id];
    resume.extend(mock);
    let refused = agentctl(&dir, &resume);
    let said = refused_for_a_full_disk("resume", &refused);
    assert!(said.contains("resume"), "{said}");
    assert_eq!(events(&dir.join("j.db")), journaled);

    // Space back: the call whose end was lost is indeterminate; denied, the run ends.
    std::fs::remove_file(&filler).unwrap();
    let paused = agentctl(&dir, &resume);
    let said = text(&paused.stderr) + &text(&paused.stdout);
    assert_eq!(paused.status.code(), Some(3), "{said}");
    assert!(said.contains("indeterminate"), "{said}");
    let denied = agentctl(
        &dir,
        &["deny", &run_id, "c_fill", "--reason", "it filled the disk"],
    );
    assert!(denied.status.success(), "{}", text(&denied.stderr));
    let finished = agentctl(&dir, &resume);
    let said = text(&finished.stderr) + &text(&finished.stdout);
    assert_eq!(finished.status.code(), Some(0), "{said}");
    assert!(said.contains("FINAL done"), "{said}");
    let all = events(&dir.join("j.db"));
    assert_eq!(&all[..journaled.len()], journaled.as_slice());
    assert!(
        all.iter().any(|(_, kind)| kind == "run.completed"),
        "{all:?}"
    );
    // The shell call ran once: its one end is the interruption found on resume.
    let ends: Vec<&str> = all
        .iter()
        .map(|(_, kind)| kind.as_str())
        .filter(|kind| {
            kind.starts_with("tool.") && !matches!(*kind, "tool.scheduled" | "tool.started")
        })
        .collect();
    assert_eq!(ends, ["tool.interrupted"], "{all:?}");
}

/// `runs list` on a full disk, right after a run stopped there (the journal's `-shm` file
/// is still there, so the journal opens for writing): listing refreshes each run's row
/// of the derived runs table first, and that write failed the whole listing with
/// `journal database error: database or disk is full`. Reads must not need room.
#[test]
fn runs_list_works_on_a_full_disk() {
    on_small_disk("disk_full::runs_list_on_a_full_disk_child", "8m");
}

#[test]
#[ignore = "child process of runs_list_works_on_a_full_disk"]
fn runs_list_on_a_full_disk_child() {
    let Some(dir) = child_dir() else { return };
    let scripts = tempfile::tempdir().unwrap();
    let script = scripts.path().join("script.json");
    let ws = dir.join("ws");
    std::fs::create_dir(&ws).unwrap();
    // `agentctl run` of `task` in `ws` with the model `script`, unsandboxed and unasked.
    let run = |script: &Path, task: &str| {
        let (script, ws) = (script.to_str().unwrap(), ws.to_str().unwrap());
        let args = [
            "run",
            "--sandbox",
            "off",
            "--approval",
            "auto",
            "--mock",
            "--mock-script",
            script,
            "--workspace",
            ws,
            task,
        ];
        agentctl(&dir, &args)
    };
    // A run that ends before the disk fills, for the search below.
    std::fs::write(&script, shell_script("echo found-after-the-disk-filled")).unwrap();
    let ran = run(&script, "echo before the fill");
    assert!(ran.status.success(), "{}", text(&ran.stderr));
    // Searched once with room left: its history is indexed in the database.
    let searched = agentctl(&dir, &["runs", "search", "--all", "found-after"]);
    assert!(searched.status.success(), "{}", text(&searched.stderr));
    assert!(text(&searched.stdout).contains("found-after-the-disk-filled"));
    // A second run, not searched (its history not indexed) before the disk fills.
    std::fs::write(&script, shell_script("echo second")).unwrap();
    let ran = run(&script, "echo a second time");
    assert!(ran.status.success(), "{}", text(&ran.stderr));
    std::fs::write(&script, filling_script()).unwrap();
    refused_for_a_full_disk("run", &run(&script, "fill the disk"));
    let listed = agentctl(&dir, &["runs", "list"]);
    let said = text(&listed.stderr);
    assert!(listed.status.success(), "{said}");
    assert!(text(&listed.stdout).contains("fill the disk"), "{said}");
    // `runs search` writes its history index into the database, which cannot take the
    // second run's: the run indexed before is searched there, read-only (it holds the hit),
    // and only the two others are derived in memory for the search.
    let found_in_memory = |why: &str| {
        let searched = agentctl(&dir, &["runs", "search", "--all", "found-after"]);
        let said = text(&searched.stderr);
        assert!(searched.status.success(), "{said}");
        assert!(said.contains(why), "{said}");
        assert!(
            said.contains(
                "the history of 2 run(s) not indexed before was derived in memory for this search"
            ),
            "{said}"
        );
        let hits = text(&searched.stdout);
        assert!(
            hits.contains("tool shell") && hits.contains("found-after-the-disk-filled"),
            "{hits}\n{said}"
        );
    };
    found_in_memory("has no room left");
    // An error is said as it would be anywhere, with no note.
    let unknown = agentctl(&dir, &["runs", "search", "no-such-run", "found-after"]);
    let said = text(&unknown.stderr);
    assert_eq!(unknown.status.code(), Some(2), "{said}");
    assert!(said.contains("no-such-run"), "{said}");
    assert!(!said.contains("in memory"), "{said}");
    // The same on a read-only file system.
    remount(&dir, "ro");
    found_in_memory("cannot be written");
    remount(&dir, "rw");
    // A new database on the full disk: the hint names the disk, not `--db`.
    let fresh = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .env_remove("AGENTCTL_DB")
        .env_remove("RUST_LOG")
        .env("AGENTCTL_CONFIG_DIR", dir.join("config"))
        .arg("--db")
        .arg(dir.join("new.db"))
        .args(["runs", "search", "anything"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = text(&fresh.stderr);
    assert!(!fresh.status.success(), "{said}");
    assert!(said.contains("has no room left"), "{said}");
    assert!(!said.contains("check --db"), "{said}");
}

/// `agentctl serve` across a full disk: a write over the API is refused with 503
/// `journal_unavailable` (its one journal latched), reads go on, and once space is back the
/// same server takes writes again (it reopens its journal), as a new CLI process would.
#[test]
fn serve_takes_writes_again_once_the_disk_has_room() {
    on_small_disk("disk_full::serve_on_a_full_disk_child", "8m");
}

#[test]
#[ignore = "child process of serve_takes_writes_again_once_the_disk_has_room"]
fn serve_on_a_full_disk_child() {
    let Some(dir) = child_dir() else { return };
    let ws = dir.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let db = dir.join("j.db");
    let server = served::serve(db.to_str().unwrap(), &dir, &[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        // A request with the server's token: its status and JSON body.
        let answer = |request: reqwest::RequestBuilder| async move {
            let resp = request.bearer_auth(served::TOKEN).send().await.unwrap();
            let status = resp.status().as_u16();
            let body: serde_json::Value = resp.json().await.unwrap();
            (status, body)
        };
        let submit = |prompt: &str| {
            answer(
                client
                    .post(format!("{}/api/v1/runs", server.base))
                    .json(&json!({"prompt": prompt, "workspace": ws})),
            )
        };
        let get = |path: &str| answer(client.get(format!("{}/api/v1{path}", server.base)));
        let (status, body) = submit("before the disk filled").await;
        assert_eq!(status, 201, "{body}");

        let filler = fill(&dir);
        let (status, body) = submit("while the disk is full").await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], "journal_unavailable", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("disk is full"),
            "{body}"
        );
        let (status, body) = get("/runs").await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body.to_string().contains("before the disk filled"),
            "{body}"
        );

        std::fs::remove_file(&filler).unwrap();
        let (status, body) = submit("after space was freed").await;
        assert_eq!(status, 201, "{body}");
        let id = body["run_id"].as_str().unwrap().to_string();
        let (status, body) = get(&format!("/runs/{id}")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["prompt"], "after space was freed", "{body}");
    });
}

/// A file size limit (`prlimit --fsize`, as `ulimit -f` sets) under `run`: the database's
/// writes fail with EFBIG, and `agentctl` says so and exits 1; it was killed by SIGXFSZ in
/// the middle of a commit (exit 153 from a shell). Needs no privilege.
#[test]
fn a_file_size_limit_is_an_error_not_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let out = Command::new("prlimit")
        .arg("--fsize=131072")
        .arg(env!("CARGO_BIN_EXE_agentctl"))
        .env_remove("AGENTCTL_DB")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RUST_LOG")
        .env("OPENAI_API_KEY", "sk-unused")
        .env("AGENTCTL_CONFIG_DIR", dir.path().join("config"))
        .arg("--db")
        .arg(dir.path().join("j.db"))
        .args(["run", "--sandbox", "off", "--approval", "auto", "--mock"])
        .arg("--workspace")
        .arg(&ws)
        .arg("look around and summarise")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = text(&out.stderr);
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(out.status.signal(), None, "killed by a signal: {said}");
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("file size limit"), "{said}");
}
