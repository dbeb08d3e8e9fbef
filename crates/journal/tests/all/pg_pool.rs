//! PostgreSQL read pool: connections a burst of reads opened are closed again once idle
//! (`JournalOptions::read_idle_timeout`), and never more than `read_connections` are open.

use std::time::{Duration, Instant};

use agent_journal::{Journal, JournalOptions, NewEvent};
use serde_json::json;
use sqlx::Connection as _;

/// Client connections of other sessions to the database `conn` is connected to (an
/// autovacuum worker on it shows in `pg_stat_activity` too, and is not one).
async fn connections(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND backend_type = 'client backend'",
    )
    .fetch_one(conn)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_read_connections_are_closed_and_never_exceed_the_pool() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_pool_idle").await else {
        return;
    };
    let options = JournalOptions {
        read_connections: 6,
        read_idle_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let mut counter = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let journal = Journal::open_with(db.url(), options).await.unwrap();
    journal
        .append(NewEvent::new("t", "e", json!({"n": 1})))
        .await
        .unwrap();
    let before = connections(&mut counter).await;
    // A burst: many reads at once, each holding a connection while the server sleeps.
    let mut reads = tokio::task::JoinSet::new();
    for _ in 0..24 {
        let journal = journal.clone();
        reads.spawn(async move {
            for _ in 0..3 {
                journal.replay("t", 0).await.unwrap();
                journal.threads().await.unwrap();
            }
        });
    }
    let mut most = 0;
    while !reads.is_empty() {
        most = most.max(connections(&mut counter).await);
        if let Ok(Some(done)) =
            tokio::time::timeout(Duration::from_millis(5), reads.join_next()).await
        {
            done.unwrap();
        }
    }
    // The writer's and the notifier's connection, and at most 6 of the pool.
    assert!(most <= 2 + 6, "{most} connections open at once");
    let grown = connections(&mut counter).await;
    assert!(
        grown > before,
        "the burst opened no connection: {before} -> {grown}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = connections(&mut counter).await;
        if now <= before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{now} connections still open, {before} before the burst"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    journal.close().await;
    counter.close().await.unwrap();
}
