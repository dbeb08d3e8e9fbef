//! Support for the worker tests: submitted runs, worker processes whose JSON lines go to a
//! file, and a decider that denies every `indeterminate` approval (a call cut off by a
//! kill may have had its effect: denying it is what keeps every effect at most once).

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use agent_host::run::{self, Decision, DecisionRequest, RunStatus};
use agent_journal::{Event, Journal};
use agent_responses_mock::MockServer;
use serde_json::{Value, json};

use crate::host::{agentctl, answer, call, text};

/// The FINAL answer of [`story`].
pub const FINAL: &str = "FINAL: run done";

/// Three side-effecting shell calls (each appends one line to a file named by the call, in
/// the run's own workspace), then the final answer. `pause` seconds in each command give
/// kills something to land on.
pub fn story(pause: &str) -> String {
    let shell = |id: &str| {
        call(
            id,
            "shell",
            json!({"command": format!("sleep {pause}; echo {id} >> {id}.txt")}),
        )
    };
    let rule = |outputs: usize, items: Value| json!({"when": {"tool_outputs": outputs}, "reply": {"items": items}});
    json!({"rules": [
        rule(0, json!([shell("call_a")])),
        rule(1, json!([shell("call_b"), shell("call_c")])),
        rule(3, answer(FINAL)),
    ]})
    .to_string()
}

/// Submits `n` runs of the story, each with its own workspace under `root`; returns
/// (run id, workspace) pairs.
pub fn submit(db: &str, server: &MockServer, root: &Path, n: usize) -> Vec<(String, PathBuf)> {
    (0..n)
        .map(|i| {
            let ws = root.join(format!("ws{i:02}"));
            std::fs::create_dir_all(&ws).unwrap();
            let o = agentctl(db)
                .args([
                    "submit",
                    "--base-url",
                    &server.base_url(),
                    "--approval",
                    "auto",
                ])
                .arg("--workspace")
                .arg(&ws)
                .arg("do the task")
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", text(&o.stderr));
            (text(&o.stdout).trim().to_string(), ws)
        })
        .collect()
}

/// A worker process; its `--json` lines go to `log`.
pub struct Worker {
    pub child: Child,
    pub log: PathBuf,
    pub name: String,
}

/// A test that fails while its worker runs must not leave it polling for ever.
impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn start_worker(db: &str, dir: &Path, name: &str, ttl: &str, extra: &[&str]) -> Worker {
    start_worker_from(agentctl(db), dir, name, ttl, extra)
}

/// [`start_worker`] from `cmd` (`agentctl --db DB` with the test's environment changed).
pub fn start_worker_from(
    mut cmd: std::process::Command,
    dir: &Path,
    name: &str,
    ttl: &str,
    extra: &[&str],
) -> Worker {
    let log = dir.join(format!("{name}.jsonl"));
    let err = dir.join(format!("{name}.err"));
    let child = cmd
        .args([
            "--json",
            "worker",
            "--name",
            name,
            "--lease-ttl",
            ttl,
            "--poll",
            "0.1",
        ])
        .args(extra)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(err).unwrap())
        .spawn()
        .unwrap();
    Worker {
        child,
        log,
        name: name.to_string(),
    }
}

impl Worker {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The worker's JSON lines so far.
    pub fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub fn signal(&self, sig: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for a line of `kind` (for `run`, when given).
    pub fn wait_for(&self, kind: &str, run: Option<&str>, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            if let Some(line) = self
                .lines()
                .into_iter()
                .find(|l| l["type"] == kind && run.is_none_or(|r| l["run_id"] == r))
            {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "worker {} printed no {kind} line in {within:?}: {:?}\nits stderr:\n{}",
                self.name,
                self.lines(),
                std::fs::read_to_string(self.log.with_extension("err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Denies every `indeterminate` approval of `runs` until `stop` fires; returns how many.
pub fn spawn_denier(
    db: String,
    runs: Vec<String>,
    stop: agent_runtime::CancellationToken,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut journal = Journal::open(&db).await.unwrap();
        let mut denied = 0;
        while !stop.is_cancelled() {
            for id in &runs {
                let state = match run::load(&journal, id).await {
                    Ok(state) => state,
                    Err(_) => {
                        // The database restarted under us: open it again.
                        if let Ok(fresh) = Journal::open(&db).await {
                            journal = fresh;
                        }
                        continue;
                    }
                };
                let pending: Vec<String> = state
                    .pending_approvals()
                    .filter(|c| {
                        c.pending_approval().is_some_and(|p| {
                            p.reason == agent_host::run::ApprovalReason::Indeterminate
                        })
                    })
                    .map(|c| c.call_id.clone())
                    .collect();
                for call_id in pending {
                    let request = DecisionRequest {
                        call_id,
                        decision: Decision {
                            approve: false,
                            reason: Some("cut off by a kill; its effect may have happened".into()),
                            by: Some("test".into()),
                            scope: None,
                        },
                        args_sha256: None,
                        round: None,
                    };
                    match run::decide(&journal, id, request).await {
                        Ok(()) => denied += 1,
                        Err(agent_host::HostError::Journal(_)) => {
                            // Its writer failed with the database: open it again.
                            if let Ok(fresh) = Journal::open(&db).await {
                                journal = fresh;
                            }
                        }
                        Err(_) => {}
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        denied
    })
}

/// Waits until every run completed (or `within` passes); returns the ones that did not.
pub async fn wait_all_completed(db: &str, runs: &[String], within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let mut left = Vec::new();
        if let Ok(journal) = Journal::open(db).await {
            for id in runs {
                match run::load(&journal, id).await {
                    Ok(s) if s.recorded_status() == Some(RunStatus::Completed) => {}
                    _ => left.push(id.clone()),
                }
            }
            journal.close().await;
        } else {
            left = runs.to_vec();
        }
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The invariants of one run driven by any number of workers: the story's final answer,
/// each effect at most once, one terminal per scheduled call, no step requested after its
/// completion, epochs never going down along the thread, and every epoch's `run.resumed`
/// written by the worker that claimed that epoch.
pub fn check_run(id: &str, ws: &Path, events: &[Event], claims: &HashMap<(String, i64), u32>) {
    crate::host::check_invariants(events);
    let completed: Vec<&Event> = events
        .iter()
        .filter(|e| &*e.kind == "run.completed")
        .collect();
    assert_eq!(completed.len(), 1, "run {id}");
    assert_eq!(completed[0].payload["text"], FINAL, "run {id}");
    for call in ["call_a", "call_b", "call_c"] {
        let lines = std::fs::read_to_string(ws.join(format!("{call}.txt"))).unwrap_or_default();
        assert!(
            lines.lines().count() <= 1,
            "run {id}: {call} ran twice: {lines:?}"
        );
    }
    // Requests from other processes (decisions, steers) are not fenced: epoch None.
    let epochs: Vec<i64> = events.iter().filter_map(|e| e.epoch).collect();
    assert!(
        epochs.windows(2).all(|w| w[0] <= w[1]),
        "run {id}: an older epoch wrote after a newer one: {epochs:?}"
    );
    for e in events.iter().filter(|e| &*e.kind == "run.resumed") {
        let epoch = e.payload["epoch"]
            .as_i64()
            .expect("a worker's resume records its epoch");
        assert_eq!(e.epoch, Some(epoch), "run {id}");
        let pid = e.payload["owner"]["pid"].as_u64().unwrap() as u32;
        assert_eq!(
            claims.get(&(id.to_string(), epoch)),
            Some(&pid),
            "run {id}: epoch {epoch} resumed by pid {pid}, not by its claimer"
        );
    }
}

/// Every claim the workers printed: (run, epoch) -> the claimer's pid. Panics if one
/// (run, epoch) was claimed twice.
pub fn claims(workers: &[Worker]) -> HashMap<(String, i64), u32> {
    let mut claims = HashMap::new();
    for w in workers {
        for line in w.lines().into_iter().filter(|l| l["type"] == "claimed") {
            let key = (
                line["run_id"].as_str().unwrap().to_string(),
                line["epoch"].as_i64().unwrap(),
            );
            assert!(
                claims.insert(key.clone(), w.pid()).is_none(),
                "{key:?} was claimed twice"
            );
        }
    }
    claims
}
