//! A journal written before the typed event model (`fixtures/journal-v1`, made by
//! `make.sh` with the agentctl of commit f0efe80) reads, shows and resumes as it did.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use super::host::{agentctl, emulator, out, show, text};

const COMPLETED: &str = "01a23f1b-78c7-7733-b224-d50ee820e20e";
const PAUSED: &str = "01a23f1b-7914-726f-9bf1-96a566c18a42";
/// The workspace the fixture's runs recorded (make.sh made it and removed it).
const WORKSPACE: &str = "/tmp/agentctl-fixture-v1-ws";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/journal-v1")
}

/// A copy of the fixture journal (the fixture itself is never written).
fn copy() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    std::fs::copy(fixture().join("journal.db"), &db).unwrap();
    (dir, format!("sqlite://{}", db.display()))
}

fn lines(bytes: &[u8]) -> Vec<Value> {
    text(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn an_old_journal_prints_the_same_event_lines() {
    let (_dir, db) = copy();
    for run in [COMPLETED, PAUSED] {
        let o = out(agentctl(&db).args(["runs", "events", run]));
        assert!(o.status.success(), "{}", text(&o.stderr));
        let before = std::fs::read(fixture().join(format!("{run}.events.jsonl"))).unwrap();
        // Line for line and byte for byte: the shapes scripts parse did not move. Fields
        // added since, at the end of their line, are taken out first: `round` of
        // `approval.requested` (the forty-first session).
        let now: Vec<String> = text(&o.stdout)
            .lines()
            .map(|line| {
                let value: Value = serde_json::from_str(line).unwrap();
                match value["round"].as_u64() {
                    Some(round) if value["type"] == "approval.requested" => {
                        let added = format!(",\"round\":{round}}}");
                        assert!(line.ends_with(&added), "{line}");
                        format!("{}}}", &line[..line.len() - added.len()])
                    }
                    _ => line.to_string(),
                }
            })
            .collect();
        assert_eq!(now.join("\n") + "\n", text(&before), "run {run}");
    }
}

#[test]
fn an_old_journal_shows_its_runs_in_the_status_model() {
    let (_dir, db) = copy();
    let done = show(&db, COMPLETED);
    assert_eq!(done["status"], "completed");
    assert_eq!(done["steps"], 5);
    assert!(done["final_text"].as_str().unwrap().len() > 10, "{done}");
    let paused = show(&db, PAUSED);
    // It paused for a decision on its first shell call: that is `waiting` now.
    assert_eq!(paused["status"], "waiting", "{paused}");
    assert_eq!(paused["detail"], "approval");
    let pending = paused["pending_approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["call_id"], "call_a");
    assert_eq!(pending[0]["reason"], "policy");
    let o = out(agentctl(&db).args(["--json", "runs", "list"]));
    let rows = lines(&o.stdout);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter()
            .any(|r| r["run_id"] == PAUSED && r["status"] == "waiting")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_paused_run_resumes_to_its_end_with_its_steer() {
    let (_dir, db) = copy();
    let script = std::fs::read_to_string(fixture().join("../responses/host-crash.json")).unwrap();
    let server = emulator(&script).await;
    std::fs::create_dir_all(WORKSPACE).unwrap();
    let _ = std::fs::remove_file(Path::new(WORKSPACE).join("lines.txt"));
    let o = out(agentctl(&db).args([
        "approve",
        PAUSED,
        "call_a",
        "--sha256",
        "9949d741f53c4d982a420cb78fe206ccc22f1af42074d4a835ff0582cabc6dc9",
    ]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = out(agentctl(&db).args(["resume", PAUSED, "--base-url", &server.base_url()]));
    let stderr = text(&o.stderr);
    // The later calls ask again under the run's recorded policy: approve them as they come.
    let mut o = o;
    for _ in 0..4 {
        if o.status.code() != Some(3) {
            break;
        }
        for call in show(&db, PAUSED)["pending_approvals"].as_array().unwrap() {
            let id = call["call_id"].as_str().unwrap();
            let d = out(agentctl(&db).args(["approve", PAUSED, id]));
            assert!(d.status.success(), "{}", text(&d.stderr));
        }
        o = out(agentctl(&db).args(["resume", PAUSED, "--base-url", &server.base_url()]));
    }
    assert_eq!(o.status.code(), Some(0), "{stderr}\n{}", text(&o.stderr));
    let done = show(&db, PAUSED);
    assert_eq!(done["status"], "completed");
    assert_eq!(done["final_text"], "FINAL: three lines and a file");
    // Each side-effecting call ran once, the first one included (b and c run together).
    let written = std::fs::read_to_string(Path::new(WORKSPACE).join("lines.txt")).unwrap();
    let mut effects: Vec<&str> = written.lines().collect();
    effects.sort_unstable();
    assert_eq!(effects, ["a", "b", "c"]);
    // The steer requested before the change was applied by the new code.
    let o = out(agentctl(&db).args(["runs", "events", PAUSED]));
    let applied: Vec<Value> = lines(&o.stdout)
        .into_iter()
        .filter(|l| l["type"] == "steer.applied")
        .collect();
    assert_eq!(applied.len(), 1, "{}", text(&o.stdout));
    let _ = std::fs::remove_dir_all(WORKSPACE);
}

/// An archived journal (a read-only file in a read-only folder) can be inspected by a user
/// who cannot write it: the reading commands open it read-only. Run as `nobody`, since file
/// modes do not stop root (CI runs as root).
#[test]
fn an_archived_journal_is_read_by_a_user_who_cannot_write_it() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("archive");
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("journal.db");
    std::fs::copy(fixture().join("journal.db"), &db).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let url = format!("sqlite://{}", db.display());
    // A copy of the binary `nobody` can reach, wherever the checkout lives.
    let bin = top.path().join("agentctl");
    std::fs::copy(env!("CARGO_BIN_EXE_agentctl"), &bin).unwrap();
    let as_nobody = |args: &[&str]| {
        let mut cmd = std::process::Command::new(&bin);
        cmd.env_remove("AGENTCTL_DB")
            .args(["--db", &url])
            .args(args)
            .env("HOME", top.path())
            .stdin(Stdio::null())
            .uid(65534)
            .gid(65534);
        out(&mut cmd)
    };
    let o = as_nobody(&["--json", "runs", "list"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(lines(&o.stdout).len(), 2);
    let o = as_nobody(&["--json", "runs", "show", PAUSED]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = as_nobody(&["journal", "threads"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains(COMPLETED));
    // Nothing was written: no WAL or shared-memory file appeared beside it.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["journal.db"]);
}
