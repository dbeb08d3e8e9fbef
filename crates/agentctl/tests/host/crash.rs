//! SIGKILL at every journal boundary, then `resume` until the run completes.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt as _;

use serde_json::json;

use crate::host::fresh_db::{self, FreshDb};
use crate::host::*;

fn crash_script() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/responses/host-crash.json"
    ))
    .unwrap()
}

/// Runs the crash story once per k, killing the first process after its k-th event.
async fn crash_at_every_boundary(db: FreshDb) {
    let db = db.url();
    let mut k = 1;
    let mut known = std::collections::HashSet::new();
    let (mut indeterminate, mut resumed) = (0, 0);
    loop {
        let server = emulator(&crash_script()).await;
        let (_ws_guard, ws) = workspace();
        let mut first = run_cmd(db, &server, &ws, &["--approval", "auto"]);
        first.env("AGENTCTL_TEST_CRASH_AFTER_EVENTS", k.to_string());
        let o = out(&mut first);
        let killed = o.status.signal() == Some(9);
        assert!(
            killed || o.status.code() == Some(0),
            "k={k}: {:?} {}",
            o.status,
            text(&o.stderr)
        );
        // The run this child created.
        let listed = out(agentctl(db).args(["--json", "runs", "list"]));
        let run = text(&listed.stdout)
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["run_id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .find(|id| !known.contains(id))
            .unwrap_or_else(|| panic!("k={k}: no new run ({})", text(&o.stderr)));
        known.insert(run.clone());
        let mut rounds = 0;
        // Killed after `run.completed` was durable: nothing left to resume.
        if killed && show(db, &run)["status"] != "completed" {
            loop {
                rounds += 1;
                assert!(rounds < 10, "k={k}: resume does not finish");
                let o = out(&mut resume_cmd(db, &server, &run, &[]));
                resumed += 1;
                match o.status.code() {
                    Some(0) => break,
                    Some(3) => {
                        let shown = show(db, &run);
                        let pending = shown["pending_approvals"].as_array().unwrap().clone();
                        assert!(
                            !pending.is_empty(),
                            "k={k}: paused with nothing pending: {shown}"
                        );
                        for p in pending {
                            assert_eq!(p["reason"], "indeterminate", "k={k}: {p}");
                            indeterminate += 1;
                            let call = p["call_id"].as_str().unwrap();
                            let d = out(agentctl(db).args([
                                "deny",
                                &run,
                                call,
                                "--reason",
                                "crash test",
                            ]));
                            assert!(d.status.success(), "{}", text(&d.stderr));
                        }
                    }
                    _ => panic!("k={k}: resume failed: {:?} {}", o.status, text(&o.stderr)),
                }
            }
        }
        let shown = show(db, &run);
        assert_eq!(shown["status"], "completed", "k={k}: {shown}");
        assert_eq!(
            shown["final_text"], "FINAL: three lines and a file",
            "k={k}"
        );
        let events = events(db, &run).await;
        check_invariants(&events);
        let lines = std::fs::read_to_string(ws.join("lines.txt")).unwrap_or_default();
        for (call, line) in [("call_a", "a"), ("call_b", "b"), ("call_c", "c")] {
            let n = lines.lines().filter(|l| *l == line).count();
            let completed = kinds_of(&events, "tool.completed")
                .iter()
                .any(|e| call_id_of(e) == call);
            assert!(n <= 1, "k={k}: line {line} appears {n} times");
            if completed {
                assert_eq!(
                    n, 1,
                    "k={k}: {call} completed but line {line} appears {n} times"
                );
            }
        }
        if kinds_of(&events, "tool.completed")
            .iter()
            .any(|e| call_id_of(e) == "call_w")
        {
            assert_eq!(
                std::fs::read_to_string(ws.join("out/done.txt")).unwrap(),
                "done\n"
            );
        }
        // The emulator saw each step at most once per journaled attempt: a completed step
        // is never paid for again.
        let mut requests: HashMap<usize, u32> = HashMap::new();
        for r in server
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/responses"))
        {
            let outputs = r.body["input"].as_array().map_or(0, |items| {
                items
                    .iter()
                    .filter(|i| i["type"] == "function_call_output")
                    .count()
            });
            *requests.entry(outputs).or_default() += 1;
        }
        let step_of_outputs = |outputs: usize| match outputs {
            0 => 1u64,
            1 => 2,
            3 => 3,
            _ => 4,
        };
        for (outputs, n) in requests {
            let step = step_of_outputs(outputs);
            let attempts = kinds_of(&events, "model.requested")
                .iter()
                .filter(|e| e.payload["step"] == json!(step))
                .count() as u32;
            assert!(
                n <= attempts,
                "k={k}: step {step} sent {n} times for {attempts} journaled attempts"
            );
        }
        if !killed {
            break;
        }
        k += 1;
    }
    assert!(
        k > 20,
        "the story has more than 20 boundaries; only {k} were crashed at"
    );
    eprintln!(
        "crashed at {} boundaries; {resumed} resumes; {indeterminate} indeterminate calls denied",
        k - 1
    );
    assert!(resumed >= k - 2, "nearly every crash needs a resume");
    assert!(
        indeterminate > 0,
        "some crash fell between a shell call's start and its end"
    );
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: crash_at_every_boundary);
