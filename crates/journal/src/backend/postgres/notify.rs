//! Wake-ups for other processes' tails, sent after the commits they announce.
//!
//! Invariants:
//! - A thread is notified only after a commit that wrote to it (the writer hands the
//!   threads over once the commit returned), so a woken tail finds the events.
//! - Threads handed over while a send is under way, or within [`INTERVAL`] of the last
//!   send's start, are sent together next, each once: under load a process sends at most
//!   one statement per interval, not one per commit (each is a transaction, and their
//!   commits queue on the server's notification lock); after a quiet interval the first
//!   commit's wake-up goes out at once.
//! - [`Notifier::flush`] returns once everything handed over before it was sent (or its
//!   send failed, which is logged; tails poll).

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::CHANNEL;

/// The shortest time between the starts of two sends.
const INTERVAL: Duration = Duration::from_millis(10);

/// The writer's handle on its notifier task.
pub(crate) struct Notifier {
    tx: mpsc::UnboundedSender<Vec<String>>,
    task: JoinHandle<()>,
}

impl Notifier {
    /// Starts the task; it sends on connections of `pool`.
    pub(crate) fn spawn(pool: PgPool) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Notifier {
            tx,
            task: tokio::spawn(run(pool, rx)),
        }
    }

    /// Hands over the threads a commit wrote.
    pub(crate) fn send(&self, threads: Vec<String>) {
        if !threads.is_empty() {
            // The task ends only once this sender is dropped.
            let _ = self.tx.send(threads);
        }
    }

    /// Sends what was handed over and stops the task.
    pub(crate) async fn flush(self) {
        let Notifier { tx, task } = self;
        drop(tx);
        if let Err(err) = task.await {
            tracing::warn!(%err, "the journal's notifier task failed");
        }
    }
}

async fn run(pool: PgPool, mut rx: mpsc::UnboundedReceiver<Vec<String>>) {
    let mut last: Option<Instant> = None;
    while let Some(mut threads) = rx.recv().await {
        if let Some(last) = last {
            tokio::time::sleep_until(last + INTERVAL).await;
        }
        last = Some(Instant::now());
        while let Ok(more) = rx.try_recv() {
            threads.extend(more);
        }
        threads.sort_unstable();
        threads.dedup();
        let sent = sqlx::query("SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t")
            .bind(CHANNEL)
            .bind(&threads)
            .execute(&pool)
            .await;
        if let Err(err) = sent {
            tracing::warn!(%err, threads = threads.len(), "journal NOTIFY failed; other processes' tails poll");
        }
    }
}
