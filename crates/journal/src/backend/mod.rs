//! The journal's backends, one module each with the same layout: `sqlite/` (embedded, one
//! file), `postgres/` (shared by processes and hosts) and `in_memory` (`memory:`, this
//! process only), plus `batch`, the pure part of a group commit both databases share.
//!
//! Parity is held by the compiler: every read is a method of [`ReadSide`], which each
//! backend implements and [`Reads`] dispatches with one exhaustive `match`, so a read added
//! for one backend cannot be forgotten on another. Writes go through one group-commit
//! queue ([`Writer::Queue`]) on both databases (on PostgreSQL a lone append finds the
//! writer idle and writes itself, in the queue's order); `memory:` appends under its lock
//! instead.

pub(crate) mod batch;
pub(crate) mod in_memory;
pub(crate) mod postgres;
pub(crate) mod sqlite;

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::commits::Commits;
use crate::error::JournalError;
use crate::event::{Appended, Event};
use crate::lease;
use crate::options::{Access, JournalOptions};
use crate::position::Position;
use crate::writer::{Counters, Msg, Request, Settle};

use in_memory::InMemoryJournal;
use postgres::PgReader;

/// The URL of the in-process journal.
pub const MEMORY_URL: &str = "memory:";

/// Events fetched per query by `replay_stream` and `tail`.
pub(crate) const PAGE: i64 = 1000;

/// The reads every backend serves. Each sees committed events only.
pub(crate) trait ReadSide {
    /// Up to `limit` events of `thread` with `seq > after`, in seq order.
    async fn replay_page(
        &self,
        thread: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Event>, JournalError>;

    /// Up to `limit` events of `kind` in `thread` with `seq > after`, in seq order, and
    /// how far the read saw: every event of the thread up to [`KindPage::seen`] was either
    /// returned or of another kind. Other kinds are skipped in the read, not decoded.
    async fn replay_kind_page(
        &self,
        thread: &str,
        kind: &str,
        after: i64,
        limit: i64,
    ) -> Result<KindPage, JournalError>;

    /// Every event of `thread` with `seq > after`, in seq order.
    async fn replay_all(&self, thread: &str, after: i64) -> Result<Vec<Event>, JournalError>;

    /// The event of `thread` appended with dedup key `key`, if any.
    async fn find_by_key(&self, thread: &str, key: &str) -> Result<Option<Event>, JournalError>;

    /// The event of `thread` of kind `kind` with the highest seq, if any.
    async fn last_of_kind(&self, thread: &str, kind: &str) -> Result<Option<Event>, JournalError>;

    /// Every thread with at least one event, sorted.
    async fn threads(&self) -> Result<Vec<String>, JournalError>;

    /// Up to `limit` events of every thread after `after`, in [`Position`] order, each with
    /// its position. Invariant (what lets `tail_all` resume after the last one): no event
    /// at or below a position this returns is committed after it returns.
    async fn journal_page(
        &self,
        after: Position,
        limit: i64,
    ) -> Result<Vec<(Position, Event)>, JournalError>;

    /// The highest seq of `thread`, or `None` if it has no events.
    async fn last_seq(&self, thread: &str) -> Result<Option<i64>, JournalError>;

    /// Refuses later reads and releases what the read side holds.
    async fn close(&self);
}

/// A page of one kind's events ([`ReadSide::replay_kind_page`]).
#[derive(Debug)]
pub(crate) struct KindPage {
    pub(crate) events: Vec<Event>,
    /// The seq the read saw up to: the last event returned when the page is full (more
    /// may follow), else the thread's last committed seq (or `after`, if higher).
    pub(crate) seen: i64,
}

impl KindPage {
    /// The page for `events` of a read bounded by `top` (the thread's last seq when the
    /// read began; seqs commit in order, so nothing at or below it is still to come).
    pub(crate) fn new(events: Vec<Event>, after: i64, top: Option<i64>, limit: i64) -> Self {
        let full = events.len() as i64 >= limit;
        let seen = match events.last() {
            Some(last) if full => last.seq,
            _ => top.unwrap_or(after).max(after),
        };
        KindPage { events, seen }
    }
}

/// The read side of whichever backend a journal opened; cheap to clone.
#[derive(Clone)]
pub(crate) enum Reads {
    Sqlite(sqlite::Reader),
    Postgres(PgReader),
    Memory(Arc<InMemoryJournal>),
}

/// Calls the same [`ReadSide`] method on whichever backend `$reads` holds.
macro_rules! on_backend {
    ($reads:expr, $side:ident => $call:expr) => {
        match $reads {
            Reads::Sqlite($side) => $call,
            Reads::Postgres($side) => $call,
            Reads::Memory($side) => $call,
        }
    };
}

impl ReadSide for Reads {
    async fn replay_page(
        &self,
        thread: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Event>, JournalError> {
        on_backend!(self, side => side.replay_page(thread, after, limit).await)
    }

    async fn replay_kind_page(
        &self,
        thread: &str,
        kind: &str,
        after: i64,
        limit: i64,
    ) -> Result<KindPage, JournalError> {
        on_backend!(self, side => side.replay_kind_page(thread, kind, after, limit).await)
    }

    async fn replay_all(&self, thread: &str, after: i64) -> Result<Vec<Event>, JournalError> {
        on_backend!(self, side => side.replay_all(thread, after).await)
    }

    async fn find_by_key(&self, thread: &str, key: &str) -> Result<Option<Event>, JournalError> {
        on_backend!(self, side => side.find_by_key(thread, key).await)
    }

    async fn last_of_kind(&self, thread: &str, kind: &str) -> Result<Option<Event>, JournalError> {
        on_backend!(self, side => side.last_of_kind(thread, kind).await)
    }

    async fn threads(&self) -> Result<Vec<String>, JournalError> {
        on_backend!(self, side => side.threads().await)
    }

    async fn journal_page(
        &self,
        after: Position,
        limit: i64,
    ) -> Result<Vec<(Position, Event)>, JournalError> {
        on_backend!(self, side => side.journal_page(after, limit).await)
    }

    async fn last_seq(&self, thread: &str) -> Result<Option<i64>, JournalError> {
        on_backend!(self, side => side.last_seq(thread).await)
    }

    async fn close(&self) {
        on_backend!(self, side => side.close().await)
    }
}

/// Where appends go: a database's group-commit queue (its writer owns the write
/// connection), or the in-memory journal directly.
pub(crate) enum Writer {
    Queue(Queue),
    Memory(Arc<InMemoryJournal>),
    /// Opened read-only: no writer runs, appends are refused.
    ReadOnly,
}

/// A database's group-commit queue; on PostgreSQL also the write side a producer uses
/// itself while the writer is idle (`postgres/direct.rs`).
pub(crate) struct Queue {
    tx: mpsc::Sender<Msg>,
    direct: Option<Arc<postgres::Shared>>,
}

impl Queue {
    /// Writes `request` (directly when PostgreSQL's writer is idle, otherwise through the
    /// queue) and waits for its answer.
    ///
    /// Cancel safety: once polled, the request is written whether or not the future is
    /// still there (unless the queue was full: then only once room appeared).
    pub(crate) async fn write(&self, request: Request) -> Result<Vec<Appended>, JournalError> {
        let request = match &self.direct {
            Some(shared) => match postgres::try_direct(shared, request) {
                postgres::Direct::Writing(write) => return write.finish().await,
                postgres::Direct::Closed => return Err(JournalError::Closed),
                postgres::Direct::Queue(request) => request,
            },
            None => request,
        };
        let (ack, done) = oneshot::channel();
        self.send(Msg::Write { request, ack }).await?;
        done.await.map_err(|_| JournalError::Closed)?
    }

    /// Asks the writer to commit what is queued and stop; returns once it has.
    pub(crate) async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.send(Msg::Close { done }).await.is_ok() {
            let _ = wait.await;
        }
    }

    async fn send(&self, msg: Msg) -> Result<(), JournalError> {
        // Counted from before it can be queued; taken back if it never is (refused, or the
        // future dropped while waiting for room), or no producer would write directly again.
        let counted = self.direct.as_deref().map(postgres::Queuing::new);
        // Room in the queue is the common case; waiting for room (backpressure) is kept
        // out of line so that every append's future stays small.
        let sent = match self.tx.try_send(msg) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(msg)) => Box::pin(self.tx.send(msg))
                .await
                .map_err(|_| JournalError::Closed),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(JournalError::Closed),
        };
        if sent.is_ok()
            && let Some(counted) = counted
        {
            counted.queued();
        }
        sent
    }
}

/// A backend opened, its writer running.
pub(crate) struct Opened {
    pub(crate) reads: Reads,
    pub(crate) writer: Writer,
    pub(crate) leases: lease::Backend,
}

/// A SQLite database as opened: for writing, or read-only.
enum Side {
    Writable(sqlite::Opened),
    ReadOnly(sqlite::ReadOnly),
}

/// `memory:` and `sqlite::memory:` hold nothing to read before they are written.
fn no_read_only_memory(shown_url: &str) -> JournalError {
    JournalError::InvalidUrl {
        url: shown_url.to_string(),
        reason: "an in-memory journal cannot be opened read-only (it starts empty)".into(),
    }
}

/// Opens the backend `url` names, applies its schema and starts its writer, which
/// wakes the tails of the threads each commit wrote (`commits`) and counts into `counters`.
/// `shown_url` is `url` with its passwords masked: the only form any error quotes.
pub(crate) async fn open(
    url: &str,
    shown_url: &str,
    options: &JournalOptions,
    commits: Arc<Commits>,
    counters: Arc<Counters>,
) -> Result<Opened, JournalError> {
    if url == MEMORY_URL {
        if options.access == Access::ReadOnly {
            return Err(no_read_only_memory(shown_url));
        }
        let memory = Arc::new(InMemoryJournal::new(commits, counters));
        return Ok(Opened {
            reads: Reads::Memory(Arc::clone(&memory)),
            writer: Writer::Memory(Arc::clone(&memory)),
            leases: lease::Backend::Memory(memory),
        });
    }
    let (tx, rx) = mpsc::channel(options.queue_capacity.max(1));
    let max_batch = options.batch_limit();
    let settle = Settle::new(commits, counters);
    if url.starts_with("sqlite:") {
        // The reason may quote a parameter, a password among them.
        let location = sqlite::parse_url(url).map_err(|reason| JournalError::InvalidUrl {
            url: shown_url.to_string(),
            reason: agent_redact::redact_in(&reason, url),
        })?;
        let read_only = match (options.access, &location) {
            (Access::ReadOnly, sqlite::Location::Memory) => {
                return Err(no_read_only_memory(shown_url));
            }
            (Access::ReadOnly, sqlite::Location::File(_)) => true,
            (Access::ReadWrite | Access::ReadOnlyWhenUnwritable, _) => false,
        };
        let fallback = options.access == Access::ReadOnlyWhenUnwritable;
        let (opts, shown) = (options.clone(), shown_url.to_string());
        let opened = tokio::task::spawn_blocking(move || {
            if read_only {
                return sqlite::open_read_only(&location, &shown, &opts).map(Side::ReadOnly);
            }
            match sqlite::open(&location, &shown, &opts) {
                Ok(opened) => Ok(Side::Writable(opened)),
                Err(err) if fallback && sqlite::cannot_write(&err) => {
                    tracing::debug!(url = %shown, %err, "cannot write the journal; opening it read-only");
                    // The read-write error says more when reading fails too.
                    sqlite::open_read_only(&location, &shown, &opts)
                        .map(Side::ReadOnly)
                        .map_err(|_| err)
                }
                Err(err) => Err(err),
            }
        })
        .await
        .map_err(|_| JournalError::Closed)?
        .map_err(sqlite::explain_open)?;
        let opened = match opened {
            Side::Writable(opened) => opened,
            Side::ReadOnly(read_only) => {
                return Ok(Opened {
                    reads: Reads::Sqlite(read_only.reader),
                    writer: Writer::ReadOnly,
                    leases: lease::Backend::Sqlite(read_only.leases),
                });
            }
        };
        let leases = lease::Backend::Sqlite(Arc::clone(&opened.writer));
        let full = options.durability == crate::options::Durability::Full;
        sqlite::spawn_writer(opened.writer, rx, settle, max_batch, options.linger, full).map_err(
            |source| JournalError::Open {
                url: shown_url.to_string(),
                source: Box::new(source),
            },
        )?;
        Ok(Opened {
            reads: Reads::Sqlite(opened.reader),
            writer: Writer::Queue(Queue { tx, direct: None }),
            leases,
        })
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        // A server is written to or not by its roles and its recovery state: a reading
        // command on a hot standby or with SELECT-only grants opens it read-only.
        let opened = match options.access {
            Access::ReadOnly => postgres::open(url, shown_url, options, true).await?,
            Access::ReadWrite => postgres::open(url, shown_url, options, false).await?,
            Access::ReadOnlyWhenUnwritable => {
                match postgres::open(url, shown_url, options, false).await {
                    Err(err) if err.refuses_writes() => {
                        postgres::open(url, shown_url, options, true).await?
                    }
                    other => other?,
                }
            }
        };
        let leases = lease::Backend::Postgres(opened.reader.pool().clone());
        let writer = match opened.writer {
            Some(writer) => {
                let shared = postgres::spawn_writer(
                    writer,
                    postgres::Notifier::spawn(
                        opened.reader.pool().clone(),
                        opened.reader.own_sender(),
                    )
                    .await,
                    rx,
                    settle,
                    max_batch,
                    #[cfg(feature = "test-hooks")]
                    options.write_hook.clone(),
                );
                Writer::Queue(Queue {
                    tx,
                    direct: Some(shared),
                })
            }
            None => Writer::ReadOnly,
        };
        Ok(Opened {
            reads: Reads::Postgres(opened.reader),
            writer,
            leases,
        })
    } else {
        Err(JournalError::InvalidUrl {
            url: shown_url.to_string(),
            reason: "expected sqlite://PATH, sqlite::memory:, postgres://USER:PASS@HOST/DB \
                     or memory:"
                .into(),
        })
    }
}
