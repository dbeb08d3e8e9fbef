//! PostgreSQL direct appends: a producer that finds the writer idle writes on its own
//! task (`backend/postgres/direct.rs`). What must hold: a lone producer does write
//! directly, concurrent producers still share commits through the queue, every append is
//! written once in its thread's order either way, and a direct write that cannot finish
//! leaves the writer latched failed rather than the connection in an unknown state.
//!
//! The timeouts only turn a hang into a failure.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_journal::hooks::{HookAction, WriteHook};
use agent_journal::{Journal, JournalError, JournalOptions, NewEvent};
use serde_json::json;
use tokio::sync::{Notify, oneshot};

const HANG: Duration = Duration::from_secs(20);

fn ev(thread: &str, n: usize) -> NewEvent {
    NewEvent::new(thread, "e", json!({ "n": n }))
}

/// A hook that holds the first write transaction open until `release` is notified
/// (signalling the receiver once it is held), and commits every later one at once.
fn hold_first() -> (WriteHook, oneshot::Receiver<()>, Arc<Notify>) {
    let (paused, is_paused) = oneshot::channel();
    let paused = Arc::new(Mutex::new(Some(paused)));
    let release = Arc::new(Notify::new());
    let hook = {
        let release = Arc::clone(&release);
        WriteHook(Arc::new(move || {
            let paused = paused.lock().unwrap().take();
            let release = Arc::clone(&release);
            Box::pin(async move {
                if let Some(paused) = paused {
                    let _ = paused.send(());
                    release.notified().await;
                }
                HookAction::Commit
            })
        }))
    };
    (hook, is_paused, release)
}

/// A lone producer's appends are all direct; 64 producers at once share commits (fewer
/// commits than appends, so the queue batched them) and lose, repeat and reorder nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lone_producer_writes_directly_and_concurrent_ones_share_commits() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_direct").await else {
        return;
    };
    let j = Journal::open(db.url()).await.unwrap();
    let before = j.stats();
    for n in 0..20 {
        j.append(ev("lone", n)).await.unwrap();
    }
    j.append_expecting(
        "lone",
        j.last_seq("lone").await.unwrap(),
        vec![ev("lone", 20)],
    )
    .await
    .unwrap();
    let lone = j.stats().since(&before);
    assert_eq!((lone.commits, lone.direct_commits), (21, 21), "{lone:?}");

    const PRODUCERS: usize = 64;
    const EACH: usize = 10;
    let before = j.stats();
    let tasks: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let j = j.clone();
            tokio::spawn(async move {
                let thread = format!("t{}", p % 8);
                let mut seqs = Vec::new();
                for n in 0..EACH {
                    let ack = j.append(ev(&thread, p * EACH + n)).await.unwrap();
                    seqs.push(ack.seq);
                }
                (thread, seqs)
            })
        })
        .collect();
    let mut acked = std::collections::BTreeMap::<String, Vec<i64>>::new();
    for task in tasks {
        let (thread, seqs) = tokio::time::timeout(HANG, task).await.unwrap().unwrap();
        // One producer's appends are acknowledged in order, so they commit in order.
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
        acked.entry(thread).or_default().extend(seqs);
    }
    let spent = j.stats().since(&before);
    assert_eq!(spent.events, (PRODUCERS * EACH) as u64);
    assert!(
        spent.commits < spent.events,
        "nothing was batched: {spent:?}"
    );
    assert!(spent.direct_commits < spent.commits, "{spent:?}");
    for (thread, mut seqs) in acked {
        seqs.sort_unstable();
        let stored: Vec<i64> = j
            .replay(&thread, 0)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(stored, seqs, "thread {thread}");
    }
    j.close().await;
}

/// A direct write dropped mid-transaction where no runtime can finish it (its future
/// dropped on a plain thread) leaves the connection inside a transaction nobody will end.
/// The next append must fail with `WriterFailed` instead of writing on that connection,
/// and the dropped append's event must not appear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_write_dropped_outside_a_runtime_latches_the_writer() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_direct_drop").await else {
        return;
    };
    let (hold, is_paused, release) = hold_first();
    let options = JournalOptions {
        write_hook: Some(hold),
        ..Default::default()
    };
    let j = Journal::open_with(db.url(), options).await.unwrap();
    let mut append = {
        let j = j.clone();
        Box::pin(async move { j.append(ev("x", 0)).await })
    };
    tokio::select! {
        done = &mut append => panic!("the held append finished: {done:?}"),
        paused = tokio::time::timeout(HANG, is_paused) => paused.unwrap().unwrap(),
    }
    assert_eq!(j.stats().direct_commits, 0);
    std::thread::spawn(move || drop(append)).join().unwrap();

    let next = tokio::time::timeout(HANG, j.append(ev("x", 1)))
        .await
        .unwrap();
    match next {
        Err(JournalError::WriterFailed(message)) => {
            assert!(message.contains("dropped"), "{message}");
        }
        other => panic!("expected WriterFailed, got {other:?}"),
    }
    assert!(j.writer_failed());
    let reader = Journal::open(db.url()).await.unwrap();
    assert!(reader.replay("x", 0).await.unwrap().is_empty());
    release.notify_waiters();
}

/// An append abandoned while it waits for room in a full queue never reaches the writer;
/// it must not stay counted as queued, or no producer would write directly again.
///
/// One thread: the writer task releases the lock before it waits for its next message, so
/// the last append finds the writer idle (on more threads an acknowledged producer can
/// race the writer task's release of the lock and queue, which is correct but not what
/// this checks).
#[tokio::test]
async fn an_append_abandoned_while_the_queue_is_full_leaves_direct_writes_on() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_direct_full").await else {
        return;
    };
    let (hold, is_paused, release) = hold_first();
    let options = JournalOptions {
        write_hook: Some(hold),
        queue_capacity: 1,
        ..Default::default()
    };
    let j = Journal::open_with(db.url(), options).await.unwrap();
    // The first append writes directly and is held inside its transaction.
    let held = {
        let j = j.clone();
        tokio::spawn(async move { j.append(ev("q", 0)).await })
    };
    tokio::time::timeout(HANG, is_paused)
        .await
        .unwrap()
        .unwrap();
    // While the lock is held the writer task holds at most one request (taken, waiting for
    // the lock) and the queue one more, so of three more appends polled now the third
    // always finds the queue full and waits for room. It is abandoned there.
    let mut second = Box::pin(j.append(ev("q", 1)));
    assert!(futures::poll!(&mut second).is_pending());
    let mut third = Box::pin(j.append(ev("q", 2)));
    assert!(futures::poll!(&mut third).is_pending());
    assert!(
        agent_testkit::poll_then_drop(j.append(ev("q", 99)), 3)
            .await
            .is_none()
    );
    release.notify_one();
    tokio::time::timeout(HANG, held)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    tokio::time::timeout(HANG, second).await.unwrap().unwrap();
    tokio::time::timeout(HANG, third).await.unwrap().unwrap();
    let before = j.stats();
    j.append(ev("q", 3)).await.unwrap();
    assert_eq!(j.stats().since(&before).direct_commits, 1);
    let written: Vec<i64> = j
        .replay("q", 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.payload["n"].as_i64().unwrap())
        .collect();
    assert_eq!(written, [0, 1, 2, 3]);
}

/// The server drops idle sessions (here `idle_session_timeout`, as a proxy or a restart
/// would): a write after a long idle gap (a run waiting on a tool) finds its connection
/// gone, makes it again and commits, instead of failing and latching the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_connection_dropped_while_idle_is_made_again() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_idle").await else {
        return;
    };
    let sep = if db.url().contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}options=-c%20idle_session_timeout%3D1000", db.url());
    let j = Journal::open(&url).await.unwrap();
    j.append(ev("t", 0)).await.unwrap();
    for n in 1..3 {
        // Past the server's timeout: the session it wrote on is gone.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let seq = tokio::time::timeout(HANG, j.append(ev("t", n)))
            .await
            .unwrap();
        assert!(seq.is_ok(), "append {n} after idle: {seq:?}");
        assert!(!j.writer_failed());
    }
    let events = j.replay("t", 0).await.unwrap();
    let ns: Vec<i64> = events
        .iter()
        .map(|e| e.payload["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns, [0, 1, 2]);
    j.close().await;
}
