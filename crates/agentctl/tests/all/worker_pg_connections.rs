//! A worker against PostgreSQL: how many connections it holds (at most its pool's cap
//! plus the writer's and the notifier's, whatever `--concurrency` says), and a clean stop
//! that prints no warning about the journal's own closing.

use std::time::{Duration, Instant};

use sqlx::Connection as _;

use crate::host::{emulator, fresh_db};
use crate::workers::{start_worker, story, submit};

/// The most a worker may hold: `agent_host::worker::MAX_READ_CONNECTIONS` read connections
/// (its LISTEN connection among them), the writer's and the notifier's.
const MOST: i64 = agent_host::worker::MAX_READ_CONNECTIONS as i64 + 2;

/// Connections to the database `counter` is connected to, but its own.
async fn connections(counter: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
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
