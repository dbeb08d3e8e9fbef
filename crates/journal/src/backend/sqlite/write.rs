//! The SQLite writer thread.
//!
//! One OS thread owns the write connection for the journal's lifetime. It blocks on the
//! request queue, takes everything queued (up to the batch limit) and commits it in one
//! transaction: `BEGIN IMMEDIATE` takes SQLite's write lock, so the head seq read inside it
//! is final and seqs are assigned in commit order, also across processes. The head row
//! (`journal_head`) holds the highest seq assigned; it only moves forward.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use tokio::sync::mpsc;

use crate::backend::batch;
use crate::writer::{Answer, Batch, Msg, Pending, Request, Settle, drain_after_close};

/// Starts the writer thread.
pub(crate) fn spawn_writer(
    conn: Arc<Mutex<Connection>>,
    rx: mpsc::Receiver<Msg>,
    settle: Settle,
    max_batch: usize,
    linger: Duration,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("agent-journal-writer".into())
        .spawn(move || run(&conn, rx, settle, max_batch, linger))
        .map(drop)
}

/// Runs until `Close` or until every handle is dropped.
///
/// Batching: after the first request, everything already queued is taken. When the queue
/// runs dry before the batch has as many requests as the previous commit acknowledged, the
/// thread yields and looks again, for at most `linger` and at most half as long as the
/// previous commit took: producers acknowledged by the previous commit are usually about
/// to append again, and waiting a fraction of a commit for them saves a commit (an fsync
/// under `Full`), while cheap commits (in memory, `Normal`) barely wait. A lone producer
/// never waits (it is the whole previous batch), and after a linger that ran out the
/// expectation drops to what came.
fn run(
    conn: &Mutex<Connection>,
    mut rx: mpsc::Receiver<Msg>,
    mut settle: Settle,
    max_batch: usize,
    linger: Duration,
) {
    let mut close = None;
    let mut expected = 0usize;
    let mut last_commit = Duration::ZERO;
    while close.is_none() {
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let batch = collect(
            &mut rx,
            first,
            max_batch,
            expected,
            linger.min(last_commit / 2),
        );
        expected = batch.requests.len();
        let started = Instant::now();
        let (pending, closing) = settle.begin(batch);
        close = closing;
        if let Some(Pending { requests, acks }) = pending {
            // Nothing panics while holding the lock; if something did, the connection is
            // still usable: `write_batch` first rolls back any transaction left open.
            let conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            settle.finish(&requests, acks, write_batch(&conn, &requests));
        }
        last_commit = started.elapsed();
    }
    drain_after_close(&mut rx, close);
}

/// Takes `first` and everything queued after it (up to `max_batch` events); while the batch
/// has fewer than `expected` requests, an empty queue is waited on for at most `max_wait`,
/// otherwise it gets one yield before the batch is closed.
fn collect(
    rx: &mut mpsc::Receiver<Msg>,
    first: Msg,
    max_batch: usize,
    expected: usize,
    max_wait: Duration,
) -> Batch {
    let mut batch = Batch::default();
    let mut more = batch.take(first, max_batch);
    let mut waiting_since: Option<Instant> = None;
    let mut yielded = false;
    while more {
        if let Ok(msg) = rx.try_recv() {
            more = batch.take(msg, max_batch);
            yielded = false;
            continue;
        }
        if batch.requests.len() >= expected {
            // Still give producers woken a moment ago one chance to join.
            if yielded {
                break;
            }
            yielded = true;
        } else if waiting_since.get_or_insert_with(Instant::now).elapsed() >= max_wait {
            break;
        }
        std::thread::yield_now();
    }
    batch
}

/// Commits one batch; rolls back and returns the error if any statement fails.
pub(crate) fn write_batch(
    conn: &Connection,
    batch: &[Request],
) -> Result<Vec<Answer>, rusqlite::Error> {
    // A transaction left open by an interrupted earlier write is abandoned, never reused.
    rollback(conn);
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    match write_in_transaction(conn, batch) {
        Ok(acks) => {
            if let Err(err) = conn
                .prepare_cached("COMMIT")
                .and_then(|mut s| s.execute([]))
            {
                rollback(conn);
                return Err(err);
            }
            Ok(acks)
        }
        Err(err) => {
            rollback(conn);
            Err(err)
        }
    }
}

fn rollback(conn: &Connection) {
    if !conn.is_autocommit()
        && let Err(err) = conn.execute_batch("ROLLBACK")
    {
        tracing::warn!(%err, "rollback after a failed journal write failed");
    }
}

fn write_in_transaction(
    conn: &Connection,
    batch: &[Request],
) -> Result<Vec<Answer>, rusqlite::Error> {
    // Final: every writer, in any process, reads and advances the head under the lock.
    let max_seq: i64 = conn
        .prepare_cached("SELECT seq FROM journal_head WHERE id = 0")?
        .query_row([], |row| row.get(0))?;
    let mut existing = HashMap::new();
    let pairs = batch::dedup_pairs(batch);
    if !pairs.is_empty() {
        let mut lookup = conn.prepare_cached(
            "SELECT seq FROM journal_events WHERE thread = ?1 AND dedup_key = ?2",
        )?;
        for (thread, key) in pairs {
            let mut rows = lookup.query(params![thread, key])?;
            if let Some(row) = rows.next()? {
                existing.insert((thread.to_string(), key.to_string()), row.get(0)?);
            }
        }
    }
    // Heads of the threads that conditional requests name, and epochs of the leases fenced
    // requests name: final under the lock too (claims take the same lock).
    let mut conditions = batch::Conditions::default();
    let heads = &mut conditions.heads;
    let threads = batch::expected_threads(batch);
    if !threads.is_empty() {
        let mut last =
            conn.prepare_cached("SELECT MAX(seq) FROM journal_events WHERE thread = ?1")?;
        for thread in threads {
            let head: Option<i64> = last.query_row([thread], |row| row.get(0))?;
            heads.insert(thread.to_string(), head);
        }
    }
    let leases = batch::fenced_leases(batch);
    if !leases.is_empty() {
        let mut epoch = conn.prepare_cached("SELECT epoch FROM journal_leases WHERE name = ?1")?;
        for lease in leases {
            let mut rows = epoch.query([lease])?;
            let current = match rows.next()? {
                Some(row) => Some(row.get(0)?),
                None => None,
            };
            conditions.epochs.insert(lease.to_string(), current);
        }
    }
    let plan = batch::plan(batch, max_seq, existing, conditions);
    let mut insert = conn.prepare_cached(
        "INSERT INTO journal_events (seq, thread, kind, payload, at, dedup_key, epoch) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for row in &plan.rows {
        insert.execute(params![
            row.seq,
            row.event.thread,
            row.event.kind,
            row.event.payload,
            row.event.at,
            row.event.dedup_key,
            row.event.epoch,
        ])?;
    }
    if let Some(last) = plan.rows.last() {
        conn.prepare_cached("UPDATE journal_head SET seq = ?1 WHERE id = 0")?
            .execute([last.seq])?;
    }
    Ok(plan.acks)
}
