//! Sub-agents across a parent's stops: a child that ended before the parent was killed is
//! recorded once; a child waiting on an approval pauses a parent that runs off a terminal
//! without `--wait`, naming the child's run and call.

use std::os::unix::process::ExitStatusExt as _;

use serde_json::{Value, json};

use crate::host::fresh_db::{self, FreshDb};
use crate::host::*;

/// The parent asks for two children that use no tool: `CHILD-A` answers after `a_ms`,
/// `CHILD-B` at once; the parent answers `FINAL: ` and what the tool returned.
fn two_answers(a_ms: u64) -> String {
    let agents = json!({"agents": [
        {"prompt": "CHILD-A: answer", "instructions": null, "tools": []},
        {"prompt": "CHILD-B: answer", "instructions": null, "tools": []}]});
    json!({"rules": [
        {"when": {"last_user_contains": "CHILD-A"}, "latency": {"first_token_ms": a_ms},
         "reply": {"items": answer("A done")}},
        {"when": {"last_user_contains": "CHILD-B"}, "reply": {"items": answer("B done")}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [call("call_spawn", "spawn_agents", agents)]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: {{outputs}}")}}]})
    .to_string()
}

/// The `subagent.ended` events of `parent`'s journal, by child run.
async fn ends(db: &str, parent: &str) -> std::collections::HashMap<String, Vec<Value>> {
    let mut by_child = std::collections::HashMap::<String, Vec<Value>>::new();
    for e in kinds_of(&events(db, parent).await, "subagent.ended") {
        let child = e.payload["child_run_id"].as_str().unwrap().to_string();
        by_child.entry(child).or_default().push(e.payload.clone());
    }
    by_child
}

/// The parent is killed after one child's end is journaled in it and before the other's;
/// the resumed parent reads the finished child again (which journaled its turn's end after
/// the answer the parent first recorded) and records its end no second time.
async fn a_finished_childs_end_is_recorded_once_across_a_crash(db: FreshDb) {
    let db = db.url();
    let server = emulator(&two_answers(1500)).await;
    let mut seen = std::collections::HashSet::new();
    let mut crashed = None;
    for k in 1..60 {
        let (guard, ws) = workspace();
        let o = out(run_cmd(
            db,
            &server,
            &ws,
            &["--approval", "auto", "--max-children", "2"],
        )
        .env("AGENTCTL_TEST_CRASH_AFTER_EVENTS", k.to_string()));
        let listed = out(agentctl(db).args(["--json", "runs", "list"]));
        let parent = text(&listed.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["parent"].is_null())
            .map(|r| r["run_id"].as_str().unwrap().to_string())
            .find(|id| !seen.contains(id))
            .unwrap();
        seen.insert(parent.clone());
        assert_eq!(o.status.signal(), Some(9), "k={k}: {}", text(&o.stderr));
        let ended = ends(db, &parent).await;
        if ended.len() == 1 {
            crashed = Some((parent, ended.into_keys().next().unwrap(), guard));
            break;
        }
    }
    let (parent, first, _ws) = crashed.expect("no crash fell between the children's ends");
    let r = out(&mut resume_cmd(db, &server, &parent, &[]));
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    let ended = ends(db, &parent).await;
    assert_eq!(ended.len(), 2, "{ended:?}");
    for (child, records) in &ended {
        assert_eq!(records.len(), 1, "child {child} ended {records:?}");
        assert_eq!(records[0]["status"], "completed");
    }
    assert!(ended.contains_key(&first));
    // `runs events`: each child's item completes once.
    let shown = out(agentctl(db).args(["runs", "events", &parent]));
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    for child in ended.keys() {
        let completed = text(&shown.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["type"] == "item.completed" && l["item"]["run_id"] == json!(child))
            .count();
        assert_eq!(completed, 1, "{child}: {}", text(&shown.stdout));
    }
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]:
    a_finished_childs_end_is_recorded_once_across_a_crash
);
