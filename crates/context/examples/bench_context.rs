//! Benchmark driver for `cargo xtask bench context` (release build). Prints one JSON object
//! per measurement on stdout. Usage: `bench_context [--sizes 100000,1000000] [--runs 5]`.
//! `bench_context --pg postgres://...` instead measures only the PostgreSQL write path
//! (ad hoc: the xtask does not run it; give it an empty database).
//!
//! The history layout follows the Python baseline's `bench_store.py` (see
//! `docs/benchmarks.md`): one "sparse" thread whose two
//! units are the oldest rows, then units round-robin over 10 "busy" threads (3 items,
//! ~700 bytes: a message, a function_call and its output); busy-5's only "E42" is its first
//! unit, so a rare-term search must find it among all the others.

use std::time::Instant;

use agent_context::{
    ContextOptions, ContextStore, DEFAULT_INDEX_TAIL_BYTES, NewEvidence, NewUnit, StoreDurability,
};
use serde_json::{Value, json};

const WORDS: &[&str] = &[
    "build",
    "failed",
    "login",
    "module",
    "timeout",
    "retry",
    "cache",
    "schema",
    "migration",
    "docs",
    "test",
    "错误",
    "登录",
    "模块",
    "超时",
    "重试",
    "诊断",
    "只读",
    "方案",
];

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn unit(i: usize, rng: &mut Rng) -> Vec<Value> {
    let text: Vec<&str> = (0..40)
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect();
    let text = text.join(" ");
    let head: String = text.chars().take(120).collect();
    vec![
        json!({"type": "message", "role": "user", "text": format!("step {i}: {text}")}),
        json!({"type": "function_call", "call_id": format!("c{i}"), "name": "run_tests", "arguments": "{\"suite\": \"unit\"}"}),
        json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": format!("ok {i} passed; {head}")}),
    ]
}

fn emit(value: Value) {
    println!("{value}");
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    if xs.is_empty() {
        return 0.0;
    }
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    }
}

async fn latency<F, Fut>(reps: usize, mut f: F) -> anyhow::Result<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<usize>>,
{
    for _ in 0..3 {
        f().await?;
    }
    let mut xs = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f().await?;
        xs.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(xs))
}

/// The same allocator as the `agentctl` binary, which opens the store for its commands.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    // As `agentctl` does once past its single-threaded start.
    tikv_jemalloc_ctl::background_thread::write(true)
        .map_err(|e| anyhow::anyhow!("jemalloc's background threads: {e}"))?;
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let sizes: Vec<usize> = arg("--sizes")
        .unwrap_or_else(|| "100000,1000000".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let runs: usize = arg("--runs").and_then(|s| s.parse().ok()).unwrap_or(5);
    let dir = tempfile::tempdir()?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let pool: Vec<Vec<Value>> = (0..2000).map(|i| unit(i, &mut rng)).collect();
    if let Some(url) = arg("--pg") {
        return postgres_write_path(&url, &pool).await;
    }

    append_throughput(dir.path(), &pool, runs).await?;
    history(dir.path(), &pool, &sizes, runs).await?;
    if let Some(&first) = sizes.first() {
        fill_unbounded(dir.path(), &pool, first, runs).await?;
    }
    catch_up_then_search(
        dir.path(),
        &pool,
        1000,
        100,
        DEFAULT_INDEX_TAIL_BYTES,
        "catch_up_search",
    )
    .await?;
    catch_up_then_search(
        dir.path(),
        &pool,
        1000,
        100,
        0,
        "catch_up_search_index_at_once",
    )
    .await?;
    consolidation(dir.path(), runs).await?;
    Ok(())
}

async fn append_rate(
    store: &ContextStore,
    pool: &[Vec<Value>],
    seconds: f64,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    let mut n = 0usize;
    while t.elapsed().as_secs_f64() < seconds {
        for _ in 0..10 {
            store
                .append_unit(
                    &format!("busy-{}", n % 10),
                    &format!("u{n}"),
                    &pool[n % pool.len()],
                )
                .await?;
            n += 1;
        }
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// The disk's floor for a durable append: one-row transactions on a bare rusqlite
/// connection (WAL, `synchronous=FULL`, no index, no thread hand-off, no validation), for
/// `seconds`. Any store that acknowledges each append after its own durable commit runs at
/// most this fast, one appender at a time.
fn durable_commit_floor(path: &std::path::Path, body: &str, seconds: f64) -> anyhow::Result<f64> {
    let conn = rusqlite::Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")?;
    let t = Instant::now();
    let mut n = 0usize;
    while t.elapsed().as_secs_f64() < seconds {
        conn.execute("INSERT INTO t (body) VALUES (?1)", [body])?;
        n += 1;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

async fn append_throughput(
    dir: &std::path::Path,
    pool: &[Vec<Value>],
    runs: usize,
) -> anyhow::Result<()> {
    let (mut mem, mut full, mut normal, mut batch) = (vec![], vec![], vec![], vec![]);
    let (mut mem_unbounded, mut floor) = (vec![], vec![]);
    for run in 0..runs {
        floor.push(durable_commit_floor(
            &dir.join(format!("floor-{run}.db")),
            &serde_json::to_string(&pool[0])?,
            1.5,
        )?);
        let s = ContextStore::open("sqlite::memory:").await?;
        mem.push(append_rate(&s, pool, 1.0).await?);
        s.close().await;
        // No tail bound: the index is left wholly to the background fold (which a
        // back-to-back appender never lets run): the write path alone.
        let s = ContextStore::open_with(
            "sqlite::memory:",
            ContextOptions::default().index_tail_bytes(u64::MAX),
        )
        .await?;
        mem_unbounded.push(append_rate(&s, pool, 1.0).await?);
        s.close().await;
        let url = format!(
            "sqlite://{}",
            dir.join(format!("append-full-{run}.db")).display()
        );
        let s = ContextStore::open(&url).await?;
        full.push(append_rate(&s, pool, 1.5).await?);
        s.close().await;
        let url = format!(
            "sqlite://{}",
            dir.join(format!("append-normal-{run}.db")).display()
        );
        let s = ContextStore::open_with(
            &url,
            ContextOptions::default().durability(StoreDurability::Normal),
        )
        .await?;
        normal.push(append_rate(&s, pool, 1.0).await?);
        s.close().await;
        // 100 units per transaction, durability Full.
        let url = format!(
            "sqlite://{}",
            dir.join(format!("append-batch-{run}.db")).display()
        );
        let s = ContextStore::open(&url).await?;
        let t = Instant::now();
        let mut n = 0usize;
        while t.elapsed().as_secs_f64() < 1.0 {
            let units: Vec<NewUnit> = (0..100)
                .map(|k| NewUnit {
                    unit: format!("u{}", n + k),
                    items: pool[(n + k) % pool.len()].clone(),
                })
                .collect();
            s.append_units(&format!("busy-{}", (n / 100) % 10), &units)
                .await?;
            n += 100;
        }
        batch.push(n as f64 / t.elapsed().as_secs_f64());
        s.close().await;
    }
    emit(json!({"bench": "append_unit_memory", "median": median(mem), "unit": "units/s"}));
    emit(
        json!({"bench": "append_unit_memory_unbounded_tail", "median": median(mem_unbounded), "unit": "units/s"}),
    );
    emit(json!({"bench": "append_unit_file_full", "median": median(full), "unit": "units/s"}));
    emit(json!({"bench": "append_unit_file_normal", "median": median(normal), "unit": "units/s"}));
    emit(json!({"bench": "durable_commit_floor", "median": median(floor), "unit": "commits/s"}));
    emit(
        json!({"bench": "append_units_batch100_file_full", "median": median(batch), "unit": "units/s"}),
    );
    Ok(())
}

async fn history(
    dir: &std::path::Path,
    pool: &[Vec<Value>],
    sizes: &[usize],
    runs: usize,
) -> anyhow::Result<()> {
    let url = format!("sqlite://{}", dir.join("history.db").display());
    let s = ContextStore::open_with(
        &url,
        ContextOptions::default().durability(StoreDurability::Normal),
    )
    .await?;
    s.append_unit(
        "sparse",
        "s0",
        &[json!({"type": "message", "text": "needle-sparse E42 旧登录模块"})],
    )
    .await?;
    s.append_unit(
        "sparse",
        "s1",
        &[json!({"type": "message", "text": "second sparse unit"})],
    )
    .await?;
    let mut filled = 0usize;
    for &n in sizes {
        let t = Instant::now();
        fill_blocks(&s, pool, filled, n).await?;
        filled = n;
        let fill_s = t.elapsed().as_secs_f64();
        let backlog = s.index_backlog().await?;
        emit(
            json!({"bench": "fill", "units": n, "seconds": fill_s, "db_bytes": db_bytes(&dir.join("history.db")), "backlog": backlog}),
        );
        // The reads below run while the background fold works through `backlog`.
        let reps = runs * 20;
        let cases: &[(&str, &str, &str, usize)] = &[
            ("search_rare_1match", "busy-5", "E42", 5),
            ("search_common", "busy-5", "login", 5),
            ("search_miss", "busy-5", "no-such-term", 5),
            ("search_cjk_sparse", "sparse", "旧登录", 5),
            ("search_short_term_fallback_common", "busy-5", "lo", 5),
        ];
        for &(name, thread, term, limit) in cases {
            let hits = s.search(thread, term, limit).await?.len();
            let ms = latency(reps, || async {
                Ok(s.search(thread, term, limit).await?.len())
            })
            .await?;
            emit(json!({"bench": name, "units": n, "p50_ms": ms, "hits": hits}));
        }
        for &(name, thread, keep) in &[
            ("window_busy", "busy-3", 2usize),
            ("window_busy_k20", "busy-3", 20),
            ("window_sparse", "sparse", 2),
        ] {
            let ms = latency(reps, || async {
                Ok(s.window(thread, "goal", keep).await?.recent_units.len())
            })
            .await?;
            emit(json!({"bench": name, "units": n, "p50_ms": ms}));
        }
        let backlog_after = s.index_backlog().await?;
        wait_indexed(&s).await?;
        let indexed_s = t.elapsed().as_secs_f64() - fill_s;
        emit(json!({
            "bench": "fold_during_reads", "units": n, "backlog_before": backlog,
            "backlog_after": backlog_after, "indexed_s_after_fill": indexed_s,
        }));
        // The same index-bound searches once the idle writer has merged the segments the
        // fill's folds wrote (schema v4).
        while !s.index_settled().await? {
            // A merge that never ends would be a bug to report, not a figure to wait for.
            if t.elapsed().as_secs_f64() - fill_s > 600.0 {
                anyhow::bail!("the index of {n} units was not merged 600 s after the fill");
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let settled_s = t.elapsed().as_secs_f64() - fill_s;
        emit(json!({"bench": "index_settled", "units": n, "settled_s_after_fill": settled_s}));
        let index_bound = ["search_rare_1match", "search_miss"];
        for &(name, thread, term, limit) in cases.iter().filter(|c| index_bound.contains(&c.0)) {
            let ms = latency(reps, || async {
                Ok(s.search(thread, term, limit).await?.len())
            })
            .await?;
            emit(json!({"bench": format!("{name}_settled"), "units": n, "p50_ms": ms}));
        }
    }
    s.close().await;
    Ok(())
}

/// Seconds until the background fold has indexed every unit (polled; the wait is the
/// measurement, not a synchronisation).
async fn wait_indexed(s: &ContextStore) -> anyhow::Result<f64> {
    let t = Instant::now();
    while s.index_backlog().await? > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Fill to `n` units with no tail bound (the index left wholly to the background fold),
/// then a rare-term search while the fold runs, and the time until it is done.
async fn fill_unbounded(
    dir: &std::path::Path,
    pool: &[Vec<Value>],
    n: usize,
    runs: usize,
) -> anyhow::Result<()> {
    let url = format!("sqlite://{}", dir.join("unbounded.db").display());
    let s = ContextStore::open_with(
        &url,
        ContextOptions::default()
            .durability(StoreDurability::Normal)
            .index_tail_bytes(u64::MAX),
    )
    .await?;
    let t = Instant::now();
    fill_blocks(&s, pool, 0, n).await?;
    let fill_s = t.elapsed().as_secs_f64();
    let backlog = s.index_backlog().await?;
    let miss_ms = latency(runs * 4, || async {
        Ok(s.search("busy-5", "no-such-term", 5).await?.len())
    })
    .await?;
    let indexed_s = wait_indexed(&s).await?;
    emit(json!({
        "bench": "fill_unbounded_tail", "units": n, "seconds": fill_s, "backlog": backlog,
        "search_miss_during_fold_p50_ms": miss_ms, "indexed_s_after_fill": indexed_s,
    }));
    s.close().await;
    Ok(())
}

/// A proxy of `runs search --all`'s first search, inside this crate: `threads` threads of
/// `units` units each appended as a catch-up (one `append_units` per thread, on a durable
/// file), then one search per thread. With `index_tail_bytes(0)` every append indexes at
/// once, as before the deferred index.
async fn catch_up_then_search(
    dir: &std::path::Path,
    pool: &[Vec<Value>],
    threads: usize,
    units: usize,
    tail_bytes: u64,
    name: &str,
) -> anyhow::Result<()> {
    let url = format!("sqlite://{}", dir.join(format!("{name}.db")).display());
    let s = ContextStore::open_with(&url, ContextOptions::default().index_tail_bytes(tail_bytes))
        .await?;
    let t = Instant::now();
    for th in 0..threads {
        let batch: Vec<NewUnit> = (0..units)
            .map(|k| NewUnit {
                unit: format!("u{k}"),
                items: pool[(th * units + k) % pool.len()].clone(),
            })
            .collect();
        s.append_units(&format!("run-{th}"), &batch).await?;
    }
    let mut hits = 0;
    for th in 0..threads {
        hits += s
            .search(&format!("run-{th}"), "no-such-term", 20)
            .await?
            .len();
    }
    emit(json!({
        "bench": name, "threads": threads, "units_per_thread": units,
        "seconds": t.elapsed().as_secs_f64(), "hits": hits,
    }));
    s.close().await;
    Ok(())
}

async fn consolidation(dir: &std::path::Path, runs: usize) -> anyhow::Result<()> {
    let n = 100_000usize;
    for keys in [Some(1000usize), None] {
        let url = format!(
            "sqlite://{}",
            dir.join(format!("evidence-{}.db", keys.unwrap_or(0)))
                .display()
        );
        let s = ContextStore::open(&url).await?;
        let mut rng = Rng(7);
        let rows: Vec<NewEvidence> = (0..n)
            .map(|i| {
                let k = keys.map_or(i, |keys| i % keys);
                NewEvidence {
                    source: format!("src-{i}"),
                    project: format!("project-{}", k % 10),
                    key: format!("key-{k}"),
                    value: format!("v{i}"),
                    observed: rng.below(10_000) as i64,
                    confirmed: i % 10 != 0,
                }
            })
            .collect();
        for chunk in rows.chunks(5000) {
            s.add_evidence_batch(chunk).await?;
        }
        let t = Instant::now();
        let full = s.consolidate().await?;
        let full_s = t.elapsed().as_secs_f64();
        let mut one = Vec::new();
        for run in 0..runs.max(5) {
            s.add_evidence(&NewEvidence {
                source: format!("new-{run}"),
                project: "project-3".into(),
                key: format!("key-{}", 3 + 10 * run),
                value: format!("new{run}"),
                observed: 20_000 + run as i64,
                confirmed: true,
            })
            .await?;
            let t = Instant::now();
            let c = s.consolidate().await?;
            one.push(t.elapsed().as_secs_f64() * 1e3);
            anyhow::ensure!(
                c.recomputed == 1,
                "expected one recomputed pair, got {}",
                c.recomputed
            );
        }
        emit(json!({
            "bench": "consolidate",
            "evidence": n,
            "distinct_keys": keys.unwrap_or(n),
            "memory_rows": full.written,
            "first_full_s": full_s,
            "one_change_p50_ms": median(one),
        }));
        s.close().await;
    }
    Ok(())
}

/// Units `from..to` of the history layout, in blocks of 1000 (100 per busy thread per
/// transaction), round robin.
async fn fill_blocks(
    s: &ContextStore,
    pool: &[Vec<Value>],
    from: usize,
    to: usize,
) -> anyhow::Result<()> {
    let mut filled = from;
    while filled < to {
        let block = (to - filled).min(1000);
        let mut per_thread: Vec<Vec<NewUnit>> = vec![Vec::new(); 10];
        for i in filled..filled + block {
            let items = if i == 5 {
                vec![json!({"type": "message", "text": "E42 early hit"})]
            } else {
                pool[i % pool.len()].clone()
            };
            let name = if i == 5 {
                "hit".to_string()
            } else {
                format!("u{i}")
            };
            per_thread[i % 10].push(NewUnit { unit: name, items });
        }
        for (k, units) in per_thread.iter().enumerate() {
            if !units.is_empty() {
                s.append_units(&format!("busy-{k}"), units).await?;
            }
        }
        filled += block;
    }
    Ok(())
}

/// PostgreSQL: 20,000 units appended in batches of 100 to 10 threads, deferred (default
/// bound, and no bound) vs indexed at once (`index_tail_bytes(0)`), and how long the
/// background fold then takes; plus single appends for 2 s each way.
async fn postgres_write_path(url: &str, pool: &[Vec<Value>]) -> anyhow::Result<()> {
    for (name, bound) in [
        ("deferred", DEFAULT_INDEX_TAIL_BYTES),
        ("unbounded_tail", u64::MAX),
        ("index_at_once", 0),
    ] {
        let s =
            ContextStore::open_with(url, ContextOptions::default().index_tail_bytes(bound)).await?;
        let prefix = format!("pg-{name}");
        let n = 20_000usize;
        let t = Instant::now();
        let mut i = 0;
        while i < n {
            let units: Vec<NewUnit> = (i..i + 100)
                .map(|k| NewUnit {
                    unit: format!("u{k}"),
                    items: pool[k % pool.len()].clone(),
                })
                .collect();
            s.append_units(&format!("{prefix}-{}", (i / 100) % 10), &units)
                .await?;
            i += 100;
        }
        let fill_s = t.elapsed().as_secs_f64();
        let backlog = s.index_backlog().await?;
        let indexed_s = wait_indexed(&s).await?;
        let t = Instant::now();
        let mut k = 0usize;
        while t.elapsed().as_secs_f64() < 2.0 {
            s.append_unit(
                &format!("{prefix}-single-{}", k % 10),
                &format!("u{k}"),
                &pool[k % pool.len()],
            )
            .await?;
            k += 1;
        }
        let single = k as f64 / t.elapsed().as_secs_f64();
        emit(json!({
            "bench": "pg_write_path", "mode": name, "units": n, "fill_s": fill_s,
            "backlog": backlog, "indexed_s_after_fill": indexed_s, "append_unit_per_s": single,
        }));
        s.close().await;
    }
    Ok(())
}

fn db_bytes(path: &std::path::Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", path.display())).ok())
        .map(|m| m.len())
        .sum()
}
