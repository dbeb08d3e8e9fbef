//! The [`Journal`] handle.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::backend::{self, ReadSide as _, Reads, Writer};
use crate::commits::Commits;
use crate::error::JournalError;
use crate::event::{Appended, Event, NewEvent};
use crate::limits::{check_append, check_event, check_nul, check_thread};
use crate::options::{Access, Durability, JournalOptions};
use crate::position::Position;
use crate::stream::{self, EventStream, PositionedStream};
use crate::writer::{Counters, Expected, Fence, Request};

/// A cheap, cloneable handle to an open journal. All clones share one writer task.
#[derive(Clone)]
pub struct Journal {
    pub(crate) inner: Arc<Inner>,
    /// Set on a handle made by [`Journal::fenced`]: every append carries it.
    fence: Option<Arc<Fence>>,
}

pub(crate) struct Inner {
    pub(crate) reads: Reads,
    /// The lease table's side of the backend.
    pub(crate) leases: crate::lease::Backend,
    writer: Writer,
    commits: Arc<Commits>,
    /// PostgreSQL: the shared LISTEN task, started by the first tail.
    listen: std::sync::OnceLock<Listen>,
    options: JournalOptions,
    shown_url: String,
    counters: Arc<Counters>,
    /// Set by [`Journal::close`]: lease operations are refused from then on (on SQLite
    /// they use the write connection, which stays open until the last handle is dropped).
    pub(crate) closed: std::sync::atomic::AtomicBool,
}

/// The shared LISTEN task of a PostgreSQL journal. Dropping it (with the journal) stops
/// the task, as [`Journal::close`] does.
struct Listen {
    stop: watch::Sender<bool>,
    /// True while LISTEN is active.
    connected: watch::Receiver<bool>,
}

/// Totals since this journal was opened (this process's writer only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalStats {
    /// Transactions committed by the group-commit writer.
    pub commits: u64,
    /// Those of them that held relaxed appends only ([`NewEvent::relaxed`]): under
    /// [`Durability::Full`] they did not wait for the disk.
    pub relaxed_commits: u64,
    /// Events written by those transactions (deduplicated appends excluded).
    pub events: u64,
    /// PostgreSQL: those of the commits that the appending task wrote itself, finding the
    /// writer idle, instead of handing them to the writer task.
    pub direct_commits: u64,
}

impl JournalStats {
    /// What was counted between `earlier` (taken from the same journal) and these.
    pub fn since(&self, earlier: &JournalStats) -> JournalStats {
        JournalStats {
            commits: self.commits.saturating_sub(earlier.commits),
            relaxed_commits: self.relaxed_commits.saturating_sub(earlier.relaxed_commits),
            events: self.events.saturating_sub(earlier.events),
            direct_commits: self.direct_commits.saturating_sub(earlier.direct_commits),
        }
    }

    /// The commits that waited for the disk: all but the relaxed-only ones.
    pub fn durable_commits(&self) -> u64 {
        self.commits.saturating_sub(self.relaxed_commits)
    }
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("url", &self.inner.shown_url)
            .field("durability", &self.inner.options.durability)
            .finish()
    }
}

impl Journal {
    /// Opens (creating if needed) the journal at `url` with default options:
    /// `sqlite://PATH`, `sqlite::memory:`, `postgres://USER:PASS@HOST/DB`, or `memory:` (kept
    /// in this process only: nothing survives it, each open is a new journal).
    ///
    /// # Cancel safety
    ///
    /// As for [`open_with`](Self::open_with).
    pub async fn open(url: &str) -> Result<Journal, JournalError> {
        Journal::open_with(url, JournalOptions::default()).await
    }

    /// Opens the journal at `url` with `options`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes leaves nothing running and nothing open
    /// except what opening already did to the database (its file created, its schema
    /// applied: each schema step is all-or-nothing).
    pub async fn open_with(url: &str, options: JournalOptions) -> Result<Journal, JournalError> {
        let shown_url = agent_redact::redact_url(url);
        let commits = Arc::new(Commits::default());
        let counters = Arc::new(Counters::default());
        let backend::Opened {
            reads,
            writer,
            leases,
        } = backend::open(
            url,
            &shown_url,
            &options,
            Arc::clone(&commits),
            Arc::clone(&counters),
        )
        .await?;
        Ok(Journal {
            fence: None,
            inner: Arc::new(Inner {
                reads,
                leases,
                writer,
                commits,
                listen: std::sync::OnceLock::new(),
                options,
                shown_url,
                counters,
                closed: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// Opens the journal at `url` read-only ([`Access::ReadOnly`]): for inspecting a journal
    /// that this process cannot or must not write (an archived file of mode 444 in a
    /// directory of mode 555, a read-only mount). Nothing is written to the database, no
    /// schema step is applied, and appends and lease writes fail with
    /// [`JournalError::ReadOnly`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: opening read-only changes nothing, and a dropped future leaves nothing
    /// open or running.
    pub async fn open_read_only(url: &str) -> Result<Journal, JournalError> {
        Journal::open_with(url, JournalOptions::default().access(Access::ReadOnly)).await
    }

    /// Opens the journal at `url` for a command that only reads
    /// ([`Access::ReadOnlyWhenUnwritable`]): read-write when it can be written (a missing
    /// database is created, as by [`open`](Self::open)), read-only when opening it for
    /// writing fails because it cannot be written. [`is_read_only`](Self::is_read_only)
    /// says which.
    ///
    /// # Cancel safety
    ///
    /// As for [`open_with`](Self::open_with).
    pub async fn open_for_reading(url: &str) -> Result<Journal, JournalError> {
        let options = JournalOptions::default().access(Access::ReadOnlyWhenUnwritable);
        Journal::open_with(url, options).await
    }

    /// Whether this journal was opened read-only (appends fail with
    /// [`JournalError::ReadOnly`]).
    pub fn is_read_only(&self) -> bool {
        matches!(self.inner.writer, Writer::ReadOnly)
    }

    fn read_only(&self) -> JournalError {
        JournalError::ReadOnly {
            url: self.inner.shown_url.clone(),
        }
    }

    /// The durability level appends are acknowledged at.
    pub fn durability(&self) -> Durability {
        self.inner.options.durability
    }

    /// The URL this journal was opened with, password removed.
    pub fn url(&self) -> &str {
        &self.inner.shown_url
    }

    /// Whether the writer has latched failed (a commit failed: every later append fails
    /// with [`JournalError::WriterFailed`]). A long-running process reopens the journal.
    pub fn writer_failed(&self) -> bool {
        self.inner
            .counters
            .failed
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Commits and events written so far by this handle's writer.
    pub fn stats(&self) -> JournalStats {
        use std::sync::atomic::Ordering::Relaxed;
        JournalStats {
            commits: self.inner.counters.commits.load(Relaxed),
            relaxed_commits: self.inner.counters.relaxed_commits.load(Relaxed),
            events: self.inner.counters.events.load(Relaxed),
            direct_commits: self.inner.counters.direct_commits.load(Relaxed),
        }
    }

    /// Appends one event; returns after it is durable (see [`Durability`]).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw the append. Once it has been polled once the
    /// event is handed to the writer (unless the writer's queue is full: then it is handed
    /// over when room appears, and a drop before that writes nothing), and it is committed
    /// whether or not anyone still waits for the acknowledgement. A caller that gave up
    /// waiting learns the outcome by appending again with the same dedup key, or by
    /// reading the thread. On `memory:` the append completes within the first poll.
    ///
    /// # Polling
    ///
    /// On PostgreSQL an append that finds the writer idle is written by the task that polls
    /// it, holding the write connection until it is done: poll it promptly. Joined with
    /// work that blocks its thread between polls, it makes other appends to this journal
    /// wait that long too. (A dropped one goes on as a task of its own.)
    pub async fn append(&self, event: NewEvent) -> Result<Appended, JournalError> {
        if let (Writer::Memory(memory), None) = (&self.inner.writer, &self.fence) {
            return memory.append_one(check_event(event, now_ms(), None)?);
        }
        let mut acks = self.append_batch(vec![event]).await?;
        acks.pop().ok_or(JournalError::Closed)
    }

    /// Appends events atomically in one transaction, with consecutive seqs, in order.
    /// (On PostgreSQL the seqs come from a sequence shared with other processes' writers,
    /// taken as one block per batch: consecutive unless another writer's allocation
    /// interleaved, and in any case increasing and adjacent within each thread: nothing of
    /// the thread lies between. Seqs of a batch's deduplicated or refused events are left
    /// unused.)
    /// Returns one acknowledgement per event, in the same order. The events together may
    /// hold at most [`MAX_APPEND_BYTES`](crate::MAX_APPEND_BYTES) and write to at most
    /// [`MAX_APPEND_THREADS`](crate::MAX_APPEND_THREADS) threads (else
    /// [`JournalError::InvalidInput`], nothing written).
    ///
    /// # Cancel safety
    ///
    /// As for [`append`](Self::append): a dropped future writes all of the events or none,
    /// and once handed to the writer (normally at the first poll) they are written.
    pub async fn append_batch(&self, events: Vec<NewEvent>) -> Result<Vec<Appended>, JournalError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let at = now_ms();
        let epoch = self.fence_epoch();
        let prepared = events
            .into_iter()
            .map(|event| check_event(event, at, epoch))
            .collect::<Result<Vec<_>, JournalError>>()?;
        check_append(&prepared)?;
        let queue = match &self.inner.writer {
            Writer::Queue(queue) => queue,
            Writer::Memory(memory) => return memory.append(prepared, self.fence.as_deref()),
            Writer::ReadOnly => return Err(self.read_only()),
        };
        queue
            .write(Request {
                events: prepared,
                expected: None,
                fence: self.fence.as_deref().cloned(),
            })
            .await
    }

    /// Appends `events` (every one on `thread`) atomically, only if the highest seq of
    /// `thread` is still `expected` (`None`: the thread has no events). Otherwise nothing is
    /// written and the result is [`JournalError::Conflict`] with the seq found.
    ///
    /// This is the "expected version" append of event stores: a process that drives a
    /// thread reads it, decides, and appends expecting the last seq it read, so a write
    /// by anyone else in between is detected instead of interleaved. The check runs inside
    /// the write transaction, under the thread's write lock, after the earlier requests
    /// of the same group commit; a conflict fails this request only (the other requests of
    /// its batch are written, and the writer is not latched failed). Dedup keys work as in
    /// [`append_batch`](Self::append_batch): a deduplicated event writes nothing, so it
    /// does not move the thread's last seq. With no events, the result says whether the
    /// expectation held at that point in the commit order (`Ok(vec![])`) or not.
    ///
    /// An event on another thread than `thread` is [`JournalError::InvalidInput`], as are
    /// events holding more than [`MAX_APPEND_BYTES`](crate::MAX_APPEND_BYTES) together.
    ///
    /// # Cancel safety
    ///
    /// As for [`append`](Self::append): once handed to the writer (normally at the first
    /// poll) the request is checked and, if the expectation holds, written, whether or not
    /// the future is still there; a caller that dropped it re-reads the thread to learn
    /// which.
    pub async fn append_expecting(
        &self,
        thread: &str,
        expected: Option<i64>,
        events: Vec<NewEvent>,
    ) -> Result<Vec<Appended>, JournalError> {
        check_thread(thread)?;
        let at = now_ms();
        let epoch = self.fence_epoch();
        let prepared = events
            .into_iter()
            .map(|event| {
                if event.thread != thread {
                    return Err(JournalError::invalid(
                        "thread",
                        format!(
                            "an append expecting the head of `{thread}` holds an event of `{}`",
                            event.thread
                        ),
                    ));
                }
                check_event(event, at, epoch)
            })
            .collect::<Result<Vec<_>, JournalError>>()?;
        check_append(&prepared)?;
        let expected = Expected {
            thread: thread.to_string(),
            last: expected,
        };
        match &self.inner.writer {
            Writer::Queue(queue) => {
                queue
                    .write(Request {
                        events: prepared,
                        expected: Some(expected),
                        fence: self.fence.as_deref().cloned(),
                    })
                    .await
            }
            Writer::Memory(memory) => {
                memory.append_expecting(expected, prepared, self.fence.as_deref())
            }
            Writer::ReadOnly => Err(self.read_only()),
        }
    }

    /// A handle to the same journal whose every append ([`append`](Self::append),
    /// [`append_batch`](Self::append_batch), [`append_expecting`](Self::append_expecting))
    /// is written only while `lease` is still at its epoch, checked inside the write
    /// transaction; otherwise it writes nothing and fails with [`JournalError::Fenced`].
    /// Each event it writes records the epoch ([`Event::epoch`]). Reads are unchanged.
    ///
    /// This is what keeps a holder that lost its lease (paused, partitioned, slow) from
    /// writing after someone else claimed it: see the [`lease`](crate::Lease) docs.
    pub fn fenced(&self, lease: &crate::Lease) -> Journal {
        Journal {
            inner: Arc::clone(&self.inner),
            fence: Some(Arc::new(Fence {
                lease: lease.name.clone(),
                epoch: lease.epoch,
            })),
        }
    }

    /// The epoch this handle's appends are fenced with, if it is fenced.
    pub fn fence_epoch(&self) -> Option<i64> {
        self.fence.as_ref().map(|f| f.epoch)
    }

    /// Every event of `thread` with `seq > after`, in seq order.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. Dropping the future discards the answer (a SQLite read
    /// already running on the blocking pool finishes there and is thrown away).
    pub async fn replay(&self, thread: &str, after: i64) -> Result<Vec<Event>, JournalError> {
        check_thread(thread)?;
        self.inner.reads.replay_all(thread, after).await
    }

    /// Like [`replay`](Self::replay) but page by page, for threads too long to hold in
    /// memory. Ends after the last event that existed when the final page was read.
    pub fn replay_stream(&self, thread: &str, after: i64) -> EventStream {
        if let Err(err) = check_thread(thread) {
            return stream::failed(err);
        }
        stream::replay(self.inner.reads.clone(), thread.to_string(), after)
    }

    /// Existing events of `thread` after `after`, then new ones as they are committed, until
    /// the stream is dropped. Sees appends from this process at once, from other processes
    /// via LISTEN/NOTIFY on PostgreSQL, and by polling every `tail_poll` on SQLite.
    pub fn tail(&self, thread: &str, after: i64) -> EventStream {
        if let Err(err) = check_thread(thread) {
            return stream::failed(err);
        }
        self.tail_with(thread, None, after)
    }

    /// As [`tail`](Self::tail), yielding only the events of `kind`. This process's commits
    /// wake it only when they write `kind` to `thread`, so a watch for a rare kind on a busy
    /// thread costs a read per poll interval (or per notification from another process on
    /// PostgreSQL), not one per commit. The other events are still read (and passed over).
    /// A `kind` holding NUL (no event's can) is [`JournalError::InvalidInput`].
    pub fn tail_kind(&self, thread: &str, kind: &str, after: i64) -> EventStream {
        if let Err(err) = check_thread(thread).and_then(|()| check_nul("kind", kind)) {
            return stream::failed(err);
        }
        self.tail_with(thread, Some(kind), after)
    }

    /// The events of every thread after `after` (from [`Position::START`]: the whole
    /// journal), then new ones as they are committed, each once, in [`Position`] order,
    /// until the stream is dropped. Resume a dropped tail after the last position it gave.
    ///
    /// Each thread's events come in seq order. On PostgreSQL writers of different threads
    /// share no lock, so they commit in any order; an event is delivered once no
    /// transaction that could still commit before it in that order is running, which
    /// delays it while an older transaction of the same database server runs (one that
    /// ends without a commit wakes the tail at its next poll). Wake-ups are as for
    /// [`tail`](Self::tail). On SQLite each page reads the table (there is no index on
    /// seq alone, which would cost every append): meant for occasional readers there.
    pub fn tail_all(&self, after: Position) -> PositionedStream {
        let committed = self.inner.commits.subscribe_all();
        let listening = self.listen_for_other_processes();
        stream::tail_all(
            self.inner.reads.clone(),
            after,
            stream::Wakes {
                committed,
                listening,
            },
            self.inner.options.tail_poll,
        )
    }

    fn tail_with(&self, thread: &str, kind: Option<&str>, after: i64) -> EventStream {
        let committed = self.inner.commits.subscribe(thread, kind);
        let listening = self.listen_for_other_processes();
        stream::tail(
            self.inner.reads.clone(),
            thread.to_string(),
            kind.map(str::to_owned),
            after,
            stream::Wakes {
                committed,
                listening,
            },
            self.inner.options.tail_poll,
        )
    }

    /// The event of `thread` appended with dedup key `key`, if any. A `key` holding NUL (no
    /// event's can) is [`JournalError::InvalidInput`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. Dropping the future discards the answer (a SQLite read
    /// already running on the blocking pool finishes there and is thrown away).
    pub async fn find_by_dedup_key(
        &self,
        thread: &str,
        key: &str,
    ) -> Result<Option<Event>, JournalError> {
        check_thread(thread)?;
        check_nul("dedup key", key)?;
        self.inner.reads.find_by_key(thread, key).await
    }

    /// The newest event of `thread` of kind `kind`, if any: where a reader that keeps
    /// checkpoints in its thread starts (then [`replay`](Self::replay) after its seq).
    /// Walks the thread from its end, so it costs the events after the match. A `kind`
    /// holding NUL (no event's can) is [`JournalError::InvalidInput`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. Dropping the future discards the answer (a SQLite read
    /// already running on the blocking pool finishes there and is thrown away).
    pub async fn last_of_kind(
        &self,
        thread: &str,
        kind: &str,
    ) -> Result<Option<Event>, JournalError> {
        check_thread(thread)?;
        check_nul("kind", kind)?;
        self.inner.reads.last_of_kind(thread, kind).await
    }

    /// Every thread with at least one event, sorted.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. Dropping the future discards the answer (a SQLite read
    /// already running on the blocking pool finishes there and is thrown away).
    pub async fn threads(&self) -> Result<Vec<String>, JournalError> {
        self.inner.reads.threads().await
    }

    /// The highest seq of `thread`, or `None` if it has no events.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. Dropping the future discards the answer (a SQLite read
    /// already running on the blocking pool finishes there and is thrown away).
    pub async fn last_seq(&self, thread: &str) -> Result<Option<i64>, JournalError> {
        check_thread(thread)?;
        self.inner.reads.last_seq(thread).await
    }

    /// PostgreSQL: starts this journal's one LISTEN task if it is not running, so other
    /// processes' commits wake tails. Outside a tokio runtime nothing starts, and tails
    /// see other processes' commits by polling only.
    /// Returns whether LISTEN is active now and later (`None`: not PostgreSQL).
    pub(crate) fn listen_for_other_processes(&self) -> Option<watch::Receiver<bool>> {
        let Reads::Postgres(reader) = &self.inner.reads else {
            return None;
        };
        let listen = self.inner.listen.get_or_init(|| {
            let (stop, stopped) = watch::channel(false);
            let (up, connected) = watch::channel(false);
            if tokio::runtime::Handle::try_current().is_ok() {
                backend::postgres::spawn_listener(
                    reader.pool(),
                    reader.own_sender(),
                    Arc::downgrade(&self.inner.commits),
                    stopped,
                    up,
                );
            }
            Listen { stop, connected }
        });
        Some(listen.connected.clone())
    }

    /// Commits everything queued so far, stops the writer and closes the connections.
    /// Later appends, reads and lease operations on any clone fail with
    /// [`JournalError::Closed`], on every backend; a tail yields it once and ends.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not stop a close under way: once the writer has the close
    /// request (at the first poll, unless its queue is full) it commits what was queued
    /// before it, then stops; only the closing of the read connections may be left undone
    /// (they close when the last handle is dropped). Dropped before the request was
    /// queued, it does nothing.
    pub async fn close(&self) {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        if let Writer::Queue(queue) = &self.inner.writer {
            queue.close().await;
        }
        // The LISTEN connection, its own pool's, is stopped with the journal.
        if let Some(listen) = self.inner.listen.get() {
            let _ = listen.stop.send(true);
        }
        self.inner.reads.close().await;
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use tokio::sync::watch;

    use super::*;

    /// Whether `rx` changes within `within`.
    async fn changes(rx: &mut watch::Receiver<u64>, within: Duration) -> bool {
        tokio::time::timeout(within, rx.changed()).await.is_ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_journals_own_notifications_wake_none_of_its_tails_and_others_do() {
        let Some(db) = agent_testkit::fresh_pg_database("journal_own_notify").await else {
            return;
        };
        let ours = Journal::open(db.url()).await.unwrap();
        let theirs = Journal::open(db.url()).await.unwrap();
        let mut up = ours.listen_for_other_processes().unwrap();
        tokio::time::timeout(Duration::from_secs(10), up.wait_for(|up| *up))
            .await
            .unwrap()
            .unwrap();
        // A tail of a kind nobody writes, as a run's interrupt watch is.
        let mut watch = ours.inner.commits.subscribe("t", Some("interrupt"));
        let mut all = ours.inner.commits.subscribe("t", None);
        ours.append(NewEvent::new("t", "step", json!({})))
            .await
            .unwrap();
        assert!(
            changes(&mut all, Duration::from_secs(1)).await,
            "the commit itself"
        );
        // Its notification comes back within the notifier's interval and a round trip.
        assert!(!changes(&mut watch, Duration::from_millis(500)).await);
        assert!(!changes(&mut all, Duration::from_millis(10)).await);
        // Another journal's commit of the same thread is only known from its notification.
        theirs
            .append(NewEvent::new("t", "step", json!({})))
            .await
            .unwrap();
        assert!(changes(&mut watch, Duration::from_secs(10)).await);
        assert!(changes(&mut all, Duration::from_secs(1)).await);
        ours.close().await;
        theirs.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn close_does_not_wait_for_a_connection_a_read_still_holds() {
        let Some(db) = agent_testkit::fresh_pg_database("journal_close_held").await else {
            return;
        };
        let journal = Journal::open(db.url()).await.unwrap();
        journal
            .append(NewEvent::new("t", "e", json!({})))
            .await
            .unwrap();
        // A tail's LISTEN connection, and a read's connection that its future still holds
        // (a read left pending when its caller stopped polling it).
        let _tail = journal.tail("t", 0);
        let Reads::Postgres(reader) = &journal.inner.reads else {
            panic!("a PostgreSQL journal reads through PgReader");
        };
        let held = reader.pool().acquire().await.unwrap();
        tokio::time::timeout(Duration::from_secs(20), journal.close())
            .await
            .expect("close waited for a connection a read still holds");
        drop(held);
    }
}
