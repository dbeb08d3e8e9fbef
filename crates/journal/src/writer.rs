//! The group-commit writer: one writer owns the write connection.
//!
//! SQLite's writer is a dedicated OS thread (`backend::sqlite::write`), PostgreSQL's an
//! async task (`backend::postgres::write`); both collect batches with [`Batch`] and settle
//! them with [`Settle`].
//!
//! Invariants:
//! - Requests are committed in arrival order; a request's events are contiguous in `seq`
//!   and all-or-nothing (one transaction).
//! - A caller is acknowledged only after the transaction containing its events committed.
//! - A request with an [`Expected`] condition is checked inside the transaction, after the
//!   batch's earlier requests: if the thread's last seq differs, that request alone gets
//!   [`JournalError::Conflict`] and writes nothing; the rest of the batch commits.
//! - After a failed commit the writer is latched failed: the failing batch and every later
//!   request get [`JournalError::WriterFailed`] with the first error's message. Later
//!   requests are never written; the failing batch may have been (a commit can fail after
//!   its pages reached the WAL), whole or not at all. (A batch
//!   whose transaction never began, SQLite's write lock being held by another connection
//!   past `busy_timeout`, wrote nothing: it fails alone with that error, [`Settle::refuse`].)
//! - `Close` is processed after everything queued before it, so closing loses no append.

use std::sync::Arc;

use crate::limits::APPEND_BYTES_PER_EVENT;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};

use crate::commits::Commits;
use crate::error::JournalError;
use crate::event::Appended;

/// A validated event ready to insert (payload already encoded).
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub(crate) thread: String,
    pub(crate) kind: String,
    pub(crate) payload: String,
    pub(crate) dedup_key: Option<String>,
    pub(crate) at: i64,
    /// The epoch of the fence the request carries, stored with the event.
    pub(crate) epoch: Option<i64>,
    /// [`crate::NewEvent::relaxed`].
    pub(crate) relaxed: bool,
}

impl Prepared {
    /// What the event takes in a write statement: its thread, kind, payload and dedup key,
    /// and [`APPEND_BYTES_PER_EVENT`] for the rest of its row.
    pub(crate) fn bytes(&self) -> usize {
        APPEND_BYTES_PER_EVENT
            + self.thread.len()
            + self.kind.len()
            + self.payload.len()
            + self.dedup_key.as_ref().map_or(0, String::len)
    }
}

#[cfg(test)]
impl Prepared {
    /// A durable event of kind `k` with an empty payload, for unit tests.
    pub(crate) fn for_test(thread: &str, dedup_key: Option<&str>) -> Self {
        Prepared {
            thread: thread.into(),
            kind: "k".into(),
            payload: "{}".into(),
            dedup_key: dedup_key.map(Into::into),
            at: 0,
            epoch: None,
            relaxed: false,
        }
    }
}

/// The condition of an optimistic-concurrency append: the highest seq of `thread` must
/// still be `last` (`None`: the thread has no events) when the request is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expected {
    pub(crate) thread: String,
    pub(crate) last: Option<i64>,
}

/// The condition of a fenced append: lease `lease` must still be at `epoch` (nobody claimed
/// it since) when the request is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fence {
    pub(crate) lease: String,
    pub(crate) epoch: i64,
}

/// One caller's append: its events, written together or not at all, and the conditions
/// under which they may be written.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) events: Vec<Prepared>,
    pub(crate) expected: Option<Expected>,
    pub(crate) fence: Option<Fence>,
}

impl Request {
    /// Whether every event of the request is relaxed ([`crate::NewEvent::relaxed`]).
    pub(crate) fn relaxed(&self) -> bool {
        self.events.iter().all(|e| e.relaxed)
    }
}

/// Whether a batch may commit without waiting for the disk: every request in it is relaxed.
pub(crate) fn relaxed_batch(requests: &[Request]) -> bool {
    requests.iter().all(Request::relaxed)
}

/// What one request of a written batch gets: its acks, or why it alone was refused.
pub(crate) type Answer = Result<Vec<Appended>, JournalError>;

pub(crate) type Ack = oneshot::Sender<Answer>;

pub(crate) enum Msg {
    Write { request: Request, ack: Ack },
    Close { done: oneshot::Sender<()> },
}

/// Counters kept by the writer, for benchmarks and monitoring.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) commits: AtomicU64,
    /// Commits of relaxed appends only ([`relaxed_batch`]).
    pub(crate) relaxed_commits: AtomicU64,
    pub(crate) events: AtomicU64,
    /// PostgreSQL commits written by the appending task itself (`backend/postgres/direct.rs`).
    pub(crate) direct_commits: AtomicU64,
    /// Set once when the writer latches failed.
    pub(crate) failed: std::sync::atomic::AtomicBool,
}

/// Bytes ([`Prepared::bytes`]) after which a batch takes no more requests. With its last
/// request (at most [`MAX_APPEND_BYTES`](crate::MAX_APPEND_BYTES)) a batch stays
/// far below the 1 GiB PostgreSQL takes in one statement, however many producers append
/// large events at once (a batch of 300 appends of 4 MiB each failed there, and latched
/// the writer).
pub(crate) const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

/// Requests collected for one transaction.
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) requests: Vec<Request>,
    acks: Vec<Ack>,
    events: usize,
    /// The requests' [`Prepared::bytes`], together.
    bytes: usize,
    pub(crate) close: Option<oneshot::Sender<()>>,
}

impl Batch {
    /// Takes `msg` into the batch; returns whether the batch may take more (false after
    /// `Close`, or once `max_events` or [`MAX_BATCH_BYTES`] is reached).
    pub(crate) fn take(&mut self, msg: Msg, max_events: usize) -> bool {
        match msg {
            Msg::Write { request, ack } => {
                self.events += request.events.len();
                self.bytes += request.events.iter().map(Prepared::bytes).sum::<usize>();
                self.requests.push(request);
                self.acks.push(ack);
                self.events < max_events && self.bytes < MAX_BATCH_BYTES
            }
            Msg::Close { done } => {
                self.close = Some(done);
                false
            }
        }
    }
}

/// What a writer keeps between batches: the failure latch, the tails to wake and the
/// counters.
pub(crate) struct Settle {
    failed: Option<String>,
    commits: Arc<Commits>,
    counters: Arc<Counters>,
}

impl Settle {
    pub(crate) fn new(commits: Arc<Commits>, counters: Arc<Counters>) -> Self {
        Settle {
            failed: None,
            commits,
            counters,
        }
    }

    /// Whether the writer is latched failed (every request is refused unwritten).
    pub(crate) fn failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Splits a collected batch into the requests to write (`None` when there is nothing to
    /// write: an empty batch, or a latched writer, whose requests are failed here) and the
    /// `Close` it ended with, if any.
    pub(crate) fn begin(&mut self, batch: Batch) -> (Option<Pending>, Option<oneshot::Sender<()>>) {
        let Batch {
            requests,
            acks,
            close,
            ..
        } = batch;
        if requests.is_empty() {
            return (None, close);
        }
        if let Some(message) = self.failed.clone() {
            self.fail(acks, message);
            return (None, close);
        }
        (Some(Pending { requests, acks }), close)
    }

    /// Acknowledges the requests of a written batch with the write's result: one answer
    /// per request when the transaction committed (a refused request, such as a
    /// [`JournalError::Conflict`], fails alone and latches nothing), or the error that
    /// failed the whole batch (which latches the writer).
    pub(crate) fn finish<E: std::fmt::Display>(
        &mut self,
        requests: &[Request],
        acks: Vec<Ack>,
        result: Result<Vec<Answer>, E>,
    ) {
        match result {
            Ok(results) => self.committed(requests, acks, results),
            Err(err) => self.fail(acks, err.to_string()),
        }
    }

    /// Acknowledges every request of a committed batch, after waking the tails of the
    /// threads it wrote.
    fn committed(&mut self, requests: &[Request], acks: Vec<Ack>, results: Vec<Answer>) {
        let appended = || results.iter().filter_map(|r| r.as_ref().ok()).flatten();
        let written = appended().filter(|a| !a.deduplicated).count();
        count_commit(&self.counters, written as u64);
        if relaxed_batch(requests) {
            self.counters
                .relaxed_commits
                .fetch_add(1, Ordering::Relaxed);
        }
        if written > 0 {
            self.commits.publish(
                requests
                    .iter()
                    .zip(&results)
                    .filter(|(_, answer)| answer.is_ok())
                    .flat_map(|(request, _)| &request.events)
                    .map(|event| (event.thread.as_str(), Some(event.kind.as_str()))),
            );
        }
        for (ack, result) in acks.into_iter().zip(results) {
            // A caller that stopped waiting still had its events committed.
            let _ = ack.send(result);
        }
    }

    /// Answers every request of a batch that was not written with `err()`, latching
    /// nothing: the next batch is written as usual.
    pub(crate) fn refuse(&self, acks: Vec<Ack>, err: impl Fn() -> JournalError) {
        for ack in acks {
            let _ = ack.send(Err(err()));
        }
    }

    /// Counts a commit that the appending task wrote itself.
    pub(crate) fn count_direct(&self) {
        self.counters.direct_commits.fetch_add(1, Ordering::Relaxed);
    }

    /// Latches the writer failed with `message` (kept if it already is): every later
    /// request gets [`JournalError::WriterFailed`].
    pub(crate) fn latch(&mut self, message: String) {
        self.fail(Vec::new(), message);
    }

    /// Fails every request of a batch; the first failure latches the writer.
    fn fail(&mut self, acks: Vec<Ack>, message: String) {
        if self.failed.is_none() {
            tracing::error!(error = %message, "journal commit failed; writer is now failed");
            self.failed = Some(message.clone());
            self.counters.failed.store(true, Ordering::Relaxed);
        }
        for ack in acks {
            let _ = ack.send(Err(JournalError::WriterFailed(message.clone())));
        }
    }
}

/// Counts one commit of `written` events.
pub(crate) fn count_commit(counters: &Counters, written: u64) {
    counters.commits.fetch_add(1, Ordering::Relaxed);
    counters.events.fetch_add(written, Ordering::Relaxed);
}

/// The requests of one batch that are to be written, with their acks.
pub(crate) struct Pending {
    pub(crate) requests: Vec<Request>,
    pub(crate) acks: Vec<Ack>,
}

/// Refuses requests that raced with `Close`, then confirms the close.
pub(crate) fn drain_after_close(rx: &mut mpsc::Receiver<Msg>, close: Option<oneshot::Sender<()>>) {
    rx.close();
    while let Ok(msg) = rx.try_recv() {
        match msg {
            Msg::Write { ack, .. } => {
                let _ = ack.send(Err(JournalError::Closed));
            }
            Msg::Close { done } => {
                let _ = done.send(());
            }
        }
    }
    if let Some(done) = close {
        let _ = done.send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(bytes: usize) -> Msg {
        let mut event = Prepared::for_test("t", None);
        event.payload = "x".repeat(bytes);
        Msg::Write {
            request: Request {
                events: vec![event],
                expected: None,
                fence: None,
            },
            ack: oneshot::channel().0,
        }
    }

    #[test]
    fn a_batch_takes_no_more_once_it_holds_its_bytes() {
        let mut batch = Batch::default();
        assert!(batch.take(write(MAX_BATCH_BYTES / 2), 100));
        assert!(!batch.take(write(MAX_BATCH_BYTES / 2), 100));
        // However large, a request is taken whole: a batch is at least one request.
        let mut batch = Batch::default();
        assert!(!batch.take(write(MAX_BATCH_BYTES * 2), 100));
        assert_eq!(batch.requests.len(), 1);
    }
}
