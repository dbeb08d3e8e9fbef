//! A SQLite journal reads on a fixed set of its own threads, one per read connection, and
//! they end with the journal. It counts a process's threads, so the check runs in a child
//! (this test binary re-run for `reader_threads::child` alone), away from the other suites'
//! journals.

use crate::support;

use std::time::Duration;

use agent_journal::{JournalOptions, NewEvent};
use serde_json::json;

/// The names of this process's threads (cut to 15 bytes, as `comm` keeps them).
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_string())
        .collect()
}

fn reader_threads() -> usize {
    thread_names()
        .iter()
        .filter(|name| *name == "agent-journal-r")
        .count()
}

#[test]
fn many_concurrent_reads_run_on_one_thread_per_connection() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "reader_threads::child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("READER_THREADS_CHILD", "1")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("1 passed"),
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by many_concurrent_reads_run_on_one_thread_per_connection in a process of its own"]
async fn child() {
    assert!(
        std::env::var_os("READER_THREADS_CHILD").is_some(),
        "run only as the child of many_concurrent_reads_run_on_one_thread_per_connection"
    );
    let options = JournalOptions {
        read_connections: 3,
        ..Default::default()
    };
    let f = support::sqlite(options).await;
    for n in 0..50 {
        let thread = format!("t{}", n % 5);
        f.journal
            .append(NewEvent::new(thread, "e", json!({"n": n})))
            .await
            .unwrap();
    }
    assert_eq!(reader_threads(), 3);
    let before = thread_names().len();
    let reads = (0..200).map(|i| {
        let journal = f.journal.clone();
        tokio::spawn(async move { journal.replay(&format!("t{}", i % 5), 0).await })
    });
    for read in futures::future::join_all(reads).await {
        assert_eq!(read.unwrap().unwrap().len(), 10);
    }
    assert_eq!(reader_threads(), 3);
    let after = thread_names();
    assert!(
        after.len() <= before,
        "reads started threads: {before} before, now {after:?}"
    );

    drop(f);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while reader_threads() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "reader threads outlived the journal"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
