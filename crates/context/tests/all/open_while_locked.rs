//! A current SQLite store opens, reads and closes while another connection holds the
//! write lock (a host writing, a `BEGIN IMMEDIATE` held open): only a write waits for it.

use std::time::{Duration, Instant};

use agent_context::{Access, ContextError, ContextOptions, ContextStore, DatabaseErrorKind};
use serde_json::json;

/// A file store holding one unit of thread `t`, not yet folded into the index; and a
/// second connection holding the write lock on it.
async fn locked_store(dir: &tempfile::TempDir) -> (String, rusqlite::Connection) {
    let path = dir.path().join("c.db");
    let url = format!("sqlite://{}", path.display());
    let store = ContextStore::open(&url).await.unwrap();
    store.pause_index_fold(true).await.unwrap();
    store
        .append_unit(
            "t",
            "u1",
            &[json!({"type": "message", "text": "E42 in the login"})],
        )
        .await
        .unwrap();
    store.close().await;
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    (url, holder)
}

/// Longer than any of these steps takes unlocked, shorter than the busy timeout below.
const PROMPT: Duration = Duration::from_secs(4);

async fn reads_while_locked(access: Access) {
    let dir = tempfile::tempdir().unwrap();
    let (url, holder) = locked_store(&dir).await;
    let options = ContextOptions {
        busy_timeout: Duration::from_secs(20),
        ..ContextOptions::default().access(access)
    };
    let started = Instant::now();
    let store = ContextStore::open_with(&url, options).await.unwrap();
    assert!(!store.is_read_only());
    let hits = store.search("t", "e42", 10).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(
        store
            .window("t", "goal", 5)
            .await
            .unwrap()
            .recent_units
            .len(),
        1
    );
    assert_eq!(store.threads().await.unwrap().len(), 1);
    // Long enough for the background fold to start (it waits 20 ms of idleness).
    tokio::time::sleep(Duration::from_millis(200)).await;
    store.close().await;
    assert!(
        started.elapsed() < PROMPT,
        "opening, reading and closing took {:?}",
        started.elapsed()
    );
    holder.execute_batch("COMMIT").unwrap();
}

#[tokio::test]
async fn a_current_store_opens_reads_and_closes_without_waiting_for_the_lock() {
    reads_while_locked(Access::ReadWrite).await;
}

#[tokio::test]
async fn a_store_opened_for_reading_reads_without_waiting_for_the_lock() {
    reads_while_locked(Access::ReadOnlyWhenUnwritable).await;
}

/// A write still waits for the lock, and says so when it is held past the busy timeout.
#[tokio::test]
async fn a_write_waits_for_the_lock_and_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let (url, holder) = locked_store(&dir).await;
    let options = ContextOptions {
        busy_timeout: Duration::from_millis(100),
        ..ContextOptions::default()
    };
    let store = ContextStore::open_with(&url, options).await.unwrap();
    match store
        .append_unit("t", "u2", &[json!({"type": "message", "text": "more"})])
        .await
    {
        Err(ContextError::Database(err)) => {
            assert_eq!(err.kind(), DatabaseErrorKind::Timeout, "{err}");
        }
        other => panic!("{other:?}"),
    }
    store.close().await;
    holder.execute_batch("COMMIT").unwrap();
}

/// A file without this build's schema waits for the lock to apply it.
#[tokio::test]
async fn a_new_file_waits_for_the_lock_to_apply_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder
        .execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE other (x); BEGIN IMMEDIATE")
        .unwrap();
    let options = ContextOptions {
        busy_timeout: Duration::from_millis(100),
        ..ContextOptions::default()
    };
    let url = format!("sqlite://{}", path.display());
    match ContextStore::open_with(&url, options).await {
        Err(ContextError::Database(err)) => {
            assert_eq!(err.kind(), DatabaseErrorKind::Timeout, "{err}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    holder.execute_batch("COMMIT").unwrap();
}
