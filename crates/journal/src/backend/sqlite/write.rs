//! The SQLite writer thread.
//!
//! One OS thread owns the write connection for the journal's lifetime. It blocks on the
//! request queue, takes everything queued (up to the batch limit) and commits it in one
//! transaction: `BEGIN IMMEDIATE` takes SQLite's write lock, so the head seq read inside it
//! is final and seqs are assigned in commit order, also across processes. The head row
//! (`journal_head`) holds the highest seq assigned; it only moves forward.
//!
//! A batch is written while it is collected: requests that arrive while the writer waits
//! for producers are inserted into the open transaction at once, so the wait overlaps the
//! inserts instead of preceding them. Each request is planned against what the transaction
//! already holds (dedup keys and heads are read from the table, which includes the
//! batch's earlier inserts), so the outcome is the one planning the whole batch at once
//! gives. The transaction, and with it SQLite's write lock and the connection (which the
//! leases share), is held while the batch is collected: at most `linger` longer than the
//! writing itself takes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use tokio::sync::mpsc;

use super::failure::describe;
use crate::JournalError;
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
/// expectation drops to what came. What a commit took counts the writing and the commit,
/// not the waits.
///
/// `full`: the journal is [`Durability::Full`](crate::Durability::Full), so a batch of
/// relaxed appends only is committed with [`write_relaxed`]. Such a batch is collected
/// before it is written (SQLite sets a commit's durability before its transaction
/// begins), as is every batch of a latched writer; every other batch is written while it
/// is collected ([`write_while_collecting`]).
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
        let max_wait = linger.min(last_commit / 2);
        let Some(first) = first_request(&mut rx, expected, max_wait) else {
            break;
        };
        let collector = Collector::new(max_batch, expected, max_wait);
        let may_relax = match &first {
            Msg::Write { request, .. } => full && request.relaxed(),
            Msg::Close { .. } => true,
        };
        // A latched writer (or a relaxed batch) collects first and writes only what
        // `Settle::begin` lets through; any other batch is written as it is collected.
        let (batch, done) = if settle.failed() || may_relax {
            (collector.collect(&mut rx, first), None)
        } else {
            let conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            let (batch, written, took) = write_while_collecting(&conn, &mut rx, first, collector);
            (batch, Some((written, took)))
        };
        let took = done.as_ref().map(|(_, took)| *took);
        expected = batch.requests.len();
        let started = Instant::now();
        // A latched writer's batch, or an empty one, is answered without a write.
        let (pending, closing) = settle.begin(batch);
        close = closing;
        if let Some(Pending { requests, acks }) = pending {
            let written = match done {
                Some((written, _)) => written,
                None => {
                    // Nothing panics while holding the lock; if something did, the connection
                    // is still usable: every write first rolls back any transaction left open.
                    let conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
                    if full && relaxed_batch(&requests) {
                        write_relaxed(&conn, &requests)
                    } else {
                        write_batch(&conn, &requests)
                    }
                }
            };
            match written {
                // Nothing of the batch was written: it fails alone, and the writer goes on.
                Err(Failure::Busy(err)) => {
                    tracing::warn!(%err, "the journal's database stayed locked by another connection; a batch was refused");
                    let err = agent_schema::DatabaseError::from_rusqlite(&err);
                    settle.refuse(acks, || JournalError::Database(err.clone()));
                }
                written => settle.finish(
                    &requests,
                    acks,
                    written.map_err(|failure| describe(&failure.into_error())),
                ),
            }
        }
        last_commit = took.unwrap_or_else(|| started.elapsed());
    }
    drain_after_close(&mut rx, close);
}

/// The first message of the next batch. Producers the previous commit acknowledged are
/// usually about to append again: for up to `max_wait` the queue is polled (yielding
/// between polls) rather than slept on, so the writer is not parked just before they come.
fn first_request(rx: &mut mpsc::Receiver<Msg>, expected: usize, max_wait: Duration) -> Option<Msg> {
    if expected > 0 {
        let since = Instant::now();
        loop {
            match rx.try_recv() {
                Ok(msg) => return Some(msg),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) if since.elapsed() >= max_wait => break,
                Err(mpsc::error::TryRecvError::Empty) => std::thread::yield_now(),
            }
        }
    }
    rx.blocking_recv()
}

/// Collects one batch from the queue; see [`run`] for how long it waits.
struct Collector {
    max_batch: usize,
    expected: usize,
    max_wait: Duration,
    /// The batch may take more (false after `Close`, at `max_batch`, or once the wait ended).
    open: bool,
    waiting_since: Option<Instant>,
    yielded: bool,
}

impl Collector {
    fn new(max_batch: usize, expected: usize, max_wait: Duration) -> Self {
        Collector {
            max_batch,
            expected,
            max_wait,
            open: true,
            waiting_since: None,
            yielded: false,
        }
    }

    /// Takes `first` and everything queued after it; while the batch has fewer than
    /// `expected` requests, an empty queue is waited on for at most `max_wait`, otherwise
    /// it gets one yield before the batch is closed.
    fn collect(mut self, rx: &mut mpsc::Receiver<Msg>, first: Msg) -> Batch {
        let mut batch = self.start(first);
        while self.next(rx, &mut batch) {}
        batch
    }

    fn start(&mut self, first: Msg) -> Batch {
        let mut batch = Batch::default();
        self.open = batch.take(first, self.max_batch);
        batch
    }

    /// Waits (as [`Collector::collect`] does) for the next message and takes it with
    /// everything queued behind it; false, having taken nothing, once the batch is closed.
    fn next(&mut self, rx: &mut mpsc::Receiver<Msg>, batch: &mut Batch) -> bool {
        while self.open {
            if let Ok(msg) = rx.try_recv() {
                self.open = batch.take(msg, self.max_batch);
                while self.open
                    && let Ok(msg) = rx.try_recv()
                {
                    self.open = batch.take(msg, self.max_batch);
                }
                self.yielded = false;
                return true;
            }
            if batch.requests.len() >= self.expected {
                // Still give producers woken a moment ago one chance to join.
                if self.yielded {
                    self.open = false;
                    break;
                }
                self.yielded = true;
            } else if self
                .waiting_since
                .get_or_insert_with(Instant::now)
                .elapsed()
                >= self.max_wait
            {
                self.open = false;
                break;
            }
            std::thread::yield_now();
        }
        false
    }
}

/// Opens a transaction, collects a batch starting with `first` and writes each request
/// as it comes, then commits. Returns the batch, its answers (or the error that failed
/// it, after a rollback) and how long the writing and the commit took.
fn write_while_collecting(
    conn: &Connection,
    rx: &mut mpsc::Receiver<Msg>,
    first: Msg,
    mut collector: Collector,
) -> (Batch, Result<Vec<Answer>, Failure>, Duration) {
    let mut batch = collector.start(first);
    let mut busy = Duration::ZERO;
    let mut answers = Vec::new();
    let written = (|| {
        let mut open = timed(&mut busy, || Open::begin(conn))?;
        let mut done = 0;
        loop {
            if done < batch.requests.len() {
                let requests = &batch.requests[done..];
                answers.extend(timed(&mut busy, || open.write(conn, requests))?);
                done = batch.requests.len();
            } else if !collector.next(rx, &mut batch) {
                break;
            }
        }
        Ok(timed(&mut busy, || open.commit(conn))?)
    })();
    let written = match written {
        Ok(()) => Ok(answers),
        Err(err) => {
            rollback(conn);
            Err(err)
        }
    };
    (batch, written, busy)
}

/// `work()`, its time added to `busy`.
fn timed<T>(busy: &mut Duration, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = work();
    *busy += started.elapsed();
    result
}

/// Why a batch was not committed.
#[derive(Debug)]
enum Failure {
    /// `BEGIN IMMEDIATE` found the write lock held by another connection (another process's
    /// journal, a tool) for longer than `busy_timeout`: the transaction never began, so
    /// nothing of the batch was written. The batch fails alone and the next one tries
    /// again; latching the writer for good over a lock another connection held for a while
    /// left the journal unwritable until it was reopened.
    Busy(rusqlite::Error),
    /// A statement or the commit failed: what was written is unknown, the writer latches.
    Failed(rusqlite::Error),
}

impl From<rusqlite::Error> for Failure {
    fn from(err: rusqlite::Error) -> Self {
        Failure::Failed(err)
    }
}

impl Failure {
    fn into_error(self) -> rusqlite::Error {
        match self {
            Failure::Busy(err) | Failure::Failed(err) => err,
        }
    }
}

/// A write transaction of the writer connection, and the head seq as its rows advance it.
struct Open {
    start: i64,
    head: i64,
}

impl Open {
    /// Takes the write lock; the head read under it is final. A transaction left open by an
    /// interrupted earlier write is abandoned first, never reused.
    fn begin(conn: &Connection) -> Result<Open, Failure> {
        rollback(conn);
        let began = conn
            .prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut begin| begin.execute([]));
        if let Err(err) = began {
            use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
            let busy = matches!(err.sqlite_error_code(), Some(DatabaseBusy | DatabaseLocked));
            return Err(if busy {
                Failure::Busy(err)
            } else {
                Failure::Failed(err)
            });
        }
        let head = read_head(conn)?;
        Ok(Open { start: head, head })
    }

    fn write(&mut self, conn: &Connection, requests: &[Request]) -> rusqlite::Result<Vec<Answer>> {
        write_requests(conn, requests, &mut self.head)
    }

    /// Writes the head row if rows were added, and commits. On an error the caller rolls
    /// back.
    fn commit(self, conn: &Connection) -> rusqlite::Result<()> {
        if self.head != self.start {
            write_head(conn, self.head)?;
        }
        conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }
}

/// Commits one batch; rolls back and returns the error if any statement fails.
fn write_batch(conn: &Connection, batch: &[Request]) -> Result<Vec<Answer>, Failure> {
    let written = Open::begin(conn).and_then(|mut open| {
        let answers = open.write(conn, batch)?;
        open.commit(conn)?;
        Ok(answers)
    });
    if written.is_err() {
        rollback(conn);
    }
    written
}

/// Commits `batch` under `synchronous = NORMAL`, so the commit does not wait for the disk
/// (WAL frames are written in commit order, and the next `FULL` commit's sync covers them),
/// then sets the connection back to `FULL` for every later commit, the leases' included.
/// Should that fail, the error fails the batch and latches the writer: nothing is committed
/// afterwards with less durability than the journal promises.
fn write_relaxed(conn: &Connection, batch: &[Request]) -> Result<Vec<Answer>, Failure> {
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

/// The highest seq assigned: final once the transaction holds the write lock.
fn read_head(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT seq FROM journal_head WHERE id = 0")?
        .query_row([], |row| row.get(0))
}

fn write_head(conn: &Connection, head: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE journal_head SET seq = ?1 WHERE id = 0")?
        .execute([head])?;
    Ok(())
}

/// Writes `batch` inside the open transaction, giving new rows the seqs after `head` and
/// advancing it; the caller writes the head row before it commits. Dedup keys and the
/// heads of conditional requests are read from the table, so rows this transaction wrote
/// for earlier requests count.
fn write_requests(
    conn: &Connection,
    batch: &[Request],
    head: &mut i64,
) -> Result<Vec<Answer>, rusqlite::Error> {
    // A database edited by hand may hold the largest seq there is: refused, not wrapped.
    let rows: usize = batch.iter().map(|r| r.events.len()).sum();
    if i64::try_from(rows)
        .ok()
        .and_then(|n| head.checked_add(n))
        .is_none()
    {
        let last = *head;
        return Ok(batch
            .iter()
            .map(|_| Err(JournalError::SeqsExhausted { last }))
            .collect());
    }
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
            let last_seq: Option<i64> = last.query_row([thread], |row| row.get(0))?;
            heads.insert(thread.to_string(), last_seq);
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
    let plan = batch::plan(batch, *head, existing, conditions);
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
        *head = last.seq;
    }
    Ok(plan.acks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sqlite::{Location, Opened, open};
    use crate::writer::{Expected, Fence, Prepared};
    use tokio::sync::oneshot;

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

    /// A new journal file with the default options; the folder goes with the first value.
    fn journal_file() -> (tempfile::TempDir, Opened) {
        let dir = tempfile::tempdir().unwrap();
        let location = Location::File(dir.path().join("j.db"));
        let opened = open(&location, "sqlite://j.db", &Default::default()).unwrap();
        (dir, opened)
    }

    fn synchronous(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA synchronous", [], |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn a_relaxed_write_commits_and_leaves_the_connection_at_full() {
        let (_dir, opened) = journal_file();
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

    /// A journal edited so that its last seq is `i64::MAX`: the next append is refused,
    /// and nothing is written.
    #[test]
    fn a_journal_at_the_largest_seq_refuses_an_append() {
        let (_dir, opened) = journal_file();
        let conn = opened.writer.lock().unwrap();
        write_batch(&conn, &[plain(None, None)]).unwrap();
        conn.execute("UPDATE journal_events SET seq = ?1", [i64::MAX])
            .unwrap();
        write_head(&conn, i64::MAX).unwrap();
        let answers = write_batch(&conn, &[plain(None, None), plain(None, None)]).unwrap();
        for answer in &answers {
            assert!(
                matches!(answer, Err(JournalError::SeqsExhausted { last: i64::MAX })),
                "{answer:?}"
            );
        }
        assert_eq!(count_and_head(&conn), (1, i64::MAX));
    }

    #[test]
    fn a_batch_is_relaxed_only_when_every_request_is() {
        assert!(relaxed_batch(&[request(true), request(true)]));
        assert!(!relaxed_batch(&[request(true), request(false)]));
        assert!(!relaxed_batch(&[request(false)]));
    }

    fn plain(dedup_key: Option<&str>, expected: Option<Option<i64>>) -> Request {
        Request {
            events: vec![Prepared::for_test("t", dedup_key)],
            expected: expected.map(|last| Expected {
                thread: "t".into(),
                last,
            }),
            fence: None,
        }
    }

    fn write(request: Request) -> Msg {
        Msg::Write {
            request,
            ack: oneshot::channel().0,
        }
    }

    /// Sends `requests` one at a time, each after a pause, so each arrives after the
    /// writer wrote what came before it.
    fn trickle(tx: mpsc::Sender<Msg>, requests: Vec<Request>) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            for request in requests {
                std::thread::sleep(Duration::from_millis(30));
                tx.blocking_send(write(request)).unwrap();
            }
        })
    }

    fn count_and_head(conn: &Connection) -> (i64, i64) {
        let count = conn
            .query_row("SELECT COUNT(*) FROM journal_events", [], |row| row.get(0))
            .unwrap();
        (count, read_head(conn).unwrap())
    }

    #[test]
    fn requests_written_while_a_batch_is_collected_count_its_earlier_rows() {
        let (_dir, opened) = journal_file();
        let conn = opened.writer.lock().unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let sender = trickle(
            tx,
            vec![
                // The first request's key: deduplicated against the row written for it.
                plain(Some("a"), None),
                // The thread's head is the first request's row by now.
                plain(None, Some(Some(1))),
                // No longer: the request before it advanced the head.
                plain(None, Some(Some(1))),
            ],
        );
        let collector = Collector::new(100, 4, Duration::from_secs(10));
        let (batch, written, _) =
            write_while_collecting(&conn, &mut rx, write(plain(Some("a"), None)), collector);
        sender.join().unwrap();
        assert_eq!(batch.requests.len(), 4);
        let answers = written.unwrap();
        let seqs = |answer: &Answer| {
            let appended = answer.as_ref().unwrap();
            appended
                .iter()
                .map(|a| (a.seq, a.deduplicated))
                .collect::<Vec<_>>()
        };
        assert_eq!(seqs(&answers[0]), [(1, false)]);
        assert_eq!(seqs(&answers[1]), [(1, true)]);
        assert_eq!(seqs(&answers[2]), [(2, false)]);
        assert!(matches!(
            answers[3],
            Err(JournalError::Conflict {
                expected: Some(1),
                actual: Some(2),
                ..
            })
        ));
        // Committed, head row included.
        assert!(conn.is_autocommit());
        assert_eq!(count_and_head(&conn), (2, 2));
    }

    #[test]
    fn a_request_that_fails_after_others_were_written_rolls_the_whole_batch_back() {
        let (_dir, opened) = journal_file();
        let conn = opened.writer.lock().unwrap();
        // A fenced request reads the leases table, which is gone.
        conn.execute_batch("DROP TABLE journal_leases").unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let mut fenced = plain(None, None);
        fenced.fence = Some(Fence {
            lease: "l".into(),
            epoch: 1,
        });
        let sender = trickle(tx, vec![plain(None, None), fenced]);
        let collector = Collector::new(100, 3, Duration::from_secs(10));
        let (batch, written, _) =
            write_while_collecting(&conn, &mut rx, write(plain(None, None)), collector);
        sender.join().unwrap();
        assert_eq!(batch.requests.len(), 3);
        assert!(written.is_err());
        assert!(conn.is_autocommit(), "rolled back");
        assert_eq!(count_and_head(&conn), (0, 0));
    }
}
