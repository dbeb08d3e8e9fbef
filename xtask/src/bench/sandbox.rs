//! `cargo xtask bench sandbox`: what the sandbox adds to one command. The release
//! `agentctl sandbox` runs the same command under `--mode workspace-write` (entry point,
//! mount namespace, Landlock, seccomp, capabilities) and under `--mode off`, interleaved in
//! the same run; the difference of the medians is the time a sandboxed `shell` call pays.
//! Target (issue 33): under 2 ms added per call.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::verdict::Verdict;
use super::{BenchCtx, Section, median};
use crate::process::{cargo, run_cmd};

/// Calls per mode and command in each run.
const CALLS: usize = 100;

pub fn run(ctx: &BenchCtx) -> anyhow::Result<Section> {
    eprintln!("[sandbox 1/2] build (release): agentctl, agentctl-sandbox");
    run_cmd(cargo().args([
        "build",
        "--release",
        "-j2",
        "-p",
        "agentctl",
        "--bin",
        "agentctl",
        "--bin",
        "agentctl-sandbox",
    ]))?;
    let target = ctx.target_dir();
    let agentctl = target.join("release/agentctl");
    let ws = std::env::temp_dir().join(format!("agentctl-bench-sandbox-{}", std::process::id()));
    std::fs::create_dir_all(ws.join(".git")).context("workspace")?;
    let commands: [(&str, &[&str]); 2] = [
        ("`true`", &["true"]),
        ("`cargo --version`", &["cargo", "--version"]),
    ];
    eprintln!(
        "[sandbox 2/2] {} runs x {CALLS} calls per mode and command",
        ctx.runs
    );
    let mut rows = String::new();
    let mut all_met = true;
    for (label, command) in commands {
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for _ in 0..ctx.runs {
            off.push(per_call_ms(&agentctl, &ws, "off", command)?);
            on.push(per_call_ms(&agentctl, &ws, "workspace-write", command)?);
        }
        let (off_ms, on_ms) = (median(&mut off), median(&mut on));
        let added = on_ms - off_ms;
        let verdict = Verdict::measured(added < 2.0);
        all_met &= verdict == Verdict::Met;
        rows.push_str(&format!(
            "| {label} | {off_ms:.2} ms | {on_ms:.2} ms | **{added:.2} ms** | {verdict} |\n"
        ));
    }
    let _ = std::fs::remove_dir_all(&ws);
    let markdown = format!(
        "## Sandbox: the time a sandboxed command adds (issue 33)\n\n\
         `cargo xtask bench sandbox`: the release `agentctl sandbox --mode M -- CMD`, {CALLS} \
         calls per mode and command in each of {} runs, the modes interleaved; medians of the \
         runs' per-call means. *Added* is what a sandboxed call pays over an unsandboxed one \
         (the entry point's exec, the mount namespace, Landlock rules, the seccomp filter).\n\n\
         | command | `off` per call | `workspace-write` per call | added | target < 2 ms |\n\
         |---|---:|---:|---:|---|\n{rows}\n\
         Every call exited 0 (a failed call stops the bench). Target {}.\n",
        ctx.runs,
        if all_met { "met" } else { "**not met**" }
    );
    Ok(Section { markdown })
}

/// Mean wall time of one call, over [`CALLS`] calls.
fn per_call_ms(agentctl: &Path, ws: &Path, mode: &str, command: &[&str]) -> anyhow::Result<f64> {
    let started = Instant::now();
    for _ in 0..CALLS {
        let status = Command::new(agentctl)
            .args(["sandbox", "--mode", mode, "--workspace"])
            .arg(ws)
            .arg("--")
            .args(command)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("cannot start agentctl sandbox")?;
        if !status.success() {
            bail!(
                "`agentctl sandbox --mode {mode} -- {}` failed with {status}",
                command.join(" ")
            );
        }
    }
    Ok(started.elapsed().as_secs_f64() * 1000.0 / CALLS as f64)
}
