//! `cargo xtask bench host`: the agent host (`crates/host/examples/bench_host.rs`, release)
//! beside the OpenAI Agents SDK (`interop/agents_sdk/bench_agents_sdk.py`, `openai-agents`
//! pinned in `interop/agents_sdk/requirements.txt`, installed into its own virtualenv), both
//! driven by the same `agentctl mock serve` process (release) with
//! `fixtures/responses/bench-host.json`, in one run.
//!
//! Environment: `BENCH_RUNS` (repetitions, medians), `BENCH_HOST_CONCURRENCY` (default
//! `1,100,1000`), `BENCH_HOST_RESUME_STEPS` (default `1000,10000`), `AGENTCTL_TEST_PG_URL`
//! (adds the PostgreSQL rows), `BENCH_HOST_SDK_MAX_RUNS_REPEAT` (repetitions of the SDK's
//! 1000-run case, default 1: it takes minutes), `BENCH_HOST_LINES=FILE` (only render the
//! section from JSON lines saved from the two drivers, measuring nothing).

use std::fmt::Write as _;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context as _;
use serde_json::Value;

use super::baseline::parse_lines;
use super::{BenchCtx, Section, median};
use crate::process::{cargo, output, run as run_cmd};

const SDK_VERSION: &str = "0.24.0";

/// The emulator, killed on drop.
pub(super) struct Emulator {
    child: Child,
    pub(super) base_url: String,
}

impl Emulator {
    pub(super) fn start(agentctl: &Path, script: &Path) -> anyhow::Result<Emulator> {
        let mut child = Command::new(agentctl)
            .args(["mock", "serve", "--addr", "127.0.0.1:0", "--script"])
            .arg(script)
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {}", agentctl.display()))?;
        let base = child
            .stdout
            .take()
            .and_then(|out| std::io::BufReader::new(out).lines().next())
            .and_then(Result::ok)
            .map(|l| l.trim().to_owned())
            .filter(|l| l.starts_with("http://"));
        match base {
            Some(base_url) => Ok(Emulator { child, base_url }),
            None => {
                let _ = child.kill();
                anyhow::bail!("the emulator did not print its base URL")
            }
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sdk_venv(dir: &Path) -> anyhow::Result<PathBuf> {
    let venv = dir.join(".venv");
    let python = venv.join("bin").join("python");
    if !python.exists() {
        run_cmd(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    run_cmd(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(dir.join("requirements.txt")),
    )?;
    Ok(python)
}

fn list_env(name: &str, default: &str) -> Vec<u64> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter_map(|x| x.trim().parse().ok())
        .collect()
}

/// Every line of `bench`/`label` (and `runs` when given).
fn rows<'a>(lines: &'a [Value], bench: &str, label: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["bench"] == bench && l["label"] == label)
        .collect()
}

fn med(lines: &[&Value], key: &str) -> Option<f64> {
    let mut v: Vec<f64> = lines.iter().filter_map(|l| l[key].as_f64()).collect();
    (!v.is_empty()).then(|| median(&mut v))
}

fn all_ok(lines: &[&Value], expect_runs: Option<u64>) -> bool {
    !lines.is_empty()
        && lines.iter().all(|l| match expect_runs {
            Some(n) => l["ok"].as_u64() == Some(n),
            None => l["ok"] == true,
        })
}

pub fn run(ctx: &BenchCtx) -> anyhow::Result<Section> {
    let runs = ctx.runs.max(1);
    let concurrency = list_env("BENCH_HOST_CONCURRENCY", "1,100,1000");
    let resume_steps = list_env("BENCH_HOST_RESUME_STEPS", "1000,10000");
    let sdk_big_repeat = list_env("BENCH_HOST_SDK_MAX_RUNS_REPEAT", "1")
        .first()
        .copied()
        .unwrap_or(1) as usize;
    let pg = std::env::var("AGENTCTL_TEST_PG_URL")
        .ok()
        .filter(|v| !v.is_empty());
    if let Some(saved) = std::env::var_os("BENCH_HOST_LINES") {
        // Re-render from the JSON lines of an earlier (or hand-run) measurement.
        let text = std::fs::read_to_string(&saved)
            .with_context(|| format!("cannot read BENCH_HOST_LINES {}", saved.to_string_lossy()))?;
        let lines = parse_lines(&text)?;
        let has_pg = lines.iter().any(|l| l["label"] == "postgres_full");
        return Ok(Section {
            markdown: render(&lines, runs, &concurrency, &resume_steps, has_pg),
        });
    }
    eprintln!("[host 1/6] build (release): agentctl, bench_host; SDK venv");
    // One command for both, so the dependencies are built once with agentctl's features
    // (`-p agent-host` alone unifies features differently and rebuilds them all).
    run_cmd(cargo().args([
        "build",
        "--release",
        "-j2",
        "-p",
        "agentctl",
        "-p",
        "agent-host",
        // Naming an example selects only that target: the binary must be named too.
        "--bin",
        "agentctl",
        "--example",
        "bench_host",
    ]))?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| ctx.root.join("target"));
    let agentctl = target.join("release/agentctl");
    let bin = target.join("release/examples/bench_host");
    let sdk_dir = ctx.root.join("interop/agents_sdk");
    let python = sdk_venv(&sdk_dir)?;
    let sdk_script = sdk_dir.join("bench_agents_sdk.py");
    let emulator = Emulator::start(
        &agentctl,
        &ctx.root.join("fixtures/responses/bench-host.json"),
    )?;
    let base = emulator.base_url.clone();
    eprintln!("xtask: emulator at {base}");
    let scratch = std::env::temp_dir().join(format!("agentctl-bench-host-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let sqlite = |name: &str| format!("sqlite://{}", scratch.join(name).display());
    // A failed measurement leaves its rows out (shown as n/a or failed), not the whole run.
    let ours = |args: &[&str]| -> anyhow::Result<Vec<Value>> {
        let mut cmd = Command::new(&bin);
        cmd.args(["--base-url", &base]).args(args);
        Ok(kept(output(&mut cmd).and_then(|o| parse_lines(&o)), args))
    };
    let sdk = |args: &[&str]| -> anyhow::Result<Vec<Value>> {
        let mut cmd = Command::new(&python);
        cmd.arg(&sdk_script)
            .args(args)
            .env("OPENAI_BASE_URL", &base)
            .env("OPENAI_API_KEY", "sk-bench");
        Ok(kept(output(&mut cmd).and_then(|o| parse_lines(&o)), args))
    };
    let mut lines: Vec<Value> = Vec::new();
    let repeat = runs.to_string();

    eprintln!("[host 2/6] emulator ceiling for the loop's requests");
    for (conc, outputs) in [("1", "0"), ("1", "100"), ("4", "100"), ("1", "1000")] {
        lines.extend(ours(&[
            "--mode", "ceiling", "--runs", conc, "--steps", outputs, "--repeat", "3",
        ])?);
    }

    eprintln!("[host 3/6] one 200-step run: ours (memory:, SQLite Full/Normal, PostgreSQL)");
    let mut journals: Vec<(String, String, &str)> = vec![
        ("memory".into(), "memory:".into(), "full"),
        ("sqlite_full".into(), sqlite("single-full.db"), "full"),
        ("sqlite_normal".into(), sqlite("single-normal.db"), "normal"),
    ];
    if let Some(url) = &pg {
        journals.push(("postgres_full".into(), url.clone(), "full"));
    }
    for (label, url, durability) in &journals {
        lines.extend(ours(&[
            "--mode",
            "single",
            "--steps",
            "200",
            "--repeat",
            &repeat,
            "--journal",
            url,
            "--durability",
            durability,
            "--label",
            label,
        ])?);
    }
    eprintln!("[host 4/6] one 200-step run: the Agents SDK (SQLiteSession file, no session)");
    for session in ["sqlite", "none"] {
        lines.extend(sdk(&["single", "200", &repeat, session])?);
    }

    eprintln!(
        "[host 5/6] concurrent runs of 20 steps: ours (memory:, SQLite Full over HTTP/1.1 and HTTP/2), the SDK"
    );
    for &c in &concurrency {
        let c_str = c.to_string();
        let reps = if c >= 1000 { 1 } else { runs };
        for rep in 0..reps {
            for (label, url, http) in [
                ("memory", "memory:".to_string(), "1"),
                ("sqlite_full", sqlite(&format!("conc-{c}-{rep}.db")), "1"),
                (
                    "sqlite_full_h2",
                    sqlite(&format!("conc-h2-{c}-{rep}.db")),
                    "2",
                ),
            ] {
                lines.extend(ours(&[
                    "--mode",
                    "concurrent",
                    "--steps",
                    "20",
                    "--runs",
                    &c_str,
                    "--journal",
                    &url,
                    "--http",
                    http,
                    "--label",
                    label,
                ])?);
            }
        }
        let sdk_reps = if c >= 1000 { sdk_big_repeat } else { runs };
        for _ in 0..sdk_reps {
            lines.extend(sdk(&["concurrent", "20", &c_str])?);
        }
    }

    eprintln!("[host 6/6] resume to the first new request: SQLite Full, PostgreSQL");
    let mut backends: Vec<(&str, String)> = Vec::new();
    for &n in &resume_steps {
        backends.push(("sqlite_full", sqlite(&format!("resume-{n}.db"))));
    }
    for (i, &n) in resume_steps.iter().enumerate() {
        let mut targets = vec![("sqlite_full", backends[i].1.clone())];
        if let Some(url) = &pg {
            targets.push(("postgres_full", url.clone()));
        }
        for (label, url) in targets {
            eprintln!("[host 6/6] building a {n}-step run on {label}");
            lines.extend(ours(&[
                "--mode",
                "resume",
                "--steps",
                &n.to_string(),
                "--repeat",
                &repeat,
                "--journal",
                &url,
                "--label",
                label,
            ])?);
        }
    }
    drop(emulator);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(Section {
        markdown: render(&lines, runs, &concurrency, &resume_steps, pg.is_some()),
    })
}

/// A concurrency row checked against the issue's target: our figures over the SDK's.
struct ConcTarget {
    runs: u64,
    transport: &'static str,
    steps: Option<f64>,
    /// Peak RSS above the start, per run.
    memory: Option<f64>,
    /// The whole process's peak.
    whole: Option<f64>,
}

fn kept(lines: anyhow::Result<Vec<Value>>, args: &[&str]) -> Vec<Value> {
    match lines {
        Ok(lines) => lines,
        Err(err) => {
            eprintln!("xtask: bench host: {} failed: {err:#}", args.join(" "));
            Vec::new()
        }
    }
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.digits$}"))
}

fn fmtx(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.2}x"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn verdict<T: Copy>(value: Option<T>, met: impl Fn(T) -> bool) -> &'static str {
    match value {
        None => "**not measured**",
        Some(v) if met(v) => "met",
        Some(_) => "**not met**",
    }
}

fn render(
    lines: &[Value],
    runs: usize,
    concurrency: &[u64],
    resume_steps: &[u64],
    pg: bool,
) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Agent host (`agent-host`) vs the OpenAI Agents SDK\n"
    );
    let _ = writeln!(
        md,
        "`cargo xtask bench host`: `crates/host/examples/bench_host.rs` (release, the library \
         `agentctl run` drives, `ApprovalMode::Auto`, the no-op `list_dir` tool on an empty \
         workspace) beside `interop/agents_sdk/bench_agents_sdk.py` (`openai-agents=={SDK_VERSION}`, \
         an `Agent` with one no-op function tool, `OpenAIResponsesModel` over \
         `AsyncOpenAI(base_url=emulator)`, `Runner.run(max_turns=...)`), both against the same \
         `agentctl mock serve` process (release) with `fixtures/responses/bench-host.json`: while \
         the context holds fewer tool outputs than the loop's length the model calls `list_dir`, \
         then it answers `BENCH-DONE`; a row counts only if every run ended with that answer. \
         Steps are model requests (a 200-step loop is 201: 200 tool calls, then the answer). Both \
         sides send the whole history every step (stateless). The emulator writes each \
         zero-latency stream as one body (every event is ready at once); both clients still \
         parse it event by event. Medians of {runs} runs unless stated; 2 cores shared with \
         other builds, so absolute figures are noisy, ratios less so.\n"
    );

    // Emulator ceiling.
    let ceiling = |conc: u64, outputs: u64| {
        lines.iter().find(|l| {
            l["bench"] == "ceiling" && l["concurrency"] == conc && l["tool_outputs"] == outputs
        })
    };
    let _ = writeln!(
        md,
        "**The emulator's own ceiling** for the loop's streamed requests (a Rust client \
         hammering it, no host, no journal, 3 s each):\n"
    );
    let _ = writeln!(
        md,
        "| clients | tool outputs in the context | requests/s | latency ms |\n|---:|---:|---:|---:|"
    );
    for (c, o) in [(1, 0), (1, 100), (4, 100), (1, 1000)] {
        if let Some(l) = ceiling(c, o) {
            let _ = writeln!(
                md,
                "| {c} | {o} | {} | {} |",
                fmt(l["requests_per_s"].as_f64(), 0),
                fmt(l["latency_ms"].as_f64(), 2)
            );
        }
    }
    let emu_ms = ceiling(1, 100).and_then(|l| l["latency_ms"].as_f64());
    let _ = writeln!(md);

    // One run.
    let single = |label: &str| rows(lines, "single", label);
    let sdk_sqlite = med(&single("sdk_sqlite"), "steps_per_s");
    let sdk_none = med(&single("sdk_none"), "steps_per_s");
    let _ = writeln!(
        md,
        "**One run of 200 tool steps** (then the answer). Host overhead per step = wall time per \
         step minus the emulator's latency for a mid-run request (100 tool outputs, one client: \
         {} ms).\n",
        fmt(emu_ms, 2)
    );
    let _ = writeln!(
        md,
        "| host | journal / session | steps/s | ms/step | overhead ms/step | vs SDK SQLiteSession | vs SDK no session | all runs ended with the answer |\n|---|---|---:|---:|---:|---:|---:|---|"
    );
    let mut ours_full = None;
    for (label, side, what) in [
        ("memory", "ours", "`memory:`"),
        (
            "sqlite_full",
            "ours",
            "SQLite file, `Durability::Full` (default)",
        ),
        ("sqlite_normal", "ours", "SQLite file, `Durability::Normal`"),
        ("postgres_full", "ours", "PostgreSQL, `Full`"),
        ("sdk_sqlite", "Agents SDK", "`SQLiteSession` file"),
        ("sdk_none", "Agents SDK", "no session"),
    ] {
        let r = single(label);
        if r.is_empty() {
            continue;
        }
        let sps = med(&r, "steps_per_s");
        if label == "sqlite_full" {
            ours_full = sps;
        }
        let ms = sps.map(|s| 1e3 / s);
        let overhead = ms.zip(emu_ms).map(|(m, e)| m - e);
        let _ = writeln!(
            md,
            "| {side} | {what} | {} | {} | {} | {} | {} | {} |",
            fmt(sps, 0),
            fmt(ms, 2),
            fmt(overhead, 2),
            fmtx(ratio(sps, sdk_sqlite)),
            fmtx(ratio(sps, sdk_none)),
            if all_ok(&r, None) {
                "yes"
            } else {
                "**failed**"
            }
        );
    }
    let _ = writeln!(md);

    // Concurrency.
    let conc = |label: &str, c: u64| -> Vec<&Value> {
        rows(lines, "concurrent", label)
            .into_iter()
            .filter(|l| l["runs"] == c)
            .collect()
    };
    let _ = writeln!(
        md,
        "**Concurrent runs of 20 tool steps in one process** (ours: one tokio runtime, one \
         journal, one HTTP client; the SDK: `asyncio.gather` of `Runner.run`, no session, its \
         client's HTTP/1.1 with a 600 s connect timeout: at its default 5 s, most of 1,000 runs \
         ended in `APITimeoutError` before their first step). Our client speaks HTTP/1.1 to \
         the plain-HTTP emulator unless told otherwise: one connection per run in flight. Against the public API (TLS) it negotiates \
         HTTP/2 and the runs share a connection; the HTTP/2 rows measure that (h2c to the \
         emulator). Peak RSS per run = (the process's VmHWM at the end - its RSS just before the \
         runs started) / runs, so the interpreter's or the binary's fixed footprint (shown as the \
         whole-process peak) is not spread over the runs; a fresh process per row; the 1000-run \
         SDK row is measured once by default, it takes minutes.\n"
    );
    let _ = writeln!(
        md,
        "| runs | host | total steps/s | peak RSS, whole process (MiB) | peak RSS per run (MiB) | steps/s vs SDK | memory per run vs SDK | all runs ended with the answer |\n|---:|---|---:|---:|---:|---:|---:|---|"
    );
    let mut conc_targets = Vec::new();
    for &c in concurrency {
        let sdk_rows = conc("sdk_none", c);
        let s_sps = med(&sdk_rows, "steps_per_s");
        let s_mem = med(&sdk_rows, "hwm_above_start_per_run_kib");
        let s_whole = med(&sdk_rows, "vm_hwm_kib");
        for (label, what) in [
            ("memory", "ours, `memory:`"),
            ("sqlite_full", "ours, SQLite `Full`, HTTP/1.1"),
            ("sqlite_full_h2", "ours, SQLite `Full`, HTTP/2"),
            ("sdk_none", "Agents SDK"),
        ] {
            let r = conc(label, c);
            if r.is_empty() {
                continue;
            }
            let sps = med(&r, "steps_per_s");
            let mem = med(&r, "hwm_above_start_per_run_kib");
            let whole = med(&r, "vm_hwm_kib");
            if label.starts_with("sqlite_full") && c >= 100 {
                conc_targets.push(ConcTarget {
                    runs: c,
                    transport: if label.ends_with("_h2") {
                        "HTTP/2"
                    } else {
                        "HTTP/1.1"
                    },
                    steps: ratio(sps, s_sps),
                    memory: ratio(mem, s_mem),
                    whole: ratio(whole, s_whole),
                });
            }
            let _ = writeln!(
                md,
                "| {c} | {what} | {} | {} | {} | {} | {} | {} |",
                fmt(sps, 0),
                fmt(whole.map(|k| k / 1024.0), 1),
                fmt(mem.map(|k| k / 1024.0), 3),
                fmtx(ratio(sps, s_sps)),
                fmtx(ratio(mem, s_mem)),
                if all_ok(&r, Some(c)) {
                    "yes"
                } else {
                    "**failed**"
                }
            );
        }
    }
    let _ = writeln!(md);

    // Resume.
    let _ = writeln!(
        md,
        "**Resume**: a run of the open-ended loop is driven until its step budget pauses it, \
         then resumed with one more step, {runs} times, each with a fresh journal handle (as a \
         new `agentctl resume` process has); time from the `Host::resume` call to the \
         `model.requested` event of the new step (journal fold, claim, runtime adoption, request \
         built; the request is sent right after).\n"
    );
    let _ = writeln!(
        md,
        "| journal | recorded steps | journal seq at resume | build the run (s) | to first new request (ms) |\n|---|---:|---:|---:|---:|"
    );
    let mut resume_10k = None;
    for label in ["sqlite_full", "postgres_full"] {
        if label == "postgres_full" && !pg {
            continue;
        }
        for &n in resume_steps {
            let builds: Vec<&Value> = rows(lines, "resume_build", label)
                .into_iter()
                .filter(|l| l["steps"].as_u64().is_some_and(|s| s + 5 >= n && s <= n))
                .collect();
            let r: Vec<&Value> = rows(lines, "resume", label)
                .into_iter()
                .filter(|l| {
                    l["recorded_steps"]
                        .as_u64()
                        .is_some_and(|s| s >= n.saturating_sub(5) && s < n + runs as u64 + 5)
                })
                .collect();
            let ms = med(&r, "to_first_request_ms");
            if n == 10_000 && label == "sqlite_full" {
                resume_10k = ms;
            }
            let _ = writeln!(
                md,
                "| {label} | {n} | {} | {} | {} |",
                fmt(med(&r, "events"), 0),
                fmt(med(&builds, "secs"), 1),
                fmt(ms, 1)
            );
        }
    }
    let _ = writeln!(md);

    // Targets.
    let _ = writeln!(md, "Targets of issue 16, checked against this run:\n");
    let single_ratio = ratio(ours_full, sdk_sqlite);
    let _ = writeln!(
        md,
        "- 50x the SDK's steps/s for one 200-step run (ours SQLite `Full` vs the SDK's \
         `SQLiteSession`): {}; {} steps/s vs {} steps/s = {}.",
        verdict(single_ratio, |r| r >= 50.0),
        fmt(ours_full, 0),
        fmt(sdk_sqlite, 1),
        fmtx(single_ratio)
    );
    // Memory per run is checked two ways. The issue's own figure for the SDK (1.33 MiB per
    // run at 100 runs) is its whole process's peak over the runs; the stricter one leaves
    // out each process's footprint before the runs start, which for the SDK holds its
    // imported code and for ours not the code a binary pages in on first use.
    for t in conc_targets {
        let _ = writeln!(
            md,
            "- {} concurrent runs, 50x the SDK's steps/s with at most 1/5 of its memory per run \
             (ours SQLite `Full`, {}): {}; steps/s {}, memory per run {} (the whole process's \
             peak over the runs, how the issue took the SDK's 1.33 MiB). Memory above each \
             process's start per run: {} ({}).",
            t.runs,
            t.transport,
            verdict(t.steps.zip(t.whole), |(s, m)| s >= 50.0 && m <= 0.2),
            fmtx(t.steps),
            fmtx(t.whole),
            fmtx(t.memory),
            verdict(t.memory, |m| m <= 0.2),
        );
    }
    let _ = writeln!(
        md,
        "- Resume of a 10,000-step run under 100 ms to the first new request (SQLite `Full`): \
         {}; {} ms.",
        verdict(resume_10k, |ms| ms < 100.0),
        fmt(resume_10k, 1)
    );
    md
}
