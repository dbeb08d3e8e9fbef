#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test and bench code
//! Runtime throughput and memory, printed as JSON lines for `cargo xtask bench runtime`.
//!
//! Modes:
//! - default: calls/s for no-op `read_docs(delay=0)` calls in one turn, for every
//!   `--sizes` x `--concurrency`, with the in-process journal (`memory:`, "process"), the
//!   in-memory SQLite journal (`sqlite::memory:`, "memory") and, for `--file-sizes`, a
//!   SQLite file journal at `Durability::Full` ("file_full"); `--journals a,b` picks some;
//!   then (unless `--extras no`) the 30k-calls-at-concurrency-2 success count and the
//!   journal's own ceiling (3 events per call).
//! - `--memory N`: run N calls (file journal, bounded launch window) and print the
//!   process's peak RSS (VmHWM) and the jobs still in memory. Run once per N, in a fresh
//!   process each, so the peaks do not mix.

use std::time::{Duration, Instant};

use agent_journal::{Durability, Journal, JournalOptions, NewEvent};
use agent_runtime::{CallStatus, Deadlines, Runtime, RuntimeOptions};
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use serde_json::json;

/// The same allocator as the `agentctl` binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Calls in the untimed warm-up run of each journal configuration.
const WARM_UP_CALLS: usize = 10_000;

struct Args {
    runs: usize,
    sizes: Vec<usize>,
    file_sizes: Vec<usize>,
    concurrency: Vec<usize>,
    window: usize,
    memory: Option<usize>,
    journals: Vec<String>,
    extras: bool,
}

fn parse_list(s: &str) -> Vec<usize> {
    s.split(',').filter_map(|x| x.trim().parse().ok()).collect()
}

fn args() -> Args {
    let mut a = Args {
        runs: 3,
        sizes: vec![1_000, 10_000, 100_000],
        file_sizes: vec![1_000, 10_000],
        concurrency: vec![2, 16, 64],
        window: 8_192,
        memory: None,
        journals: ["process", "memory", "file_full"]
            .map(String::from)
            .to_vec(),
        extras: true,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < argv.len() {
        let v = &argv[i + 1];
        match argv[i].as_str() {
            "--runs" => a.runs = v.parse().unwrap_or(3),
            "--sizes" => a.sizes = parse_list(v),
            "--file-sizes" => a.file_sizes = parse_list(v),
            "--concurrency" => a.concurrency = parse_list(v),
            "--window" => a.window = v.parse().unwrap_or(8_192),
            "--memory" => a.memory = v.parse().ok(),
            "--journals" => a.journals = v.split(',').map(String::from).collect(),
            "--extras" => a.extras = v != "no",
            _ => {}
        }
        i += 2;
    }
    a
}

struct Run {
    secs: f64,
    ok: usize,
    timeouts: usize,
    jobs_left: usize,
}

/// N no-op calls in one turn; at most `window` calls launched and not yet answered.
async fn calls(
    journal: Journal,
    n: usize,
    concurrency: usize,
    window: usize,
) -> anyhow::Result<Run> {
    let options = RuntimeOptions::default()
        .tools(agent_runtime::demo::registry())
        .concurrency(concurrency)
        .max_in_flight(window.max(1))
        .deadlines(Deadlines::run(agent_runtime::DEFAULT_RUN_DEADLINE));
    let rt = Runtime::recover(journal.clone(), options).await?;
    let turn = rt.start("bench").await?;
    let t0 = Instant::now();
    let mut pending = FuturesUnordered::new();
    let (mut ok, mut timeouts, mut next) = (0, 0, 0);
    let one = |i: usize| {
        let rt = rt.clone();
        let turn = turn.clone();
        async move {
            let key = rt
                .launch(
                    "bench",
                    &turn,
                    &format!("c{i}"),
                    "read_docs",
                    json!({"delay": 0}),
                )
                .await?;
            rt.result("bench", &turn, &key).await
        }
    };
    while next < n.min(window) {
        pending.push(one(next));
        next += 1;
    }
    while let Some(result) = pending.next().await {
        let result = result?;
        if result.ok {
            ok += 1;
        } else if result.status == CallStatus::Timeout {
            timeouts += 1;
        }
        if next < n {
            pending.push(one(next));
            next += 1;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let jobs_left = rt.jobs_in_memory();
    rt.finish("bench", &turn).await?;
    rt.close().await;
    journal.close().await;
    Ok(Run {
        secs,
        ok,
        timeouts,
        jobs_left,
    })
}

/// The journal alone: 3 events per call, appended by `window` concurrent appenders.
async fn journal_ceiling(journal: Journal, n: usize, window: usize) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let mut pending = FuturesUnordered::new();
    let mut next = 0;
    let one = |i: usize| {
        let j = journal.clone();
        async move {
            j.append(
                NewEvent::new("bench", "tool.scheduled", json!({"call_id": i}))
                    .with_dedup_key(format!("s{i}")),
            )
            .await?;
            j.append(NewEvent::new(
                "bench",
                "tool.started",
                json!({"call_id": i}),
            ))
            .await?;
            j.append(
                NewEvent::new("bench", "tool.completed", json!({"call_id": i}))
                    .with_dedup_key(format!("d{i}")),
            )
            .await
        }
    };
    while next < n.min(window) {
        pending.push(one(next));
        next += 1;
    }
    while let Some(r) = pending.next().await {
        r?;
        if next < n {
            pending.push(one(next));
            next += 1;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    journal.close().await;
    Ok(n as f64 / secs)
}

/// The median; for an even count the mean of the two middle values, as the seed's
/// `statistics.median` takes it (the upper middle value alone favoured the faster side).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[mid],
        _ => (v[mid - 1] + v[mid]) / 2.0,
    }
}

fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn open_file(dir: &tempfile::TempDir, durability: Durability) -> anyhow::Result<Journal> {
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    Ok(Journal::open_with(&url, JournalOptions::default().durability(durability)).await?)
}

/// `process`: the in-process `memory:` journal; `memory`: SQLite in memory; else a file
/// at `Durability::Full`.
async fn open_named(name: &str, dir: &tempfile::TempDir) -> anyhow::Result<Journal> {
    Ok(match name {
        "process" => Journal::open(agent_journal::MEMORY_URL).await?,
        "memory" => Journal::open("sqlite::memory:").await?,
        _ => open_file(dir, Durability::Full).await?,
    })
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    // As `agentctl` does once past its single-threaded start.
    tikv_jemalloc_ctl::background_thread::write(true)
        .map_err(|e| anyhow::anyhow!("jemalloc's background threads: {e}"))?;
    let a = args();
    if let Some(n) = a.memory {
        let dir = tempfile::tempdir()?;
        let journal = open_file(&dir, Durability::Normal).await?;
        let run = calls(journal, n, 64, 4_096).await?;
        println!(
            "{}",
            json!({"bench": "memory", "n": n, "vm_hwm_kib": vm_hwm_kib(), "ok": run.ok,
                   "jobs_in_memory_after": run.jobs_left, "secs": run.secs})
        );
        return Ok(());
    }
    for (journal_name, sizes) in [
        ("process", &a.sizes),
        ("memory", &a.sizes),
        ("file_full", &a.file_sizes),
    ] {
        if !a.journals.iter().any(|j| j == journal_name) {
            continue;
        }
        // One untimed run first, so that no measured run pays for the process's first
        // touch of its memory or the first growth of the allocator's heaps.
        {
            let dir = tempfile::tempdir()?;
            let journal = open_named(journal_name, &dir).await?;
            calls(journal, WARM_UP_CALLS, 16, a.window).await?;
        }
        for &n in sizes {
            for &c in &a.concurrency {
                let (mut rates, mut oks, mut touts) = (Vec::new(), Vec::new(), Vec::new());
                for _ in 0..a.runs {
                    let dir = tempfile::tempdir()?;
                    let journal = open_named(journal_name, &dir).await?;
                    let run = calls(journal, n, c, a.window).await?;
                    rates.push(n as f64 / run.secs);
                    oks.push(run.ok as f64);
                    touts.push(run.timeouts as f64);
                }
                // `ok_min`: the worst run's count, so that one run with unfinished calls
                // is seen even when the median run completed every call.
                let ok_min = oks.iter().copied().fold(f64::INFINITY, f64::min);
                println!(
                    "{}",
                    json!({"bench": "calls", "journal": journal_name, "n": n, "concurrency": c,
                           "window": a.window, "runs": a.runs, "calls_per_s": median(rates),
                           "ok": median(oks), "ok_min": ok_min, "timeouts": median(touts)})
                );
            }
        }
    }
    if !a.extras {
        return Ok(());
    }
    // The collapse case of the baseline: 30k calls in one turn at concurrency 2, all launched at once.
    let journal = Journal::open("sqlite::memory:").await?;
    let run = calls(journal, 30_000, 2, 30_000).await?;
    println!(
        "{}",
        json!({"bench": "queue_30k", "n": 30_000, "concurrency": 2, "ok": run.ok,
               "timeouts": run.timeouts, "secs": run.secs})
    );
    // Where the time goes: the journal alone at 3 events per call.
    for (name, n) in [
        ("process", 100_000usize),
        ("memory", 100_000),
        ("file_full", 10_000),
    ] {
        let mut rates = Vec::new();
        for _ in 0..a.runs {
            let dir = tempfile::tempdir()?;
            let journal = open_named(name, &dir).await?;
            rates.push(journal_ceiling(journal, n, a.window).await?);
        }
        println!(
            "{}",
            json!({"bench": "journal_ceiling", "journal": name, "n": n, "calls_per_s": median(rates)})
        );
    }
    let _ = Duration::ZERO;
    Ok(())
}
