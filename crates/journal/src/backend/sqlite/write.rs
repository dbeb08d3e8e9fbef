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
use crate::writer::{
    Answer, Batch, Msg, Pending, Request, Settle, drain_after_close, relaxed_batch,
};

/// Starts the writer thread.
pub(crate) fn spawn_writer(
    conn: Arc<Mutex<Connection>>,
    rx: mpsc::Receiver<Msg>,
    settle: Settle,
    max_batch: usize,
    linger: Duration,
    full: bool,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("agent-journal-writer".into())
        .spawn(move || run(&conn, rx, settle, max_batch, linger, full))
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
///
/// `full`: the journal is [`Durability::Full`](crate::Durability::Full), so a batch of
/// relaxed appends only is committed with [`write_relaxed`].
fn run(
    conn: &Mutex<Connection>,
    mut rx: mpsc::Receiver<Msg>,
    mut settle: Settle,
    max_batch: usize,
    linger: Duration,
    full: bool,
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
            let written = if full && relaxed_batch(&requests) {
                write_relaxed(&conn, &requests)
            } else {
                write_batch(&conn, &requests)
            };
            settle.finish(&requests, acks, written);
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
fn write_batch(conn: &Connection, batch: &[Request]) -> Result<Vec<Answer>, rusqlite::Error> {
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

/// Commits `batch` under `synchronous = NORMAL`, so the commit does not wait for the disk
/// (WAL frames are written in commit order, and the next `FULL` commit's sync covers them),
/// then sets the connection back to `FULL` for every later commit, the leases' included.
/// Should that fail, the error fails the batch and latches the writer: nothing is committed
/// afterwards with less durability than the journal promises.
fn write_relaxed(conn: &Connection, batch: &[Request]) -> Result<Vec<Answer>, rusqlite::Error> {
    conn.execute_batch("PRAGMA synchronous = NORMAL")?;
    let written = write_batch(conn, batch);
    conn.execute_batch("PRAGMA synchronous = FULL")?;
    written
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sqlite::{Location, open};
    use crate::writer::Prepared;

    fn request(relaxed: bool) -> Request {
        Request {
            events: vec![Prepared {
                thread: "t".into(),
                kind: "k".into(),
                payload: "{}".into(),
                dedup_key: None,
                at: 0,
                epoch: None,
                relaxed,
            }],
            expected: None,
            fence: None,
        }
    }

    fn synchronous(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA synchronous", [], |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn a_relaxed_write_commits_and_leaves_the_connection_at_full() {
        let dir = tempfile::tempdir().unwrap();
        let location = Location::File(dir.path().join("j.db"));
        let opened = open(&location, "sqlite://j.db", &Default::default()).unwrap();
        let conn = opened.writer.lock().unwrap();
        assert_eq!(synchronous(&conn), 2, "a Full journal opens at FULL");
        let answers = write_relaxed(&conn, &[request(true)]).unwrap();
        assert_eq!(answers[0].as_ref().unwrap()[0].seq, 1);
        // Every later commit, a lease's included, is at FULL again.
        assert_eq!(synchronous(&conn), 2);
        // A failed write restores it as well.
        conn.execute_batch("DROP TABLE journal_events").unwrap();
        assert!(write_relaxed(&conn, &[request(true)]).is_err());
        assert_eq!(synchronous(&conn), 2);
    }

    #[test]
    fn a_batch_is_relaxed_only_when_every_request_is() {
        assert!(relaxed_batch(&[request(true), request(true)]));
        assert!(!relaxed_batch(&[request(true), request(false)]));
        assert!(!relaxed_batch(&[request(false)]));
    }
}
