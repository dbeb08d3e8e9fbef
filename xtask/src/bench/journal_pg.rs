//! The PostgreSQL part of `cargo xtask bench journal` (issue 35): the raw limit, N
//! connections each committing single-row INSERTs into a table of the journal's shape with
//! `synchronous_commit = on`, beside the journal, N journals (each its own writer
//! connection, as N processes have) each appending awaited events to its own thread.
//! Both from `crates/journal/examples/bench_pg_writers.rs`, interleaved per round, on a
//! database created for the run. Skipped, and said so, without `AGENTCTL_TEST_PG_URL`.

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::Context as _;

use super::baseline::parse_lines;
use super::pg::PgDatabase;
use super::verdict::Verdict;
use super::{BenchCtx, median};
use crate::process::{cargo, output, run_cmd};

/// Connections (and journals) per measurement.
const WRITERS: [usize; 5] = [1, 2, 4, 8, 16];
/// Seconds each measurement lasts.
const SECONDS: &str = "2";

/// The section's markdown, or why it was not measured.
pub fn run(ctx: &BenchCtx) -> anyhow::Result<String> {
    let Some(admin) = std::env::var("AGENTCTL_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        return Ok(
            "\n### PostgreSQL writers\n\nNot measured: `AGENTCTL_TEST_PG_URL` is unset.\n".into(),
        );
    };
    run_cmd(cargo().args([
        "build",
        "--release",
        "-p",
        "agent-journal",
        "--example",
        "bench_pg_writers",
    ]))?;
    let bin = ctx.target_dir().join("release/examples/bench_pg_writers");
    let db = PgDatabase::create(&admin, "journal_pg_writers")?;
    eprintln!(
        "[journal] PostgreSQL: raw and journal writers, N = {WRITERS:?}, {} rounds",
        ctx.runs
    );
    let rounds = ctx.runs.to_string();
    let mut args = vec![db.url().to_string(), SECONDS.into(), rounds];
    args.extend(WRITERS.iter().map(ToString::to_string));
    let lines = parse_lines(&output(Command::new(&bin).args(&args))?)?;
    let mut rates: BTreeMap<(String, usize), Vec<f64>> = BTreeMap::new();
    for line in &lines {
        let case = line["case"].as_str().context("a line without `case`")?;
        let n = line["n"].as_u64().context("a line without `n`")? as usize;
        let rate = line["rate"].as_f64().context("a line without `rate`")?;
        rates.entry((case.to_string(), n)).or_default().push(rate);
    }
    let rows: Vec<Row> = WRITERS
        .iter()
        .map(|&n| {
            let mut of = |case: &str| {
                rates
                    .get_mut(&(case.to_string(), n))
                    .filter(|r| r.len() == ctx.runs)
                    .map(|r| median(r))
            };
            Row {
                n,
                raw: of("raw"),
                journal: of("journal"),
            }
        })
        .collect();
    Ok(render(&rows, ctx.runs))
}

struct Row {
    n: usize,
    raw: Option<f64>,
    journal: Option<f64>,
}

impl Row {
    /// The journal's rate as a share of the raw rate, when both were measured.
    fn share(&self) -> Option<f64> {
        match (self.raw, self.journal) {
            (Some(raw), Some(journal)) if raw > 0.0 => Some(journal / raw),
            _ => None,
        }
    }
}

/// A share as a percentage with one decimal: a share just under a bar must not print as
/// the bar itself.
fn percent(share: Option<f64>) -> String {
    share.map_or("-".to_string(), |s| format!("{:.1}%", 100.0 * s))
}

fn render(rows: &[Row], runs: usize) -> String {
    let mut md = format!(
        "\n### PostgreSQL writers (issue 35)\n\n`bench_pg_writers` (release) on a database of \
         its own, medians of {runs} rounds of {SECONDS} s per row, raw and journal interleaved \
         in each round. Raw: N connections, each committing one-row INSERTs into a table of \
         the journal's shape (seq from a sequence, its `(thread, seq)` and `(tx, seq)` indexes, \
         the `tx` column), each its own transaction, so every one waits for the WAL flush \
         (`synchronous_commit = on`). Journal: N journals opened separately, each with one \
         producer appending awaited events (`Durability::Full`) to a thread of its own.\n\n\
         | writers | raw rows/s | journal events/s | journal / raw |\n|---:|---:|---:|---:|\n"
    );
    let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    for row in rows {
        let share = percent(row.share());
        md.push_str(&format!(
            "| {} | {} | {} | {share} |\n",
            row.n,
            show(row.raw),
            show(row.journal)
        ));
    }
    md.push_str(&targets(rows));
    md
}

fn targets(rows: &[Row]) -> String {
    let all = rows.iter().map(Row::share).collect::<Option<Vec<f64>>>();
    let lowest = all
        .as_ref()
        .and_then(|s| s.iter().copied().min_by(f64::total_cmp));
    let share = Verdict::of(true, lowest, |s| s >= 0.8);
    let journal: Option<Vec<f64>> = rows.iter().map(|r| r.journal).collect();
    let raw: Option<Vec<f64>> = rows.iter().map(|r| r.raw).collect();
    // Rising with N as the raw rate does: wherever raw rises from one N to the next, so does
    // the journal.
    let rising = match (&journal, &raw) {
        (Some(j), Some(r)) => Some(
            j.windows(2)
                .zip(r.windows(2))
                .all(|(j, r)| r[1] <= r[0] || j[1] > j[0]),
        ),
        _ => None,
    };
    let rises = Verdict::of(true, rising, |r| r);
    format!(
        "\nTargets of issue 35, checked against this run:\n\n\
         - the journal at least 80% of the raw rate at every N: {share} (lowest: {})\n\
         - the journal rising with N wherever the raw rate does: {rises}\n",
        percent(lowest),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: usize, raw: f64, journal: f64) -> Row {
        Row {
            n,
            raw: Some(raw),
            journal: Some(journal),
        }
    }

    #[test]
    fn the_targets_read_each_row() {
        let good = [
            row(1, 100.0, 90.0),
            row(2, 180.0, 170.0),
            row(4, 170.0, 160.0),
        ];
        let md = render(&good, 3);
        assert!(md.contains("| 2 | 180 | 170 | 94.4% |"), "{md}");
        assert!(md.contains("every N: met (lowest: 90.0%)"), "{md}");
        assert!(md.contains("raw rate does: met"), "{md}");
        let flat = [row(1, 100.0, 90.0), row(2, 180.0, 85.0)];
        let md = render(&flat, 3);
        assert!(md.contains("every N: **not met** (lowest: 47.2%)"), "{md}");
        assert!(md.contains("raw rate does: **not met**"), "{md}");
        let just_under = [row(1, 1000.0, 799.0)];
        let md = render(&just_under, 3);
        assert!(md.contains("every N: **not met** (lowest: 79.9%)"), "{md}");
        let missing = [
            row(1, 100.0, 90.0),
            Row {
                n: 2,
                raw: Some(1.0),
                journal: None,
            },
        ];
        let md = render(&missing, 3);
        assert!(md.contains("| 2 | 1 | - | - |"), "{md}");
        assert!(!md.contains(": met"), "{md}");
    }
}
