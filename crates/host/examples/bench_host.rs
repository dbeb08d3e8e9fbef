#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code
//! Host throughput, concurrency and resume, printed as JSON lines for `cargo xtask bench host`.
//!
//! Drives `agent_host::run::Host` (the library `agentctl run` uses) against a running
//! emulator (`agentctl mock serve --script fixtures/responses/bench-host.json`), with the
//! no-op `list_dir` tool on an empty workspace and `ApprovalMode::Auto`.
//!
//! Modes (`--mode`):
//! - `single`: `--repeat R` sequential runs of a `--steps N` loop (N tool steps, then the
//!   final answer); one line per run with its wall time and model steps per second.
//! - `concurrent`: `--runs C` runs of a `--steps N` loop started at once in this process;
//!   total model steps per second and the process's peak RSS (VmHWM) per run. Run it in a
//!   fresh process per C so the peaks do not mix.
//! - `resume`: drive a run of the open-ended loop until its step budget (`--steps N`)
//!   pauses it, then `--repeat R` times: resume it with one more step and time from the
//!   `Host::resume` call to the `model.requested` event of the new step (the request is
//!   built and about to be sent). The run compacts its history whenever a request passed
//!   `--compact-at` input tokens (default 4000; the fixture's compaction is one opaque item),
//!   as a run of thousands of steps must to stay inside a context window, so building it
//!   costs O(steps), not O(steps^2).
//!
//! - `ceiling`: the emulator alone: `--runs C` clients each sending, for `--repeat S`
//!   seconds, the streamed request of step `--steps K + 1` of the 200-step loop (K tool
//!   outputs in the context), one after another; requests per second and mean latency.
//!
//! Common options: `--base-url URL` (the emulator, `.../v1`), `--journal URL` (`memory:`,
//! `sqlite:///path`, `postgres://...`), `--durability full|normal` (default full), `--http 1|2`
//! (default 1; 2 is HTTP/2 from the first byte, as TLS ALPN gives against the public API),
//! `--label NAME` (echoed in every line).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use agent_host::run::{
    Budgets, DriveOptions, Host, NewRun, Observer, ResumeChange, RunEnd, RunState,
};
use agent_host::tools::ApprovalMode;
use agent_journal::{Durability, Event, Journal, JournalOptions};
use agent_responses::{ApiKey, Client, ClientConfig};
use serde_json::json;

/// The same allocator as the `agentctl` binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const FINAL_ANSWER: &str = "BENCH-DONE";

struct Args {
    mode: String,
    base_url: String,
    journal: String,
    label: String,
    steps: u64,
    runs: usize,
    repeat: usize,
    durability: Durability,
    compact_at: u64,
    http2: bool,
    /// `ClientConfig::max_idle_connections`, when given.
    max_idle: Option<usize>,
}

fn args() -> Args {
    let mut a = Args {
        mode: "single".into(),
        base_url: "http://127.0.0.1:8080/v1".into(),
        journal: "memory:".into(),
        label: String::new(),
        steps: 200,
        runs: 1,
        repeat: 3,
        durability: Durability::Full,
        compact_at: 4000,
        http2: false,
        max_idle: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < argv.len() {
        let v = argv[i + 1].clone();
        match argv[i].as_str() {
            "--mode" => a.mode = v,
            "--base-url" => a.base_url = v,
            "--journal" => a.journal = v,
            "--label" => a.label = v,
            "--steps" => a.steps = v.parse().expect("--steps"),
            "--runs" => a.runs = v.parse().expect("--runs"),
            "--repeat" => a.repeat = v.parse().expect("--repeat"),
            "--compact-at" => a.compact_at = v.parse().expect("--compact-at"),
            "--max-idle" => a.max_idle = Some(v.parse().expect("--max-idle")),
            "--http" => {
                a.http2 = match v.as_str() {
                    "1" => false,
                    "2" => true,
                    other => panic!("--http 1|2, not {other}"),
                }
            }
            "--durability" => {
                a.durability = match v.as_str() {
                    "full" => Durability::Full,
                    "normal" => Durability::Normal,
                    other => panic!("--durability full|normal, not {other}"),
                }
            }
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    a
}

fn loop_prompt(steps: u64) -> String {
    match steps {
        20 => "loop=20; call list_dir until told otherwise".into(),
        200 => "loop=200; call list_dir until told otherwise".into(),
        _ => "loop=long; call list_dir until told otherwise".into(),
    }
}

fn new_run(
    workspace: &std::path::Path,
    steps: u64,
    max_steps: u64,
    compact_at: Option<u64>,
) -> NewRun {
    NewRun::new(loop_prompt(steps), workspace)
        .budgets(Budgets {
            max_steps,
            max_tokens: None,
        })
        .approval(ApprovalMode::Auto)
        .compact_at(compact_at)
}

/// Peak and current resident set of this process, KiB (`/proc/self/status`).
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Model steps of a finished run, and whether it ended with the scripted answer.
fn outcome(end: &RunEnd, state: &RunState) -> (u64, bool) {
    let ok = matches!(end, RunEnd::Completed { text } if text.contains(FINAL_ANSWER));
    (state.step_count(), ok)
}

/// Notes when the first `model.requested` past a sequence number is folded.
struct FirstRequest {
    after_seq: i64,
    at: Mutex<Option<Instant>>,
}

impl Observer for FirstRequest {
    fn event(&self, _: &RunState, event: &Event) {
        if &*event.kind == agent_host::run::kinds::MODEL_REQUESTED && event.seq > self.after_seq {
            let mut at = self.at.lock().unwrap();
            if at.is_none() {
                *at = Some(Instant::now());
            }
        }
    }
    fn shows_progress(&self) -> bool {
        false
    }
}

/// The Responses client: HTTP/1.1, or HTTP/2 from the first byte with `--http 2` (what
/// TLS ALPN gives against the public API; the emulator speaks it in plain text).
fn responses_client(a: &Args) -> Client {
    let mut config = ClientConfig::new(a.base_url.clone(), ApiKey::new("sk-bench").expect("key"));
    config.http2_prior_knowledge = a.http2;
    if let Some(n) = a.max_idle {
        config.max_idle_connections = n;
    }
    Client::new(config).expect("client")
}

async fn open_journal(url: &str, durability: Durability) -> Journal {
    Journal::open_with(url, JournalOptions::default().durability(durability))
        .await
        .expect("open the journal")
}

#[tokio::main]
async fn main() {
    // As `agentctl` does once past its single-threaded start.
    tikv_jemalloc_ctl::background_thread::write(true).expect("jemalloc's background threads");
    let a = args();
    let client = responses_client(&a);
    let journal = open_journal(&a.journal, a.durability).await;
    let host = Host::new(journal.clone(), client);
    let workspace = tempfile::tempdir().expect("workspace");
    match a.mode.as_str() {
        "single" => {
            for i in 0..a.repeat {
                let before = journal.stats();
                let t = Instant::now();
                let report = host
                    .start(
                        new_run(workspace.path(), a.steps, a.steps + 10, None),
                        DriveOptions::default(),
                    )
                    .await
                    .expect("run");
                let secs = t.elapsed().as_secs_f64();
                let (steps, ok) = outcome(&report.end, &report.state);
                let durable = journal.stats().since(&before).durable_commits();
                println!(
                    "{}",
                    json!({"bench": "single", "label": a.label, "repeat": i, "tool_steps": a.steps,
                           "model_steps": steps, "secs": secs, "steps_per_s": steps as f64 / secs, "ok": ok,
                           "durable_commits_per_step": durable as f64 / steps.max(1) as f64})
                );
            }
        }
        "concurrent" => {
            let (_, rss_before) = rss_kib();
            let t = Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..a.runs {
                let host = host.clone();
                let run = new_run(workspace.path(), a.steps, a.steps + 10, None);
                tasks.spawn(async move { host.start(run, DriveOptions::default()).await });
            }
            let (mut steps, mut ok) = (0u64, 0usize);
            while let Some(joined) = tasks.join_next().await {
                let report = joined.expect("join").expect("run");
                let (s, good) = outcome(&report.end, &report.state);
                steps += s;
                ok += usize::from(good);
            }
            let secs = t.elapsed().as_secs_f64();
            let (hwm, rss_after) = rss_kib();
            println!(
                "{}",
                json!({"bench": "concurrent", "label": a.label, "runs": a.runs, "tool_steps": a.steps,
                       "model_steps": steps, "secs": secs, "steps_per_s": steps as f64 / secs,
                       "ok": ok, "vm_hwm_kib": hwm, "rss_before_kib": rss_before, "rss_after_kib": rss_after,
                       "hwm_per_run_kib": hwm as f64 / a.runs as f64,
                       "hwm_above_start_per_run_kib": hwm.saturating_sub(rss_before) as f64 / a.runs as f64})
            );
        }
        "resume" => {
            let t = Instant::now();
            let report = host
                .start(
                    new_run(workspace.path(), u64::MAX, a.steps, Some(a.compact_at)),
                    DriveOptions::default(),
                )
                .await
                .expect("build the long run");
            let build_secs = t.elapsed().as_secs_f64();
            let paused = matches!(report.end, RunEnd::Paused { .. });
            let run_id = report.run_id.clone();
            let mut budget = report.state.step_count();
            println!(
                "{}",
                json!({"bench": "resume_build", "label": a.label, "steps": budget, "paused": paused,
                       "secs": build_secs, "last_seq": report.state.last_seq()})
            );
            for i in 0..a.repeat {
                // A fresh host and journal handle, as `agentctl resume` in a new process has.
                let journal = open_journal(&a.journal, a.durability).await;
                let client = responses_client(&a);
                let host = Host::new(journal.clone(), client);
                let before = agent_host::run::load(&journal, &run_id)
                    .await
                    .expect("load")
                    .last_seq();
                budget += 1;
                let first = Arc::new(FirstRequest {
                    after_seq: before,
                    at: Mutex::new(None),
                });
                let opts = DriveOptions {
                    observer: first.clone(),
                    ..DriveOptions::default()
                };
                let t = Instant::now();
                let report = host
                    .resume(
                        &run_id,
                        ResumeChange {
                            max_steps: Some(budget),
                            ..ResumeChange::default()
                        },
                        opts,
                    )
                    .await
                    .expect("resume");
                let total = t.elapsed().as_secs_f64();
                let to_request = first
                    .at
                    .lock()
                    .unwrap()
                    .map(|at| at.duration_since(t).as_secs_f64());
                println!(
                    "{}",
                    json!({"bench": "resume", "label": a.label, "repeat": i,
                           "recorded_steps": budget - 1, "events": before,
                           "to_first_request_ms": to_request.map(|s| s * 1e3),
                           "resume_drive_ms": total * 1e3,
                           "paused_again": matches!(report.end, RunEnd::Paused { .. })})
                );
                if i + 1 < a.repeat {
                    journal.close().await;
                }
            }
        }
        "ceiling" => ceiling(&a).await,
        other => panic!("unknown --mode {other}"),
    }
    journal.close().await;
}

/// The emulator's own rate for the loop's requests (no host, no journal).
async fn ceiling(a: &Args) {
    use agent_responses::types::{CreateResponse, Input, Item};
    let mut items = vec![json!({"type": "message", "role": "user", "content": loop_prompt(200)})];
    for i in 0..a.steps {
        items.push(json!({"type": "function_call", "id": format!("fc_{i}"), "call_id": format!("call_{i}"),
                          "name": "list_dir", "arguments": "{\"path\":\".\"}", "status": "completed"}));
        items.push(
            json!({"type": "function_call_output", "call_id": format!("call_{i}"),
                          "output": "{\"entries\":[],\"more\":false}"}),
        );
    }
    let items: Vec<Item> = serde_json::from_value(json!(items)).expect("items");
    let request = CreateResponse::new("gpt-5.1", Input::Items(items));
    let client = responses_client(a);
    let seconds = a.repeat as f64;
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..a.runs {
        let client = client.clone();
        let request = request.clone();
        tasks.spawn(async move {
            let mut n = 0u64;
            while t.elapsed().as_secs_f64() < seconds {
                let stream = client.create_stream(&request).await.expect("request");
                stream.final_response().await.expect("response");
                n += 1;
            }
            n
        });
    }
    let mut total = 0;
    while let Some(n) = tasks.join_next().await {
        total += n.expect("join");
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"bench": "ceiling", "concurrency": a.runs, "tool_outputs": a.steps, "requests": total,
               "requests_per_s": total as f64 / secs,
               "latency_ms": secs * 1e3 * a.runs as f64 / total.max(1) as f64})
    );
}
