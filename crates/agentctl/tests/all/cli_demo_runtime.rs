#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! `agentctl demo runtime|orchestrate|gui` end to end, on a temp SQLite file.

use crate::support;

use serde_json::Value;

use support::{agentctl, one_json, stdout_ok, temp_db};

fn kinds(report: &Value) -> Vec<String> {
    report["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn demo_runtime_tells_the_the_demo_story_and_runs_twice_on_one_db() {
    let (_dir, db) = temp_db("demo.db");
    let mut turns = Vec::new();
    for _ in 0..2 {
        let out = stdout_ok(agentctl(&db).args(["demo", "runtime", "--json"]));
        let r = one_json(&out);
        assert_eq!(r["thread"], "demo");
        assert!(
            r["rejected_commit"]
                .as_str()
                .unwrap()
                .contains("revalidate first")
        );
        assert_eq!(r["committed_revision"], 1);
        let results = r["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        for res in results {
            assert_eq!(res["ok"], true);
            assert_eq!(res["stale"], true, "launched before the steer");
        }
        assert_eq!(results[0]["call_id"], "call-docs");
        assert_eq!(results[1]["call_id"], "call-tests");
        let kinds = kinds(&r);
        assert_eq!(kinds.first().map(String::as_str), Some("turn.started"));
        assert_eq!(kinds.last().map(String::as_str), Some("turn.completed"));
        for k in ["independent.work", "steer.accepted", "proposal.committed"] {
            assert_eq!(
                kinds.iter().filter(|x| *x == k).count(),
                1,
                "{k} in {kinds:?}"
            );
        }
        assert_eq!(kinds.iter().filter(|x| *x == "tool.scheduled").count(), 2);
        assert_eq!(kinds.iter().filter(|x| *x == "tool.completed").count(), 2);
        // Independent work was journaled while the tools ran.
        let work = kinds.iter().position(|k| k == "independent.work").unwrap();
        let first_done = kinds.iter().position(|k| k == "tool.completed").unwrap();
        assert!(work < first_done, "{kinds:?}");
        // The committed proposal is the revalidated one, at revision 1.
        let commit = r["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "proposal.committed")
            .unwrap();
        assert_eq!(commit["payload"]["revision"], 1);
        assert!(r["elapsed_s"].as_f64().unwrap() > 0.0);
        turns.push(r["turn"].as_str().unwrap().to_string());
    }
    assert_ne!(turns[0], turns[1], "each run is its own turn");
    // The whole thread holds both runs.
    let out = agentctl(&db)
        .args(["journal", "replay", "--thread", "demo", "--json"])
        .output()
        .unwrap();
    if out.status.success() {
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.matches("turn.completed").count(), 2);
    }
}

#[test]
fn demo_runtime_human_output_prints_the_refusal_results_replay_and_time() {
    let (_dir, db) = temp_db("demo.db");
    let out = stdout_ok(agentctl(&db).args(["demo", "runtime"]));
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("旧方案被拒绝: proposal predates user update; revalidate first"),
        "{text}"
    );
    assert!(text.contains("\"stale\": true"));
    assert!(text.contains("steer.accepted"));
    assert!(text.contains("elapsed="));
}

#[test]
fn demo_orchestrate_is_partial_with_one_finding_and_one_failure() {
    let (_dir, db) = temp_db("demo.db");
    let out = stdout_ok(agentctl(&db).args(["demo", "orchestrate", "--json"]));
    let r = one_json(&out);
    assert_eq!(r["status"], "partial");
    assert_eq!(r["findings"].as_array().unwrap().len(), 1);
    assert_eq!(r["findings"][0]["file"], "api.py");
    assert_eq!(r["failures"].as_array().unwrap().len(), 1);
    assert_eq!(r["failures"][0]["input"], "unknown");
    assert_eq!(r["failures"][0]["error"], "missing fixture: unknown");
}

#[test]
fn demo_gui_verifies_the_final_state() {
    let (_dir, db) = temp_db("demo.db");
    let out = stdout_ok(agentctl(&db).args(["demo", "gui", "--json"]));
    let r = one_json(&out);
    assert_eq!(r["verified"], true);
    assert_eq!(r["final_state"]["filters_open"], true);
    assert_eq!(r["final_state"]["query"], "penguin");
    assert_eq!(
        r["actions"],
        serde_json::json!(["open_filters", "type_penguin"])
    );
    let out = stdout_ok(agentctl(&db).args(["demo", "gui"]));
    assert!(
        String::from_utf8(out)
            .unwrap()
            .contains("verified: {\"filters_open\":true,\"query\":\"penguin\"}")
    );
}

/// Demo runs side by side on one database share the `demo` thread; each reports its own
/// turn's events only (they used to include the others').
#[test]
fn demo_runtimes_side_by_side_report_their_own_turns() {
    let (_dir, db) = temp_db("demo.db");
    // Each run is created first, then all started: they overlap on the thread.
    let runs: Vec<std::process::Child> = (0..3)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_agentctl"))
                .env_remove("AGENTCTL_DB")
                .args(["--db", &db, "demo", "runtime", "--json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for run in runs {
        let out = run.wait_with_output().unwrap();
        assert!(out.status.success());
        let r = one_json(&out.stdout);
        let turn = r["turn_id"]
            .as_str()
            .or(r["turn"].as_str())
            .unwrap()
            .to_owned();
        let events = r["events"].as_array().unwrap();
        assert!(!events.is_empty());
        for e in events {
            assert_eq!(e["payload"]["turn_id"], turn.as_str(), "{e}");
        }
        assert_eq!(kinds(&r).first().map(String::as_str), Some("turn.started"));
    }
}
