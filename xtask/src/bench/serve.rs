//! `cargo xtask bench serve`: one release `agentctl serve` with 1,000 SSE watchers on 100
//! live runs (`crates/serve/examples/bench_serve.rs`): every watcher must get every event of
//! its run, in order; the server's memory and CPU per watcher and the delay from an event's
//! append request to its delivery (p50, p99). Issue 34.

use std::fmt::Write as _;

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::verdict::Verdict;
use super::{BenchCtx, Section, median};
use crate::process::{cargo, output, run_cmd};

const WATCHERS: usize = 1000;
const RUNS: usize = 100;
const EVENTS: usize = 20;

pub fn run(ctx: &BenchCtx) -> anyhow::Result<Section> {
    eprintln!("[serve 1/2] build (release): agentctl, bench_serve");
    run_cmd(cargo().args([
        "build",
        "--release",
        "-j2",
        "-p",
        "agentctl",
        "-p",
        "agent-serve",
        "--bin",
        "agentctl",
        "--example",
        "bench_serve",
    ]))?;
    let target = ctx.target_dir();
    let agentctl = target.join("release/agentctl");
    let bench = target.join("release/examples/bench_serve");
    eprintln!(
        "[serve 2/2] {} runs of {WATCHERS} watchers on {RUNS} runs, {EVENTS} events each",
        ctx.runs
    );
    let mut lines: Vec<Value> = Vec::new();
    for _ in 0..ctx.runs {
        let text = output(std::process::Command::new(&bench).arg(&agentctl).args([
            WATCHERS.to_string(),
            RUNS.to_string(),
            EVENTS.to_string(),
        ]))?;
        let line: Value = serde_json::from_str(text.trim())
            .with_context(|| format!("bench_serve printed {text:?}"))?;
        lines.push(line);
    }
    if lines.is_empty() {
        bail!("no run of bench_serve");
    }
    let markdown = render(&lines, ctx.runs);
    Ok(Section { markdown })
}

/// The section from the runs' lines (one per run of `bench_serve`).
fn render(lines: &[Value], runs: usize) -> String {
    let all_ok = lines.iter().all(|l| {
        l["complete"].as_u64() == Some(WATCHERS as u64)
            && l["in_order"].as_u64() == Some(WATCHERS as u64)
    });
    // The median over the runs that printed the figure; "n/a" when none did (a run whose
    // watchers measured no delay prints null, and a median of nothing is not 0 ms).
    let med = |key: &str, digits: usize| {
        let mut v: Vec<f64> = lines.iter().filter_map(|l| l[key].as_f64()).collect();
        if v.is_empty() {
            "n/a".to_string()
        } else {
            format!("{:.digits$}", median(&mut v))
        }
    };
    let (kib, us, cpu_connect, p50, p99) = (
        med("kib_per_watcher", 1),
        med("cpu_us_per_delivery", 0),
        med("cpu_connect_ms", 0),
        med("delay_p50_ms", 1),
        med("delay_p99_ms", 1),
    );
    let figure = |l: &Value, key: &str, digits: usize| {
        l[key]
            .as_f64()
            .map_or_else(|| "n/a".to_string(), |v| format!("{v:.digits$}"))
    };
    let delivered = Verdict::of(all_ok, Some(()), |()| true);
    let per_run: String = lines
        .iter()
        .map(|l| {
            format!(
                "| {} / {} | {} / {} | {} KiB | {} µs | {} ms | {} ms |\n",
                l["complete"],
                WATCHERS,
                l["in_order"],
                WATCHERS,
                figure(l, "kib_per_watcher", 1),
                figure(l, "cpu_us_per_delivery", 0),
                figure(l, "delay_p50_ms", 1),
                figure(l, "delay_p99_ms", 1),
            )
        })
        .collect();
    let mut markdown = format!(
        "## Serve: 1,000 SSE watchers on 100 live runs (issue 34)\n\n\
         `cargo xtask bench serve`: one release `agentctl serve` on SQLite; \
         `crates/serve/examples/bench_serve.rs` opens {WATCHERS} event streams (10 per run), \
         then posts {EVENTS} steers to each of the {RUNS} runs through the API (rounds of one \
         per run, 20 ms apart), so {} deliveries per run of the bench. Memory is the server's \
         resident growth once every stream is open, per watcher; CPU is the server's user + \
         system time while delivering, per delivery (10 ms clock ticks); the delay runs from \
         just before a steer's POST is sent to the moment a watcher has parsed its message \
         (so it bounds commit-to-delivery from above). {} runs, medians.\n\n\
         | every watcher got every event | in order | memory per watcher | CPU per delivery | delay p50 | delay p99 |\n\
         |---|---|---:|---:|---:|---:|\n{per_run}\
         | **median** | | **{kib} KiB** | **{us} µs** | **{p50} ms** | **{p99} ms** |\n\n\
         Opening the {WATCHERS} streams cost the server {cpu_connect} ms of CPU (median). \
         Target (every watcher gets every event in order, in every run): {delivered}.\n",
        WATCHERS * EVENTS,
        runs,
    );
    // The delays are those of the deliveries whose steer the watcher could match to its send
    // time; when some could not be, the percentiles are of fewer deliveries than the text says.
    let measured: u64 = lines
        .iter()
        .filter_map(|l| l["delays_measured"].as_u64())
        .sum();
    let deliveries = (WATCHERS * EVENTS * lines.len()) as u64;
    if measured != deliveries {
        let _ = writeln!(
            markdown,
            "The delays are of {measured} of the runs' {deliveries} deliveries (the others \
             were not matched to their send time)."
        );
    }
    markdown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_no_run_printed_is_not_shown_as_zero() {
        // Every watcher got every event, but no delay was measured (`null`, as
        // `bench_serve` prints a percentile of no samples).
        let line = serde_json::json!({
            "complete": WATCHERS, "in_order": WATCHERS, "kib_per_watcher": 30.9,
            "cpu_us_per_delivery": 26.4, "cpu_connect_ms": 130, "delay_p50_ms": null,
            "delay_p99_ms": null,
        });
        let md = render(&[line], 1);
        assert!(
            md.contains("| **median** | | **30.9 KiB** | **26 µs** | **n/a ms** | **n/a ms** |"),
            "{md}"
        );
        assert!(
            md.contains("| 30.9 KiB | 26 µs | n/a ms | n/a ms |"),
            "{md}"
        );
        assert!(!md.contains("0.0 ms"), "{md}");
        assert!(
            md.contains("The delays are of 0 of the runs' 20000 deliveries"),
            "{md}"
        );
    }

    #[test]
    fn every_delivery_timed_needs_no_note() {
        let line = serde_json::json!({
            "complete": WATCHERS, "in_order": WATCHERS, "kib_per_watcher": 30.9,
            "cpu_us_per_delivery": 26.4, "cpu_connect_ms": 130, "delay_p50_ms": 14.7,
            "delay_p99_ms": 30.1, "delays_measured": WATCHERS * EVENTS,
        });
        let md = render(&[line], 1);
        assert!(!md.contains("The delays are of"), "{md}");
        assert!(md.contains("**14.7 ms** | **30.1 ms**"), "{md}");
        assert!(md.contains("in every run): met."), "{md}");
    }
}
