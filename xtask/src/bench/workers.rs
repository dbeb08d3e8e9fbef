//! `cargo xtask bench workers`: the worker pool (`agentctl submit` + `agentctl worker`,
//! release) against `agentctl mock serve` with zero model latency: runs and model steps per
//! second through 1, 2 and 4 worker processes, on a SQLite file and on PostgreSQL
//! (`AGENTCTL_TEST_PG_URL`), and the takeover time after a worker is SIGKILLed. Every
//! measurement has a database of its own (a new SQLite file, or a PostgreSQL database
//! created for it and dropped after it), so none finds the runs of another.
//!
//! On PostgreSQL the pool is measured again with 20 ms of model latency and enough runs to
//! fill every worker's slots, against issue 35's targets (2 workers at least 1.6x one, 4 at
//! least 2.5x one), while `pg_stat_activity` is sampled for backends waiting on a lock.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::BufRead as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::Value;

use super::cpu::{CpuMark, CpuUse};
use super::host::Emulator;
use super::pg::PgDatabase;
use super::{BenchCtx, Section, median};
use crate::process::{cargo, run as run_cmd};

/// Runs per measurement, each a 20-step tool loop then the answer (21 model steps).
const RUNS: usize = 40;
/// Runs per measurement with model latency: four workers' slots (4 x 8) twice over.
const LATENCY_RUNS: usize = 64;
/// The model latency of those measurements: milliseconds to the first token.
const LATENCY_MS: &str = "20";
const STEPS_PER_RUN: usize = 21;
/// Lease time-to-live of the takeover measurement, seconds.
const TAKEOVER_TTL: f64 = 2.0;

/// The reading of the figures. Every figure in it is this run's (the lease window is
/// computed from [`TAKEOVER_TTL`]): `sqlite_scale` is 4 workers' rate over one worker's on
/// SQLite, `takeovers` each database's median takeover (`None`: not measured).
fn where_the_time_goes(sqlite_scale: Option<f64>, takeovers: &[(&str, Option<f64>)]) -> String {
    let scale = sqlite_scale.map_or_else(
        || "not measured in this run".to_string(),
        |r| format!("{r:.2}x one worker's rate in this run"),
    );
    let medians: Vec<String> = takeovers
        .iter()
        .map(|(label, secs)| {
            format!(
                "{label} {}",
                secs.map_or_else(|| "not measured".into(), |s| format!("{s:.2} s"))
            )
        })
        .collect();
    let renew = TAKEOVER_TTL / 3.0;
    format!(
        "Where the time goes. On SQLite the workers wait on the model: this zero-latency pool is \
         bound by the emulator's own ceiling for these streamed requests (measured in the host \
         section), so adding workers is not expected to add throughput (4 workers: {scale}). On \
         PostgreSQL each model step is five journal appends (model.requested, model.completed \
         and the tool call's scheduled/started/completed), of which two (model.requested and \
         tool.started) wait for a WAL flush and the others commit with `synchronous_commit` off; \
         appends to different threads take no common lock and wake-ups are sent after the commit \
         (issue 35), so with zero model latency the server's commit rate and this machine's two \
         cores bound the pool, which the rows with model latency below take out of the way. \
         Takeover is the lease: with a {TAKEOVER_TTL} s lease renewed every {renew:.2} s the heir \
         can claim {:.1}-{TAKEOVER_TTL:.1} s after the kill plus at most one poll (50 ms); this \
         run's medians: {}.",
        TAKEOVER_TTL - renew,
        medians.join(", ")
    )
}

/// A pool row: the median over the measurements that finished (`secs`), or "-" when none
/// did; `ok` is whether every measurement ran and completed every run.
fn pool_row(label: &str, workers: usize, secs: &[f64], ok: bool) -> String {
    let mut secs = secs.to_vec();
    let (rps, sps) = if secs.is_empty() {
        ("-".to_string(), "-".to_string())
    } else {
        let s = median(&mut secs);
        (
            format!("{:.1}", RUNS as f64 / s),
            format!("{:.0}", (RUNS * STEPS_PER_RUN) as f64 / s),
        )
    };
    format!(
        "| {label} | {workers} | {rps} | {sps} | {} |",
        if ok { "yes" } else { "**no**" }
    )
}

/// A takeover row: the median of the measurements that succeeded, out of `attempts`; "-"
/// when none did (a median of nothing is not 0 s).
fn takeover_row(label: &str, secs: &[f64], attempts: usize) -> (String, Option<f64>) {
    let mut v = secs.to_vec();
    let m = (!v.is_empty()).then(|| median(&mut v));
    let shown = m.map_or_else(|| "-".to_string(), |m| format!("{m:.2}"));
    let failed = if secs.len() < attempts {
        " (**failed**: the others)"
    } else {
        ""
    };
    (
        format!(
            "| {label} | {shown} | {} of {attempts}{failed} |",
            secs.len()
        ),
        m,
    )
}

/// One measurement's database: a new SQLite file in `scratch`, or, with `pg` (the server's
/// URL), a new PostgreSQL database dropped with this value, so no measurement finds the runs
/// of another.
enum RowDatabase {
    Sqlite(String),
    Postgres(PgDatabase),
}

impl RowDatabase {
    fn url(&self) -> &str {
        match self {
            RowDatabase::Sqlite(url) => url,
            RowDatabase::Postgres(db) => db.url(),
        }
    }
}

fn row_database(pg: Option<&str>, scratch: &Path, tag: &str) -> anyhow::Result<RowDatabase> {
    Ok(match pg {
        Some(admin) => RowDatabase::Postgres(PgDatabase::create(admin, &format!("workers_{tag}"))?),
        None => RowDatabase::Sqlite(format!(
            "sqlite://{}",
            scratch.join(format!("{tag}.db")).display()
        )),
    })
}

struct Worker {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl Worker {
    fn start(agentctl: &Path, db: &str, name: &str, ttl: f64) -> anyhow::Result<Worker> {
        let mut cmd = Command::new(agentctl);
        cmd.args([
            "--db",
            db,
            "--json",
            "worker",
            "--concurrency",
            "8",
            "--poll",
            "0.05",
        ])
        .args(["--lease-ttl", &ttl.to_string(), "--name", name])
        // The emulator's key: the worker reads it from the environment like any client.
        .env("OPENAI_API_KEY", "sk-bench");
        Worker::spawn(cmd)
    }

    /// Starts `cmd` as a worker whose stdout JSON lines are read on a thread of their own.
    fn spawn(mut cmd: Command) -> anyhow::Result<Worker> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start a worker")?;
        let out = child.stdout.take().context("worker stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        });
        Ok(Worker { child, lines: rx })
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status();
    }

    /// Whether the process has already exited (a worker runs until it is stopped: one that
    /// ended by itself crashed or gave up, whatever the runs it left did).
    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    fn stop(mut self) {
        self.signal("TERM");
        let _ = self.child.wait();
    }
}

fn submit(
    agentctl: &Path,
    db: &str,
    base: &str,
    ws: &Path,
    prompt: &str,
) -> anyhow::Result<String> {
    let out = Command::new(agentctl)
        .args([
            "--db",
            db,
            "submit",
            "--base-url",
            base,
            "--approval",
            "auto",
        ])
        .args(["--max-steps", "1000000", "--workspace"])
        .arg(ws)
        .arg(prompt)
        .env("OPENAI_API_KEY", "sk-bench")
        .stderr(Stdio::null())
        .output()
        .context("cannot run agentctl submit")?;
    anyhow::ensure!(out.status.success(), "agentctl submit failed");
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// One pool measurement of `runs` runs.
struct PoolRun {
    /// Seconds until every submitted run ended.
    secs: f64,
    /// Whether every run completed.
    all_completed: bool,
    /// `pg_stat_activity` samples, when the database is PostgreSQL.
    locks: Option<LockSamples>,
    /// The CPU time the measurement took.
    cpu: CpuUse,
}

/// One pool measurement: seconds until every submitted run ended, and whether all completed.
fn pool(
    agentctl: &Path,
    db: &RowDatabase,
    base: &str,
    ws: &Path,
    workers: usize,
    runs: usize,
) -> anyhow::Result<PoolRun> {
    let mut ids = HashSet::new();
    for _ in 0..runs {
        ids.insert(submit(agentctl, db.url(), base, ws, "loop=20; go")?);
    }
    let watch = match db {
        RowDatabase::Postgres(pg) => Some(LockWatch::start(pg.url())?),
        RowDatabase::Sqlite(_) => None,
    };
    let db = db.url();
    let mark = CpuMark::now();
    let started = Instant::now();
    let pool: Vec<Worker> = (0..workers)
        .map(|n| Worker::start(agentctl, db, &format!("bench-{n}"), 15.0))
        .collect::<anyhow::Result<_>>()?;
    let (mut ended, mut completed) = (0, 0);
    let deadline = started + Duration::from_secs(300);
    'wait: while ended < runs && Instant::now() < deadline {
        for w in &pool {
            while let Ok(line) = w.lines.try_recv() {
                if line["type"] == "ended"
                    && line["run_id"].as_str().is_some_and(|r| ids.contains(r))
                {
                    ended += 1;
                    completed += usize::from(line["status"] == "completed");
                    if ended == runs {
                        break 'wait;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let secs = started.elapsed().as_secs_f64();
    let pids: Vec<u32> = pool.iter().map(|w| w.child.id()).collect();
    let cpu = mark.since(&pids);
    let locks = watch.map(LockWatch::stop);
    let mut pool = pool;
    // A worker that died on the way fails the measurement even when the others took over
    // its runs and completed them (the time then holds a lease expiry, not the pool's pace).
    let crashed = pool.iter_mut().map(Worker::exited).filter(|e| *e).count();
    if crashed > 0 {
        eprintln!("xtask: bench workers: {crashed} worker(s) exited before they were stopped");
    }
    for w in pool {
        w.stop();
    }
    Ok(PoolRun {
        secs,
        all_completed: completed == runs && crashed == 0,
        locks,
        cpu,
    })
}

/// Backends of the measured database seen waiting on a lock (`wait_event_type = 'Lock'`).
#[derive(Debug, Default, Clone, Copy)]
struct LockSamples {
    samples: usize,
    with_waits: usize,
    most: u64,
}

impl LockSamples {
    fn add(&mut self, other: LockSamples) {
        self.samples += other.samples;
        self.with_waits += other.with_waits;
        self.most = self.most.max(other.most);
    }
}

/// A `psql` that samples `pg_stat_activity` every 50 ms (`\watch`) while a pool runs.
struct LockWatch {
    child: Child,
    /// Kept open: psql ends its `\\watch` when its input closes.
    _stdin: std::process::ChildStdin,
    counts: mpsc::Receiver<u64>,
}

impl LockWatch {
    fn start(url: &str) -> anyhow::Result<LockWatch> {
        use std::io::Write as _;
        let mut child = Command::new("psql")
            .args(["-X", "-q", "-At", "-d", url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start psql to sample pg_stat_activity")?;
        let mut stdin = child.stdin.take().context("psql stdin")?;
        writeln!(
            stdin,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND pid <> pg_backend_pid() \\watch 0.05"
        )?;
        let out = child.stdout.take().context("psql stdout")?;
        let (tx, counts) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(n) = line.trim().parse::<u64>()
                    && tx.send(n).is_err()
                {
                    return;
                }
            }
        });
        Ok(LockWatch {
            child,
            _stdin: stdin,
            counts,
        })
    }

    fn stop(mut self) -> LockSamples {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut samples = LockSamples::default();
        while let Ok(n) = self.counts.try_recv() {
            samples.samples += 1;
            samples.with_waits += usize::from(n > 0);
            samples.most = samples.most.max(n);
        }
        samples
    }
}

/// Seconds from SIGKILL of the worker driving a run to another worker's claim.
fn takeover(agentctl: &Path, db: &str, base: &str, ws: &Path) -> anyhow::Result<f64> {
    let id = submit(agentctl, db, base, ws, "loop=long; go")?;
    let first = Worker::start(agentctl, db, "bench-first", TAKEOVER_TTL)?;
    let claimed = |w: &Worker, within: Duration| -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(line) = w.lines.recv_timeout(Duration::from_millis(5))
                && line["type"] == "claimed"
                && line["run_id"] == id.as_str()
            {
                return Ok(());
            }
        }
        anyhow::bail!("no claim of {id}")
    };
    claimed(&first, Duration::from_secs(30))?;
    let second = Worker::start(agentctl, db, "bench-second", TAKEOVER_TTL)?;
    std::thread::sleep(Duration::from_millis(700));
    first.signal("KILL");
    let killed = Instant::now();
    let result = claimed(&second, Duration::from_secs(30)).map(|()| killed.elapsed().as_secs_f64());
    // End the endless run so no later measurement's workers pick it up.
    let _ = Command::new(agentctl)
        .args(["--db", db, "interrupt", &id])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    std::thread::sleep(Duration::from_millis(500));
    second.stop();
    let mut first = first;
    let _ = first.child.wait();
    result
}

pub fn run(ctx: &BenchCtx) -> anyhow::Result<Section> {
    let runs = ctx.runs.max(1);
    eprintln!("[workers 1/3] build (release): agentctl");
    run_cmd(cargo().args(["build", "--release", "-j2", "-p", "agentctl"]))?;
    let target = ctx.target_dir();
    let agentctl = target.join("release/agentctl");
    let emulator = Emulator::start(
        &agentctl,
        &ctx.root.join("fixtures/responses/bench-host.json"),
    )?;
    let base = emulator.base_url.clone();
    let scratch =
        std::env::temp_dir().join(format!("agentctl-bench-workers-{}", std::process::id()));
    let ws = scratch.join("workspace");
    std::fs::create_dir_all(&ws)?;
    let mut backends: Vec<(&str, Option<String>)> = vec![("SQLite (Full)", None)];
    if let Some(url) = std::env::var("AGENTCTL_TEST_PG_URL")
        .ok()
        .filter(|v| !v.is_empty())
    {
        backends.push(("PostgreSQL", Some(url)));
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Worker pool (`agentctl submit` + `agentctl worker`)\n"
    );
    let _ = writeln!(
        md,
        "`cargo xtask bench workers`: {RUNS} submitted runs of the host bench's 20-step loop \
         ({STEPS_PER_RUN} model steps each, `list_dir` as the tool, zero model latency, \
         `fixtures/responses/bench-host.json` on one `agentctl mock serve`), driven by 1, 2 or 4 \
         `agentctl worker --concurrency 8` processes (release) on one database; time from \
         starting the workers until every run ended (submits excluded). Medians of {runs} runs. \
         Takeover: a worker driving an endless run is SIGKILLed; the time until another \
         (already running, polling every 50 ms) claims the run, with a {TAKEOVER_TTL} s lease \
         renewed every third of it, so the lease alone accounts for 1.3-2.0 s of it.\n"
    );
    let _ = writeln!(
        md,
        "| database | workers | runs/s | model steps/s | all completed |\n|---|---:|---:|---:|---|"
    );
    let mut takeovers: Vec<(&str, Vec<f64>)> = Vec::new();
    let mut sqlite_secs: Vec<(usize, f64)> = Vec::new();
    for (label, url) in &backends {
        for workers in [1usize, 2, 4] {
            eprintln!("[workers 2/3] {label}: {workers} worker(s), {runs} runs");
            let mut secs = Vec::new();
            let mut ok = true;
            for rep in 0..runs {
                let measured =
                    row_database(url.as_deref(), &scratch, &format!("pool_{workers}_{rep}"))
                        .and_then(|db| pool(&agentctl, &db, &base, &ws, workers, RUNS));
                match measured {
                    Ok(run) => {
                        secs.push(run.secs);
                        ok &= run.all_completed;
                    }
                    Err(err) => {
                        eprintln!("xtask: bench workers: {err:#}");
                        ok = false;
                    }
                }
            }
            if *label == "SQLite (Full)" && !secs.is_empty() {
                let mut v = secs.clone();
                sqlite_secs.push((workers, median(&mut v)));
            }
            let _ = writeln!(md, "{}", pool_row(label, workers, &secs, ok));
        }
        eprintln!("[workers 3/3] {label}: takeover after SIGKILL");
        let mut t = Vec::new();
        for rep in 0..runs {
            let measured = row_database(url.as_deref(), &scratch, &format!("takeover_{rep}"))
                .and_then(|db| takeover(&agentctl, db.url(), &base, &ws));
            match measured {
                Ok(s) => t.push(s),
                Err(err) => eprintln!("xtask: bench workers: takeover: {err:#}"),
            }
        }
        takeovers.push((*label, t));
    }
    let _ = writeln!(
        md,
        "\n| database | takeover after SIGKILL, s (median) | measurements |\n|---|---:|---:|"
    );
    let mut takeover_medians = Vec::new();
    for (label, t) in &takeovers {
        let (row, m) = takeover_row(label, t, runs);
        let _ = writeln!(md, "{row}");
        takeover_medians.push((*label, m));
    }
    // 4 workers' rate over one worker's, SQLite: the ratio of their median times.
    let time_of = |w: usize| sqlite_secs.iter().find(|r| r.0 == w).map(|r| r.1);
    let sqlite_scale = match (time_of(1), time_of(4)) {
        (Some(one), Some(four)) if four > 0.0 => Some(one / four),
        _ => None,
    };
    let _ = writeln!(
        md,
        "\n{}",
        where_the_time_goes(sqlite_scale, &takeover_medians)
    );
    drop(emulator);
    md.push_str(&with_latency(ctx, &agentctl, &scratch, &ws, runs)?);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(Section { markdown: md })
}

/// The PostgreSQL pool with model latency (issue 35's scaling targets), or why not measured.
fn with_latency(
    ctx: &BenchCtx,
    agentctl: &Path,
    scratch: &Path,
    ws: &Path,
    runs: usize,
) -> anyhow::Result<String> {
    let mut md =
        format!("\n### PostgreSQL workers with {LATENCY_MS} ms of model latency (issue 35)\n\n");
    let Some(admin) = std::env::var("AGENTCTL_TEST_PG_URL")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        md.push_str("Not measured: `AGENTCTL_TEST_PG_URL` is unset.\n");
        return Ok(md);
    };
    let emulator = Emulator::start_with(
        agentctl,
        &ctx.root.join("fixtures/responses/bench-host.json"),
        &["--first-token-ms", LATENCY_MS],
    )?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let _ = writeln!(
        md,
        "The same pool and loop, {LATENCY_RUNS} runs per measurement (every worker's 8 slots \
         full at 4 workers), the emulator waiting {LATENCY_MS} ms before each reply's first \
         output (`mock serve --first-token-ms {LATENCY_MS}`). Lock waits: `pg_stat_activity` \
         sampled every 50 ms during each measurement for backends of the database waiting on a \
         lock. CPU (from `/proc`, over each measurement): the share of this machine's {cores} \
         cores that was busy, and CPU milliseconds per model step spent by the whole machine, \
         by the worker processes and by the PostgreSQL server (the emulator and the rest make \
         up the difference). Medians of {runs} runs.\n\n\
         | workers | model steps/s | vs 1 worker | samples with a lock wait | most waiting at once | CPU busy | CPU ms/step: all | workers | PostgreSQL | all completed |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    let mut rates: Vec<(usize, Option<f64>, bool)> = Vec::new();
    for workers in [1usize, 2, 4] {
        eprintln!(
            "[workers] PostgreSQL, {LATENCY_MS} ms latency: {workers} worker(s), {runs} runs"
        );
        let (mut secs, mut ok, mut locks) = (Vec::new(), true, LockSamples::default());
        let mut cpu: Vec<CpuUse> = Vec::new();
        for rep in 0..runs {
            let measured = row_database(Some(&admin), scratch, &format!("latency_{workers}_{rep}"))
                .and_then(|db| pool(agentctl, &db, &emulator.base_url, ws, workers, LATENCY_RUNS));
            match measured {
                Ok(run) => {
                    secs.push(run.secs);
                    ok &= run.all_completed;
                    locks.add(run.locks.unwrap_or_default());
                    cpu.push(run.cpu);
                }
                Err(err) => {
                    eprintln!("xtask: bench workers: {err:#}");
                    ok = false;
                }
            }
        }
        let s = median(&mut secs);
        let sps = (s > 0.0).then(|| (LATENCY_RUNS * STEPS_PER_RUN) as f64 / s);
        let base = rates.first().and_then(|r| r.1);
        let ratio = match (sps, base) {
            (Some(x), Some(b)) if b > 0.0 => format!("{:.2}x", x / b),
            _ => "-".into(),
        };
        let steps = (LATENCY_RUNS * STEPS_PER_RUN) as f64;
        let per_step = |f: fn(&CpuUse) -> f64| {
            let mut v: Vec<f64> = cpu.iter().map(|c| 1e3 * f(c) / steps).collect();
            if v.is_empty() {
                "-".to_string()
            } else {
                format!("{:.2}", median(&mut v))
            }
        };
        let (all, workers_ms, postgres_ms) = (
            per_step(|c| c.busy_s),
            per_step(|c| c.processes_s),
            per_step(|c| c.postgres_s),
        );
        let mut busy: Vec<f64> = cpu.iter().map(|c| 100.0 * c.busy).collect();
        let busy = if busy.is_empty() {
            "-".to_string()
        } else {
            format!("{:.0}%", median(&mut busy))
        };
        let _ = writeln!(
            md,
            "| {workers} | {} | {ratio} | {} of {} | {} | {busy} | {all} | {workers_ms} | {postgres_ms} | {} |",
            sps.map_or("-".into(), |v| format!("{v:.0}")),
            locks.with_waits,
            locks.samples,
            locks.most,
            if ok { "yes" } else { "**no**" }
        );
        rates.push((workers, sps, ok));
    }
    md.push_str(&scaling_targets(&rates));
    Ok(md)
}

/// Issue 35's scaling targets, from (workers, steps/s, every run completed) rows.
fn scaling_targets(rates: &[(usize, Option<f64>, bool)]) -> String {
    let one = rates.iter().find(|r| r.0 == 1);
    let verdict = |workers: usize, times: f64| {
        let row = rates.iter().find(|r| r.0 == workers);
        let ok = row.is_some_and(|r| r.2) && one.is_some_and(|r| r.2);
        let ratio = match (row.and_then(|r| r.1), one.and_then(|r| r.1)) {
            (Some(x), Some(b)) if b > 0.0 => Some(x / b),
            _ => None,
        };
        let v = super::verdict::Verdict::of(ok, ratio, |r| r >= times);
        format!(
            "- {workers} workers at least {times}x one: {v} ({})\n",
            ratio.map_or("-".into(), |r| format!("{r:.2}x"))
        )
    };
    format!(
        "\nTargets of issue 35, checked against this run:\n\n{}{}",
        verdict(2, 1.6),
        verdict(4, 2.5)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reading_holds_this_runs_figures_only() {
        let text = where_the_time_goes(
            Some(0.847),
            &[("SQLite (Full)", Some(1.984)), ("PostgreSQL", None)],
        );
        assert!(
            text.contains("(4 workers: 0.85x one worker's rate in this run)"),
            "{text}"
        );
        assert!(
            text.contains("this run's medians: SQLite (Full) 1.98 s, PostgreSQL not measured."),
            "{text}"
        );
        assert!(text.contains("renewed every 0.67 s"), "{text}");
        assert!(
            text.contains("can claim 1.3-2.0 s after the kill"),
            "{text}"
        );
        // Figures of earlier runs that the text used to carry as constants.
        assert!(!text.contains("270"), "{text}");
        assert!(!text.contains("1.97-2.00"), "{text}");
    }

    #[test]
    fn a_row_with_no_finished_measurement_shows_no_figure() {
        assert_eq!(
            pool_row("SQLite (Full)", 2, &[], false),
            "| SQLite (Full) | 2 | - | - | **no** |"
        );
        assert_eq!(
            pool_row("SQLite (Full)", 1, &[0.5, 0.4, 0.6], true),
            "| SQLite (Full) | 1 | 80.0 | 1680 | yes |"
        );
        let (row, m) = takeover_row("PostgreSQL", &[], 3);
        assert_eq!(row, "| PostgreSQL | - | 0 of 3 (**failed**: the others) |");
        assert_eq!(m, None);
        let (row, m) = takeover_row("SQLite (Full)", &[1.9, 2.0, 1.95], 3);
        assert_eq!(row, "| SQLite (Full) | 1.95 | 3 of 3 |");
        assert_eq!(m, Some(1.95));
    }

    #[cfg(unix)]
    #[test]
    fn a_worker_that_exited_by_itself_is_seen() {
        let mut gone = Command::new("sh");
        gone.args(["-c", "exit 3"]);
        let mut gone = Worker::spawn(gone).unwrap();
        let mut running = Command::new("sleep");
        running.arg("30");
        let mut running = Worker::spawn(running).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !gone.exited() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(gone.exited());
        assert!(!running.exited());
        let _ = running.child.kill();
        let _ = running.child.wait();
    }

    #[test]
    fn scaling_targets_read_the_ratios_and_failed_runs() {
        let md = scaling_targets(&[
            (1, Some(100.0), true),
            (2, Some(170.0), true),
            (4, Some(200.0), true),
        ]);
        assert!(
            md.contains("2 workers at least 1.6x one: met (1.70x)"),
            "{md}"
        );
        assert!(
            md.contains("4 workers at least 2.5x one: **not met** (2.00x)"),
            "{md}"
        );
        let md = scaling_targets(&[
            (1, Some(100.0), true),
            (2, Some(300.0), false),
            (4, None, true),
        ]);
        assert!(md.contains("1.6x one: **not met** (not every run"), "{md}");
        assert!(md.contains("2.5x one: **not measured**"), "{md}");
    }
}
