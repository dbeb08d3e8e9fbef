//! A full disk under a SQLite journal, on the real kernel: each scenario runs in a child
//! process (this test binary, re-run for one ignored test) inside a mount namespace of its
//! own, where its directory is a small tmpfs that a filler file fills up. SQLite then gets
//! `ENOSPC` from the kernel exactly where a full disk gives it.
//!
//! What must hold: an append that cannot be written is refused with an error that says the
//! disk is full, and the writer latches (nothing later is written by this handle, so the
//! journal stays a prefix of what its process meant to write); nothing acknowledged is
//! lost; the database stays readable meanwhile; once space is back, the journal, reopened,
//! holds every acknowledged event, seqs without gaps, and takes appends again. A refused
//! append is not always absent: one that failed after it reached the WAL is found, whole,
//! once the journal is reopened (its outcome is unknown, as the error's doc says).
//!
//! The namespace needs root, or unprivileged user namespaces (CI runs as root): without it
//! those tests say `SKIPPED:` on stderr, and fail under `CI=true`, as the PostgreSQL suites
//! do without a server. One test needs no root: a file size limit (`ulimit -f`) gives EFBIG
//! instead of ENOSPC.

use std::path::Path;
use std::process::Command;

use agent_journal::{Event, Journal, JournalError, NewEvent};
use agent_testkit::small_disk::{child_dir, fill, on_small_disk};
use serde_json::json;

/// An event of thread `t` numbered `n`, with `pad` bytes of padding.
fn event(n: u64, pad: usize) -> NewEvent {
    NewEvent::new("t", "e", json!({ "n": n, "pad": "p".repeat(pad) }))
}

/// `(seq, n)` of each event.
fn summary(events: &[Event]) -> Vec<(i64, u64)> {
    events
        .iter()
        .map(|e| (e.seq, e.payload["n"].as_u64().unwrap()))
        .collect()
}

/// Pages in the WAL of the journal at `db`.
fn wal_frames(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(Path::new(&wal)).map_or(0, |m| m.len().saturating_sub(32) / 4120)
}

/// Shrinks the filler by `bytes`: that much space is free again.
fn free(filler: &Path, bytes: u64) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(filler)
        .unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len - bytes).unwrap();
}

/// What a reopened journal must hold: every acknowledged event, first, then only events
/// of refused appends, and seqs from 1 without gaps.
fn check_reopened(replayed: &[(i64, u64)], acked: &[(i64, u64)], refused: &[u64]) {
    assert_eq!(
        &replayed[..acked.len()],
        acked,
        "an acknowledged event is missing"
    );
    for (_, n) in &replayed[acked.len()..] {
        assert!(refused.contains(n), "event {n} was never appended");
    }
    let seqs: Vec<i64> = replayed.iter().map(|(seq, _)| *seq).collect();
    let want: Vec<i64> = (1..=i64::try_from(replayed.len()).unwrap()).collect();
    assert_eq!(seqs, want);
}

/// Whether a refusal names the full disk (SQLite's own message or the journal's
/// explanation of an I/O error).
fn says_disk_full(message: &str) -> bool {
    message.contains("disk is full") || message.contains("is the disk full?")
}

fn integrity(db: &Path) -> String {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap()
}

#[test]
fn appends_on_a_full_disk_are_refused_and_nothing_acknowledged_is_lost() {
    on_small_disk("disk_full::appends_on_a_full_disk_child", "4m");
}

#[test]
#[ignore = "child process of appends_on_a_full_disk_are_refused_and_nothing_acknowledged_is_lost"]
fn appends_on_a_full_disk_child() {
    let Some(dir) = child_dir() else { return };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let db = dir.join("j.db");
        let url = format!("sqlite://{}", db.display());
        let journal = Journal::open(&url).await.unwrap();
        let mut acked = Vec::new();
        for n in 0..20 {
            // About a page per event, so that each commit grows the WAL.
            let ack = journal.append(event(n, 3000)).await.unwrap();
            acked.push((ack.seq, n));
        }
        let filler = fill(&dir);
        // Concurrent appends, so that the refusal meets group commits.
        let mut tasks = Vec::new();
        for n in 20..60 {
            let journal = journal.clone();
            tasks.push(tokio::spawn(async move {
                (n, journal.append(event(n, 3000)).await)
            }));
        }
        let mut refused = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                (n, Ok(ack)) => acked.push((ack.seq, n)),
                (n, Err(JournalError::WriterFailed(message))) => {
                    assert!(says_disk_full(&message), "{message}");
                    refused.push(n);
                }
                (_, Err(other)) => panic!("refused with {other:?}"),
            }
        }
        assert!(!refused.is_empty(), "a full disk refused nothing");
        assert!(journal.writer_failed());
        acked.sort_unstable();
        // Reads still work, and see what was acknowledged.
        assert_eq!(summary(&journal.replay("t", 0).await.unwrap()), acked);
        std::fs::remove_file(&filler).unwrap();
        // Latched: this handle writes nothing more, space or not.
        let later = journal.append(event(100, 10)).await;
        assert!(
            matches!(later, Err(JournalError::WriterFailed(_))),
            "{later:?}"
        );
        journal.close().await;
        let reopened = Journal::open(&url).await.unwrap();
        let replayed = summary(&reopened.replay("t", 0).await.unwrap());
        check_reopened(&replayed, &acked, &refused);
        let ack = reopened.append(event(200, 10)).await.unwrap();
        assert_eq!(ack.seq, i64::try_from(replayed.len()).unwrap() + 1);
        reopened.close().await;
        assert_eq!(integrity(&db), "ok");
    });
}

/// SQLite copies the WAL into the database file after the commit that takes the WAL past
/// 8,000 pages. With no room left for that copy, the commit still stands: it is
/// acknowledged and kept (a failed checkpoint must not turn into a failed append, which
/// would make the caller think an event that is there was not written).
#[test]
fn a_commit_whose_checkpoint_finds_the_disk_full_is_acknowledged() {
    on_small_disk("disk_full::checkpoint_on_a_full_disk_child", "48m");
}

#[test]
#[ignore = "child process of a_commit_whose_checkpoint_finds_the_disk_full_is_acknowledged"]
fn checkpoint_on_a_full_disk_child() {
    let Some(dir) = child_dir() else { return };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let db = dir.join("j.db");
        let url = format!("sqlite://{}", db.display());
        let journal = Journal::open(&url).await.unwrap();
        let mut acked = Vec::new();
        let mut n = 0;
        while wal_frames(&db) < 7950 {
            let ack = journal.append(event(n, 100 << 10)).await.unwrap();
            acked.push((ack.seq, n));
            n += 1;
        }
        let filler = fill(&dir);
        // Room for the commit's ~100 WAL pages, not for the checkpoint's ~8,000.
        free(&filler, 2 << 20);
        let ack = journal.append(event(n, 400 << 10)).await.unwrap();
        acked.push((ack.seq, n));
        assert!(
            wal_frames(&db) > 8000,
            "the commit did not cross the checkpoint"
        );
        assert_eq!(summary(&journal.replay("t", 0).await.unwrap()), acked);
        journal.close().await;
        std::fs::remove_file(&filler).unwrap();
        let reopened = Journal::open(&url).await.unwrap();
        let replayed = summary(&reopened.replay("t", 0).await.unwrap());
        assert_eq!(replayed, acked);
        reopened.append(event(n + 1, 10)).await.unwrap();
        reopened.close().await;
        assert_eq!(integrity(&db), "ok");
    });
}

/// The WAL's index (the `-shm` file) grows by 32 KiB when the WAL passes 4,062 pages, after
/// the commit's pages are in the WAL and synced. When only that growth finds the disk
/// full, the append is refused, yet the event is durable: it is found, whole, once the
/// journal is reopened. The refusal says the disk is full (SQLite itself only says
/// `disk I/O error`). How much free space leads there depends on SQLite's page use, so
/// several amounts are tried; each must keep the journal's invariants.
#[test]
fn an_append_refused_once_in_the_wal_says_why_and_is_found_whole_after_reopen() {
    on_small_disk("disk_full::shm_growth_on_a_full_disk_child", "24m");
}

#[test]
#[ignore = "child process of an_append_refused_once_in_the_wal_says_why_and_is_found_whole_after_reopen"]
fn shm_growth_on_a_full_disk_child() {
    let Some(dir) = child_dir() else { return };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let mut turned_up = false;
        for kib in (20..=48).step_by(4) {
            let db = dir.join(format!("j{kib}.db"));
            let url = format!("sqlite://{}", db.display());
            let journal = Journal::open(&url).await.unwrap();
            let mut acked = Vec::new();
            let mut n = 0;
            while wal_frames(&db) < 4058 {
                let ack = journal.append(event(n, 100)).await.unwrap();
                acked.push((ack.seq, n));
                n += 1;
            }
            let filler = fill(&dir);
            free(&filler, kib << 10);
            let mut refused = Vec::new();
            match journal.append(event(n, 16 << 10)).await {
                Ok(ack) => acked.push((ack.seq, n)),
                Err(JournalError::WriterFailed(message)) => {
                    assert!(says_disk_full(&message), "{message}");
                    refused.push(n);
                }
                Err(other) => panic!("refused with {other:?}"),
            }
            assert_eq!(summary(&journal.replay("t", 0).await.unwrap()), acked);
            journal.close().await;
            drop(journal);
            std::fs::remove_file(&filler).unwrap();
            let reopened = Journal::open(&url).await.unwrap();
            let replayed = summary(&reopened.replay("t", 0).await.unwrap());
            check_reopened(&replayed, &acked, &refused);
            turned_up |= replayed.len() > acked.len();
            reopened.close().await;
            drop(reopened);
            assert_eq!(integrity(&db), "ok");
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
            }
            if turned_up {
                break;
            }
        }
        assert!(
            turned_up,
            "no amount of free space failed the -shm growth alone"
        );
    });
}

/// A journal shut down cleanly has no `-wal` or `-shm` file left; on a full disk there is
/// no room for the `-shm` file that writing needs. A command that only reads
/// ([`Journal::open_for_reading`]) still reads it, read-only; a read-write open is refused
/// with an error, not a panic.
#[test]
fn a_journal_closed_cleanly_is_read_on_a_full_disk() {
    on_small_disk("disk_full::reading_on_a_full_disk_child", "4m");
}

#[test]
#[ignore = "child process of a_journal_closed_cleanly_is_read_on_a_full_disk"]
fn reading_on_a_full_disk_child() {
    let Some(dir) = child_dir() else { return };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let db = dir.join("j.db");
        let url = format!("sqlite://{}", db.display());
        let journal = Journal::open(&url).await.unwrap();
        let mut acked = Vec::new();
        for n in 0..5 {
            let ack = journal.append(event(n, 100)).await.unwrap();
            acked.push((ack.seq, n));
        }
        journal.close().await;
        drop(journal);
        // The last read connection closes on the blocking pool, and takes the files along.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while dir.join("j.db-shm").exists() {
            assert!(std::time::Instant::now() < deadline, "not closed cleanly");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let filler = fill(&dir);
        let refused = Journal::open(&url).await.err().unwrap();
        assert!(matches!(refused, JournalError::Open { .. }), "{refused:?}");
        // SQLite says `disk I/O error`; the journal says what that means here.
        assert!(says_disk_full(&refused.to_string()), "{refused}");
        let reading = Journal::open_for_reading(&url).await.unwrap();
        assert!(reading.is_read_only());
        assert_eq!(summary(&reading.replay("t", 0).await.unwrap()), acked);
        reading.close().await;
        std::fs::remove_file(&filler).unwrap();
        let reopened = Journal::open_for_reading(&url).await.unwrap();
        assert!(
            !reopened.is_read_only(),
            "writable again once there is room"
        );
        reopened.append(event(5, 10)).await.unwrap();
    });
}

/// Marks the child of [`appends_past_a_file_size_limit_are_refused_with_a_clear_error`]
/// and names its database.
const LIMIT_CHILD_DB: &str = "JOURNAL_FILE_LIMIT_DB";
/// Exit code of the child's shell when the limit cannot be set.
const NO_LIMIT: i32 = 97;

/// Without root: a file size limit (`ulimit -f`, with SIGXFSZ ignored, as some service
/// managers run programs) makes the kernel refuse a write past it with EFBIG, which SQLite
/// reports as a plain `disk I/O error`. The refusal must say what may be wrong, nothing
/// acknowledged may be lost, and the journal must open and take appends without the limit.
#[test]
fn appends_past_a_file_size_limit_are_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("j.db").display());
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            r#"trap '' XFSZ; ulimit -f 1024 || exit {NO_LIMIT}; exec "$@""#
        ))
        .arg("sh")
        .arg(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "disk_full::file_size_limit_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(LIMIT_CHILD_DB, &url)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut acked = Vec::new();
    let mut refused = Vec::new();
    for line in said.lines() {
        // The first report shares its line with the test harness's own words.
        let line = ["ACK ", "REFUSED "]
            .iter()
            .find_map(|word| line.find(word).map(|at| &line[at..]))
            .unwrap_or_default();
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["ACK", seq, n] => acked.push((seq.parse().unwrap(), n.parse().unwrap())),
            ["REFUSED", n] => refused.push(n.parse().unwrap()),
            _ => {}
        }
    }
    assert!(acked.len() > 10 && !refused.is_empty(), "{said}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let journal = Journal::open(&url).await.unwrap();
        let replayed = summary(&journal.replay("t", 0).await.unwrap());
        check_reopened(&replayed, &acked, &refused);
        journal.append(event(1000, 10)).await.unwrap();
    });
}

#[test]
#[ignore = "child process of appends_past_a_file_size_limit_are_refused_with_a_clear_error"]
fn file_size_limit_child() {
    let Ok(url) = std::env::var(LIMIT_CHILD_DB) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let journal = Journal::open(&url).await.unwrap();
        for n in 0..10_000 {
            match journal.append(event(n, 3000)).await {
                Ok(ack) => println!("ACK {} {n}", ack.seq),
                Err(JournalError::WriterFailed(message)) => {
                    assert!(message.contains("file size limit"), "{message}");
                    println!("REFUSED {n}");
                    return;
                }
                Err(other) => panic!("refused with {other:?}"),
            }
        }
        panic!("a file size limit of 512 KiB took 30 MB of events");
    });
}
