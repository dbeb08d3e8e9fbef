//! The load bench of `agentctl serve` (run by `cargo xtask bench serve`): W SSE watchers on
//! R live runs of one `serve` process; every watcher must get every event of its run, in
//! order, exactly once. Prints one JSON line: memory and CPU of the server per watcher, and
//! the delay from an event's append request to its delivery (p50, p99).
//!
//! `bench_serve AGENTCTL WATCHERS RUNS EVENTS_PER_RUN`
//!
//! The events are steers posted through the server's own API (`POST /runs/{id}/steer`), so
//! the append and its delivery happen in the server process, as they do for decisions made
//! in the console; the delay is measured from just before the POST is sent to the moment a
//! watcher has parsed the message, so it bounds commit-to-delivery from above.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a bench program

use std::collections::HashMap;
use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::{Value, json};

const TOKEN: &str = "bench-token-0123456789abcdef0123456789abcdef";

/// The server under test, killed however the bench ends (a failed assertion included), so
/// that no server outlives it.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let agentctl = args
        .get(1)
        .expect("usage: bench_serve AGENTCTL WATCHERS RUNS EVENTS");
    let watchers: usize = args.get(2).map_or(1000, |a| a.parse().unwrap());
    let runs: usize = args.get(3).map_or(100, |a| a.parse().unwrap());
    let per_run: usize = args.get(4).map_or(20, |a| a.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());

    // The runs: submitted, never driven (their threads are what is watched).
    let journal = agent_journal::Journal::open(&db).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..runs {
        let ws = dir.path().join(format!("ws{i}"));
        std::fs::create_dir_all(&ws).unwrap();
        let new = agent_host::run::NewRun::new(format!("bench run {i}"), ws);
        let id = agent_host::run::submit(&journal, &agent_host::tools::ToolConfig::default(), new)
            .await
            .unwrap();
        let last = journal
            .last_seq(&agent_host::run::kinds::thread_of(&id))
            .await
            .unwrap()
            .unwrap_or(0);
        ids.push((id, last));
    }
    journal.close().await;

    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let mut serve = Server(
        Command::new(agentctl)
            .args([
                "--db",
                &db,
                "--json",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--token-file",
            ])
            .arg(&token_file)
            .args(["--max-watchers", &(watchers + 16).to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufReader::new(serve.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let listening: Value = serde_json::from_str(&line).unwrap();
    let base = format!("http://{}", listening["addr"].as_str().unwrap());
    let pid = serve.0.id();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (rss0, cpu0) = (rss_kib(pid), cpu_ms(pid));

    // The watchers: `per_run` events expected each, after the run's current last seq.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(watchers + 16)
        .build()
        .unwrap();
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut tasks = Vec::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(watchers);
    for w in 0..watchers {
        let (run, after) = ids[w % runs].clone();
        let url = format!("{base}/api/v1/runs/{run}/events/stream?after={after}");
        let client = client.clone();
        let sent = Arc::clone(&sent);
        let ready = ready_tx.clone();
        tasks.push(tokio::spawn(async move {
            let resp = client.get(url).bearer_auth(TOKEN).send().await.unwrap();
            assert!(resp.status().is_success(), "{}", resp.status());
            let _ = ready.send(()).await;
            drop(ready);
            let mut stream = resp.bytes_stream();
            let mut buf = String::new();
            let mut seqs = Vec::new();
            let mut delays = Vec::new();
            while seqs.len() < per_run {
                let Ok(Some(chunk)) =
                    tokio::time::timeout(Duration::from_secs(60), stream.next()).await
                else {
                    break;
                };
                let Ok(chunk) = chunk else { break };
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buf.find("\n\n") {
                    let message: String = buf.drain(..end + 2).collect();
                    let Some(data) = message.lines().find_map(|l| l.strip_prefix("data:")) else {
                        continue;
                    };
                    let now = Instant::now();
                    let event: Value = serde_json::from_str(data.trim()).unwrap();
                    assert_eq!(event["kind"], "steer.requested", "{event}");
                    seqs.push(event["seq"].as_i64().unwrap());
                    if std::env::var_os("BENCH_SERVE_DEBUG").is_some() {
                        eprintln!("{}", event);
                    }
                    let text = event["lines"][0]["text"].as_str().unwrap_or("").to_string();
                    if let Some(at) = sent.lock().unwrap().get(&text) {
                        delays.push(now.duration_since(*at).as_secs_f64() * 1000.0);
                    }
                }
            }
            (seqs, delays)
        }));
    }
    drop(ready_tx);
    let mut connected = 0;
    while connected < watchers && ready_rx.recv().await.is_some() {
        connected += 1;
    }
    assert_eq!(connected, watchers, "not every watcher connected");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss1, cpu1) = (rss_kib(pid), cpu_ms(pid));

    // The events: rounds of one steer per run, all runs at once.
    let started = Instant::now();
    for round in 0..per_run {
        let posts = ids.iter().map(|(run, _)| {
            let text = format!("tick {round} of {run}");
            sent.lock().unwrap().insert(text.clone(), Instant::now());
            client
                .post(format!("{base}/api/v1/runs/{run}/steer"))
                .bearer_auth(TOKEN)
                .json(&json!({ "text": text }))
                .send()
        });
        for resp in futures::future::join_all(posts).await {
            assert_eq!(resp.unwrap().status().as_u16(), 202);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut delays = Vec::new();
    let (mut complete, mut in_order) = (0, 0);
    for task in tasks {
        let (seqs, d) = task.await.unwrap();
        if seqs.len() == per_run {
            complete += 1;
        }
        // Seqs are journal positions: increasing along a thread, not consecutive.
        if seqs.windows(2).all(|w| w[1] > w[0]) {
            in_order += 1;
        }
        delays.extend(d);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (rss2, cpu2) = (rss_kib(pid), cpu_ms(pid));
    drop(serve);
    delays.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        if delays.is_empty() {
            f64::NAN
        } else {
            delays[((delays.len() - 1) as f64 * p).round() as usize]
        }
    };
    let deliveries = watchers * per_run;
    println!(
        "{}",
        json!({
            "watchers": watchers, "runs": runs, "events_per_run": per_run,
            "deliveries": deliveries, "complete": complete, "in_order": in_order,
            "delays_measured": delays.len(),
            "rss_idle_kib": rss0, "rss_watching_kib": rss1, "rss_end_kib": rss2,
            "kib_per_watcher": (rss1.saturating_sub(rss0)) as f64 / watchers as f64,
            "cpu_connect_ms": cpu1.saturating_sub(cpu0),
            "cpu_deliver_ms": cpu2.saturating_sub(cpu1),
            "cpu_us_per_delivery": (cpu2.saturating_sub(cpu1)) as f64 * 1000.0 / deliveries as f64,
            "delay_p50_ms": pct(0.50), "delay_p99_ms": pct(0.99),
            "seconds": elapsed,
        })
    );
}

/// The resident memory of process `pid` (KiB).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The CPU time (user + system) of process `pid` so far (ms, at the clock tick's 10 ms).
fn cpu_ms(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which may hold spaces: state is the 3rd field.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    (ticks(11) + ticks(12)) * 10
}
