//! Durable sub-agents (`spawn_agents`): children as runs of their own, created once,
//! driven concurrently, their answers or failures returned to the parent; limits; a SIGKILL
//! at every journal boundary of a parent with two children.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt as _;

use serde_json::{Value, json};

use crate::host::fresh_db::{self, FreshDb};
use crate::host::*;

/// The parent asks for two children (`CHILD-A`, `CHILD-B`), each running one shell command
/// (`a_cmd`, `b_cmd`), answering `A done` / `B done`; the parent answers `FINAL: ` and what
/// the tool returned. Keyed on the last user message and the number of tool outputs, so a
/// resumed run gets the same answers.
fn script(a_cmd: &str, b_cmd: &str, b_fails: bool) -> String {
    let child = |tag: &str, cmd: &str, done: &str| {
        vec![
            json!({"when": {"last_user_contains": tag, "tool_outputs": 0}, "reply": {"items": [
                call(&format!("call_{tag}"), "shell", json!({"command": cmd}))]}}),
            json!({"when": {"last_user_contains": tag, "tool_outputs": 1}, "reply": {"items": answer(done)}}),
        ]
    };
    let mut rules = child("CHILD-A", a_cmd, "A done");
    if b_fails {
        rules.push(
            json!({"when": {"last_user_contains": "CHILD-B"}, "reply": {"error": {
            "status": 400, "message": "child B refused", "type": "invalid_request_error"}}}),
        );
    } else {
        rules.extend(child("CHILD-B", b_cmd, "B done"));
    }
    let agents = json!({"agents": [
        {"prompt": "CHILD-A: append a", "instructions": "be brief", "tools": ["shell"]},
        {"prompt": "CHILD-B: append b", "instructions": null, "tools": null}]});
    rules.push(json!({"when": {"tool_outputs": 0}, "reply": {"items": [
        call("call_spawn", "spawn_agents", agents)]}}));
    rules.push(
        json!({"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: {{outputs}}")}}),
    );
    json!({"rules": rules}).to_string()
}

/// Every run of the database, by whether it has a parent.
async fn runs(db: &str) -> (Vec<String>, Vec<(String, Value)>) {
    let listed = out(agentctl(db).args(["--json", "runs", "list"]));
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let (mut roots, mut children) = (Vec::new(), Vec::new());
    for line in text(&listed.stdout).lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        let id = row["run_id"].as_str().unwrap().to_string();
        let created = events(db, &id).await;
        let created = kinds_of(&created, "run.created");
        assert_eq!(created.len(), 1, "run {id} created {} times", created.len());
        match created[0].payload.get("parent") {
            Some(parent) => children.push((id, parent.clone())),
            None => roots.push(id),
        }
    }
    (roots, children)
}

fn file_lines(path: &std::path::Path, line: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == line)
        .count()
}

async fn two_children_answer_concurrently(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    // Each command waits for the other's mark: run one after the other, they would not
    // both see it (and say `alone`).
    let wait_for = |me: &str, other: &str| {
        format!(
            "touch {me}.ready; for i in $(seq 1 300); do [ -f {other}.ready ] && break; sleep 0.05; done; \
             if [ -f {other}.ready ]; then echo {me} >> effects.txt; else echo {me}-alone >> effects.txt; fi"
        )
    };
    let server = emulator(&script(&wait_for("a", "b"), &wait_for("b", "a"), false)).await;
    let o = out(&mut run_cmd(
        db,
        &server,
        &ws,
        &[
            "--json",
            "--approval",
            "auto",
            "--max-children",
            "2",
            "--sandbox",
            "off",
        ],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(file_lines(&ws.join("effects.txt"), "a"), 1);
    assert_eq!(
        file_lines(&ws.join("effects.txt"), "b"),
        1,
        "the children ran one after the other"
    );
    let (roots, children) = runs(db).await;
    assert_eq!(roots.len(), 1);
    assert_eq!(children.len(), 2);
    let parent = &roots[0];
    for (child, link) in &children {
        assert_eq!(link["run_id"], json!(parent));
        assert_eq!(link["call_id"], "call_spawn");
        let shown = show(db, child);
        assert_eq!(shown["status"], "completed", "{shown}");
        let ev = events(db, child).await;
        check_invariants(&ev);
        let spec = &kinds_of(&ev, "run.created")[0].payload;
        let tools: Vec<&str> = spec["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert!(
            !tools.contains(&"spawn_agents"),
            "a child at the depth limit cannot spawn: {tools:?}"
        );
        // Inherited.
        assert_eq!(spec["approval"], "auto");
        assert_eq!(
            spec["workspace"].as_str(),
            Some(ws.canonicalize().unwrap().to_str().unwrap())
        );
        if link["index"] == 0 {
            assert_eq!(tools, ["shell"], "child A narrowed its tools");
            assert_eq!(spec["instructions"], "be brief");
        } else {
            assert!(
                tools.contains(&"read_file") && tools.contains(&"shell"),
                "{tools:?}"
            );
        }
    }
    let shown = show(db, parent);
    assert_eq!(shown["status"], "completed");
    let final_text = shown["final_text"].as_str().unwrap();
    assert!(final_text.starts_with("FINAL: "), "{final_text}");
    assert!(
        final_text.contains("A done") && final_text.contains("B done"),
        "{final_text}"
    );
    // The parent's tokens include its children's.
    let pev = events(db, parent).await;
    check_invariants(&pev);
    let own: u64 = kinds_of(&pev, "model.completed")
        .iter()
        .map(|e| e.payload["usage"]["total_tokens"].as_u64().unwrap())
        .sum();
    let mut kids = 0;
    for (child, _) in &children {
        kids += kinds_of(&events(db, child).await, "model.completed")
            .iter()
            .map(|e| e.payload["usage"]["total_tokens"].as_u64().unwrap())
            .sum::<u64>();
    }
    assert!(kids > 0);
    let done = kinds_of(&pev, "run.completed")[0];
    assert_eq!(
        done.payload["usage"]["total_tokens"].as_u64().unwrap(),
        own + kids
    );
    assert_eq!(kinds_of(&pev, "subagent.spawned").len(), 2);
    assert_eq!(kinds_of(&pev, "subagent.ended").len(), 2);
    // `--json`: one `sub_agent` item per child, started then completed with its answer.
    let lines: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let items = |kind: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["type"] == kind && l["item"]["type"] == "sub_agent")
            .map(|l| &l["item"])
            .collect()
    };
    assert_eq!(items("item.started").len(), 2, "{lines:?}");
    let completed = items("item.completed");
    assert_eq!(completed.len(), 2);
    for item in completed {
        assert_eq!(item["status"], "completed");
        assert!(children.iter().any(|(id, _)| item["run_id"] == json!(id)));
        let answer = item["answer"].as_str().unwrap();
        assert!(answer == "A done" || answer == "B done", "{item}");
    }
}

async fn a_failed_child_is_a_partial_result(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let server = emulator(&script("echo a >> effects.txt", "", true)).await;
    let o = out(&mut run_cmd(
        db,
        &server,
        &ws,
        &[
            "--approval",
            "auto",
            "--max-children",
            "2",
            "--sandbox",
            "off",
        ],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let (roots, children) = runs(db).await;
    let shown = show(db, &roots[0]);
    assert_eq!(shown["status"], "completed");
    let pev = events(db, &roots[0]).await;
    let result = kinds_of(&pev, "tool.completed")[0].payload["value"].clone();
    let result: Value = match result {
        Value::String(s) => serde_json::from_str(&s).unwrap(),
        other => other,
    };
    let agents = result["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2, "{result}");
    assert_eq!(agents[0]["status"], "completed");
    assert_eq!(agents[0]["answer"], "A done");
    assert_eq!(agents[1]["status"], "paused", "{result}");
    assert!(
        agents[1]["error"]
            .as_str()
            .unwrap()
            .contains("child B refused"),
        "{result}"
    );
    assert_eq!(file_lines(&ws.join("effects.txt"), "a"), 1);
    assert_eq!(children.len(), 2);
}

async fn limits_are_enforced(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let ask = |agents: Value| {
        json!({"rules": [
        {"when": {"tool_outputs": 0}, "reply": {"items": [call("call_spawn", "spawn_agents", agents)]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: {{outputs}}")}}]})
    .to_string()
    };
    let child = |tools: Value| json!({"prompt": "CHILD", "instructions": null, "tools": tools});
    // Three children where one is allowed; a child asking for the spawn tool at the depth
    // limit; a child asking for a tool its parent does not have.
    let mut seen = std::collections::HashSet::new();
    for (agents, refusal) in [
        (
            json!({"agents": [child(json!(null)), child(json!(null)), child(json!(null))]}),
            "at most 1",
        ),
        (
            json!({"agents": [child(json!(["spawn_agents"]))]}),
            "cannot spawn",
        ),
        (
            json!({"agents": [child(json!(["rm_rf"]))]}),
            "not one of your tools",
        ),
    ] {
        let server = emulator(&ask(agents)).await;
        let o = out(&mut run_cmd(
            db,
            &server,
            &ws,
            &["--approval", "auto", "--max-children", "1"],
        ));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let (roots, children) = runs(db).await;
        assert!(children.is_empty(), "a refused call creates no child");
        let fresh: Vec<&String> = roots.iter().filter(|r| !seen.contains(*r)).collect();
        assert_eq!(fresh.len(), 1);
        let parent = fresh[0].clone();
        seen.insert(parent.clone());
        let pev = events(db, &parent).await;
        assert_eq!(
            kinds_of(&pev, "tool.refused").len(),
            1,
            "refused before it runs"
        );
        let final_text = show(db, &parent)["final_text"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(final_text.contains(refusal), "{refusal}: {final_text}");
    }
    // Without --max-children no run is offered the tool.
    let server = emulator(&script_by_outputs(&[answer("FINAL: plain")])).await;
    let o = out(&mut run_cmd(db, &server, &ws, &["--approval", "auto"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let tools = last_request(&server)["tools"].clone();
    assert!(!tools.to_string().contains("spawn_agents"), "{tools}");
}

async fn children_share_the_token_budget(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let server = emulator(&script(
        "echo a >> effects.txt",
        "echo b >> effects.txt",
        false,
    ))
    .await;
    let o = out(&mut run_cmd(
        db,
        &server,
        &ws,
        &[
            "--approval",
            "auto",
            "--max-children",
            "2",
            "--sandbox",
            "off",
            "--max-tokens",
            "100000",
        ],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let (roots, children) = runs(db).await;
    let pev = events(db, &roots[0]).await;
    let used = kinds_of(&pev, "model.completed")[0].payload["usage"]["total_tokens"]
        .as_u64()
        .unwrap();
    for (child, _) in &children {
        let ev = events(db, child).await;
        let budget = &kinds_of(&ev, "run.created")[0].payload["budgets"];
        assert_eq!(
            budget["max_tokens"].as_u64(),
            Some((100_000 - used) / 2),
            "{budget}"
        );
    }
}

/// A parent whose first step already went past its `--max-tokens` starts no child: the
/// call fails with why, the parent pauses for budget, and a resume with more lets the model
/// go on. It used to create children with a 0-token budget, paused for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_with_no_tokens_left_starts_no_child() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("b.db").display());
    let (_g, ws) = workspace();
    let server = emulator(&script("echo a", "echo b", false)).await;
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &[
            "--approval",
            "auto",
            "--max-children",
            "2",
            "--max-tokens",
            "10",
        ],
    ));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("max_tokens"),
        "{}",
        text(&o.stderr)
    );
    let (roots, children) = runs(&db).await;
    assert!(children.is_empty(), "{children:?}");
    let pev = events(&db, &roots[0]).await;
    assert!(kinds_of(&pev, "subagent.spawned").is_empty());
    let failed = kinds_of(&pev, "tool.failed");
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0]
            .payload
            .to_string()
            .contains("no sub-agent was started"),
        "{}",
        failed[0].payload
    );
    let r = out(&mut resume_cmd(
        &db,
        &server,
        &roots[0],
        &["--max-tokens", "100000"],
    ));
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    assert!(runs(&db).await.1.is_empty());
}

/// Two `spawn_agents` calls of one step: child A's shell call asks (so its call holds
/// and the parent pauses), child B answers after 1.5 s. The calls share what the step
/// left: each child gets half (each used to get all of it). While B runs, the held drive
/// waits for it without spinning: it used to wake at once, over and over (a journal read
/// each time), as its wait was on the cancellation the hold had fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_spawn_calls_of_one_step_share_the_budget_and_a_hold_waits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("b.db").display());
    let (_g, ws) = workspace();
    let one = |prompt: &str, tools: Value| json!({"agents": [{"prompt": prompt, "instructions": null, "tools": tools}]});
    let rules = json!({"rules": [
        {"when": {"last_user_contains": "CHILD-A"}, "reply": {"items": [
            call("call_CHILD-A", "shell", json!({"command": "echo a >> effects.txt"}))]}},
        {"when": {"last_user_contains": "CHILD-B"}, "latency": {"first_token_ms": 1500},
         "reply": {"items": answer("B done")}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [
            call("call_hold", "spawn_agents", one("CHILD-A: append a", json!(["shell"]))),
            call("call_slow", "spawn_agents", one("CHILD-B: answer", json!([])))]}},
        {"when": {"tool_outputs": 2}, "reply": {"items": answer("FINAL: {{outputs}}")}}]});
    let server = emulator(&rules.to_string()).await;
    let o = out_within(
        run_cmd(
            &db,
            &server,
            &ws,
            &[
                "--max-children",
                "1",
                "--sandbox",
                "off",
                "--max-tokens",
                "1000000",
            ],
        )
        .env("RUST_LOG", "agent_host::run::driver::held=debug"),
        std::time::Duration::from_secs(60),
    );
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    let waits = stderr
        .lines()
        .filter(|l| l.contains("waiting for the step's other calls"))
        .count();
    assert!(
        (1..10).contains(&waits),
        "the held drive woke {waits} times while B ran"
    );
    let (roots, children) = runs(&db).await;
    let pev = events(&db, &roots[0]).await;
    let used = kinds_of(&pev, "model.completed")[0].payload["usage"]["total_tokens"]
        .as_u64()
        .unwrap();
    assert_eq!(children.len(), 2);
    for (child, _) in &children {
        let ev = events(&db, child).await;
        let budget = &kinds_of(&ev, "run.created")[0].payload["budgets"];
        assert_eq!(
            budget["max_tokens"].as_u64(),
            Some((1_000_000 - used) / 2),
            "{budget}"
        );
    }
}

/// Three children answering 1.5 MB each: the call's outcome keeps a part of each answer
/// (the whole within the tool result cap), saying where the rest is, and is journaled. It
/// used to be over the journal's event limit: the call failed and the model saw nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_answers_of_children_are_cut_to_fit() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("b.db").display());
    let (_g, ws) = workspace();
    let big = "x".repeat(1_500_000);
    let kid = |tag: &str| json!({"prompt": format!("CHILD-{tag}: answer"), "instructions": null, "tools": []});
    let rules = json!({"rules": [
        {"when": {"last_user_contains": "CHILD-"}, "reply": {"items": answer(&big)}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [
            call("call_spawn", "spawn_agents", json!({"agents": [kid("A"), kid("B"), kid("C")]}))]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL")}}]});
    let server = emulator(&rules.to_string()).await;
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &["--approval", "auto", "--max-children", "3"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let (roots, children) = runs(&db).await;
    let pev = events(&db, &roots[0]).await;
    let done = kinds_of(&pev, "tool.completed");
    assert_eq!(done.len(), 1, "the call's outcome was journaled");
    let result: Value = match &done[0].payload["value"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        other => other.clone(),
    };
    let agents = result["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 3);
    let mut total = 0;
    for agent in agents {
        let answer = agent["answer"].as_str().unwrap();
        total += answer.len();
        let id = agent["run_id"].as_str().unwrap();
        assert!(children.iter().any(|(c, _)| c == id));
        assert!(
            answer.ends_with(&format!("`agentctl runs show {id}` shows all of it ...]")),
            "{}",
            &answer[answer.len().saturating_sub(200)..]
        );
    }
    assert!(total < 300 * 1024, "{total}");
}

/// `--approval ask` asks before `spawn_agents` too ("every call"): off a terminal the run
/// pauses on it, no child started; approved, the resumed run spawns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_ask_asks_before_spawning() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("b.db").display());
    let (_g, ws) = workspace();
    let agents =
        json!({"agents": [{"prompt": "CHILD-A: answer", "instructions": null, "tools": []}]});
    let rules = json!({"rules": [
        {"when": {"last_user_contains": "CHILD-A"}, "reply": {"items": answer("A done")}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [call("call_spawn", "spawn_agents", agents)]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: {{outputs}}")}}]});
    let server = emulator(&rules.to_string()).await;
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &["--approval", "ask", "--max-children", "1"],
    ));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let (roots, children) = runs(&db).await;
    assert!(children.is_empty(), "{children:?}");
    let shown = show(&db, &roots[0]);
    assert_eq!(
        shown["pending_approvals"][0]["call_id"], "call_spawn",
        "{shown}"
    );
    let d = out(agentctl(&db).args(["approve", &roots[0], "call_spawn"]));
    assert!(d.status.success(), "{}", text(&d.stderr));
    let r = out(&mut resume_cmd(&db, &server, &roots[0], &[]));
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    let final_text = show(&db, &roots[0])["final_text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(final_text.contains("A done"), "{final_text}");
}

/// A compaction's tokens count before the step it precedes: a run that the compaction
/// takes past its `--max-tokens` pauses instead of asking for the step (it used to ask,
/// and run the step's calls). Children rely on it: each stops at the first step boundary
/// past its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_past_the_budget_pauses_before_the_step() {
    let script = json!({"rules": [
        {"when": {"endpoint": "responses", "input_has_type": "compaction"},
         "reply": {"items": answer("FINAL: done")}},
        {"when": {"endpoint": "responses", "tool_outputs": 0},
         "reply": {"items": [call("c1", "list_dir", json!({}))]}},
        {"when": {"endpoint": "responses"}, "reply": {"items": answer("FINAL: done")}}]})
    .to_string();
    let server = emulator(&script).await;
    let dir = tempfile::tempdir().unwrap();
    // The whole run once: its first step's tokens, and its compaction's.
    let whole = format!("sqlite://{}", dir.path().join("whole.db").display());
    let (_w, ws) = workspace();
    let o = out(&mut run_cmd(&whole, &server, &ws, &["--compact-at", "1"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let ev = events(&whole, &only_run(&whole)).await;
    let first = kinds_of(&ev, "model.completed")[0].payload["usage"]["total_tokens"]
        .as_u64()
        .unwrap();
    let compacted = kinds_of(&ev, "context.compacted")[0].payload["usage"]["total_tokens"]
        .as_u64()
        .unwrap();
    assert!(compacted > 10, "{compacted}");
    // Room left after the first step, none after the compaction.
    let max = (first + compacted / 2).to_string();
    let db = format!("sqlite://{}", dir.path().join("b.db").display());
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &["--compact-at", "1", "--max-tokens", &max],
    ));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let ev = events(&db, &only_run(&db)).await;
    assert_eq!(kinds_of(&ev, "context.compacted").len(), 1);
    assert_eq!(
        kinds_of(&ev, "model.requested").len(),
        1,
        "step 2 was asked for"
    );
    let paused = kinds_of(&ev, "run.paused");
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].payload["reason"], "max_tokens");
}

/// The parent of the only tree in the database, once it exists.
async fn wait_for_parent(db: &str, child: &mut std::process::Child) -> String {
    loop {
        let (roots, _) = runs(db).await;
        if let Some(root) = roots.first() {
            return root.clone();
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it was listed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn a_childs_approval_is_decided_by_its_own_id(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let server = emulator(&script(
        "echo a >> effects.txt",
        "echo b >> effects.txt",
        false,
    ))
    .await;
    // No --approval: under `--sandbox off` the children's shell calls ask, and with
    // `--wait` the run waits for their decisions (without, it pauses: `subagents_resume`).
    let mut run = run_cmd(
        db,
        &server,
        &ws,
        &["--max-children", "2", "--sandbox", "off", "--wait"],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let parent = wait_for_parent(db, &mut run).await;
    let children = loop {
        let shown = show(db, &parent);
        let children = shown["children"].as_array().cloned().unwrap_or_default();
        let pending: usize = children
            .iter()
            .map(|c| c["pending_approvals"].as_array().unwrap().len())
            .sum();
        if children.len() == 2 && pending == 2 {
            break children;
        }
        assert!(run.try_wait().unwrap().is_none(), "the run ended: {shown}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    // `runs list` shows the tree.
    let listed = out(agentctl(db).args(["--json", "runs", "list"]));
    let rows: Vec<Value> = text(&listed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows[0]["run_id"], json!(parent));
    assert_eq!(rows[0]["depth"], 0);
    for row in &rows[1..] {
        assert_eq!(row["parent"], json!(parent), "{row}");
        assert_eq!(row["depth"], 1);
        assert_eq!(row["status"], "waiting");
    }
    let human = text(&out(agentctl(db).args(["runs", "list"])).stdout);
    assert_eq!(
        human.lines().filter(|l| l.starts_with("  ")).count(),
        2,
        "{human}"
    );
    for child in &children {
        assert_eq!(child["status"], "waiting");
        let id = child["run_id"].as_str().unwrap();
        let call = child["pending_approvals"][0]["call_id"].as_str().unwrap();
        let verdict = if child["index"] == 0 {
            "approve"
        } else {
            "deny"
        };
        if child["index"] == 0 {
            // A steer reaches a child by its own id too.
            let st = out(agentctl(db).args(["steer", id, "CHILD-A: steered by the child's id"]));
            assert!(st.status.success(), "{}", text(&st.stderr));
        }
        let d = out(agentctl(db).args([verdict, id, call]));
        assert!(d.status.success(), "{}", text(&d.stderr));
    }
    let o = run.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(file_lines(&ws.join("effects.txt"), "a"), 1);
    assert_eq!(file_lines(&ws.join("effects.txt"), "b"), 0, "b was denied");
    let shown = show(db, &parent);
    assert_eq!(shown["status"], "completed");
    for child in shown["children"].as_array().unwrap() {
        assert_eq!(child["status"], "completed");
        assert!(child["pending_approvals"].as_array().unwrap().is_empty());
        let ev = events(db, child["run_id"].as_str().unwrap()).await;
        let applied = kinds_of(&ev, "steer.applied").len();
        assert_eq!(applied, usize::from(child["index"] == 0), "{child}");
    }
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.body.to_string().contains("steered by the child's id")),
        "the steer reached the child's model"
    );
}

async fn interrupting_the_parent_interrupts_its_children(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let long = |me: &str| format!("touch started_{me}; sleep 60; echo {me} >> effects.txt");
    let server = emulator(&script(&long("a"), &long("b"), false)).await;
    let mut run = spawn_two_child_parent(db, &server, &ws);
    let parent = wait_for_parent(db, &mut run).await;
    while !(ws.join("started_a").exists() && ws.join("started_b").exists()) {
        assert!(run.try_wait().unwrap().is_none(), "the run ended early");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let i = out(agentctl(db).args(["interrupt", &parent]));
    assert!(i.status.success(), "{}", text(&i.stderr));
    let o = run.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o.stderr));
    assert!(
        !ws.join("effects.txt").exists(),
        "the children's commands were killed"
    );
    let shown = show(db, &parent);
    assert_eq!(shown["status"], "interrupted");
    let children = shown["children"].as_array().unwrap();
    assert_eq!(children.len(), 2);
    for child in children {
        assert_eq!(child["status"], "interrupted", "{child}");
        let ev = events(db, child["run_id"].as_str().unwrap()).await;
        check_invariants(&ev);
        assert_eq!(kinds_of(&ev, "run.interrupted").len(), 1);
    }
    // Resumed, the parent goes on (its model is told the call was cancelled).
    let o = out(&mut resume_cmd(db, &server, &parent, &[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(show(db, &parent)["status"], "completed");
}

/// `agentctl worker` named `name`, its output in `dir`.
fn worker(db: &str, dir: &std::path::Path, name: &str, concurrency: &str) -> std::process::Child {
    agentctl(db)
        .args([
            "--json",
            "worker",
            "--name",
            name,
            "--lease-ttl",
            "1",
            "--poll",
            "0.1",
        ])
        .args(["--concurrency", concurrency])
        .stdout(std::fs::File::create(dir.join(format!("{name}.jsonl"))).unwrap())
        .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap())
        .spawn()
        .unwrap()
}

/// A submitted parent's children are claimed by any worker; the worker driving them is
/// killed while their second model step streams; another takes them over; the parent (on
/// its own worker all along) finishes.
async fn a_childs_worker_is_killed_and_another_takes_over(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let logs = tempfile::tempdir().unwrap();
    // The first request of each child's second step stalls (its worker is killed then).
    let mut rules: Vec<Value> = Vec::new();
    for (tag, line) in [("CHILD-A", "a"), ("CHILD-B", "b")] {
        rules.push(json!({"when": {"last_user_contains": tag, "tool_outputs": 0}, "reply": {"items": [
            call(&format!("call_{tag}"), "shell", json!({"command": format!("echo {line} >> effects.txt")}))]}}));
        rules.push(
            json!({"when": {"last_user_contains": tag, "tool_outputs": 1}, "times": 1,
            "fault": {"after_events": 1, "kind": "stall"},
            "reply": {"items": answer(&format!("{} done", &line.to_uppercase()))}}),
        );
        rules.push(
            json!({"when": {"last_user_contains": tag, "tool_outputs": 1},
            "reply": {"items": answer(&format!("{} done", &line.to_uppercase()))}}),
        );
    }
    let agents = json!({"agents": [
        {"prompt": "CHILD-A: append a", "instructions": null, "tools": ["shell"]},
        {"prompt": "CHILD-B: append b", "instructions": null, "tools": ["shell"]}]});
    rules.push(json!({"when": {"tool_outputs": 0}, "reply": {"items": [call("call_spawn", "spawn_agents", agents)]}}));
    rules.push(
        json!({"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: {{outputs}}")}}),
    );
    let server = emulator(&json!({"rules": rules}).to_string()).await;
    let o = out(agentctl(db)
        .args([
            "submit",
            "--base-url",
            &server.base_url(),
            "--approval",
            "auto",
            "--sandbox",
            "off",
        ])
        .args(["--max-children", "2", "--workspace"])
        .arg(&ws)
        .arg("PARENT: fan out"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let parent = text(&o.stdout).trim().to_string();
    // The parent's worker has room for the parent alone.
    let mut p = worker(db, logs.path(), "wp", "1");
    let children = loop {
        let (_, children) = runs(db).await;
        if children.len() == 2 {
            break children;
        }
        assert!(
            p.try_wait().unwrap().is_none(),
            "the parent's worker exited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let ids: Vec<String> = children.iter().map(|(id, _)| id.clone()).collect();
    for (_, link) in &children {
        assert_eq!(link["run_id"], json!(parent));
    }
    let mut c1 = worker(db, logs.path(), "wc1", "2");
    // Both children are in their second step, which stalls.
    loop {
        let mut stalled = 0;
        for id in &ids {
            let ev = events(db, id).await;
            if kinds_of(&ev, "model.requested")
                .iter()
                .any(|e| e.payload["step"] == 2)
            {
                stalled += 1;
            }
        }
        if stalled == 2 {
            break;
        }
        assert!(
            c1.try_wait().unwrap().is_none(),
            "the children's worker exited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    c1.kill().unwrap();
    c1.wait().unwrap();
    let mut c2 = worker(db, logs.path(), "wc2", "2");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while show(db, &parent)["status"] != "completed" {
        assert!(
            std::time::Instant::now() < deadline,
            "the parent did not finish: {}",
            show(db, &parent)
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for w in [&mut p, &mut c2] {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    let final_text = show(db, &parent)["final_text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        final_text.contains("A done") && final_text.contains("B done"),
        "{final_text}"
    );
    assert_eq!(file_lines(&ws.join("effects.txt"), "a"), 1);
    assert_eq!(file_lines(&ws.join("effects.txt"), "b"), 1);
    for id in &ids {
        let ev = events(db, id).await;
        check_invariants(&ev);
        let claims: Vec<i64> = kinds_of(&ev, "run.resumed")
            .iter()
            .map(|e| e.payload["epoch"].as_i64().unwrap())
            .collect();
        assert!(
            claims.len() >= 2 && claims.windows(2).all(|w| w[0] < w[1]),
            "{id}: claims {claims:?}"
        );
        assert_eq!(kinds_of(&ev, "model.completed").len(), 2);
    }
    let pev = events(db, &parent).await;
    check_invariants(&pev);
    assert_eq!(
        kinds_of(&pev, "run.resumed").len(),
        1,
        "the parent's worker drove it throughout"
    );
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]:
    two_children_answer_concurrently,
    a_failed_child_is_a_partial_result,
    limits_are_enforced,
    children_share_the_token_budget,
    a_childs_approval_is_decided_by_its_own_id,
    interrupting_the_parent_interrupts_its_children,
    a_deeper_tree_when_the_depth_allows_it,
    interrupting_a_child_by_its_id,
    a_childs_worker_is_killed_and_another_takes_over,
    interrupting_a_worker_parent_withdraws_its_queued_child,
    resuming_a_worker_parent_continues_its_interrupted_children,
    a_child_interrupted_alone_stays_so_when_its_parent_is_taken_over,
    crash_at_every_boundary
);

/// `agentctl submit` of a parent that may spawn two children (`--sandbox off`, `extra`),
/// its emulator `server`, in `ws`; the parent's id.
fn submit_parent(
    db: &str,
    server: &agent_responses_mock::MockServer,
    ws: &std::path::Path,
    extra: &[&str],
) -> String {
    let o = out(agentctl(db)
        .args([
            "submit",
            "--base-url",
            &server.base_url(),
            "--sandbox",
            "off",
        ])
        .args(extra)
        .args(["--max-children", "2", "--workspace"])
        .arg(ws)
        .arg("PARENT: fan out"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout).trim().to_string()
}

/// Polls `runs show` of `run` until `done` holds of it (or fails after `secs`).
async fn show_until(db: &str, run: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let shown = show(db, run);
        if done(&shown) {
            return shown;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{run} never got there: {shown}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The children of `shown` (a parent's `runs show`), by index.
fn children_of(shown: &Value) -> Vec<Value> {
    let mut children = shown["children"].as_array().cloned().unwrap_or_default();
    children.sort_by_key(|c| c["index"].as_u64());
    children
}

/// A worker-driven parent interrupted while one child runs and the other is still in the
/// workers' queue: the queued one is withdrawn (`run.interrupted`, its lease closed), so no
/// worker runs it afterwards, as `interrupt` of a queued run does.
async fn interrupting_a_worker_parent_withdraws_its_queued_child(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let logs = tempfile::tempdir().unwrap();
    let kid = |me: &str| format!("touch started_{me}; sleep 4; echo kid >> kids.txt");
    let server = emulator(&script(&kid("a"), &kid("b"), false)).await;
    let parent = submit_parent(db, &server, &ws, &["--approval", "auto"]);
    // Room for the parent and one child: the other child waits in the queue.
    let mut w = worker(db, logs.path(), "w", "2");
    let started = |ws: &std::path::Path| {
        ["a", "b"]
            .iter()
            .filter(|me| ws.join(format!("started_{me}")).exists())
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while started(&ws) == 0 {
        assert!(w.try_wait().unwrap().is_none(), "the worker exited");
        assert!(
            std::time::Instant::now() < deadline,
            "no child started: {}",
            show(db, &parent)
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let shown = show(db, &parent);
    let statuses: Vec<Value> = children_of(&shown)
        .iter()
        .map(|c| c["status"].clone())
        .collect();
    assert!(
        statuses.contains(&json!("running")) && statuses.contains(&json!("queued")),
        "one child runs, the other waits: {shown}"
    );
    let i = out(agentctl(db).args(["interrupt", &parent]));
    assert!(i.status.success(), "{}", text(&i.stderr));
    let shown = show_until(db, &parent, 30, |shown| {
        shown["status"] == "interrupted"
            && children_of(shown)
                .iter()
                .all(|c| c["status"] == "interrupted")
    })
    .await;
    // Long enough for the worker, its slots free again, to claim a child still queued
    // (it polls every 0.1 s) and for that child's command to start.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(w.try_wait().unwrap().is_none(), "the worker exited");
    w.kill().unwrap();
    w.wait().unwrap();
    assert_eq!(started(&ws), 1, "the queued child never ran");
    assert_eq!(file_lines(&ws.join("kids.txt"), "kid"), 0);
    let children = children_of(&shown);
    assert_eq!(children.len(), 2);
    let mut stepped = 0;
    for child in &children {
        let id = child["run_id"].as_str().unwrap();
        assert_eq!(show(db, id)["status"], "interrupted", "{child}");
        let ev = events(db, id).await;
        check_invariants(&ev);
        assert_eq!(kinds_of(&ev, "run.interrupted").len(), 1, "{id}");
        // The queued child was withdrawn (or, claimed as the interrupt came, stopped by its
        // worker before its first step): it never asked the model anything.
        stepped += usize::from(!kinds_of(&ev, "model.requested").is_empty());
    }
    assert_eq!(stepped, 1, "only the running child took a step");
    let pev = events(db, &parent).await;
    check_invariants(&pev);
    assert!(kinds_of(&pev, "run.completed").is_empty());
    // Nothing of the tree is left for the workers.
    let listed = out(agentctl(db).args(["--json", "runs", "list"]));
    for line in text(&listed.stdout).lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        assert_eq!(row["claimable"], false, "{row}");
    }
}

/// `POST /api/v1/runs/ID/…` to `agentctl serve` with `body`; the status.
async fn api_post(s: &crate::served::Served, path: &str, body: Value) -> reqwest::StatusCode {
    reqwest::Client::new()
        .post(format!("{}/api/v1/runs/{path}", s.base))
        .bearer_auth(crate::served::TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap()
        .status()
}

/// A worker-driven parent interrupted while its children wait on approvals, the calls then
/// approved, and the parent resumed (`POST /resume`: requeued for the workers): its call
/// runs again and continues the interrupted children (each requeued), whose commands run
/// once; the parent answers with both children completed, never `interrupted`.
async fn resuming_a_worker_parent_continues_its_interrupted_children(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let dir = tempfile::tempdir().unwrap();
    let server = emulator(&script("echo a >> kids.txt", "echo b >> kids.txt", false)).await;
    let s = crate::served::serve(
        db,
        dir.path(),
        &["--worker", "3", "--base-url", &server.base_url()],
    );
    // No --approval: under `--sandbox off` each child's shell call asks.
    let parent = submit_parent(db, &server, &ws, &[]);
    let shown = show_until(db, &parent, 60, |shown| {
        let children = children_of(shown);
        children.len() == 2
            && children.iter().all(|c| {
                c["status"] == "waiting" && c["pending_approvals"].as_array().unwrap().len() == 1
            })
    })
    .await;
    let children = children_of(&shown);
    let status = api_post(&s, &format!("{parent}/interrupt"), json!({})).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED);
    show_until(db, &parent, 30, |shown| {
        shown["status"] == "interrupted"
            && children_of(shown)
                .iter()
                .all(|c| c["status"] == "interrupted")
    })
    .await;
    for child in &children {
        let id = child["run_id"].as_str().unwrap();
        let call = child["pending_approvals"][0]["call_id"].as_str().unwrap();
        let d = out(agentctl(db).args(["approve", id, call]));
        assert!(d.status.success(), "{}", text(&d.stderr));
    }
    assert_eq!(file_lines(&ws.join("kids.txt"), "a"), 0);
    let status = api_post(&s, &format!("{parent}/resume"), json!({})).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED);
    let shown = show_until(db, &parent, 60, |shown| {
        shown["status"] != "queued" && shown["status"] != "running"
    })
    .await;
    drop(s);
    assert_eq!(shown["status"], "completed", "{shown}");
    let final_text = shown["final_text"].as_str().unwrap();
    assert!(
        final_text.contains("A done") && final_text.contains("B done"),
        "{final_text}"
    );
    assert!(!final_text.contains("interrupted"), "{final_text}");
    assert_eq!(file_lines(&ws.join("kids.txt"), "a"), 1);
    assert_eq!(file_lines(&ws.join("kids.txt"), "b"), 1);
    for child in &children {
        let id = child["run_id"].as_str().unwrap();
        assert_eq!(show(db, id)["status"], "completed", "{child}");
        let ev = events(db, id).await;
        check_invariants(&ev);
        assert_eq!(kinds_of(&ev, "run.requeued").len(), 1, "{id}");
        assert_eq!(kinds_of(&ev, "run.created").len(), 1, "{id}");
    }
    let pev = events(db, &parent).await;
    check_invariants(&pev);
    assert_eq!(kinds_of(&pev, "run.requeued").len(), 1);
}

/// `interrupt CHILD` of a worker-driven parent's child A (the parent records its end and
/// waits on B), then the parent's worker killed (`kill -9`): the worker that takes the
/// parent over runs its `spawn_agents` call again, which reports A as it was stopped,
/// not requeued; the parent answers with B's answer and A interrupted. A came back (it
/// was requeued and asked for its approval again), as if the parent had stopped it.
async fn a_child_interrupted_alone_stays_so_when_its_parent_is_taken_over(db: FreshDb) {
    use crate::workers::start_worker;
    let db = db.url();
    let (_g, ws) = workspace();
    let logs = tempfile::tempdir().unwrap();
    let server = emulator(&script("echo a >> kids.txt", "echo b >> kids.txt", false)).await;
    // No --approval: under `--sandbox off` each child's shell call asks.
    let parent = submit_parent(db, &server, &ws, &[]);
    let mut workers = [
        start_worker(db, logs.path(), "w1", "2", &["--concurrency", "3"]),
        start_worker(db, logs.path(), "w2", "2", &["--concurrency", "3"]),
    ];
    let shown = show_until(db, &parent, 60, |shown| {
        let children = children_of(shown);
        children.len() == 2
            && children.iter().all(|c| {
                c["status"] == "waiting" && c["pending_approvals"].as_array().unwrap().len() == 1
            })
    })
    .await;
    let children = children_of(&shown);
    let child_a = children[0]["run_id"].as_str().unwrap().to_string();
    let child_b = children[1]["run_id"].as_str().unwrap().to_string();
    let call_b = children[1]["pending_approvals"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    let i = out(agentctl(db).args(["interrupt", &child_a]));
    assert!(i.status.success(), "{}", text(&i.stderr));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !kinds_of(&events(db, &parent).await, "subagent.ended")
        .iter()
        .any(|e| e.payload["index"] == 0 && e.payload["status"] == "interrupted")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the parent never recorded A's end"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let driver = workers
        .iter()
        .position(|w| {
            w.lines()
                .iter()
                .any(|l| l["type"] == "claimed" && l["run_id"] == parent.as_str())
        })
        .unwrap();
    workers[driver].signal("KILL");
    let _ = workers[driver].child.wait();
    let heir = &workers[1 - driver];
    heir.wait_for("claimed", Some(&parent), std::time::Duration::from_secs(30));
    let d = out(agentctl(db).args(["approve", &child_b, &call_b]));
    assert!(d.status.success(), "{}", text(&d.stderr));
    let shown = show_until(db, &parent, 60, |shown| {
        shown["status"] == "completed" || show(db, &child_a)["status"] != "interrupted"
    })
    .await;
    assert_eq!(
        show(db, &child_a)["status"],
        "interrupted",
        "A came back: {}",
        show(db, &child_a)
    );
    assert_eq!(shown["status"], "completed", "{shown}");
    let final_text = shown["final_text"].as_str().unwrap();
    assert!(
        final_text.contains("B done") && final_text.contains("interrupted"),
        "{final_text}"
    );
    assert_eq!(file_lines(&ws.join("kids.txt"), "a"), 0);
    assert_eq!(file_lines(&ws.join("kids.txt"), "b"), 1);
    let a_events = events(db, &child_a).await;
    assert!(kinds_of(&a_events, "run.requeued").is_empty());
    check_invariants(&events(db, &parent).await);
}

/// `interrupt CHILD` stops that child alone: the parent goes on with the other's answer
/// and the interrupted one's status (partial results).
async fn interrupting_a_child_by_its_id(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let server = emulator(&script(
        "touch started_a; sleep 60; echo a >> effects.txt",
        "echo b >> effects.txt",
        false,
    ))
    .await;
    let mut run = spawn_two_child_parent(db, &server, &ws);
    let parent = wait_for_parent(db, &mut run).await;
    while !ws.join("started_a").exists() {
        assert!(run.try_wait().unwrap().is_none(), "the run ended early");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let child_a = show(db, &parent)["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["index"] == 0)
        .unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let i = out(agentctl(db).args(["interrupt", &child_a]));
    assert!(i.status.success(), "{}", text(&i.stderr));
    let o = run.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(file_lines(&ws.join("effects.txt"), "a"), 0);
    assert_eq!(file_lines(&ws.join("effects.txt"), "b"), 1);
    let shown = show(db, &parent);
    assert_eq!(shown["status"], "completed");
    let final_text = shown["final_text"].as_str().unwrap();
    assert!(
        final_text.contains("B done") && final_text.contains("interrupted"),
        "{final_text}"
    );
    assert_eq!(show(db, &child_a)["status"], "interrupted");
    // The human `runs show` lists the children.
    let human = text(&out(agentctl(db).args(["runs", "show", &parent])).stdout);
    assert_eq!(
        human.lines().filter(|l| l.starts_with("child ")).count(),
        2,
        "{human}"
    );
}

/// `--max-depth 2`: a child may spawn its own; the grandchild cannot; tokens roll up.
async fn a_deeper_tree_when_the_depth_allows_it(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    let spawn = |prompt: &str, tools: Value| json!({"agents": [{"prompt": prompt, "instructions": null, "tools": tools}]});
    let rules = json!({"rules": [
        {"when": {"last_user_contains": "GRAND"}, "reply": {"items": answer("G done")}},
        {"when": {"last_user_contains": "CHILD", "tool_outputs": 0}, "reply": {"items": [
            call("call_grand", "spawn_agents", spawn("GRAND: dig", json!(null)))]}},
        {"when": {"last_user_contains": "CHILD", "tool_outputs": 1}, "reply": {"items": answer("C saw {{outputs}}")}},
        {"when": {"tool_outputs": 0}, "reply": {"items": [
            call("call_spawn", "spawn_agents", spawn("CHILD: delegate", json!(["spawn_agents", "read_file"])))]}},
        {"when": {"tool_outputs": 1}, "reply": {"items": answer("FINAL: {{outputs}}")}}]});
    let server = emulator(&rules.to_string()).await;
    let o = out(&mut run_cmd(
        db,
        &server,
        &ws,
        &[
            "--approval",
            "auto",
            "--max-children",
            "1",
            "--max-depth",
            "2",
        ],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let (roots, children) = runs(db).await;
    assert_eq!(roots.len(), 1);
    assert_eq!(children.len(), 2, "a child and a grandchild");
    let parent = &roots[0];
    let final_text = show(db, parent)["final_text"].as_str().unwrap().to_string();
    assert!(
        final_text.contains("G done"),
        "the grandchild's answer reached the root: {final_text}"
    );
    let listed = out(agentctl(db).args(["--json", "runs", "list"]));
    let depths: Vec<u64> = text(&listed.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["depth"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(depths, [0, 1, 2], "the tree in order");
    let mut total_below = 0;
    for (id, link) in &children {
        let ev = events(db, id).await;
        let spec = &kinds_of(&ev, "run.created")[0].payload;
        let tools = spec["tools"].to_string();
        if link["run_id"] == json!(parent) {
            assert_eq!(spec["subagents"]["depth"], 1);
            assert!(
                tools.contains("spawn_agents") && !tools.contains("\"shell\""),
                "{tools}"
            );
            // The child's usage includes its own child's.
            total_below = kinds_of(&ev, "run.completed")[0].payload["usage"]["total_tokens"]
                .as_u64()
                .unwrap();
        } else {
            assert_eq!(spec["subagents"]["depth"], 2);
            assert!(!tools.contains("spawn_agents"), "{tools}");
        }
    }
    let pev = events(db, parent).await;
    let own: u64 = kinds_of(&pev, "model.completed")
        .iter()
        .map(|e| e.payload["usage"]["total_tokens"].as_u64().unwrap())
        .sum();
    let done = &kinds_of(&pev, "run.completed")[0].payload;
    assert_eq!(
        done["usage"]["total_tokens"].as_u64().unwrap(),
        own + total_below
    );
}

/// Which run of the crash story a request to the emulator is for, and its step.
fn request_of(body: &Value) -> (&'static str, u64) {
    let input = body["input"].as_array().cloned().unwrap_or_default();
    let outputs = input
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .count() as u64;
    let first_user = input
        .iter()
        .find(|i| i["role"] == "user")
        .map(|i| i["content"].to_string())
        .unwrap_or_default();
    let who = if first_user.contains("CHILD-A") {
        "a"
    } else if first_user.contains("CHILD-B") {
        "b"
    } else {
        "parent"
    };
    (who, outputs + 1)
}

/// One run of the crash story, killed by `var` after `k` events; then `resume` until the
/// parent completes, denying the indeterminate calls of the children as they are asked.
/// Returns whether the first process was killed, and the calls denied.
async fn crash_once(
    db: &str,
    var: &str,
    k: usize,
    seen: &mut std::collections::HashSet<String>,
) -> (bool, usize) {
    let server = emulator(&script(
        "echo a >> effects.txt",
        "echo b >> effects.txt",
        false,
    ))
    .await;
    let (_g, ws) = workspace();
    let mut first = run_cmd(
        db,
        &server,
        &ws,
        &[
            "--approval",
            "auto",
            "--max-children",
            "2",
            "--sandbox",
            "off",
        ],
    );
    first.env(var, k.to_string());
    let o = out(&mut first);
    let killed = o.status.signal() == Some(9);
    assert!(
        killed || o.status.code() == Some(0),
        "{var}={k}: {:?} {}",
        o.status,
        text(&o.stderr)
    );
    let (roots, _) = runs(db).await;
    let fresh: Vec<String> = roots.into_iter().filter(|r| !seen.contains(r)).collect();
    assert_eq!(fresh.len(), 1, "{var}={k}: one new parent");
    let parent = fresh[0].clone();
    seen.insert(parent.clone());
    let mut denied = 0;
    let mut rounds = 0;
    while show(db, &parent)["status"] != "completed" {
        rounds += 1;
        assert!(rounds < 10, "{var}={k}: resume does not finish");
        // `--wait`: the children's indeterminate calls are waited for, denied below.
        let mut resume = resume_cmd(db, &server, &parent, &["--wait"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A child whose shell call was cut off waits for a decision by its own run id.
        let status = loop {
            if let Some(status) = resume.try_wait().unwrap() {
                break status;
            }
            let (_, children) = runs(db).await;
            for (child, link) in children
                .iter()
                .filter(|(_, l)| l["run_id"] == json!(parent))
            {
                assert_eq!(link["call_id"], "call_spawn");
                for p in show(db, child)["pending_approvals"].as_array().unwrap() {
                    assert_eq!(p["reason"], "indeterminate", "{var}={k}: {p}");
                    let call = p["call_id"].as_str().unwrap();
                    let d = out(agentctl(db).args(["deny", child, call, "--reason", "crash test"]));
                    assert!(d.status.success(), "{}", text(&d.stderr));
                    denied += 1;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        let o = resume.wait_with_output().unwrap();
        assert_eq!(
            status.code(),
            Some(0),
            "{var}={k}: resume: {}",
            text(&o.stderr)
        );
    }
    let shown = show(db, &parent);
    let final_text = shown["final_text"].as_str().unwrap();
    assert!(final_text.starts_with("FINAL: "), "{var}={k}: {final_text}");
    assert!(
        final_text.contains("A done") && final_text.contains("B done"),
        "{var}={k}: {final_text}"
    );
    let pev = events(db, &parent).await;
    check_invariants(&pev);
    // Each child spawned once, created once (`runs` checks one `run.created` a thread).
    assert_eq!(kinds_of(&pev, "subagent.spawned").len(), 2, "{var}={k}");
    let (_, children) = runs(db).await;
    let mine: Vec<&(String, Value)> = children
        .iter()
        .filter(|(_, l)| l["run_id"] == json!(parent))
        .collect();
    assert_eq!(mine.len(), 2, "{var}={k}");
    let mut journals = HashMap::new();
    journals.insert("parent", pev);
    for (child, link) in mine {
        let ev = events(db, child).await;
        check_invariants(&ev);
        assert_eq!(show(db, child)["status"], "completed", "{var}={k}");
        let (tag, line) = if link["index"] == 0 {
            ("a", "a")
        } else {
            ("b", "b")
        };
        let n = file_lines(&ws.join("effects.txt"), line);
        let completed = kinds_of(&ev, "tool.completed")
            .iter()
            .any(|e| call_id_of(e).starts_with("call_CHILD"));
        assert!(
            n <= 1,
            "{var}={k}: the effect of child {tag} happened {n} times"
        );
        if completed {
            assert_eq!(
                n, 1,
                "{var}={k}: child {tag}'s call completed, its effect happened {n} times"
            );
        }
        journals.insert(tag, ev);
    }
    // No model step was sent more often than it was journaled as requested: a completed
    // step is never paid for again.
    let mut sent: HashMap<(&str, u64), u32> = HashMap::new();
    for r in server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/responses"))
    {
        *sent.entry(request_of(&r.body)).or_default() += 1;
    }
    for ((who, step), n) in sent {
        let attempts = kinds_of(&journals[who], "model.requested")
            .iter()
            .filter(|e| e.payload["step"] == json!(step))
            .count() as u32;
        assert!(
            n <= attempts,
            "{var}={k}: {who} step {step} sent {n} times for {attempts} attempts"
        );
    }
    (killed, denied)
}

async fn crash_at_every_boundary(db: FreshDb) {
    let db = db.url();
    let mut seen = std::collections::HashSet::new();
    let mut denied = 0;
    let mut boundaries = 0;
    for var in [
        "AGENTCTL_TEST_CRASH_AFTER_EVENTS",
        "AGENTCTL_TEST_CRASH_CHILD_AFTER_EVENTS",
    ] {
        let mut k = 1;
        loop {
            let (killed, d) = crash_once(db, var, k, &mut seen).await;
            denied += d;
            if !killed {
                break;
            }
            boundaries += 1;
            k += 1;
        }
        assert!(k > 5, "{var}: only {k} boundaries");
    }
    eprintln!("crashed at {boundaries} boundaries; {denied} indeterminate child calls denied");
    assert!(
        denied > 0,
        "some crash fell between a child's shell call's start and its end"
    );
}

/// `agentctl run` of a parent that may spawn two children (`--approval auto`, no sandbox),
/// started in the background with its output piped.
fn spawn_two_child_parent(
    db: &str,
    server: &agent_responses_mock::MockServer,
    ws: &std::path::Path,
) -> std::process::Child {
    run_cmd(
        db,
        server,
        ws,
        &[
            "--approval",
            "auto",
            "--max-children",
            "2",
            "--sandbox",
            "off",
        ],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap()
}
