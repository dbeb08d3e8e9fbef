//! `cargo xtask bench context`: agent-context (release, `examples/bench_context.rs`) beside
//! the seed's `Store` (`../shared/seed/context_memory_demo.py`, called unchanged from the
//! script below, same layout as `../shared/baseline/bench_store.py`), in one run.
//!
//! `BENCH_CONTEXT_SIZES` (default `100000,1000000`) sets the history sizes.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::Command;

use anyhow::Context as _;
use serde_json::Value;

use super::verdict::Verdict;
use super::{BenchCtx, Section};
use crate::process::{cargo, output, shared_dir};

/// Drives the seed's Store exactly like `bench_store.py` (history layout, unit shape,
/// evidence generator), plus the 1M size and a "one new evidence row" consolidation.
const SEED_SCRIPT: &str = r#"
import json, os, random, statistics, sys, tempfile, time
from context_memory_demo import Store
RUNS = int(sys.argv[1]); SIZES = [int(x) for x in sys.argv[2].split(",")]
random.seed(7)
WORDS = ("build failed login module timeout retry cache schema migration docs test "
         "错误 登录 模块 超时 重试 诊断 只读 方案").split()
def emit(d): print(json.dumps(d, ensure_ascii=False), flush=True)
def unit(i):
    text = " ".join(random.choice(WORDS) for _ in range(40))
    return [{"type": "message", "role": "user", "text": "step %d: %s" % (i, text)},
            {"type": "function_call", "call_id": "c%d" % i, "name": "run_tests", "arguments": "{\"suite\": \"unit\"}"},
            {"type": "function_call_output", "call_id": "c%d" % i, "output": "ok %d passed; %s" % (i, text[:120])}]
UNITS = [unit(i) for i in range(2000)]
def lat(fn, reps):
    for _ in range(2): fn()
    xs = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); xs.append((time.perf_counter() - t) * 1e3)
    return statistics.median(xs)
def rate(s, secs):
    n = 0; t0 = time.perf_counter()
    while time.perf_counter() - t0 < secs:
        for _ in range(10):
            s.append_unit("busy-%d" % (n % 10), "u%d" % n, UNITS[n % len(UNITS)]); n += 1
    return n / (time.perf_counter() - t0)
mem, fil = [], []
for _ in range(RUNS):
    s = Store(); mem.append(rate(s, 1.0)); s.db.close()
    with tempfile.TemporaryDirectory() as d:
        s = Store(os.path.join(d, "s.db")); fil.append(rate(s, 1.5)); s.db.close()
emit({"bench": "append_unit_memory", "median": statistics.median(mem)})
emit({"bench": "append_unit_file", "median": statistics.median(fil)})
s = Store()
s.append_unit("sparse", "s0", [{"type": "message", "text": "needle-sparse E42 旧登录模块"}])
s.append_unit("sparse", "s1", [{"type": "message", "text": "second sparse unit"}])
filled = 0
for n in SIZES:
    t = time.perf_counter()
    for i in range(filled, n):
        if i == 5: s.append_unit("busy-5", "hit", [{"type": "message", "text": "E42 early hit"}])
        else: s.append_unit("busy-%d" % (i % 10), "u%d" % i, UNITS[i % len(UNITS)])
    filled = n
    emit({"bench": "fill", "units": n, "seconds": time.perf_counter() - t})
    reps = RUNS * 4
    for name, th, term in (("search_rare_1match", "busy-5", "E42"), ("search_common", "busy-5", "login"),
                           ("search_miss", "busy-5", "no-such-term"), ("search_cjk_sparse", "sparse", "旧登录"),
                           ("search_short_term_fallback_common", "busy-5", "lo")):
        emit({"bench": name, "units": n, "p50_ms": lat(lambda: s.search(th, term), reps)})
    for name, th, k in (("window_busy", "busy-3", 2), ("window_busy_k20", "busy-3", 20), ("window_sparse", "sparse", 2)):
        emit({"bench": name, "units": n, "p50_ms": lat(lambda: s.window(th, "goal", k), reps)})
s.db.close()
for keys in (1000, None):
    s = Store(); n = 100_000
    for i in range(n):
        k = i % keys if keys else i
        s.add_evidence("src-%d" % i, "project-%d" % (k % 10), "key-%d" % k, "v%d" % i,
                       observed=random.randint(0, 10_000), confirmed=(i % 10 != 0))
    t = time.perf_counter(); s.consolidate(); full = time.perf_counter() - t
    xs = []
    for run in range(max(RUNS, 5)):
        s.add_evidence("new-%d" % run, "project-3", "key-%d" % (3 + 10 * run), "new%d" % run, 20_000 + run, True)
        t = time.perf_counter(); s.consolidate(); xs.append((time.perf_counter() - t) * 1e3)
    emit({"bench": "consolidate", "evidence": n, "distinct_keys": keys or n, "first_full_s": full,
          "one_change_p50_ms": statistics.median(xs)})
    s.db.close()
"#;

type Results = HashMap<String, Value>;

/// Key of a measurement: its name plus its size (units, or distinct keys for consolidation).
fn key_of(v: &Value) -> Option<String> {
    let name = v.get("bench")?.as_str()?;
    let size = v
        .get("units")
        .or_else(|| v.get("distinct_keys"))
        .and_then(Value::as_u64)
        .map(|n| format!("@{n}"))
        .unwrap_or_default();
    Some(format!("{name}{size}"))
}

fn parse(out: &str) -> Results {
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some((key_of(&v)?, v)))
        .collect()
}

fn num(results: &Results, key: &str, field: &str) -> Option<f64> {
    results.get(key)?.get(field)?.as_f64()
}

pub fn run(ctx: &BenchCtx) -> anyhow::Result<Section> {
    let sizes = std::env::var("BENCH_CONTEXT_SIZES").unwrap_or_else(|_| "100000,1000000".into());
    let runs = ctx.runs.max(1).to_string();
    let load_before = load_average();
    let ours = output(
        cargo()
            .args([
                "run",
                "--release",
                "-j2",
                "-p",
                "agent-context",
                "--example",
                "bench_context",
                "--",
            ])
            .args(["--runs", &runs, "--sizes", &sizes]),
    )?;
    // The real search path of `agentctl runs search --all` (agent-host), 1,000 runs of 100
    // steps, first search with catch-up; one run per mode (each takes tens of seconds).
    let history = output(cargo().args([
        "run",
        "--release",
        "-j2",
        "-p",
        "agent-host",
        "--example",
        "bench_history_search",
        "--",
        "--runs",
        "1000",
        "--steps",
        "100",
    ]))?;
    // Read when our part ends, before the seed's starts (the text says so).
    let load_after = load_average();
    let seed_dir = shared_dir().join("seed");
    let seed = output(
        Command::new("python3")
            .arg("-c")
            .arg(SEED_SCRIPT)
            .args([&runs, &sizes])
            .env("PYTHONPATH", &seed_dir),
    )
    .context("the seed baseline needs python3 and ../shared/seed")?;
    let mut ours = parse(&ours);
    ours.extend(parse(&history));
    let seed = parse(&seed);
    Ok(Section {
        markdown: render(&ours, &seed, &sizes, ctx.runs, (&load_before, &load_after)),
    })
}

/// The 1-minute load average (`/proc/loadavg`), or "n/a".
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "n/a".into())
}

fn ms(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| {
        if v < 0.1 {
            format!("{v:.4}")
        } else if v < 10.0 {
            format!("{v:.3}")
        } else {
            format!("{v:.1}")
        }
    })
}

fn ratio(seed: Option<f64>, ours: Option<f64>, higher_is_better: bool) -> String {
    match (seed, ours) {
        (Some(s), Some(o)) if s > 0.0 && o > 0.0 => {
            let r = if higher_is_better { o / s } else { s / o };
            if r >= 10.0 {
                format!("{r:.0}x")
            } else {
                format!("{r:.2}x")
            }
        }
        _ => "n/a".into(),
    }
}

/// Issue 4's targets, checked against this run's numbers.
fn targets(ours: &Results, seed: &Results, sizes: &str) -> String {
    let mut md = String::new();
    let verdict = |ok: bool| Verdict::measured(ok);
    let slowest = |prefix: &str, size: &str| -> Option<(f64, String)> {
        ours.iter()
            .filter(|(k, _)| k.starts_with(prefix) && k.ends_with(&format!("@{size}")))
            .filter_map(|(k, v)| Some((v.get("p50_ms")?.as_f64()?, k.clone())))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    };
    let _ = writeln!(md, "Targets of issue 4, checked against this run:\n");
    for (prefix, what, size, limit) in [
        ("search_", "search p50", "100000", 1.0),
        ("search_", "search p50", "1000000", 5.0),
        ("window_", "window p50", "100000", 1.0),
        ("window_", "window p50", "1000000", 1.0),
    ] {
        if !sizes.split(',').any(|s| s == size) {
            continue;
        }
        match slowest(prefix, size) {
            Some((worst, key)) => {
                let _ = writeln!(
                    md,
                    "- {what} under {limit} ms at {size} units: {} (slowest: `{key}` {} ms).",
                    verdict(worst < limit),
                    ms(Some(worst))
                );
            }
            None => {
                let _ = writeln!(
                    md,
                    "- {what} under {limit} ms at {size} units: {}.",
                    Verdict::NotMeasured
                );
            }
        }
    }
    let consolidation: Vec<f64> = ["1000", "100000"]
        .iter()
        .filter_map(|k| num(ours, &format!("consolidate@{k}"), "one_change_p50_ms"))
        .collect();
    if let Some(worst) = consolidation.iter().copied().max_by(f64::total_cmp) {
        let _ = writeln!(
            md,
            "- consolidation of one change under 5 ms at 100k rows: {} (slowest: {} ms).",
            verdict(worst < 5.0),
            ms(Some(worst))
        );
    }
    let mut below = Vec::new();
    let mut keys: Vec<&String> = ours.keys().collect();
    keys.sort();
    for key in keys {
        let Some(seed_key) = seed_key_of(key) else {
            continue;
        };
        for (what, field, higher) in comparisons_of(key) {
            let (o, s) = (num(ours, key, field), num(seed, &seed_key, field));
            if let (Some(o), Some(s)) = (o, s)
                && o > 0.0
                && s > 0.0
            {
                let r = if higher { o / s } else { s / o };
                if r < 20.0 {
                    let mark = if r < 1.0 { " (seed faster)" } else { "" };
                    below.push(format!(
                        "`{key}`{what} {}{mark}",
                        ratio(Some(s), Some(o), higher)
                    ));
                }
            }
        }
    }
    let _ = writeln!(
        md,
        "- at least 20x the seed everywhere: {}{}",
        verdict(below.is_empty()),
        if below.is_empty() {
            ".".to_string()
        } else {
            format!("; under 20x: {}.", below.join(", "))
        }
    );
    md
}

/// The seed's measurement that the table shows beside a row of ours (`name@size`), so that
/// the 20x check reads every pair the table shows: the same key, a settled search's
/// unsettled one (the seed has no index to settle), the seed's one `:memory:` or file
/// append rate for each of our append rows, the seed's fill for both of our fills. `None`
/// for the disk's bare commit floor, which is SQLite's figure, not ours.
fn seed_key_of(key: &str) -> Option<String> {
    let (name, size) = key.split_once('@').map_or((key, ""), |(n, s)| (n, s));
    let at = |name: &str| {
        if size.is_empty() {
            name.to_string()
        } else {
            format!("{name}@{size}")
        }
    };
    if name == "durable_commit_floor" {
        return None;
    }
    Some(if name.starts_with("append_unit_memory") {
        "append_unit_memory".into()
    } else if name.starts_with("append_unit_file") || name.starts_with("append_units_") {
        "append_unit_file".into()
    } else if name.starts_with("fill") {
        at("fill")
    } else {
        at(name.trim_end_matches("_settled"))
    })
}

/// The figures a row is compared on: (what to add to its name, field, higher is better).
fn comparisons_of(key: &str) -> Vec<(&'static str, &'static str, bool)> {
    if key.starts_with("consolidate") {
        vec![
            ("", "one_change_p50_ms", false),
            (" (first, everything dirty)", "first_full_s", false),
        ]
    } else if key.starts_with("append_unit") {
        vec![("", "median", true)]
    } else if key.starts_with("fill") {
        vec![("", "seconds", false)]
    } else {
        vec![("", "p50_ms", false)]
    }
}

/// Issue 38's ingest targets, checked against this run.
fn ingest_targets(ours: &Results, seed: &Results, sizes: &str) -> String {
    let mut md = String::new();
    let verdict = |r: Option<f64>, want: f64| match r {
        Some(r) => format!("{} ({r:.2}x)", Verdict::measured(r >= want)),
        None => Verdict::of(true, None::<f64>, |_| false).to_string(),
    };
    let faster = |s: Option<f64>, o: Option<f64>| match (s, o) {
        (Some(s), Some(o)) if s > 0.0 && o > 0.0 => Some(s / o),
        _ => None,
    };
    let rate = |s: Option<f64>, o: Option<f64>| faster(o, s);
    let _ = writeln!(md, "Targets of issue 38, checked against this run:\n");
    for size in sizes.split(',') {
        let key = format!("fill@{size}");
        let _ = writeln!(
            md,
            "- fill to {size} units at least at the seed's rate: {}.",
            verdict(
                faster(num(seed, &key, "seconds"), num(ours, &key, "seconds")),
                1.0
            )
        );
    }
    let _ = writeln!(
        md,
        "- single `append_unit`, durable file, at least 5x the seed's durable rate: {} (a bare \
         one-row durable commit on this disk: {}; ours against that floor: {}).",
        verdict(
            rate(
                num(seed, "append_unit_file", "median"),
                num(ours, "append_unit_file_full", "median")
            ),
            5.0
        ),
        ratio(
            num(seed, "append_unit_file", "median"),
            num(ours, "durable_commit_floor", "median"),
            true
        ),
        ratio(
            num(ours, "durable_commit_floor", "median"),
            num(ours, "append_unit_file_full", "median"),
            true
        )
    );
    let _ = writeln!(
        md,
        "- single `append_unit`, `:memory:`, at least the seed's rate: {} (no tail bound: {}).",
        verdict(
            rate(
                num(seed, "append_unit_memory", "median"),
                num(ours, "append_unit_memory", "median")
            ),
            1.0
        ),
        verdict(
            rate(
                num(seed, "append_unit_memory", "median"),
                num(ours, "append_unit_memory_unbounded_tail", "median")
            ),
            1.0
        )
    );
    let _ = writeln!(
        md,
        "- first search after a catch-up of 1,000 x 100 units at least 5x faster than indexing at once \
         (in-crate proxy of `runs search --all`): {}.",
        verdict(
            faster(
                num(ours, "catch_up_search_index_at_once", "seconds"),
                num(ours, "catch_up_search", "seconds")
            ),
            5.0
        )
    );
    let _ = writeln!(
        md,
        "- first `runs search --all` over 1,000 runs of 100 steps, catch-up included, at least 5x \
         faster than indexing at once (the host's search path, `bench_history_search`): {}; \
         than the command as it was (also one durable append per unit): {}.",
        verdict(
            faster(
                num(ours, "runs_search_all_first_index_at_once", "first_s"),
                num(ours, "runs_search_all_first_deferred", "first_s")
            ),
            5.0
        ),
        verdict(
            faster(
                num(
                    ours,
                    "runs_search_all_first_unit_by_unit_index_at_once",
                    "first_s"
                ),
                num(ours, "runs_search_all_first_deferred", "first_s")
            ),
            5.0
        )
    );
    md
}

fn render(
    ours: &Results,
    seed: &Results,
    sizes: &str,
    runs: usize,
    (load_before, load_after): (&str, &str),
) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Context and memory store (`agent-context`, SQLite)\n"
    );
    let _ = writeln!(
        md,
        "`cargo xtask bench context`: `crates/context/examples/bench_context.rs` (release) beside the seed's \
         `Store` driven like `shared/baseline/bench_store.py`, same run, same machine. Medians \
         ({runs} runs; latencies are p50 over {} calls for ours, {} for the seed). History: 10 busy threads \
         round-robin plus a 2-unit \"sparse\" thread holding the oldest rows; units of 3 items (~700 B). \
         Ours: SQLite through rusqlite (writes on a writer thread, except appends on `:memory:` \
         that do not fold, which run on the caller's thread when the writer is free; WAL \
         checkpoints on a checkpointer thread; short reads on the caller's thread; jemalloc, the \
         allocator of `agentctl`, as in the `runs search --all` bench below), file database (WAL, `synchronous=NORMAL` for the fill); seed: its default \
         `:memory:`. \"Ratio\" = how many times faster ours is. 1-minute load average of this \
         2-core machine: {load_before} when our part started, {load_after} when it ended.\n",
        runs * 20,
        runs * 4
    );
    let _ = writeln!(
        md,
        "| Measurement | Units | agent-context | seed Store | Ratio |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    let rows: &[(&str, &str)] = &[
        (
            "search_rare_1match",
            "search, rare term (1 match in thread), p50 ms",
        ),
        ("search_common", "search, common term (limit 5), p50 ms"),
        ("search_miss", "search, absent term, p50 ms"),
        (
            "search_rare_1match_settled",
            "search, rare term, index merged by the idle writer, p50 ms",
        ),
        (
            "search_miss_settled",
            "search, absent term, index merged by the idle writer, p50 ms",
        ),
        (
            "search_cjk_sparse",
            "search, CJK term \"旧登录\", sparse thread, p50 ms",
        ),
        (
            "search_short_term_fallback_common",
            "search, 2-char term \"lo\" (thread-scan fallback), p50 ms",
        ),
        (
            "window_sparse",
            "window(keep 2), thread with the oldest units, p50 ms",
        ),
        ("window_busy", "window(keep 2), busy thread, p50 ms"),
        ("window_busy_k20", "window(keep 20), busy thread, p50 ms"),
    ];
    for size in sizes.split(',') {
        for (name, label) in rows {
            let key = format!("{name}@{size}");
            // The seed has no index: its figure for a settled row is the same search's.
            let seed_key = format!("{}@{size}", name.trim_end_matches("_settled"));
            let (o, s) = (num(ours, &key, "p50_ms"), num(seed, &seed_key, "p50_ms"));
            if o.is_none() && s.is_none() {
                continue;
            }
            let _ = writeln!(
                md,
                "| {label} | {size} | {} | {} | {} |",
                ms(o),
                ms(s),
                ratio(s, o, false)
            );
        }
    }
    for keys in ["1000", "100000"] {
        let key = format!("consolidate@{keys}");
        let (o, s) = (
            num(ours, &key, "one_change_p50_ms"),
            num(seed, &key, "one_change_p50_ms"),
        );
        let _ = writeln!(
            md,
            "| consolidate after 1 new evidence row, 100k rows / {keys} keys, p50 ms | 100000 | {} | {} | {} |",
            ms(o),
            ms(s),
            ratio(s, o, false)
        );
        let (o, s) = (
            num(ours, &key, "first_full_s"),
            num(seed, &key, "first_full_s"),
        );
        let _ = writeln!(
            md,
            "| first consolidation of 100k rows / {keys} keys (everything dirty), s | 100000 | {} | {} | {} |",
            ms(o),
            ms(s),
            ratio(s, o, false)
        );
    }
    let append = |k: &str, r: &Results| num(r, k, "median");
    let ap = [
        (
            "append_unit, `:memory:`, units/s",
            "append_unit_memory",
            "append_unit_memory",
        ),
        (
            "append_unit, `:memory:`, no tail bound (the write path alone), units/s",
            "append_unit_memory_unbounded_tail",
            "append_unit_memory",
        ),
        (
            "append_unit, file, durable (`synchronous=FULL`), units/s",
            "append_unit_file_full",
            "append_unit_file",
        ),
        (
            "one-row commit on a bare rusqlite connection, WAL `synchronous=FULL` (this disk's floor for a durable append), commits/s",
            "durable_commit_floor",
            "append_unit_file",
        ),
        (
            "append_unit, file, `synchronous=NORMAL`, units/s",
            "append_unit_file_normal",
            "append_unit_file",
        ),
        (
            "append_units, 100 per transaction, file FULL, units/s",
            "append_units_batch100_file_full",
            "append_unit_file",
        ),
    ];
    for (label, o, s) in ap {
        let (o, s) = (append(o, ours), append(s, seed));
        let fmt = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.0}"));
        let _ = writeln!(
            md,
            "| {label} | - | {} | {} | {} |",
            fmt(o),
            fmt(s),
            ratio(s, o, true)
        );
    }
    let _ = writeln!(md);
    for size in sizes.split(',') {
        let key = format!("fill@{size}");
        let o = num(ours, &key, "seconds");
        let s = num(seed, &key, "seconds");
        let bytes = num(ours, &key, "db_bytes")
            .map_or("n/a".into(), |b| format!("{:.0} MiB", b / 1048576.0));
        let fold = format!("fold_during_reads@{size}");
        let _ = writeln!(
            md,
            "Fill to {size} units (incremental from the previous size): ours {} s (batched `append_units`, \
             default tail bound, database {bytes}; {} units left to the background fold, which the reads \
             above ran beside, indexed {} s after the fill, its segments merged by the idle writer {} s \
             after the fill), seed {} s (one `append_unit` each, in memory, no index): {}.",
            ms(o),
            num(ours, &key, "backlog").map_or("n/a".into(), |b| format!("{b:.0}")),
            ms(num(ours, &fold, "indexed_s_after_fill")),
            ms(num(
                ours,
                &format!("index_settled@{size}"),
                "settled_s_after_fill"
            )),
            ms(s),
            ratio(s, o, false)
        );
        let key = format!("fill_unbounded_tail@{size}");
        if let Some(o) = num(ours, &key, "seconds") {
            let _ = writeln!(
                md,
                "Fill to {size} units with no tail bound (the index left wholly to the background fold): \
                 ours {} s, {}; {} units then un-indexed, a search for an absent term while they are \
                 folded {} ms (p50), all indexed {} s after the fill.",
                ms(Some(o)),
                ratio(
                    num(seed, &format!("fill@{size}"), "seconds"),
                    Some(o),
                    false
                ),
                num(ours, &key, "backlog").map_or("n/a".into(), |b| format!("{b:.0}")),
                ms(num(ours, &key, "search_miss_during_fold_p50_ms")),
                ms(num(ours, &key, "indexed_s_after_fill")),
            );
        }
    }
    let (deferred, at_once) = (
        num(ours, "catch_up_search", "seconds"),
        num(ours, "catch_up_search_index_at_once", "seconds"),
    );
    if deferred.is_some() || at_once.is_some() {
        let _ = writeln!(
            md,
            "\nProxy of the first `runs search --all` (in this crate; the command itself lives in \
             `agentctl`): 1,000 threads of 100 units, each caught up by one `append_units` on a durable \
             file, then one search per thread: {} s with the deferred index, {} s indexing every \
             append at once (`index_tail_bytes(0)`, the former write path): {}.",
            ms(deferred),
            ms(at_once),
            ratio(at_once, deferred, false)
        );
    }
    let (deferred, at_once) = (
        num(ours, "runs_search_all_first_deferred", "first_s"),
        num(ours, "runs_search_all_first_index_at_once", "first_s"),
    );
    if deferred.is_some() || at_once.is_some() {
        let _ = writeln!(
            md,
            "\nThe first `runs search --all` (`crates/host/examples/bench_history_search.rs`: \
             `agent_host::run::history::search`, what the command calls, with the journal and the \
             store on one SQLite file as `--db` puts them; 1,000 runs of 100 model steps written \
             into the journal, an absent term so every run is caught up and searched; one run per \
             mode): {} s with the store's defaults, {} s indexing every append at once \
             (`index_tail_bytes(0)`): {}; {} s with both the index and the catch-up as they were \
             when issue 38 was filed (one durable `append_unit` per unit, indexed at once): {}. \
             Searching again, all caught up: {} s and {} s.",
            ms(deferred),
            ms(at_once),
            ratio(at_once, deferred, false),
            ms(num(
                ours,
                "runs_search_all_first_unit_by_unit_index_at_once",
                "first_s"
            )),
            ratio(
                num(
                    ours,
                    "runs_search_all_first_unit_by_unit_index_at_once",
                    "first_s"
                ),
                deferred,
                false
            ),
            ms(num(ours, "runs_search_all_first_deferred", "second_s")),
            ms(num(ours, "runs_search_all_first_index_at_once", "second_s")),
        );
    }
    let _ = writeln!(md, "\n{}", targets(ours, seed, sizes));
    let _ = writeln!(md, "{}", ingest_targets(ours, seed, sizes));
    let _ = writeln!(
        md,
        "Reading the table: a ratio under 1x means the seed is faster. Where the seed stays close \
         or ahead, it reads a handful of rows of an in-memory table and stops: a common term in a \
         busy thread, a 2-character term, the newest units of a busy thread. Ours does the same \
         few row reads (a common term is looked for in the thread's first `4 x limit` units before \
         the trigram index, a window is a reverse primary-key range scan) and then decodes each \
         returned unit into JSON values, so 20x would need these calls to take a few \
         microseconds. \
         The trigram index is deferred (issue 38): an append writes the unit only and adds it to \
         its thread's un-indexed tail; the tail is folded into FTS5 when the writer has been idle \
         for 20 ms, or in the append itself once the thread's tail passes `index_tail_bytes` \
         (default 256 KiB, about 370 of these ~700-byte units), and a search scans the tail after \
         the index. Since schema v3 the index keeps no positions (FTS5 `detail=none`; a search \
         asks it for units holding trigrams that cover the term and checks each candidate's \
         text); since schema v4 FTS5 merges the index's segments 16 at a time instead of 4. \
         Indexing a unit still costs more than writing its row, so the 10 busy threads of this \
         layout, which each outgrow the bound every ~370 units, still pay for the index on the \
         write path, in larger batches; what the deferral buys is appends to threads within the \
         bound (many short threads, bursts) and the unbounded-tail figures. The per-unit costs \
         and the merge A/B were measured outside this bench: see the hand-written notes below, \
         with their dates (this text is generated and quotes no figure it did not measure). \
         The seed keeps no index. A durable (`synchronous=FULL`) append waits for one \
         fsync. Consolidation commits with \
         `synchronous=NORMAL` even on a FULL store (memory is derived data and a lost \
         consolidation comes back as pending work, see `ContextStore::consolidate`), so its \
         one-change cost above is SQLite work without an fsync. Terms under 3 characters cannot \
         use a trigram index and scan only the thread's own units, stopping at the limit."
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_misses_and_seed_wins() {
        let ours = parse(
            r#"{"bench":"search_common","units":100000,"p50_ms":0.02}
{"bench":"search_rare_1match","units":100000,"p50_ms":0.05}
{"bench":"window_busy","units":100000,"p50_ms":1.5}
{"bench":"consolidate","distinct_keys":1000,"one_change_p50_ms":0.2}
{"bench":"append_unit_memory","median":2000.0}
{"bench":"append_units_batch100_file_full","median":6000.0}"#,
        );
        let seed = parse(
            r#"{"bench":"search_common","units":100000,"p50_ms":0.05}
{"bench":"search_rare_1match","units":100000,"p50_ms":50.0}
{"bench":"window_busy","units":100000,"p50_ms":0.03}
{"bench":"consolidate","distinct_keys":1000,"one_change_p50_ms":300.0}
{"bench":"append_unit_memory","median":20000.0}
{"bench":"append_unit_file","median":60.0}"#,
        );
        let md = targets(&ours, &seed, "100000");
        assert!(
            md.contains("search p50 under 1 ms at 100000 units: met"),
            "{md}"
        );
        assert!(
            md.contains("window p50 under 1 ms at 100000 units: **not met**"),
            "{md}"
        );
        assert!(
            md.contains("one change under 5 ms at 100k rows: met"),
            "{md}"
        );
        assert!(md.contains("`search_common@100000` 2.50x"), "{md}");
        assert!(
            md.contains("`window_busy@100000` 0.02x (seed faster)"),
            "{md}"
        );
        assert!(
            md.contains("`append_unit_memory` 0.10x (seed faster)"),
            "{md}"
        );
        let under = md.split("under 20x:").nth(1).unwrap_or_default();
        assert!(!under.contains("search_rare"), "{md}");
        assert!(!under.contains("append_units_batch"), "{md}");
    }

    #[test]
    fn the_20x_check_reads_every_pair_the_table_shows() {
        // Rows the table compares with a seed figure of another name (or a second field of
        // the same line) must be checked too, not skipped for want of a same-named figure.
        let ours = parse(
            r#"{"bench":"search_miss_settled","units":100000,"p50_ms":0.5}
{"bench":"append_unit_memory_unbounded_tail","median":100.0}
{"bench":"durable_commit_floor","median":1.0}
{"bench":"consolidate","distinct_keys":100000,"one_change_p50_ms":0.1,"first_full_s":0.09}
{"bench":"fill","units":100000,"seconds":2.0}
{"bench":"fill_unbounded_tail","units":100000,"seconds":0.7}"#,
        );
        let seed = parse(
            r#"{"bench":"search_miss","units":100000,"p50_ms":1.0}
{"bench":"append_unit_memory","median":120.0}
{"bench":"append_unit_file","median":60.0}
{"bench":"consolidate","distinct_keys":100000,"one_change_p50_ms":300.0,"first_full_s":0.31}
{"bench":"fill","units":100000,"seconds":0.8}"#,
        );
        let md = targets(&ours, &seed, "100000");
        let under = md.split("under 20x:").nth(1).unwrap_or_default();
        for shown in [
            "`search_miss_settled@100000` 2.00x",
            "`append_unit_memory_unbounded_tail` 0.83x (seed faster)",
            "`consolidate@100000` (first, everything dirty) 3.44x",
            "`fill@100000` 0.40x (seed faster)",
            "`fill_unbounded_tail@100000` 1.14x",
        ] {
            assert!(under.contains(shown), "{shown} missing from {md}");
        }
        // SQLite's own commit floor is not a figure of ours, and the one-change
        // consolidation passes.
        assert!(!under.contains("durable_commit_floor"), "{md}");
        assert!(!under.contains("`consolidate@100000` 3"), "{md}");
    }

    #[test]
    fn the_generated_text_quotes_no_figure_of_another_run() {
        // With nothing measured, no figure may appear: every one must come from this run.
        let md = render(&parse(""), &parse(""), "100000", 3, ("0.5", "0.6"));
        for earlier in ["µs", "34.1", "24.4", "0.25 to 4"] {
            assert!(!md.contains(earlier), "`{earlier}` in\n{md}");
        }
    }

    #[test]
    fn a_latency_target_without_rows_reads_not_measured() {
        let md = targets(&parse(""), &parse(""), "100000");
        assert!(
            md.contains("search p50 under 1 ms at 100000 units: **not measured**."),
            "{md}"
        );
    }
}
