//! `cargo xtask bench sandbox`: what the sandbox adds to one command. The release
//! `agentctl sandbox` runs the same command under `--mode off` and under
//! `--mode workspace-write` (entry point, mount namespace, Landlock, seccomp, capabilities),
//! the latter through the entry point as `cargo xtask install` ships it (static) and as a
//! plain `cargo build --release` leaves it (dynamic). The three are interleaved call by call,
//! so drift in the machine's load falls on all of them alike; a run's figure is the
//! difference of per-call medians, and the section reports the median of the runs.
//! Target (issue 33): under 2 ms added per call (the installed entry point).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::verdict::Verdict;
use super::{BenchCtx, Section, median};
use crate::install;
use crate::process::{cargo, run_cmd};

/// Calls per mode and command in each run.
const CALLS: usize = 200;

/// One way of running the command: an `agentctl` (with its entry point beside it) and the
/// mode.
struct Variant {
    agentctl: PathBuf,
    mode: &'static str,
}

pub fn run(ctx: &BenchCtx) -> anyhow::Result<Section> {
    eprintln!("[sandbox 1/3] build (release): agentctl, agentctl-sandbox static and dynamic");
    let target = ctx.target_dir();
    let bench_dir = target.join("bench-sandbox");
    let built = install::build_release(&target)?;
    let installed = pair(&bench_dir.join("static"), &built.agentctl, &built.entry)?;
    run_cmd(cargo().args([
        "build",
        "--release",
        "-j2",
        "-p",
        "agentctl",
        "--bin",
        "agentctl-sandbox",
    ]))?;
    let plain = pair(&bench_dir.join("dynamic"), &built.agentctl, &built.entry)?;
    let ws = std::env::temp_dir().join(format!("agentctl-bench-sandbox-{}", std::process::id()));
    std::fs::create_dir_all(ws.join(".git")).context("workspace")?;
    let variants = [
        Variant {
            agentctl: installed.clone(),
            mode: "off",
        },
        Variant {
            agentctl: installed,
            mode: "workspace-write",
        },
        Variant {
            agentctl: plain,
            mode: "workspace-write",
        },
    ];
    let commands: [(&str, &[&str]); 2] = [
        ("`true`", &["true"]),
        ("`cargo --version`", &["cargo", "--version"]),
    ];
    eprintln!(
        "[sandbox 2/3] {} runs x {CALLS} calls per variant and command",
        ctx.runs
    );
    let mut rows = String::new();
    let mut all_met = true;
    for (label, command) in commands {
        // Per run: the per-call medians of off, static and dynamic.
        let mut runs: Vec<[f64; 3]> = Vec::new();
        for run in 0..ctx.runs {
            let medians = interleaved(&variants, &ws, command)?;
            eprintln!(
                "[sandbox] {label} run {}: off {:.2} ms, static {:.2} ms, dynamic {:.2} ms",
                run + 1,
                medians[0],
                medians[1],
                medians[2]
            );
            runs.push(medians);
        }
        let column = |i: usize| -> Vec<f64> { runs.iter().map(|r| r[i]).collect() };
        let added = |i: usize| -> Vec<f64> { runs.iter().map(|r| r[i] - r[0]).collect() };
        let off_ms = median(&mut column(0));
        let (mut static_added, mut dynamic_added) = (added(1), added(2));
        let static_runs = list(&static_added);
        let static_ms = median(&mut static_added);
        let dynamic_ms = median(&mut dynamic_added);
        let verdict = Verdict::measured(static_ms < 2.0);
        all_met &= verdict == Verdict::Met;
        rows.push_str(&format!(
            "| {label} | {off_ms:.2} ms | **{static_ms:.2} ms** ({static_runs}) | \
             {dynamic_ms:.2} ms | {verdict} |\n"
        ));
    }
    eprintln!("[sandbox 3/3] done");
    let _ = std::fs::remove_dir_all(&ws);
    let markdown = format!(
        "## Sandbox: the time a sandboxed command adds (issue 33)\n\n\
         `cargo xtask bench sandbox`: the release `agentctl sandbox --mode M -- CMD`, {CALLS} \
         calls per variant and command in each of {} runs, the variants interleaved call by \
         call. *Added* is the median time of a sandboxed call less that of an unsandboxed \
         one in the same run (the entry point's exec, the mount namespace, Landlock rules, the \
         seccomp filter), as the median of the runs (each run's in brackets). *Installed* is \
         the entry point as `cargo xtask install` builds it (statically linked); *cargo \
         build* is the dynamically linked one a plain `cargo build --release` leaves.\n\n\
         | command | `off` per call | added, installed | added, cargo build | target < 2 ms |\n\
         |---|---:|---:|---:|---|\n{rows}\n\
         Every call exited 0 (a failed call stops the bench). Target {}.\n",
        ctx.runs,
        Verdict::measured(all_met)
    );
    Ok(Section { markdown })
}

/// A directory with a copy of `agentctl` and `entry` beside it (the launcher takes the
/// entry point beside the running binary); returns the copy of `agentctl`.
fn pair(dir: &Path, agentctl: &Path, entry: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let copy = |from: &Path| -> anyhow::Result<PathBuf> {
        let to = dir.join(from.file_name().context("a binary without a name")?);
        std::fs::copy(from, &to)
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
        Ok(to)
    };
    copy(entry)?;
    copy(agentctl)
}

/// [`CALLS`] rounds of one call per variant, the order rotated each round; the per-call
/// median of each variant.
fn interleaved(variants: &[Variant; 3], ws: &Path, command: &[&str]) -> anyhow::Result<[f64; 3]> {
    let mut times: [Vec<f64>; 3] = Default::default();
    for round in 0..CALLS {
        for k in 0..variants.len() {
            let i = (round + k) % variants.len();
            times[i].push(call_ms(&variants[i], ws, command)?);
        }
    }
    Ok(times.map(|mut t| median(&mut t)))
}

/// The wall time of one call; a call that fails stops the bench.
fn call_ms(variant: &Variant, ws: &Path, command: &[&str]) -> anyhow::Result<f64> {
    let started = Instant::now();
    let status = Command::new(&variant.agentctl)
        .args(["sandbox", "--mode", variant.mode, "--workspace"])
        .arg(ws)
        .arg("--")
        .args(command)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("cannot start agentctl sandbox")?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if !status.success() {
        bail!(
            "`{} sandbox --mode {} -- {}` failed with {status}",
            variant.agentctl.display(),
            variant.mode,
            command.join(" ")
        );
    }
    Ok(ms)
}

fn list(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}
