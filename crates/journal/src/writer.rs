//! The group-commit writer: one task owns the write connection.
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
use crate::{postgres, sqlite};

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

/// The connection the writer owns.
pub(crate) enum WriteConn {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl WriteConn {
    async fn write(&mut self, batch: &[Vec<Prepared>]) -> Result<Vec<Vec<Appended>>, sqlx::Error> {
        match self {
            WriteConn::Sqlite(conn) => sqlite::write_batch(conn, batch).await,
            WriteConn::Postgres(conn) => postgres::write_batch(conn, batch).await,
        }
    }

    async fn close(self) {
        use sqlx::Connection as _;
        let result = match self {
            WriteConn::Sqlite(conn) => conn.close().await,
            WriteConn::Postgres(conn) => conn.close().await,
        };
        if let Err(err) = result {
            tracing::warn!(%err, "closing the journal's write connection failed");
        }
    }
}

/// Counters kept by the writer, for benchmarks and monitoring.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub commits: AtomicU64,
    pub events: AtomicU64,
}

/// Runs until `Close` or until every handle is dropped.
///
/// Batching: after the first queued request, everything already queued is taken, and the
/// task yields once whenever the queue runs dry, to let producers that were just
/// acknowledged join this commit (up to `max_batch` events).
///
/// `committed` publishes the highest
/// committed seq after each commit, for in-process tails.
pub(crate) async fn run(
    mut conn: WriteConn,
    mut rx: mpsc::Receiver<Msg>,
    committed: watch::Sender<i64>,
    max_batch: usize,
    counters: Arc<Counters>,
) {
    let mut failed: Option<String> = None;
    let mut requests: Vec<Vec<Prepared>> = Vec::new();
    let mut acks: Vec<Ack> = Vec::new();
    let mut close: Option<oneshot::Sender<()>> = None;
    while close.is_none() {
        let Some(first) = rx.recv().await else { break };
        let mut queued = 0usize;
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Write { events, ack } => {
                    queued += events.len();
                    requests.push(events);
                    acks.push(ack);
                }
                Msg::Close { done } => {
                    close = Some(done);
                    break;
                }
            }
            if queued >= max_batch {
                break;
            }
            next = match rx.try_recv() {
                Ok(msg) => Some(msg),
                // Linger: producers woken by the previous commit's acks may be about to
                // append. Yielding once lets them run; stop as soon as a yield brings
                // nothing, so an idle writer adds no latency beyond one scheduler pass.
                Err(_) => {
                    tokio::task::yield_now().await;
                    rx.try_recv().ok()
                }
            };
        }
        if requests.is_empty() {
            continue;
        }
        if let Some(message) = &failed {
            for ack in acks.drain(..) {
                let _ = ack.send(Err(JournalError::WriterFailed(message.clone())));
            }
            requests.clear();
            continue;
        }
        match conn.write(&requests).await {
            Ok(results) => {
                let written = results.iter().flatten().filter(|a| !a.deduplicated).count();
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters.events.fetch_add(written as u64, Ordering::Relaxed);
                if let Some(max) = results.iter().flatten().map(|a| a.seq).max() {
                    committed.send_if_modified(|current| {
                        let changed = max > *current;
                        *current = (*current).max(max);
                        changed
                    });
                }
                for (ack, result) in acks.drain(..).zip(results) {
                    // A caller that stopped waiting still had its events committed.
                    let _ = ack.send(Ok(result));
                }
            }
            Err(err) => {
                let message = err.to_string();
                tracing::error!(error = %message, "journal commit failed; writer is now failed");
                for ack in acks.drain(..) {
                    let _ = ack.send(Err(JournalError::WriterFailed(message.clone())));
                }
                failed = Some(message);
            }
        }
        requests.clear();
    }
    conn.close().await;
    // Requests that raced with Close: refuse them explicitly rather than dropping silently.
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
