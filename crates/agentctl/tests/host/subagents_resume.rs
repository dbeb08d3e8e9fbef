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

/// The parent asks for two children that each run one shell command, which asks under
/// `--sandbox off`; each answers what its command printed.
fn two_asking_children() -> String {
    let agents = json!({"agents": [
        {"prompt": "CHILD-A: append a", "instructions": null, "tools": ["shell"]},
        {"prompt": "CHILD-B: append b", "instructions": null, "tools": ["shell"]}]});
    let child = |tag: &str, cmd: &str| {
        [
            json!({"when": {"last_user_contains": tag, "tool_outputs": 0}, "reply": {"items": [
                call(&format!("call_{tag}"), "shell", json!({"command": cmd}))]}}),
            json!({"when": {"last_user_contains": tag, "tool_outputs": 1},
                   "reply": {"items": answer(&format!("{tag} saw {{{{outputs}}}}"))}}),
        ]
    };
    let mut rules: Vec<Value> = child("CHILD-A", "echo a >> effects.txt").into();
    rules.extend(child("CHILD-B", "echo b >> effects.txt"));
    rules.push(json!({"when": {"tool_outputs": 0}, "reply": {"items": [
        call("call_spawn", "spawn_agents", agents)]}}));
    rules.push(
        json!({"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: {{outputs}}")}}),
    );
    json!({"rules": rules}).to_string()
}

/// Off a terminal without `--wait`, children waiting on approvals pause the parent (exit
/// 3), which names each child's run and call with the commands to decide them; decided by
/// the children's ids, `resume` of the parent finishes the call it left open.
async fn a_child_waiting_on_approval_pauses_the_parent(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let server = emulator(&two_asking_children()).await;
    let mut first = run_cmd(
        db,
        &server,
        &ws,
        &["--max-children", "2", "--sandbox", "off"],
    );
    let o = tokio::task::spawn_blocking(move || {
        first
            .output()
            .map(|o| (o.status.code(), text(&o.stderr)))
            .unwrap()
    });
    let (code, stderr) = tokio::time::timeout(std::time::Duration::from_secs(60), o)
        .await
        .expect("the parent waited instead of pausing")
        .unwrap();
    assert_eq!(code, Some(3), "{stderr}");
    let listed = out(agentctl(db).args(["--json", "runs", "list"]));
    let rows: Vec<Value> = text(&listed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let parent = rows[0]["run_id"].as_str().unwrap().to_string();
    let shown = show(db, &parent);
    assert_eq!(shown["status"], "paused", "{shown}");
    let children = shown["children"].as_array().unwrap().clone();
    assert_eq!(children.len(), 2);
    for child in &children {
        let id = child["run_id"].as_str().unwrap();
        // Paused on its approval: waiting for a decision.
        assert_eq!(show(db, id)["status"], "waiting");
        let call = format!("call_CHILD-{}", if child["index"] == 0 { "A" } else { "B" });
        // Which child, which call, and the command that decides it.
        assert!(
            stderr.contains(&format!(
                "sub-agent {id} waits for approval of {call} (shell)"
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!("approve {id} {call} --sha256 ")),
            "{stderr}"
        );
        let verdict = if child["index"] == 0 {
            "approve"
        } else {
            "deny"
        };
        let d = out(agentctl(db).args([verdict, id, &call]));
        assert!(d.status.success(), "{}", text(&d.stderr));
    }
    assert!(
        !ws.join("effects.txt").exists(),
        "nothing ran before approval"
    );
    let r = out(&mut resume_cmd(db, &server, &parent, &[]));
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    let final_text = show(db, &parent)["final_text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(final_text.starts_with("FINAL: "), "{final_text}");
    assert_eq!(
        std::fs::read_to_string(ws.join("effects.txt")).unwrap(),
        "a\n",
        "a approved, b denied"
    );
    let pev = events(db, &parent).await;
    check_invariants(&pev);
    // The call left open was run again, and completed once.
    let completed: Vec<_> = kinds_of(&pev, "tool.completed")
        .into_iter()
        .filter(|e| call_id_of(e) == "call_spawn")
        .collect();
    assert_eq!(completed.len(), 1);
    assert_eq!(kinds_of(&pev, "subagent.spawned").len(), 2);
}

/// `interrupt PARENT` while one child has answered and the other still runs, then `resume
/// PARENT`: the `spawn_agents` call stays open through the interrupt (it is retry-safe), so
/// the resumed parent runs it again, which reuses the finished child's answer and continues
/// the interrupted child. It used to end cancelled: the model never got the first answer and
/// the second child stayed `interrupted` under a completed parent.
async fn an_interrupted_parent_resumes_its_children(db: FreshDb) {
    let db = db.url();
    let agents = json!({"agents": [
        {"prompt": "CHILD-A: answer", "instructions": null, "tools": []},
        {"prompt": "CHILD-B: answer", "instructions": null, "tools": []}]});
    let script = json!({"rules": [
        {"when": {"last_user_contains": "CHILD-A"}, "times": 1,
         "latency": {"first_token_ms": 60_000}, "reply": {"items": answer("A done")}},
        {"when": {"last_user_contains": "CHILD-A"}, "reply": {"items": answer("A done")}},
        {"when": {"last_user_contains": "CHILD-B"}, "reply": {"items": answer("B done")}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [call("call_spawn", "spawn_agents", agents)]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: {{outputs}}")}}]});
    let server = emulator(&script.to_string()).await;
    let (_g, ws) = workspace();
    let mut running = run_cmd(
        db,
        &server,
        &ws,
        &["--approval", "auto", "--max-children", "2"],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    // Until child B has answered (A waits a minute for its first token).
    let runs = || -> Vec<Value> {
        text(&out(agentctl(db).args(["--json", "runs", "list"])).stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let parent = loop {
        let listed = runs();
        let b_done = listed
            .iter()
            .any(|r| r["title"] == "CHILD-B: answer" && r["status"] == "completed");
        if let Some(parent) = listed
            .iter()
            .find(|r| r["parent"].is_null())
            .filter(|_| b_done)
        {
            break parent["run_id"].as_str().unwrap().to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "child B never answered"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let o = out(agentctl(db).args(["interrupt", &parent]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(running.wait().unwrap().code(), Some(130));

    let r = out_within(
        &mut resume_cmd(db, &server, &parent, &[]),
        std::time::Duration::from_secs(60),
    );
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    let answer = text(&r.stdout);
    assert!(
        answer.contains("A done") && answer.contains("B done"),
        "{answer}"
    );
    let listed = runs();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(
        listed.iter().all(|r| r["status"] == "completed"),
        "{listed:?}"
    );
    // B answered once (its answer reused); A was asked again after the interrupt. (The
    // parent's requests name both prompts too, in the call they offer `spawn_agents` for.)
    let asked = |who: &str| {
        server
            .requests()
            .iter()
            .map(|r| r.body.to_string())
            .filter(|body| body.contains(who) && !body.contains("spawn_agents"))
            .count()
    };
    assert_eq!(asked("CHILD-B: answer"), 1);
    assert_eq!(asked("CHILD-A: answer"), 2);
    let pev = events(db, &parent).await;
    check_invariants(&pev);
    assert_eq!(kinds_of(&pev, "subagent.spawned").len(), 2);
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]:
    a_finished_childs_end_is_recorded_once_across_a_crash,
    a_child_waiting_on_approval_pauses_the_parent,
    an_interrupted_parent_resumes_its_children,
    a_grandchild_waiting_on_approval_pauses_the_root
);

/// `--max-depth 2`: a grandchild waiting on an approval pauses its parent, which pauses the
/// root (exit 3), naming the grandchild's run and call with the command that decides it;
/// decided by the grandchild's id, `resume ROOT` finishes the tree. The root used to
/// complete at once, its answer the child's `paused` status, the grandchild waiting for
/// ever.
async fn a_grandchild_waiting_on_approval_pauses_the_root(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let spawn = |prompt: &str, tools: Value| json!({"agents": [{"prompt": prompt, "instructions": null, "tools": tools}]});
    let rules = json!({"rules": [
        {"when": {"last_user_contains": "GRAND", "tool_outputs": 0}, "reply": {"items": [
            call("call_g", "shell", json!({"command": "echo g >> effects.txt"}))]}},
        {"when": {"last_user_contains": "GRAND", "tool_outputs": 1}, "reply": {"items": answer("G done")}},
        {"when": {"last_user_contains": "CHILD", "tool_outputs": 0}, "reply": {"items": [
            call("call_grand", "spawn_agents", spawn("GRAND: dig", json!(["shell"])))]}},
        {"when": {"last_user_contains": "CHILD", "tool_outputs": 1}, "reply": {"items": answer("C saw {{outputs}}")}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [
            call("call_spawn", "spawn_agents", spawn("CHILD: delegate", json!(["spawn_agents", "shell"])))]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: {{outputs}}")}}]});
    let server = emulator(&rules.to_string()).await;
    let o = out_within(
        &mut run_cmd(
            db,
            &server,
            &ws,
            &[
                "--max-children",
                "1",
                "--max-depth",
                "2",
                "--sandbox",
                "off",
            ],
        ),
        std::time::Duration::from_secs(60),
    );
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    let rows: Vec<Value> = text(&out(agentctl(db).args(["--json", "runs", "list"])).stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = |depth: u64| {
        rows.iter()
            .find(|r| r["depth"] == depth)
            .unwrap_or_else(|| panic!("no run at depth {depth}: {rows:?}"))["run_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (root, kid, grand) = (at(0), at(1), at(2));
    assert_eq!(show(db, &root)["status"], "paused");
    assert_eq!(show(db, &grand)["status"], "waiting");
    assert!(
        stderr.contains(&format!("approve {grand} call_g --sha256 ")),
        "{stderr}"
    );
    let pev = events(db, &root).await;
    assert!(
        kinds_of(&pev, "tool.completed")
            .iter()
            .all(|e| call_id_of(e) != "call_spawn"),
        "the root's call stays open"
    );
    let d = out(agentctl(db).args(["approve", &grand, "call_g"]));
    assert!(d.status.success(), "{}", text(&d.stderr));
    let r = out_within(
        &mut resume_cmd(db, &server, &root, &[]),
        std::time::Duration::from_secs(60),
    );
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    let final_text = show(db, &root)["final_text"].as_str().unwrap().to_string();
    assert!(final_text.contains("G done"), "{final_text}");
    for id in [&kid, &grand] {
        assert_eq!(show(db, id)["status"], "completed", "{id}");
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("effects.txt")).unwrap(),
        "g\n"
    );
}

/// Child A reads a file then answers; child B runs a shell command (which asks under
/// `--sandbox off`) then answers.
fn reader_and_asker() -> String {
    let agents = json!({"agents": [
        {"prompt": "CHILD-A: read", "instructions": null, "tools": ["read_file"]},
        {"prompt": "CHILD-B: append b", "instructions": null, "tools": ["shell"]}]});
    json!({"rules": [
        {"when": {"last_user_contains": "CHILD-A", "tool_outputs": 0}, "reply": {"items": [
            call("call_CHILD-A", "read_file", json!({"path": "f.txt"}))]}},
        {"when": {"last_user_contains": "CHILD-A", "tool_outputs": 1}, "reply": {"items": answer("A done")}},
        {"when": {"last_user_contains": "CHILD-B", "tool_outputs": 0}, "reply": {"items": [
            call("call_CHILD-B", "shell", json!({"command": "echo b >> effects.txt"}))]}},
        {"when": {"last_user_contains": "CHILD-B", "tool_outputs": 1}, "reply": {"items": answer("B done")}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [call("call_spawn", "spawn_agents", agents)]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: {{outputs}}")}}]})
    .to_string()
}

/// A parent whose children leave it past its `--max-tokens` while its call holds (child A
/// paused on its share, child B waiting on an approval), then `resume PARENT`: the call
/// goes on with the children it has. Without a higher budget, B's approved call runs and
/// A is reported paused on its budget (the call used to fail, "no sub-agent was started",
/// losing both; and A used to be reported failed); with one, each child gets its part of
/// the new remainder and both answer (they used to keep their first shares).
/// Under `--json`, a parent paused for its children's approvals prints each as an
/// `approval.requested` line under the child's run id: a script decides them from the
/// stream alone (its stderr was the only place that named them), and the parent resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_s_json_stream_names_its_children_s_approvals() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let db = db.as_str();
    let (_g, ws) = workspace();
    let server = emulator(&two_asking_children()).await;
    let mut first = run_cmd(
        db,
        &server,
        &ws,
        &["--max-children", "2", "--sandbox", "off", "--json"],
    );
    let o = tokio::task::spawn_blocking(move || first.output().unwrap())
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let lines: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let parent = lines[0]["thread_id"].as_str().unwrap().to_string();
    let asked: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "approval.requested")
        .collect();
    assert_eq!(asked.len(), 2, "{lines:#?}");
    for request in asked {
        let child = request["run_id"].as_str().unwrap();
        assert_ne!(child, parent);
        assert_eq!(request["tool"], "shell");
        let round = request["round"].to_string();
        let d = out(agentctl(db).args([
            "approve",
            child,
            request["call_id"].as_str().unwrap(),
            "--sha256",
            request["args_sha256"].as_str().unwrap(),
            "--round",
            &round,
        ]));
        assert!(d.status.success(), "{}", text(&d.stderr));
    }
    let r = out(&mut resume_cmd(db, &server, &parent, &[]));
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    let mut effects: Vec<String> = std::fs::read_to_string(ws.join("effects.txt"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    effects.sort();
    assert_eq!(effects, ["a", "b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_past_its_budget_goes_on_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("b.db").display());
    let server = emulator(&reader_and_asker()).await;
    let args = ["--max-children", "2", "--sandbox", "off"];
    // The parent's first step, from a run of its own: each child's share is then 50
    // tokens, less than any model step of theirs.
    let probe = tempfile::tempdir().unwrap();
    let probe_db = format!("sqlite://{}", probe.path().join("p.db").display());
    let (_p, probe_ws) = workspace();
    let o = out(&mut run_cmd(&probe_db, &server, &probe_ws, &args));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let first = kinds_of(
        &events(&probe_db, &only_root(&probe_db)).await,
        "model.completed",
    )[0]
    .payload["usage"]["total_tokens"]
        .as_u64()
        .unwrap();
    let max = (first + 100).to_string();
    let mut seen = std::collections::HashSet::new();
    for raise in [false, true] {
        let (_g, ws) = workspace();
        std::fs::write(ws.join("f.txt"), "f").unwrap();
        let o = out(&mut run_cmd(
            &db,
            &server,
            &ws,
            &[&args[..], &["--max-tokens", &max]].concat(),
        ));
        assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
        let parent = new_root(&db, &mut seen);
        let children = show(&db, &parent)["children"].as_array().unwrap().clone();
        let kid = |i: u64| {
            children.iter().find(|c| c["index"] == i).unwrap()["run_id"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let (a, b) = (kid(0), kid(1));
        assert_eq!(show(&db, &a)["status"], "paused", "A is past its share");
        assert_eq!(show(&db, &b)["status"], "waiting");
        let d = out(agentctl(&db).args(["approve", &b, "call_CHILD-B"]));
        assert!(d.status.success(), "{}", text(&d.stderr));
        let more: &[&str] = if raise {
            &["--max-tokens", "1000000"]
        } else {
            &[]
        };
        let r = out_within(
            &mut resume_cmd(&db, &server, &parent, more),
            std::time::Duration::from_secs(60),
        );
        let pev = events(&db, &parent).await;
        check_invariants(&pev);
        assert!(
            kinds_of(&pev, "tool.failed")
                .iter()
                .all(|e| call_id_of(e) != "call_spawn"),
            "raise={raise}: {}",
            text(&r.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("effects.txt")).unwrap_or_default(),
            "b\n",
            "raise={raise}: B's approved call ran"
        );
        assert_eq!(kinds_of(&pev, "subagent.spawned").len(), 2);
        if raise {
            assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
            let final_text = show(&db, &parent)["final_text"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(
                final_text.contains("A done") && final_text.contains("B done"),
                "{final_text}"
            );
        } else {
            // Both children stopped on their shares, and so does the parent.
            assert_eq!(r.status.code(), Some(3), "{}", text(&r.stderr));
            let done = kinds_of(&pev, "tool.completed")
                .into_iter()
                .find(|e| call_id_of(e) == "call_spawn")
                .expect("the call completed");
            let result: Value = match &done.payload["value"] {
                Value::String(s) => serde_json::from_str(s).unwrap(),
                other => other.clone(),
            };
            for agent in result["agents"].as_array().unwrap() {
                assert_eq!(agent["status"], "paused", "{result}");
                assert!(
                    agent["error"].as_str().unwrap().contains("max_tokens"),
                    "{result}"
                );
            }
        }
    }
}

/// The one run without a parent in `db`.
fn only_root(db: &str) -> String {
    let mut seen = std::collections::HashSet::new();
    new_root(db, &mut seen)
}

/// The run without a parent in `db` not in `seen`, which it joins.
fn new_root(db: &str, seen: &mut std::collections::HashSet<String>) -> String {
    let listed = out(agentctl(db).args(["--json", "runs", "list"]));
    let fresh: Vec<String> = text(&listed.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["parent"].is_null())
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .filter(|id| !seen.contains(id))
        .collect();
    assert_eq!(fresh.len(), 1, "{fresh:?}");
    seen.insert(fresh[0].clone());
    fresh[0].clone()
}
