//! Approvals decided from other processes.

use std::process::Stdio;

use serde_json::json;

use crate::host::fresh_db::{self, FreshDb};
use crate::host::*;

fn one_shell_script() -> String {
    script_by_outputs(&[
        json!([call(
            "call_s",
            "shell",
            json!({"command": "echo ran >> ran.txt"})
        )]),
        answer("FINAL: after the shell"),
    ])
}

/// Waits (following the journal) until the run has an event of `kind`.
async fn wait_for(db: &str, kind: &str) -> String {
    use futures::StreamExt as _;
    let journal = agent_journal::Journal::open(db).await.unwrap();
    let deadline = std::time::Duration::from_secs(60);
    let found = tokio::time::timeout(deadline, async {
        loop {
            for thread in journal.threads().await.unwrap() {
                let Some(run) = thread.strip_prefix("run:") else {
                    continue;
                };
                let mut tail = journal.replay_stream(&thread, 0);
                while let Some(e) = tail.next().await {
                    if &*e.unwrap().kind == kind {
                        return run.to_string();
                    }
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {kind} within {deadline:?}"));
    journal.close().await;
    found
}

async fn approvals_across_processes(db: FreshDb) {
    let db = db.url();
    let server = emulator(&one_shell_script()).await;

    // 1. A run waits (--wait); another process approves; the call runs once.
    let (_g, ws) = workspace();
    let child = run_cmd(db, &server, &ws, &["--wait", "--sandbox", "off"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run = wait_for(db, "approval.requested").await;
    // Only one process may drive a run: a resume while the waiting host lives is refused.
    let refused = out(&mut resume_cmd(db, &server, &run, &[]));
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("being driven by"),
        "{}",
        text(&refused.stderr)
    );
    let shown = show(db, &run);
    let pending = &shown["pending_approvals"][0];
    assert_eq!(pending["call_id"], "call_s");
    assert_eq!(pending["reason"], "policy");
    // A decision naming other arguments is refused.
    let wrong = out(agentctl(db).args(["approve", &run, "call_s", "--sha256", "00ff"]));
    assert!(!wrong.status.success());
    assert!(
        text(&wrong.stderr).contains("refused"),
        "{}",
        text(&wrong.stderr)
    );
    let sha = pending["args_sha256"].as_str().unwrap();
    let ok = out(agentctl(db).args(["approve", &run, "call_s", "--sha256", sha]));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    assert!(text(&done.stdout).contains("FINAL: after the shell"));
    assert_eq!(
        std::fs::read_to_string(ws.join("ran.txt")).unwrap(),
        "ran\n"
    );
    check_invariants(&events(db, &run).await);
    // The first decision wins: a different one is refused (exit 2, saying whose decision
    // stands), the same one again is done (a retry, or two people agreeing).
    let again = out(agentctl(db).args(["deny", &run, "call_s"]));
    assert_eq!(again.status.code(), Some(2), "{}", text(&again.stderr));
    assert!(
        text(&again.stderr).contains("already approved by")
            && text(&again.stderr).contains(&format!("agentctl runs show {run}")),
        "{}",
        text(&again.stderr)
    );
    let always = out(agentctl(db).args(["approve", &run, "call_s", "--always"]));
    assert_eq!(always.status.code(), Some(2), "{}", text(&always.stderr));
    let same = out(agentctl(db).args(["approve", &run, "call_s"]));
    assert_eq!(same.status.code(), Some(0), "{}", text(&same.stderr));
    assert!(
        text(&same.stdout).starts_with(&format!("call_s of run {run} was already approved by ")),
        "{}",
        text(&same.stdout)
    );
    let same = out(agentctl(db).args(["--json", "approve", &run, "call_s"]));
    assert_eq!(same.status.code(), Some(0), "{}", text(&same.stderr));
    let line: serde_json::Value = serde_json::from_slice(&same.stdout).unwrap();
    assert_eq!(line["type"], "approval.decided");
    assert_eq!(line["decision"], "approve");
    assert!(line["already_decided_by"].is_string(), "{line}");

    // 2. Paused without --wait (exit 3), approved while no host runs, then resumed.
    let (_g2, ws2) = workspace();
    let paused = out(&mut run_cmd(db, &server, &ws2, &["--sandbox", "off"]));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    assert!(
        text(&paused.stderr).contains(" approve "),
        "{}",
        text(&paused.stderr)
    );
    let run2 = text(&paused.stderr)
        .split_whitespace()
        .skip_while(|w| *w != "run")
        .nth(1)
        .unwrap()
        .to_string();
    // Paused for a decision: `waiting`, with the call it waits on (one status model).
    let shown = show(db, &run2);
    assert_eq!(shown["status"], "waiting");
    assert_eq!(shown["pending_approvals"].as_array().unwrap().len(), 1);
    assert!(
        !ws2.join("ran.txt").exists(),
        "nothing runs before approval"
    );
    // 3. Two racing decisions: exactly one wins.
    let a = agentctl(db)
        .args(["approve", &run2, "call_s"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let d = agentctl(db)
        .args(["deny", &run2, "call_s"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (a, d) = (a.wait_with_output().unwrap(), d.wait_with_output().unwrap());
    assert!(
        a.status.success() != d.status.success(),
        "approve: {} / deny: {}",
        text(&a.stderr),
        text(&d.stderr)
    );
    let loser = if a.status.success() { &d } else { &a };
    assert!(
        text(&loser.stderr).contains("already"),
        "{}",
        text(&loser.stderr)
    );
    let resumed = out(&mut resume_cmd(db, &server, &run2, &[]));
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    let ran = std::fs::read_to_string(ws2.join("ran.txt")).unwrap_or_default();
    let events = events(db, &run2).await;
    check_invariants(&events);
    if a.status.success() {
        assert_eq!(
            ran, "ran\n",
            "approved while no host ran: runs exactly once"
        );
    } else {
        assert_eq!(ran, "", "denied: never runs");
        let out = events
            .iter()
            .find(|e| &*e.kind == "approval.decided")
            .unwrap();
        assert_eq!(out.payload["decision"], "deny");
    }
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: approvals_across_processes);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_always_decides_the_siblings_and_no_later_decision_rewrites_a_call_that_ran() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("always.db").display());
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([
            call("c1", "shell", json!({"command": "echo one >> log.txt"})),
            call("c2", "shell", json!({"command": "echo two >> log.txt"})),
        ]),
        json!([]),
        answer("FINAL: both"),
    ]))
    .await;
    let paused = out(&mut run_cmd(&db, &server, &ws, &["--sandbox", "off"]));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    let run = only_run(&db);
    let ok = out(agentctl(&db).args(["approve", &run, "c1", "--always"]));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    // Retried (the first answer lost): the same decision, scope included, is done.
    let again = out(agentctl(&db).args(["approve", &run, "c1", "--always"]));
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert!(text(&again.stdout).contains("was already approved by"));
    let done = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    // Both ran, once each (in either order: calls of a step run concurrently).
    let log = std::fs::read_to_string(ws.join("log.txt")).unwrap();
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["one", "two"]);
    assert!(
        show(&db, &run)["pending_approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let late = out(agentctl(&db).args(["deny", &run, "c2"]));
    assert_eq!(late.status.code(), Some(2));
    let msg = text(&late.stderr);
    assert!(msg.contains("already"), "{msg}");
    // The model saw c2's real output.
    let body = last_request(&server);
    let c2 = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call_output" && i["call_id"] == "c2")
        .unwrap();
    assert!(
        c2["output"].as_str().unwrap().starts_with("Exit code: 0"),
        "{c2}"
    );
}

/// The commands a paused run prints work when pasted: they carry the `--db` the run used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn printed_commands_work_when_pasted() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("pasted db.db").display());
    let (_g, ws) = workspace();
    let script = script_by_outputs(&[
        serde_json::json!([call(
            "call_p",
            "shell",
            serde_json::json!({"command": "echo pasted > pasted.txt"})
        )]),
        answer("FINAL: pasted"),
    ]);
    let server = emulator(&script).await;
    let paused = out(&mut run_cmd(&db, &server, &ws, &["--sandbox", "off"]));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    let printed = text(&paused.stderr);
    let command = |verb: &str| {
        printed
            .lines()
            .map(str::trim)
            .map(|l| l.strip_prefix("continue with: ").unwrap_or(l))
            .find(|l| l.starts_with("agentctl ") && l.contains(verb))
            .unwrap_or_else(|| panic!("no `{verb}` command in {printed}"))
            .to_string()
    };
    let paste = |line: String| {
        // As a user would: in a shell, from another directory, with no AGENTCTL_DB.
        let bin = env!("CARGO_BIN_EXE_agentctl");
        let o = std::process::Command::new("sh")
            .arg("-c")
            .arg(line.replacen("agentctl", &format!("'{bin}'"), 1))
            .current_dir(dir.path())
            .env_remove("AGENTCTL_DB")
            .env("OPENAI_API_KEY", agent_responses_mock::MOCK_API_KEY)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "{line}: {}", text(&o.stderr));
    };
    paste(command(" approve "));
    paste(command(" resume "));
    assert_eq!(
        std::fs::read_to_string(ws.join("pasted.txt")).unwrap(),
        "pasted\n"
    );
}

/// A tool the user's configuration refuses is refused before anyone is asked, also when
/// the call asks to leave the sandbox (which asks even under "approve always"): no question
/// a person could approve, and so no way for the tool to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_tool_is_refused_before_an_escalation_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("deny.db").display());
    let cfg = dir.path().join("cfg");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(
        cfg.join("config.toml"),
        "[tools.shell]\napproval = \"deny\"\n",
    )
    .unwrap();
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c_esc",
            "shell",
            json!({
                "command": "echo escaped > escaped.txt",
                "sandbox_permissions": "require_escalated",
                "justification": "needs it"
            })
        )]),
        answer("FINAL: told"),
    ]))
    .await;
    let o = out(run_cmd(&db, &server, &ws, &[]).env("AGENTCTL_CONFIG_DIR", &cfg));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = only_run(&db);
    let events = events(&db, &run).await;
    assert!(kinds_of(&events, "approval.requested").is_empty());
    let refused = kinds_of(&events, "tool.refused");
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0]
            .payload
            .to_string()
            .contains("does not allow `shell`"),
        "{}",
        refused[0].payload
    );
    assert!(!ws.join("escaped.txt").exists());
}

/// A decision meant for a question a crash made the host ask again (same call, same
/// arguments) does not answer the new question when it names its round: it is the first
/// round's, already decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_for_an_earlier_round_does_not_answer_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("round.db").display());
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c_dep",
            "shell",
            json!({"command": "echo deployed >> count.txt; sleep 30"})
        )]),
        answer("FINAL: deployed"),
    ]))
    .await;
    let paused = out(&mut run_cmd(&db, &server, &ws, &["--sandbox", "off"]));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    let printed = text(&paused.stderr);
    assert!(printed.contains("--round 0"), "{printed}");
    let run = only_run(&db);
    let ok = out(agentctl(&db).args(["approve", &run, "c_dep", "--round", "0"]));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    // The host dies while the command runs: the next resume asks again (round 1).
    let mut host = resume_cmd(&db, &server, &run, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ws.join("count.txt").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never ran"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    host.kill().unwrap();
    host.wait().unwrap();
    let asked = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(asked.status.code(), Some(3), "{}", text(&asked.stderr));
    let pending = show(&db, &run)["pending_approvals"].clone();
    assert_eq!(pending[0]["round"], 1, "{pending}");
    assert_eq!(pending[0]["reason"], "indeterminate", "{pending}");
    // A second approver's decision of the first question, pasted late.
    let late = out(agentctl(&db).args(["approve", &run, "c_dep", "--round", "0"]));
    assert_eq!(late.status.code(), Some(0), "{}", text(&late.stderr));
    assert!(
        text(&late.stdout).contains("already approved"),
        "{}",
        text(&late.stdout)
    );
    let pending = show(&db, &run)["pending_approvals"].clone();
    assert_eq!(
        pending[0]["round"], 1,
        "the new question was answered: {pending}"
    );
    // A round that was never asked is refused (as a call not waiting is); the new one is
    // decided as asked.
    let none = out(agentctl(&db).args(["deny", &run, "c_dep", "--round", "7"]));
    assert_eq!(none.status.code(), Some(1), "{}", text(&none.stderr));
    assert!(text(&none.stderr).contains("no approval round 7"));
    let deny = out(agentctl(&db).args(["deny", &run, "c_dep", "--round", "1"]));
    assert!(deny.status.success(), "{}", text(&deny.stderr));
    let done = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    assert_eq!(
        std::fs::read_to_string(ws.join("count.txt")).unwrap(),
        "deployed\n"
    );
}
