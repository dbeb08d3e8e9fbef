//! The SQLite writer thread.
//!
//! One OS thread owns the write connection for the journal's lifetime. It blocks on the
//! request queue, takes everything queued (up to the batch limit) and commits it in one
//! transaction: `BEGIN IMMEDIATE` takes SQLite's write lock, so the head seq read inside it
//! is final and seqs are assigned in commit order, also across processes. The head row
//! (`journal_head`) holds the highest seq assigned; it only moves forward.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::{Connection, params};
use tokio::sync::mpsc;

use crate::backend;
use crate::event::Appended;
use crate::writer::{Batch, Msg, Prepared, Settle, drain_after_close};

/// Starts the writer thread.
pub(crate) fn spawn_writer(
    conn: Arc<Mutex<Connection>>,
    rx: mpsc::Receiver<Msg>,
    settle: Settle,
    max_batch: usize,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("agent-journal-writer".into())
        .spawn(move || run(&conn, rx, settle, max_batch))
        .map(drop)
}

/// Runs until `Close` or until every handle is dropped.
///
/// Batching: after the first request, everything already queued is taken; when the queue
/// runs dry the thread yields its time slice once, so producers that the previous commit
/// just acknowledged can join this one, and commits as soon as a yield brings nothing.
fn run(
    conn: &Mutex<Connection>,
    mut rx: mpsc::Receiver<Msg>,
    mut settle: Settle,
    max_batch: usize,
) {
    let mut close = None;
    while close.is_none() {
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let mut batch = Batch::default();
        let mut more = batch.take(first, max_batch);
        while more {
            let msg = match rx.try_recv() {
                Ok(msg) => msg,
                Err(_) => {
                    std::thread::yield_now();
                    match rx.try_recv() {
                        Ok(msg) => msg,
                        Err(_) => break,
                    }
                }
            };
            more = batch.take(msg, max_batch);
        }
        close = settle.settle_with(batch, |requests| {
            // Nothing panics while holding the lock; if something did, the connection is
            // still usable: `write_batch` first rolls back any transaction left open.
            let conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            write_batch(&conn, requests)
        });
    }
    drain_after_close(&mut rx, close);
}

/// Commits one batch; rolls back and returns the error if any statement fails.
pub(crate) fn write_batch(
    conn: &Connection,
    batch: &[Vec<Prepared>],
) -> Result<Vec<Vec<Appended>>, rusqlite::Error> {
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
    batch: &[Vec<Prepared>],
) -> Result<Vec<Vec<Appended>>, rusqlite::Error> {
    // Final: every writer, in any process, reads and advances the head under the lock.
    let max_seq: i64 = conn
        .prepare_cached("SELECT seq FROM journal_head WHERE id = 0")?
        .query_row([], |row| row.get(0))?;
    let mut existing = HashMap::new();
    let pairs = backend::dedup_pairs(batch);
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
    let plan = backend::plan(batch, max_seq, existing);
    let mut insert = conn.prepare_cached(
        "INSERT INTO journal_events (seq, thread, kind, payload, at, dedup_key) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for row in &plan.rows {
        insert.execute(params![
            row.seq,
            row.event.thread,
            row.event.kind,
            row.event.payload,
            row.event.at,
            row.event.dedup_key,
        ])?;
    }
    if let Some(last) = plan.rows.last() {
        conn.prepare_cached("UPDATE journal_head SET seq = ?1 WHERE id = 0")?
            .execute([last.seq])?;
    }
    Ok(plan.acks)
}
