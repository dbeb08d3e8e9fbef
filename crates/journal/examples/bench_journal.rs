//! Measurements for `cargo xtask bench journal`; prints one JSON object per line.
//!
//! - `append DB PRODUCERS full|normal SECONDS [IN_FLIGHT]`: concurrent producers, each
//!   awaiting its own appends (with IN_FLIGHT > 1, each keeps that many appends outstanding,
//!   like a turn journaling several tool calls at once), for SECONDS; reports events/s and
//!   events per commit.
//! - `raw DB SECONDS ROWS_PER_TXN [journal-table]`: the limit of the same SQLite build on
//!   the same disk, ROWS_PER_TXN prepared INSERTs per fsync'd transaction, no journal around
//!   it: into a plain rowid table, or (`journal-table`) into the journal's own table
//!   (clustered by thread and seq, head row advanced per transaction) with its schema.
//! - `replay-build DB`: 10 interleaved threads of 100k events (1M in all) plus a 100-event
//!   thread, bulk-appended.
//! - `replay DB RUNS`: median wall time to replay the 100k-event and the 100-event thread.

use std::time::{Duration, Instant};

use agent_journal::{Durability, Journal, JournalOptions, NewEvent};
use anyhow::{Context as _, bail};
use serde_json::json;

/// The same allocator as the `agentctl` binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    // As `agentctl` does once past its single-threaded start.
    tikv_jemalloc_ctl::background_thread::write(true)
        .map_err(|e| anyhow::anyhow!("jemalloc's background threads: {e}"))?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).cloned().context("missing argument");
    match args.first().map(String::as_str) {
        Some("append") => {
            let in_flight = args.get(5).map(|a| a.parse()).transpose()?.unwrap_or(1);
            append(
                &arg(1)?,
                arg(2)?.parse()?,
                &arg(3)?,
                arg(4)?.parse()?,
                in_flight,
            )
            .await
        }
        Some("raw") => {
            let into_journal = args.get(4).map(String::as_str) == Some("journal-table");
            if into_journal {
                // The journal's schema, created by the journal itself.
                Journal::open(&format!("sqlite://{}", arg(1)?))
                    .await?
                    .close()
                    .await;
            }
            raw(&arg(1)?, arg(2)?.parse()?, arg(3)?.parse()?, into_journal)
        }
        Some("replay-build") => replay_build(&arg(1)?).await,
        Some("replay") => replay(&arg(1)?, arg(2)?.parse()?).await,
        _ => bail!("usage: bench_journal append|raw|replay-build|replay ..."),
    }
}

async fn append(
    db: &str,
    producers: usize,
    durability: &str,
    seconds: f64,
    in_flight: usize,
) -> anyhow::Result<()> {
    let durability = match durability {
        "full" => Durability::Full,
        "normal" => Durability::Normal,
        other => bail!("unknown durability {other}"),
    };
    let journal = Journal::open_with(
        &format!("sqlite://{db}"),
        JournalOptions::default().durability(durability),
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for p in 0..producers * in_flight.max(1) {
        let journal = journal.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let thread = format!("t{}", (p % producers) % 10);
            while Instant::now() < deadline {
                journal
                    .append(NewEvent::new(
                        thread.as_str(),
                        "tool.started",
                        json!({ "call_id": format!("call-{p}-{n}") }),
                    ))
                    .await?;
                n += 1;
            }
            anyhow::Ok(n)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let stats = journal.stats();
    journal.close().await;
    println!(
        "{}",
        json!({
            "events_per_s": total as f64 / elapsed,
            "events": total,
            "commits": stats.commits,
            "events_per_commit": stats.events as f64 / stats.commits.max(1) as f64,
        })
    );
    Ok(())
}

fn raw(db: &str, seconds: f64, rows_per_txn: usize, into_journal: bool) -> anyhow::Result<()> {
    // Direct calls into the same bundled SQLite (no journal, no async, no thread hand-off):
    // one prepared INSERT per row, ROWS_PER_TXN rows per fsync'd WAL transaction.
    let conn = rusqlite::Connection::open(db)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE IF NOT EXISTS raw_events (seq INTEGER PRIMARY KEY, thread TEXT NOT NULL,
         kind TEXT NOT NULL, payload TEXT NOT NULL, at INTEGER NOT NULL, dedup_key TEXT);",
    )?;
    let (insert_sql, head_sql) = if into_journal {
        (
            "INSERT INTO journal_events (seq, thread, kind, payload, at, dedup_key) \
             VALUES (?1, ?2, ?3, ?4, ?5, NULL)",
            Some("UPDATE journal_head SET seq = ?1 WHERE id = 0"),
        )
    } else {
        (
            "INSERT INTO raw_events (seq, thread, kind, payload, at, dedup_key) \
             VALUES (?1, ?2, ?3, ?4, ?5, NULL)",
            None,
        )
    };
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut total = 0usize;
    let mut commits = 0usize;
    let mut seq = 0i64;
    while Instant::now() < deadline {
        conn.execute_batch(if into_journal {
            "BEGIN IMMEDIATE"
        } else {
            "BEGIN"
        })?;
        {
            let mut insert = conn.prepare_cached(insert_sql)?;
            for i in 0..rows_per_txn {
                seq += 1;
                insert.execute(rusqlite::params![
                    seq,
                    format!("t{}", i % 10),
                    "tool.started",
                    format!("{{\"call_id\":\"call-{}\"}}", total + i),
                    0i64,
                ])?;
            }
            if let Some(head) = head_sql {
                conn.prepare_cached(head)?.execute([seq])?;
            }
        }
        conn.execute_batch("COMMIT")?;
        total += rows_per_txn;
        commits += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({ "rows_per_s": total as f64 / elapsed, "commits": commits, "rows_per_txn": rows_per_txn })
    );
    Ok(())
}

const KINDS: [&str; 5] = [
    "turn.started",
    "tool.started",
    "tool.completed",
    "steer.accepted",
    "tool.failed",
];

async fn replay_build(db: &str) -> anyhow::Result<()> {
    let journal = Journal::open_with(
        &format!("sqlite://{db}"),
        JournalOptions::default().durability(Durability::Normal),
    )
    .await?;
    let started = Instant::now();
    let mut batch = Vec::with_capacity(10_000);
    for i in 0..100_000u64 {
        for t in 0..10 {
            batch.push(NewEvent::new(
                format!("thread-{t}"),
                KINDS[(i % 5) as usize],
                json!({ "call_id": format!("call-{i}"), "revision": i % 7 }),
            ));
        }
        if i % 1000 == 0 {
            batch.push(NewEvent::new("small", "tool.completed", json!({ "i": i })));
        }
        if batch.len() >= 10_000 {
            journal.append_batch(std::mem::take(&mut batch)).await?;
        }
    }
    journal.append_batch(batch).await?;
    journal.close().await;
    println!(
        "{}",
        json!({ "events": 1_000_100, "build_s": started.elapsed().as_secs_f64() })
    );
    Ok(())
}

async fn replay(db: &str, runs: usize) -> anyhow::Result<()> {
    let journal = Journal::open(&format!("sqlite://{db}")).await?;
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let mut small_events = journal.replay("small", 0).await?.len(); // warm-up
    let mut small = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        small_events = journal.replay("small", 0).await?.len();
        small.push(ms(t));
    }
    let mut big = Vec::new();
    let mut after_big = Vec::new();
    let mut big_events = 0;
    for _ in 0..runs {
        let t = Instant::now();
        big_events = journal.replay("thread-3", 0).await?.len();
        big.push(ms(t));
        let t = Instant::now();
        journal.replay("small", 0).await?;
        after_big.push(ms(t));
    }
    // For an even count the mean of the two middle values, as the seed's
    // `statistics.median` takes it (it took the upper one, the slower time, alone).
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[mid],
            _ => (v[mid - 1] + v[mid]) / 2.0,
        }
    };
    println!(
        "{}",
        json!({
            "big_events": big_events, "big_ms": median(&mut big),
            "small_events": small_events, "small_ms": median(&mut small),
            "small_after_big_ms": median(&mut after_big),
        })
    );
    Ok(())
}
