//! Reads on the journal's own reader threads.
//!
//! A file journal keeps a few read-only connections (WAL lets them read while the writer
//! commits; each read sees a committed snapshot), and as many threads, started with the
//! journal, that take reads from one queue. An in-memory journal reads through the writer's
//! connection, on one thread. After [`Reader::close`] every read fails with
//! [`JournalError::Closed`].
//!
//! Invariants:
//! - At most as many reads run at once as there are connections (one for an in-memory
//!   journal); the others wait in the queue. So a connection is never opened past the
//!   pool's size (opening one re-reads the schema and re-prepares every statement), and a
//!   hundred concurrent readers cost a hundred queued closures on a fixed set of threads.
//!   (Reads on tokio's blocking pool, bounded by a semaphore, still grew the pool to some
//!   twenty threads under a hundred runs: a permit came free just before its thread went
//!   idle, so the next read often started a new thread.)
//! - The threads end when the last handle to the reader is dropped.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, OptionalExtension as _, Row, params};
use tokio::sync::oneshot;

use crate::backend::{KindPage, ReadSide};
use crate::error::JournalError;
use crate::event::Event;
use crate::payload::Decoder;
use crate::position::Position;
use agent_schema::json;

/// Replays spanning fewer seqs than this are read in one piece.
const PARALLEL_REPLAY_SPAN: i64 = 20_000;
/// Most parallel pieces of one replay.
const MAX_REPLAY_PARTS: usize = 4;
/// Events a replay reads before it probes how far the thread goes.
const FIRST_REPLAY_PAGE: i64 = 256;
/// Most events a replay's range is sized for before it reads them: a density measured on
/// a dense first page can overestimate a sparse rest, so the reservation is capped (at
/// 160 bytes an event, 40 MiB); past it the vector grows as it fills.
const MAX_PRESIZED: usize = 1 << 18;

/// The page cache of each read connection, KiB (SQLite's default is 2,000).
///
/// Reads are mostly tails and catch-ups of recent events spread over many threads' ranges,
/// so a connection's cache filled to its bound and stayed there: with four connections and
/// a thousand concurrent runs, ~9 MiB of the process's peak. A page read again comes from
/// the OS's page cache (no disk). The write connection has its own bound (`WRITE_CACHE_KIB`).
const READ_CACHE_KIB: u32 = 256;

/// Up to `?4` events of thread `?1` with `?2 < seq <= ?3`, in seq order.
const RANGE_SQL: &str = "SELECT seq, kind, payload, at, dedup_key, epoch FROM journal_events \
     WHERE thread = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4";

/// Up to `?5` events of thread `?1` and kind `?4` with `?2 < seq <= ?3`, in seq order.
const KIND_RANGE_SQL: &str = "SELECT seq, kind, payload, at, dedup_key, epoch FROM journal_events \
     WHERE thread = ?1 AND seq > ?2 AND seq <= ?3 AND kind = ?4 ORDER BY seq LIMIT ?5";

/// The read side of a SQLite journal; cheap to clone.
#[derive(Clone)]
pub(crate) struct Reader {
    inner: Arc<Inner>,
}

struct Inner {
    source: Source,
    closed: AtomicBool,
    /// The reader threads' queue.
    jobs: mpsc::Sender<Job>,
}

/// A read, as the reader threads run it.
type Job = Box<dyn FnOnce() + Send>;

enum Source {
    Files {
        path: PathBuf,
        /// Set when the journal is open read-only: the `file:` URI each connection opens
        /// (`mode=ro` or `immutable=1`) instead of `path`.
        uri: Option<String>,
        busy_timeout: Duration,
        idle: Mutex<Vec<Connection>>,
        connections: usize,
    },
    Shared(Arc<Mutex<Connection>>),
}

impl Reader {
    pub(crate) fn files(
        path: PathBuf,
        uri: Option<String>,
        busy_timeout: Duration,
        connections: usize,
    ) -> std::io::Result<Self> {
        let connections = connections.max(1);
        Reader::new(
            Source::Files {
                path,
                uri,
                busy_timeout,
                idle: Mutex::new(Vec::new()),
                connections,
            },
            connections,
        )
    }

    pub(crate) fn shared(conn: Arc<Mutex<Connection>>) -> std::io::Result<Self> {
        Reader::new(Source::Shared(conn), 1)
    }

    fn new(source: Source, threads: usize) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(rx));
        for _ in 0..threads {
            let queue = Arc::clone(&queue);
            std::thread::Builder::new()
                .name("agent-journal-reader".into())
                .spawn(move || serve(&queue))?;
        }
        Ok(Reader {
            inner: Arc::new(Inner {
                source,
                closed: AtomicBool::new(false),
                jobs: tx,
            }),
        })
    }

    /// Runs `read` with a connection on a reader thread, once one is free.
    ///
    /// # Cancel safety
    /// Dropped before a thread takes the read: it is skipped. Dropped later: the read still
    /// finishes on its thread, which then returns its connection; the result is dropped.
    async fn run<T, F>(&self, read: F) -> Result<T, JournalError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, JournalError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let inner = Arc::clone(&self.inner);
        let job: Job = Box::new(move || {
            if !tx.is_closed() {
                let _ = tx.send(inner.with_connection(read));
            }
        });
        self.inner
            .jobs
            .send(job)
            .map_err(|_| JournalError::Closed)?;
        rx.await.map_err(|_| JournalError::Closed)?
    }

    /// `first` (the first page of a replay of `thread`, full) extended with every later
    /// event of `thread`, as of one moment. A long rest is read as seq ranges in parallel
    /// (one per core): seqs are assigned in commit order, so every seq up to the highest
    /// one seen at the start is already committed and each range reads a complete,
    /// immutable slice. Each range's vector is sized from the first page's density (its
    /// events per seq), and the first range decodes into `first`, sized for the whole rest:
    /// a long replay then copies its events once, when the other ranges join it, instead
    /// of on every doubling and again when the ranges are joined.
    async fn replay_rest(
        &self,
        thread: &str,
        first: Vec<Event>,
    ) -> Result<Vec<Event>, JournalError> {
        let (Some(head), Some(after)) = (first.first(), first.last()) else {
            return Ok(first);
        };
        let after = after.seq;
        let density = first.len() as f64 / (after - head.seq + 1).max(1) as f64;
        let owned = thread.to_string();
        let bounds = self
            .run(move |conn| {
                let bounds = conn
                    .prepare_cached(
                        // Two subqueries: each is one probe of the (thread, seq) key,
                        // where MIN and MAX in one SELECT would scan the thread.
                        "SELECT (SELECT MIN(seq) FROM journal_events WHERE thread = ?1 AND seq > ?2), \
                                (SELECT MAX(seq) FROM journal_events WHERE thread = ?1 AND seq > ?2)",
                    )?
                    .query_row(params![owned, after], |row| {
                        Ok((row.get::<_, Option<i64>>(0)?, row.get::<_, Option<i64>>(1)?))
                    })?;
                Ok(bounds)
            })
            .await?;
        let (Some(low), Some(high)) = bounds else {
            return Ok(first);
        };
        let parts = match self.inner.source {
            Source::Shared(_) => 1,
            Source::Files { .. } if high - low < PARALLEL_REPLAY_SPAN => 1,
            Source::Files { .. } => {
                std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_REPLAY_PARTS))
            }
        };
        let span = (high - low) / parts as i64 + 1;
        let expected = |seqs: i64| (seqs as f64 * density * 1.05) as usize + 16;
        let mut first = Some(first);
        let reads = (0..parts as i64).map(|i| {
            let from = low - 1 + i * span;
            // Saturating: the last range may reach one past `high`, which can be `i64::MAX`.
            let to = from.saturating_add(span).min(high);
            let into = match first.take() {
                Some(mut events) => {
                    events.reserve(expected(high - after).min(MAX_PRESIZED));
                    events
                }
                None => Vec::with_capacity(expected(to - from).min(MAX_PRESIZED)),
            };
            self.range_into(thread, from, to, i64::MAX, into)
        });
        // The first range's vector holds the first page and has room for the others.
        let mut parts = futures::future::join_all(reads).await.into_iter();
        let mut events = parts.next().transpose()?.unwrap_or_default();
        for part in parts {
            events.extend(part?);
        }
        Ok(events)
    }

    /// Up to `limit` events of `thread` with `after < seq <= upto`, in seq order.
    async fn range(
        &self,
        thread: &str,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> Result<Vec<Event>, JournalError> {
        self.range_into(thread, after, upto, limit, Vec::new())
            .await
    }

    /// [`Reader::range`], appended to `into`.
    async fn range_into(
        &self,
        thread: &str,
        after: i64,
        upto: i64,
        limit: i64,
        into: Vec<Event>,
    ) -> Result<Vec<Event>, JournalError> {
        let thread = thread.to_string();
        self.run(move |conn| {
            // Served by the clustered primary key (thread, seq): O(events of the thread).
            let mut stmt = conn.prepare_cached(RANGE_SQL)?;
            events(
                &thread,
                stmt.query(params![thread, after, upto, limit])?,
                into,
            )
        })
        .await
    }
}

/// `events` extended with the events `rows` (of `thread`) hold, decoded.
fn events(
    thread: &str,
    mut rows: rusqlite::Rows<'_>,
    mut events: Vec<Event>,
) -> Result<Vec<Event>, JournalError> {
    let mut decoding = Decoding::new(thread);
    while let Some(row) = rows.next()? {
        events.push(decode(row, &mut decoding)?);
    }
    Ok(events)
}

/// The highest seq of `thread`, or `None` if it has no events.
fn top_seq(conn: &Connection, thread: &str) -> Result<Option<i64>, JournalError> {
    let top = conn
        .prepare_cached("SELECT MAX(seq) FROM journal_events WHERE thread = ?1")?
        .query_row([thread], |row| row.get::<_, Option<i64>>(0))
        .optional()?;
    Ok(top.flatten())
}

impl ReadSide for Reader {
    /// Up to `limit` events of `thread` with `seq > after`, in seq order.
    async fn replay_page(
        &self,
        thread: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Event>, JournalError> {
        self.range(thread, after, i64::MAX, limit).await
    }

    async fn replay_kind_page(
        &self,
        thread: &str,
        kind: &str,
        after: i64,
        limit: i64,
    ) -> Result<KindPage, JournalError> {
        let (thread, kind) = (thread.to_string(), kind.to_string());
        self.run(move |conn| {
            // The top first: the events read next are bounded by it, so what `seen` claims
            // was read even if a commit lands in between.
            let top = top_seq(conn, &thread)?;
            let page = match top {
                // The (thread, seq) key walked forward; other kinds are skipped unread.
                Some(top) => {
                    let mut stmt = conn.prepare_cached(KIND_RANGE_SQL)?;
                    events(
                        &thread,
                        stmt.query(params![thread, after, top, kind, limit])?,
                        Vec::new(),
                    )?
                }
                None => Vec::new(),
            };
            Ok(KindPage::new(page, after, top, limit))
        })
        .await
    }

    /// Every event of `thread` after `after`: a prefix of the thread as committed.
    async fn replay_all(&self, thread: &str, after: i64) -> Result<Vec<Event>, JournalError> {
        // Most replays catch up on a few events (a driver after its own step): one read.
        // A full first page means a long catch-up (a resume): the rest is probed and may
        // be read in parallel. Each read is a committed snapshot and commits append to a
        // thread in seq order, so the rest, read later, extends the first page.
        let events = self
            .range(thread, after, i64::MAX, FIRST_REPLAY_PAGE)
            .await?;
        if events.len() < FIRST_REPLAY_PAGE as usize {
            return Ok(events);
        }
        self.replay_rest(thread, events).await
    }

    async fn find_by_key(&self, thread: &str, key: &str) -> Result<Option<Event>, JournalError> {
        let (thread, key) = (thread.to_string(), key.to_string());
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, kind, payload, at, dedup_key, epoch FROM journal_events \
                 WHERE thread = ?1 AND dedup_key = ?2",
            )?;
            let mut rows = stmt.query(params![thread, key])?;
            rows.next()?
                .map(|row| decode(row, &mut Decoding::new(&thread)))
                .transpose()
        })
        .await
    }

    async fn last_of_kind(&self, thread: &str, kind: &str) -> Result<Option<Event>, JournalError> {
        let (thread, kind) = (thread.to_string(), kind.to_string());
        self.run(move |conn| {
            // The (thread, seq) key walked backwards: stops at the newest match.
            let mut stmt = conn.prepare_cached(
                "SELECT seq, kind, payload, at, dedup_key, epoch FROM journal_events \
                 WHERE thread = ?1 AND kind = ?2 ORDER BY seq DESC LIMIT 1",
            )?;
            let mut rows = stmt.query(params![thread, kind])?;
            rows.next()?
                .map(|row| decode(row, &mut Decoding::new(&thread)))
                .transpose()
        })
        .await
    }

    async fn threads(&self) -> Result<Vec<String>, JournalError> {
        self.run(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT DISTINCT thread FROM journal_events ORDER BY thread")?;
            let threads = stmt
                .query_map([], |row| row.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            Ok(threads)
        })
        .await
    }

    /// Commits are in seq order here (one write lock), so seq alone is the journal's
    /// order. There is no index on seq alone (it cost every insert; see schema 2), so a
    /// page reads the table: this is for occasional whole-journal readers, not for tails
    /// of busy journals.
    async fn journal_page(
        &self,
        after: Position,
        limit: i64,
    ) -> Result<Vec<(Position, Event)>, JournalError> {
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, kind, payload, at, dedup_key, epoch, thread FROM journal_events \
                 WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            )?;
            let mut rows = stmt.query(params![after.seq, limit])?;
            let mut page = Vec::new();
            let mut decoding = Decoding::new("");
            while let Some(row) = rows.next()? {
                let thread = row.get_ref(6)?.as_str().map_err(rusqlite::Error::from)?;
                decoding.switch_to(thread);
                let event = decode(row, &mut decoding)?;
                page.push((Position::START.with_seq(event.seq), event));
            }
            Ok(page)
        })
        .await
    }

    async fn last_seq(&self, thread: &str) -> Result<Option<i64>, JournalError> {
        let thread = thread.to_string();
        self.run(move |conn| top_seq(conn, &thread)).await
    }

    /// Refuses later reads and drops idle connections.
    async fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        if let Source::Files { idle, .. } = &self.inner.source {
            idle.lock().unwrap_or_else(PoisonError::into_inner).clear();
        }
    }
}

impl Inner {
    fn with_connection<T>(
        &self,
        read: impl FnOnce(&Connection) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(JournalError::Closed);
        }
        match &self.source {
            Source::Shared(conn) => read(&conn.lock().unwrap_or_else(PoisonError::into_inner)),
            Source::Files {
                path,
                uri,
                busy_timeout,
                idle,
                connections,
            } => {
                let reused = idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
                let conn = match (reused, uri) {
                    (Some(conn), _) => conn,
                    (None, None) => open_read_only(path, *busy_timeout)?,
                    (None, Some(uri)) => open_uri(uri, *busy_timeout)?,
                };
                let result = read(&conn);
                let mut idle = idle.lock().unwrap_or_else(PoisonError::into_inner);
                if idle.len() < *connections && !self.closed.load(Ordering::SeqCst) {
                    idle.push(conn);
                }
                result
            }
        }
    }
}

/// A reader thread: runs reads until every sender is gone. A read that panics loses only
/// its own answer (its caller sees [`JournalError::Closed`]), not the thread.
fn serve(queue: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        match job {
            Ok(job) => {
                let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
            }
            Err(mpsc::RecvError) => return,
        }
    }
}

fn open_read_only(path: &PathBuf, busy_timeout: Duration) -> Result<Connection, JournalError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(busy_timeout)?;
    super::stable_plans(&conn)?;
    conn.execute_batch(&format!("PRAGMA cache_size = -{READ_CACHE_KIB};"))?;
    Ok(conn)
}

/// A read connection to the `file:` URI `uri` (a journal opened read-only).
pub(super) fn open_uri(uri: &str, busy_timeout: Duration) -> Result<Connection, JournalError> {
    let conn = Connection::open_with_flags(
        uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(busy_timeout)?;
    super::stable_plans(&conn)?;
    conn.execute_batch(&format!("PRAGMA cache_size = -{READ_CACHE_KIB};"))?;
    Ok(conn)
}

/// What decoding the rows of one read keeps from row to row: the thread and kind names
/// its events share (a thread has few kinds) and the payload decoder's scratch.
struct Decoding {
    thread: Arc<str>,
    kinds: Vec<Arc<str>>,
    payloads: Decoder,
}

impl Decoding {
    /// Kinds kept for sharing; a read with more distinct kinds allocates the rest per event.
    const MAX_KINDS: usize = 16;

    fn new(thread: &str) -> Self {
        Decoding {
            thread: thread.into(),
            kinds: Vec::new(),
            payloads: Decoder::default(),
        }
    }

    /// Makes the names those of `thread`'s events (the kinds of another thread are
    /// forgotten); the payload decoder is kept.
    fn switch_to(&mut self, thread: &str) {
        if *self.thread != *thread {
            self.thread = thread.into();
            self.kinds.clear();
        }
    }

    fn kind(&mut self, kind: &str) -> Arc<str> {
        if let Some(known) = self.kinds.iter().find(|k| ***k == *kind) {
            return Arc::clone(known);
        }
        let new: Arc<str> = kind.into();
        if self.kinds.len() < Self::MAX_KINDS {
            self.kinds.push(Arc::clone(&new));
        }
        new
    }
}

/// Decodes a row of `seq, kind, payload, at, dedup_key, epoch` of the thread `decoding` is
/// for (the thread the query selected, so it is not read back).
fn decode(row: &Row<'_>, decoding: &mut Decoding) -> Result<Event, JournalError> {
    let seq: i64 = row.get(0)?;
    let kind = row.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?;
    let kind = decoding.kind(kind);
    // Payloads are TEXT, checked as UTF-8 once here; text that fails the check, or a BLOB
    // written by hand, is parsed as bytes (and reported as corrupt when it is not JSON).
    let payload = match row.get_ref(2)? {
        ValueRef::Text(text) => match std::str::from_utf8(text) {
            Ok(text) => decoding.payloads.decode(text),
            Err(_) => json::from_slice(text),
        },
        other => json::from_slice(other.as_bytes().map_err(rusqlite::Error::from)?),
    }
    .map_err(|source| JournalError::CorruptPayload { seq, source })?;
    Ok(Event {
        seq,
        thread: Arc::clone(&decoding.thread),
        kind,
        payload,
        at: row.get(3)?,
        dedup_key: row.get(4)?,
        epoch: row.get(5)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switching_threads_names_the_new_thread_and_forgets_the_old_kinds() {
        let mut names = Decoding::new("a");
        let kind = names.kind("k");
        names.switch_to("a");
        assert!(Arc::ptr_eq(&kind, &names.kind("k")));
        names.switch_to("b");
        assert_eq!(&*names.thread, "b");
        assert!(names.kinds.is_empty());
        assert!(!Arc::ptr_eq(&kind, &names.kind("k")));
    }

    #[test]
    fn names_share_the_thread_and_known_kinds_and_stay_correct_past_the_cap() {
        let mut names = Decoding::new("t");
        let a = names.kind("a");
        assert!(Arc::ptr_eq(&a, &names.kind("a")));
        for n in 0..2 * Decoding::MAX_KINDS {
            assert_eq!(&*names.kind(&format!("k{n}")), format!("k{n}"));
        }
        assert_eq!(names.kinds.len(), Decoding::MAX_KINDS);
        assert!(Arc::ptr_eq(&a, &names.kind("a")));
        assert_eq!(&*names.kind("k31"), "k31");
    }

    /// Times the cached range read was compiled again over `limits.len()` reads.
    fn reprepares(conn: &Connection, limits: &[i64]) -> i32 {
        let mut stmt = conn.prepare_cached(RANGE_SQL).unwrap();
        for &limit in limits {
            let mut rows = stmt.query(params!["t", 0, 100, limit]).unwrap();
            while rows.next().unwrap().is_some() {}
        }
        stmt.get_status(rusqlite::StatementStatus::RePrepare)
    }

    #[test]
    fn a_cached_read_is_not_compiled_again_for_new_bound_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        // Creates the schema.
        drop(
            super::super::open(
                &super::super::Location::File(path.clone()),
                "sqlite:j.db",
                &crate::JournalOptions::default(),
            )
            .unwrap(),
        );
        let limits = [10, 20, 30, 40];
        // Without the guarantee the planner reads `LIMIT ?4`, so each binding expires it.
        let plain = Connection::open(&path).unwrap();
        assert!(reprepares(&plain, &limits) >= 3);
        let reader = open_read_only(&path, Duration::from_secs(1)).unwrap();
        assert_eq!(reprepares(&reader, &limits), 0);
    }

    /// An in-memory table of the journal's shape (its payload column without a type, so
    /// that what a test stores keeps its own type).
    fn events_table() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE journal_events (thread TEXT, seq INTEGER, kind TEXT, payload, \
             at INTEGER, dedup_key TEXT, epoch INTEGER)",
        )
        .unwrap();
        conn
    }

    /// Every event of thread `t` in `conn`, decoded as a replay does.
    fn decode_rows(conn: &Connection) -> Vec<Result<Event, JournalError>> {
        let mut stmt = conn.prepare(RANGE_SQL).unwrap();
        let mut rows = stmt.query(params!["t", 0, i64::MAX, 100]).unwrap();
        let mut decoding = Decoding::new("t");
        let mut out = Vec::new();
        while let Some(row) = rows.next().unwrap() {
            out.push(decode(row, &mut decoding));
        }
        out
    }

    /// Each stored payload, decoded as a replay does.
    fn decoded(payloads: &[rusqlite::types::Value]) -> Vec<Result<serde_json::Value, String>> {
        let conn = events_table();
        for (seq, payload) in payloads.iter().enumerate() {
            conn.execute(
                "INSERT INTO journal_events VALUES ('t', ?1, 'k', ?2, 0, NULL, NULL)",
                params![seq as i64 + 1, payload],
            )
            .unwrap();
        }
        decode_rows(&conn)
            .into_iter()
            .map(|event| event.map(|e| e.payload).map_err(|err| err.to_string()))
            .collect()
    }

    #[test]
    fn payloads_written_by_hand_decode_or_are_reported_corrupt() {
        use rusqlite::types::Value::{Blob, Text};
        let got = decoded(&[
            Text(r#"{"a":"é","b":[1]}"#.into()),
            Blob(br#"{"blob":true}"#.to_vec()),
            Text("not json".into()),
            Blob(vec![0xff, 0xfe]),
        ]);
        assert_eq!(got[0], Ok(serde_json::json!({"a": "é", "b": [1]})));
        assert_eq!(got[1], Ok(serde_json::json!({"blob": true})));
        for (n, bad) in got[2..].iter().enumerate() {
            let err = bad.as_ref().unwrap_err();
            assert!(err.contains("corrupt payload"), "{n}: {err}");
        }
    }

    #[test]
    fn invalid_utf8_text_is_reported_corrupt() {
        let conn = events_table();
        conn.execute_batch(
            "INSERT INTO journal_events VALUES ('t', 1, 'k', CAST(X'22FF22' AS TEXT), 0, NULL, NULL);",
        )
        .unwrap();
        let kind: String = conn
            .query_row("SELECT typeof(payload) FROM journal_events", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(kind, "text");
        let err = decode_rows(&conn).remove(0).unwrap_err();
        assert!(
            matches!(err, JournalError::CorruptPayload { seq: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn read_connections_keep_a_small_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let reader = open_read_only(&path, Duration::from_secs(1)).unwrap();
        let cache: i64 = reader
            .query_row("PRAGMA cache_size", [], |row| row.get(0))
            .unwrap();
        assert_eq!(cache, -i64::from(READ_CACHE_KIB));
        let default: i64 = Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA cache_size", [], |row| row.get(0))
            .unwrap();
        assert_ne!(cache, default);
    }
}
