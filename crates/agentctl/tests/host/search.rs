//! `agentctl runs search`: a run's model output and tool outputs, found through the history
//! units derived from its journal; `--all` across runs; a second search writes nothing new.

use serde_json::{Value, json};

use crate::host::fresh_db::{self, FreshDb};
use crate::host::*;

fn script() -> String {
    script_by_outputs(&[
        json!([call(
            "c_echo",
            "shell",
            json!({"command": "echo TOOL-OUT-$((40+2))"})
        )]),
        answer("FINAL: the Zebra-Answer is ready"),
    ])
}

fn search(db: &str, args: &[&str]) -> Vec<Value> {
    let o = out(agentctl(db).args(["--json", "runs", "search"]).args(args));
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn search_finds_history(db: FreshDb) {
    let db = db.url();
    let server = emulator(&script()).await;
    let (_g1, ws1) = workspace();
    let first = out(&mut run_cmd(db, &server, &ws1, &["--approval", "auto"]));
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let run1 = only_run(db);

    // The tool's output (computed by the shell, so only the output holds it).
    let hits = search(db, &[&run1, "tool-out-42"]);
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0]["type"], "runs.search.hit");
    assert_eq!(hits[0]["kind"], "tool");
    assert_eq!(hits[0]["tool"], "shell");
    assert_eq!(hits[0]["call_id"], "c_echo");
    assert_eq!(hits[0]["step"], 1);
    assert!(hits[0]["snippet"].as_str().unwrap().contains("TOOL-OUT-42"));
    // The model's text.
    let hits = search(db, &[&run1, "zebra-answer"]);
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0]["kind"], "model");
    assert_eq!(hits[0]["step"], 2);
    assert_eq!(hits[0]["unit"], "step:2");
    // Idempotent catch-up: the same results, and no new units.
    let units = |db: &str| {
        let o = out(agentctl(db).args(["--json", "history", "threads"]));
        text(&o.stdout)
    };
    let before = units(db);
    assert_eq!(search(db, &[&run1, "zebra-answer"]), hits);
    assert_eq!(units(db), before);

    // A second run: --all finds both, newest first.
    let (_g2, ws2) = workspace();
    let second = out(&mut run_cmd(db, &server, &ws2, &["--approval", "auto"]));
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    let all = search(db, &["--all", "zebra-answer"]);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_ne!(all[0]["run_id"], all[1]["run_id"]);
    assert!(all.iter().any(|h| h["run_id"] == run1.as_str()));
    assert_eq!(search(db, &["--all", "zebra-answer"]), all);
    // Human lines: run id, step, kind, snippet.
    let o = out(agentctl(db).args(["runs", "search", &run1, "tool-out-42"]));
    let line = text(&o.stdout);
    assert!(line.starts_with(&run1), "{line}");
    assert!(
        line.contains("step   1") && line.contains("tool shell") && line.contains("TOOL-OUT-42"),
        "{line}"
    );
    // Usage errors.
    assert_eq!(
        out(agentctl(db).args(["runs", "search", &run1]))
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        out(agentctl(db).args(["runs", "search", "--all", &run1, "x"]))
            .status
            .code(),
        Some(2)
    );
}

/// A step whose output holds a tool output no call of the step made is stored without it
/// and found (the whole step used to be refused, on every search, with a warning); so is a
/// run whose thread could be appended to by `history append` before its first search.
async fn odd_steps_and_run_threads_are_searched(db: FreshDb) {
    let db = db.url();
    let orphan = json!({"type": "function_call_output", "call_id": "ghost", "output": "x"});
    let mut items = answer("ZEBRAWORD answer");
    items.as_array_mut().unwrap().push(orphan);
    let server = emulator(&script_by_outputs(&[items])).await;
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(db, &server, &ws, &[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let odd = only_run(db);
    for _ in 0..2 {
        let o = out(agentctl(db).args(["--json", "runs", "search", "--all", "zebraword"]));
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(!text(&o.stderr).contains("unpaired"), "{}", text(&o.stderr));
        let hits: Vec<Value> = text(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert_eq!(hits[0]["run_id"], odd.as_str());
        assert_eq!(hits[0]["unit"], "step:1");
    }

    // A run whose thread `history append` is asked to write before its first search.
    let server = emulator(&script()).await;
    let (_g2, ws2) = workspace();
    let o = out(&mut run_cmd(db, &server, &ws2, &["--approval", "auto"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = out(agentctl(db).args(["--json", "runs", "list"]));
    let fresh = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["run_id"].clone())
        .find(|id| *id != odd.as_str())
        .unwrap();
    let fresh = fresh.as_str().unwrap();
    let fresh_thread = format!("run:{fresh}");
    for note in ["note1", "note2"] {
        let o = out(agentctl(db)
            .args([
                "history",
                "append",
                "--thread",
                &fresh_thread,
                "--unit",
                note,
            ])
            .arg(r#"[{"type":"message","text":"n"}]"#));
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    }
    let hits = search(db, &[fresh, "tool-out-42"]);
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0]["unit"], "call:c_echo");
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: search_finds_history, odd_steps_and_run_threads_are_searched);
