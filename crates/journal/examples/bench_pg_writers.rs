//! PostgreSQL writers side by side (issue 35); prints one JSON object per line.
//!
//! `bench_pg_writers URL SECONDS ROUNDS N...`: for each round and each N, on the database
//! at URL (it creates `bench_raw_events` and the journal's tables there):
//! - `raw`: N connections, each committing single-row INSERTs (its own transaction, so
//!   `synchronous_commit = on` waits for the WAL flush) into a table of the journal's shape
//!   (seq from a sequence, the `(thread, seq)` and `(tx, seq)` indexes), for SECONDS. The
//!   server's limit.
//! - `journal`: N journals opened separately (each its own writer connection, as N
//!   processes would), each with one producer appending awaited events to its own thread,
//!   for SECONDS.
//!
//! Each line: `{"case", "n", "round", "rate"}` (committed rows or events per second).
//! `BENCH_PG_ONLY=raw` or `=journal` runs one side only (for profiling).

use std::time::{Duration, Instant};

use agent_journal::{Journal, NewEvent};
use anyhow::Context as _;
use serde_json::json;
use sqlx::Connection as _;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const RAW_SCHEMA: &str = "
CREATE SEQUENCE IF NOT EXISTS bench_raw_seq AS BIGINT;
CREATE TABLE IF NOT EXISTS bench_raw_events (
    seq       BIGINT PRIMARY KEY DEFAULT nextval('bench_raw_seq'),
    thread    TEXT   NOT NULL,
    kind      TEXT   NOT NULL,
    payload   TEXT   NOT NULL,
    at        BIGINT NOT NULL,
    dedup_key TEXT,
    epoch     BIGINT,
    tx        BIGINT NOT NULL DEFAULT (pg_current_xact_id()::text::bigint)
);
CREATE INDEX IF NOT EXISTS bench_raw_thread_seq ON bench_raw_events (thread, seq);
CREATE INDEX IF NOT EXISTS bench_raw_tx_seq ON bench_raw_events (tx, seq);
";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = args.first().context("URL")?.clone();
    let seconds: u64 = args.get(1).context("SECONDS")?.parse()?;
    let rounds: usize = args.get(2).context("ROUNDS")?.parse()?;
    let ns: Vec<usize> = args[3..]
        .iter()
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let span = Duration::from_secs(seconds);
    // For profiling one side alone: `BENCH_PG_ONLY=raw|journal`.
    let only = std::env::var("BENCH_PG_ONLY").ok();
    let mut setup = sqlx::PgConnection::connect(&url).await?;
    sqlx::raw_sql(RAW_SCHEMA).execute(&mut setup).await?;
    setup.close().await?;
    for round in 0..rounds {
        for &n in &ns {
            if only.as_deref() != Some("journal") {
                let rate = raw(&url, n, span).await?;
                println!(
                    "{}",
                    json!({"case": "raw", "n": n, "round": round, "rate": rate})
                );
            }
            if only.as_deref() != Some("raw") {
                let rate = journal(&url, n, span).await?;
                println!(
                    "{}",
                    json!({"case": "journal", "n": n, "round": round, "rate": rate})
                );
            }
        }
    }
    Ok(())
}

async fn raw(url: &str, n: usize, span: Duration) -> anyhow::Result<f64> {
    let mut conns = Vec::new();
    for _ in 0..n {
        conns.push(sqlx::PgConnection::connect(url).await?);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, mut conn) in conns.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let thread = format!("raw-{i}");
            let mut count = 0u64;
            while start.elapsed() < span {
                sqlx::query(
                    "INSERT INTO bench_raw_events (thread, kind, payload, at) VALUES ($1, 'e', $2, $3)",
                )
                .bind(&thread)
                .bind(r#"{"n":1}"#)
                .bind(count as i64)
                .execute(&mut conn)
                .await?;
                count += 1;
            }
            conn.close().await?;
            anyhow::Ok(count)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

async fn journal(url: &str, n: usize, span: Duration) -> anyhow::Result<f64> {
    let mut journals = Vec::new();
    for _ in 0..n {
        journals.push(Journal::open(url).await?);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, journal) in journals.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let thread = format!("journal-{i}");
            let mut count = 0u64;
            while start.elapsed() < span {
                journal
                    .append(NewEvent::new(&thread, "e", json!({"n": count})))
                    .await?;
                count += 1;
            }
            journal.close().await;
            anyhow::Ok(count)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}
