//! WAL checkpoints off the write path (SQLite files): the writer connection no longer
//! checkpoints at SQLite's default 1000 pages, so these show that the checkpointer thread
//! does (the database file grows while the WAL stays far below the writer's own fallback
//! limit), that nothing is lost across a reopen, and that closing stops it.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_context::{ContextOptions, ContextStore, NewUnit, StoreDurability};
use serde_json::json;

fn batch(from: usize) -> Vec<NewUnit> {
    (from..from + 100)
        .map(|i| NewUnit {
            unit: format!("u{i}"),
            items: vec![
                json!({"type": "message", "text": format!("unit {i} {}", "x".repeat(2000))}),
            ],
        })
        .collect()
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test]
async fn the_checkpointer_moves_the_wal_into_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let url = format!("sqlite://{}", path.display());
    let options = ContextOptions::default()
        .durability(StoreDurability::Normal)
        .index_tail_bytes(u64::MAX);
    let store = ContextStore::open_with(&url, options.clone())
        .await
        .unwrap();
    store.pause_index_fold(true).await.unwrap();
    // About 10 MB of units in 50 transactions: 2,500 pages of 4 KiB, over the 1000 at
    // which a checkpoint is asked for and under the writer's own limit (16,000), so the
    // checkpointer thread is what copies them.
    let units = 5000;
    for from in (0..units).step_by(100) {
        store.append_units("t", &batch(from)).await.unwrap();
    }
    let wal = dir.path().join("c.db-wal");
    let deadline = Instant::now() + Duration::from_secs(20);
    while size(&path) < 8_000_000 {
        assert!(
            Instant::now() < deadline,
            "no checkpoint: database {} bytes, WAL {} bytes",
            size(&path),
            size(&wal)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The WAL was restarted after a checkpoint rather than left to grow to the whole
    // history.
    assert!(size(&wal) < 40_000_000, "WAL {} bytes", size(&wal));
    let window = store.window("t", "g", 3).await.unwrap();
    assert_eq!(window.recent_units.last().unwrap().position, units as u64);
    store.close().await;

    let store = ContextStore::open_with(&url, options).await.unwrap();
    let threads = store.threads().await.unwrap();
    assert_eq!(threads[0].units, units as u64);
    let hits = store.search("t", "UNIT 4999 ", 5).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].position, 5000);
    store.close().await;
}
