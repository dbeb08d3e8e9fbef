//! The group-commit writer: one writer owns the write connection.
//!
//! SQLite's writer is a dedicated OS thread (`sqlite::write`), PostgreSQL's an async task
//! ([`run_async`]); both collect batches with [`Batch`] and settle them with [`Settle`].
//!
//! Invariants:
//! - Requests are committed in arrival order; a request's events are contiguous in `seq`
//!   and all-or-nothing (one transaction).
//! - A caller is acknowledged only after the transaction containing its events committed.
//! - After a failed commit the writer is latched failed: the failing batch and every later
//!   request get [`JournalError::WriterFailed`] with the first error's message.
//! - `Close` is processed after everything queued before it, so closing loses no append.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot, watch};

use crate::error::JournalError;
use crate::event::Appended;
use crate::postgres;

/// A validated event ready to insert (payload already encoded).
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub thread: String,
    pub kind: String,
    pub payload: String,
    pub dedup_key: Option<String>,
    pub at: i64,
}

pub(crate) type Ack = oneshot::Sender<Result<Vec<Appended>, JournalError>>;

pub(crate) enum Msg {
    Write { events: Vec<Prepared>, ack: Ack },
    Close { done: oneshot::Sender<()> },
}

/// Counters kept by the writer, for benchmarks and monitoring.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub commits: AtomicU64,
    pub events: AtomicU64,
}

/// Requests collected for one transaction.
#[derive(Default)]
pub(crate) struct Batch {
    pub requests: Vec<Vec<Prepared>>,
    acks: Vec<Ack>,
    events: usize,
    pub close: Option<oneshot::Sender<()>>,
}

impl Batch {
    /// Takes `msg` into the batch; returns whether the batch may take more (false after
    /// `Close` or once `max_events` is reached).
    pub fn take(&mut self, msg: Msg, max_events: usize) -> bool {
        match msg {
            Msg::Write { events, ack } => {
                self.events += events.len();
                self.requests.push(events);
                self.acks.push(ack);
                self.events < max_events
            }
            Msg::Close { done } => {
                self.close = Some(done);
                false
            }
        }
    }
}

/// What a writer keeps between batches: the failure latch, the committed watermark and
/// the counters.
pub(crate) struct Settle {
    failed: Option<String>,
    committed: watch::Sender<i64>,
    counters: Arc<Counters>,
}

impl Settle {
    pub fn new(committed: watch::Sender<i64>, counters: Arc<Counters>) -> Self {
        Settle {
            failed: None,
            committed,
            counters,
        }
    }

    /// The latched failure, if a commit failed earlier.
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Acknowledges every request of a committed batch, after publishing its highest seq.
    pub fn committed(&mut self, acks: Vec<Ack>, results: Vec<Vec<Appended>>) {
        let written = results.iter().flatten().filter(|a| !a.deduplicated).count();
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        self.counters
            .events
            .fetch_add(written as u64, Ordering::Relaxed);
        if let Some(max) = results.iter().flatten().map(|a| a.seq).max() {
            self.committed.send_if_modified(|current| {
                let changed = max > *current;
                *current = (*current).max(max);
                changed
            });
        }
        for (ack, result) in acks.into_iter().zip(results) {
            // A caller that stopped waiting still had its events committed.
            let _ = ack.send(Ok(result));
        }
    }

    /// Fails every request of a batch; the first failure latches the writer.
    pub fn failed_with(&mut self, acks: Vec<Ack>, message: String) {
        if self.failed.is_none() {
            tracing::error!(error = %message, "journal commit failed; writer is now failed");
            self.failed = Some(message.clone());
        }
        for ack in acks {
            let _ = ack.send(Err(JournalError::WriterFailed(message.clone())));
        }
    }

    /// Writes `batch` with `write` unless the writer is latched failed, and acknowledges it.
    pub fn settle_with<E: std::fmt::Display>(
        &mut self,
        batch: Batch,
        write: impl FnOnce(&[Vec<Prepared>]) -> Result<Vec<Vec<Appended>>, E>,
    ) -> Option<oneshot::Sender<()>> {
        let Batch {
            requests,
            acks,
            close,
            ..
        } = batch;
        if requests.is_empty() {
            return close;
        }
        if let Some(message) = self.failed.clone() {
            self.failed_with(acks, message);
            return close;
        }
        match write(&requests) {
            Ok(results) => self.committed(acks, results),
            Err(err) => self.failed_with(acks, err.to_string()),
        }
        close
    }
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

/// The PostgreSQL writer task. Runs until `Close` or until every handle is dropped.
///
/// Batching: after the first queued request, everything already queued is taken, and the
/// task yields once whenever the queue runs dry, to let producers that were just
/// acknowledged join this commit (up to `max_batch` events).
pub(crate) async fn run_async(
    mut conn: sqlx::PgConnection,
    mut rx: mpsc::Receiver<Msg>,
    mut settle: Settle,
    max_batch: usize,
) {
    let mut close = None;
    while close.is_none() {
        let Some(first) = rx.recv().await else { break };
        let mut batch = Batch::default();
        let mut more = batch.take(first, max_batch);
        while more {
            let msg = match rx.try_recv() {
                Ok(msg) => msg,
                // Linger: producers woken by the previous commit's acks may be about to
                // append. Yielding once lets them run; stop as soon as a yield brings
                // nothing, so an idle writer adds no latency beyond one scheduler pass.
                Err(_) => {
                    tokio::task::yield_now().await;
                    match rx.try_recv() {
                        Ok(msg) => msg,
                        Err(_) => break,
                    }
                }
            };
            more = batch.take(msg, max_batch);
        }
        let Batch {
            requests,
            acks,
            close: closing,
            ..
        } = batch;
        close = closing;
        if requests.is_empty() {
            continue;
        }
        if let Some(message) = settle.failed().map(str::to_string) {
            settle.failed_with(acks, message);
            continue;
        }
        match postgres::write_batch(&mut conn, &requests).await {
            Ok(results) => settle.committed(acks, results),
            Err(err) => settle.failed_with(acks, err.to_string()),
        }
    }
    use sqlx::Connection as _;
    if let Err(err) = conn.close().await {
        tracing::warn!(%err, "closing the journal's write connection failed");
    }
    drain_after_close(&mut rx, close);
}
