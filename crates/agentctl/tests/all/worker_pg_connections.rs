//! A worker against PostgreSQL: how many connections it holds (at most its pool's cap
//! plus the writer's, the notifier's and the LISTEN connection, whatever `--concurrency`
//! says), and a clean stop
//! that prints no warning about the journal's own closing.

use std::time::{Duration, Instant};

use sqlx::Connection as _;

use crate::host::{agentctl, emulator, fresh_db, text};
use crate::workers::{start_worker, story, submit};

/// The most a worker may hold: `agent_host::worker::MAX_READ_CONNECTIONS` read connections,
/// the writer's, the notifier's and the LISTEN connection (a connection of its own, so that
/// a tail never takes one the reads need).
const MOST: i64 = agent_host::worker::MAX_READ_CONNECTIONS as i64 + 3;

/// Client connections to the database `counter` is connected to, but its own. Not every
/// backend: an autovacuum worker on the database shows in `pg_stat_activity` too (the
/// likely cause of a CI run where the worker "held 19").
async fn connections(counter: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND backend_type = 'client backend'",
    )
    .fetch_one(counter)
    .await
    .unwrap()
}

/// `--concurrency 1024` with 40 runs at once: never more connections than [`MOST`] (it
/// used to be 3 × concurrency + 4, which took every connection of the server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_concurrency_worker_holds_at_most_the_pool_cap() {
    let Some(db) = fresh_db::postgres().await else {
        return;
    };
    let db = db.url();
    let server = emulator(&story("0.3")).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = submit(db, &server, dir.path(), 40);
    let mut counter = sqlx::PgConnection::connect(db).await.unwrap();
    assert_eq!(connections(&mut counter).await, 0);
    let mut worker = start_worker(db, dir.path(), "wide", "30", &["--concurrency", "1024"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut most = 0;
    loop {
        most = most.max(connections(&mut counter).await);
        let ended = worker
            .lines()
            .iter()
            .filter(|l| l["type"] == "ended")
            .count();
        if ended == runs.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{ended} of {} runs ended",
            runs.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.signal("TERM");
    assert!(worker.child.wait().unwrap().success());
    for line in worker.lines().iter().filter(|l| l["type"] == "ended") {
        assert_eq!(line["status"], "completed", "{line}");
    }
    assert!(most > 2, "the worker opened no read connection: {most}");
    assert!(
        most <= MOST,
        "the worker held {most} connections, at most {MOST} expected"
    );
    counter.close().await.unwrap();
}

/// `runs wait` on a completed run: opens the journal, tails the run (LISTEN connected),
/// sees it ended and closes; 4 of 30 tries warned that the LISTEN connection was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_wait_exits_without_a_warning() {
    let Some(db) = fresh_db::postgres().await else {
        return;
    };
    let db = db.url();
    let ws = tempfile::tempdir().unwrap();
    let o = agentctl(db)
        .env_remove("RUST_LOG")
        .args(["run", "--mock", "--approval", "auto", "--workspace"])
        .arg(ws.path())
        .arg("hi")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stderr = text(&o.stderr);
    let id = stderr
        .split_whitespace()
        .skip_while(|w| *w != "run")
        .nth(1)
        .unwrap()
        .to_string();
    for n in 0..30 {
        let o = agentctl(db)
            .env_remove("RUST_LOG")
            .args(["runs", "wait", &id])
            .output()
            .unwrap();
        let stderr = text(&o.stderr);
        assert!(o.status.success(), "try {n}: {stderr}");
        assert!(
            !stderr.lines().any(|l| l.contains("WARN")),
            "try {n}: a warning on a clean exit:\n{stderr}"
        );
    }
}

/// A worker stopped by SIGTERM closes its journal; its LISTEN connection going away with
/// the pool is that close, not a lost connection, and warns about nothing. The race it
/// lost (the pool's close seen before the stop) was intermittent: tried many times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_worker_stop_prints_no_warning() {
    let Some(db) = fresh_db::postgres().await else {
        return;
    };
    let db = db.url();
    let dir = tempfile::tempdir().unwrap();
    for n in 0..10 {
        let name = format!("quiet{n}");
        let mut worker = start_worker(db, dir.path(), &name, "5", &["--concurrency", "4"]);
        // Up and idle: its journal open, LISTEN connected, polling for runs.
        std::thread::sleep(Duration::from_millis(300));
        worker.signal("TERM");
        let status = worker.child.wait().unwrap();
        let stderr = std::fs::read_to_string(dir.path().join(format!("{name}.err"))).unwrap();
        assert!(status.success(), "try {n}: {status}\n{stderr}");
        assert!(
            !stderr.lines().any(|l| l.contains("WARN")),
            "try {n}: a warning on a clean exit:\n{stderr}"
        );
    }
}
