//! `cargo xtask bench [AREA...]`: our code and the seed's baselines, side by side in one run.
//!
//! Each area module returns a markdown [`Section`]; it is written into `docs/benchmarks.md`
//! between `<!-- bench:AREA:start -->` and `<!-- bench:AREA:end -->`, so areas can be re-run
//! one at a time without losing the others' tables.

pub mod baseline;
pub mod chart;
mod context;
mod cpu;
mod doc;
mod host;
mod journal;
mod journal_pg;
mod pg;
mod responses;
mod runtime;
mod sandbox;
mod serve;
mod verdict;
mod workers;

use std::path::PathBuf;

use crate::process::workspace_root;

/// What every area gets.
pub struct BenchCtx {
    pub root: PathBuf,
    /// Repetitions per measurement (medians are reported); `BENCH_RUNS`, default 5.
    pub runs: usize,
}

impl BenchCtx {
    /// Cargo's target directory (`CARGO_TARGET_DIR`, else `target/` of the workspace).
    pub fn target_dir(&self) -> PathBuf {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| self.root.join("target"))
    }
}

/// An area's output.
pub struct Section {
    pub markdown: String,
}

type Area = (&'static str, fn(&BenchCtx) -> anyhow::Result<Section>);

/// Every benchmark area, by name.
const AREAS: &[Area] = &[
    ("journal", journal::run),
    ("runtime", runtime::run),
    ("responses", responses::run),
    ("context", context::run),
    ("host", host::run),
    ("workers", workers::run),
    ("sandbox", sandbox::run),
    ("serve", serve::run),
];

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let runs = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let ctx = BenchCtx {
        root: workspace_root(),
        runs,
    };
    let names: Vec<&str> = if args.is_empty() {
        AREAS.iter().map(|(n, _)| *n).collect()
    } else {
        args.iter().map(String::as_str).collect()
    };
    for name in names {
        let (_, area) = AREAS
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| anyhow::anyhow!("unknown bench area `{name}`"))?;
        eprintln!("xtask: bench `{name}` ({runs} runs per measurement)");
        let section = area(&ctx)?;
        doc::write_section(
            &ctx.root.join("docs/benchmarks.md"),
            name,
            &section.markdown,
        )?;
        eprintln!("xtask: bench `{name}` written to docs/benchmarks.md");
    }
    Ok(())
}

/// Median of a non-empty sample (NaN-free); 0 for an empty one.
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}
