//! Opening a SQLite journal while another connection holds the database's write lock.
//!
//! Opening used to take the write lock to check the schema even when it was current, so
//! an inspecting command (`journal threads`, `runs list`) failed with "database is locked"
//! after `busy_timeout` while any process wrote, though WAL lets readers read meanwhile;
//! listing leases (the runs table) took it too.

use std::time::{Duration, Instant};

use agent_journal::{Access, Journal, JournalOptions, NewEvent};
use serde_json::json;

const BUSY: Duration = Duration::from_secs(3);

/// A journal file with one event in it, and the open connection holding its write lock.
async fn locked_journal(dir: &tempfile::TempDir) -> (String, rusqlite::Connection) {
    let path = dir.path().join("j.db");
    let url = format!("sqlite://{}", path.display());
    let journal = Journal::open(&url).await.unwrap();
    journal
        .append(NewEvent::new("run:1", "k", json!({"n": 1})))
        .await
        .unwrap();
    journal
        .offer_lease("run:1", &json!({"n": 1}))
        .await
        .unwrap();
    journal.close().await;
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    (url, other)
}

async fn opens_at_once_and_reads(url: &str, access: Access) -> Journal {
    let options = JournalOptions {
        busy_timeout: BUSY,
        ..JournalOptions::default().access(access)
    };
    let started = Instant::now();
    let journal = Journal::open_with(url, options).await.unwrap();
    let took = started.elapsed();
    assert!(took < BUSY / 3, "{access:?}: opening waited {took:?}");
    let events = journal.replay("run:1", 0).await.unwrap();
    assert_eq!(events.len(), 1, "{access:?}");
    assert_eq!(events[0].payload, json!({"n": 1}));
    // Listing leases reads; it took the write lock too (`runs list` failed after 5 s).
    let started = Instant::now();
    let leases = journal.leases("run:").await.unwrap();
    let took = started.elapsed();
    assert!(
        took < BUSY / 3,
        "{access:?}: listing leases waited {took:?}"
    );
    let names: Vec<&str> = leases.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["run:1"], "{access:?}");
    journal
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_current_journal_opens_for_reading_while_another_connection_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (url, other) = locked_journal(&dir).await;
    let journal = opens_at_once_and_reads(&url, Access::ReadOnlyWhenUnwritable).await;
    // It could be written: it was opened read-write, not read-only as a fallback.
    assert!(!journal.is_read_only());
    other.execute_batch("COMMIT").unwrap();
    journal.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_current_journal_opens_for_writing_while_another_connection_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (url, other) = locked_journal(&dir).await;
    let journal = opens_at_once_and_reads(&url, Access::ReadWrite).await;
    // Its first append waits for the lock, as every append does, and then writes.
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        other.execute_batch("COMMIT").unwrap();
    });
    let appended = journal
        .append(NewEvent::new("run:1", "k", json!({"n": 2})))
        .await
        .unwrap();
    assert_eq!(appended.seq, 2);
    release.join().unwrap();
    journal.close().await;
}

/// A lease put that may wait only a moment (the runs table's cache refresh) gives up while
/// another connection holds the lock past that moment, where a plain put waits for it; the
/// connection's own busy timeout is back afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_put_that_waits_a_moment_gives_up_and_the_busy_timeout_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let (url, other) = locked_journal(&dir).await;
    let options = JournalOptions {
        busy_timeout: BUSY,
        ..JournalOptions::default()
    };
    let journal = Journal::open_with(&url, options).await.unwrap();
    // Released after a second: a put that waited its busy timeout (3 s) would succeed.
    let other = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        other.execute_batch("COMMIT").unwrap();
        other
    });
    let refused = journal
        .put_lease_waiting_at_most("run:1", None, &json!({"n": 2}), Duration::from_millis(50))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let other = other.join().unwrap();
    // Held again, released after 300 ms: the plain put waits for it (the connection's
    // timeout is 3 s again, not 50 ms).
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        other.execute_batch("COMMIT").unwrap();
    });
    journal
        .put_lease("run:1", None, &json!({"n": 3}))
        .await
        .unwrap();
    releaser.join().unwrap();
    let leases = journal.leases("run:").await.unwrap();
    assert_eq!(leases[0].info, json!({"n": 3}));
    journal.close().await;
}
