//! The PostgreSQL writer task: one task owns the write connection and commits each batch
//! in one transaction. There is no journal-wide lock: a transaction holds the locks of the
//! threads it writes only, so writers of different threads (in this process's batches or
//! in other processes) never wait for each other. Each commit's threads are notified on
//! `CHANNEL` after it (`notify.rs`).
//!
//! Invariants of a write transaction, in statement order (the proof that tails neither
//! skip nor repeat an event is in `docs/architecture.md`, "PostgreSQL write path"):
//! 1. It first takes a transaction-scoped advisory lock per thread of the batch (keyed by a
//!    64-bit hash of the name), in key order, so two batches cannot deadlock. Until commit
//!    no other transaction writes those threads: dedup keys, heads and expectations read
//!    next are final.
//! 2. Only then is its transaction id assigned (`pg_current_xact_id()`: advisory locks do
//!    not assign one). A transaction that waited for a thread's lock gets a higher id than
//!    the one it waited for, so transaction ids order each thread's commits.
//!    (`nextval` may assign it too, which is why it also runs only after the locks.)
//! 3. Its seqs come from the `journal_seq` sequence after the locks, so a thread's seqs
//!    increase in its commit order. Every row stores the transaction id (`tx`); readers of
//!    the whole journal order by `(tx, seq)` and stop below the oldest running transaction.
//! 4. Fences are read `FOR SHARE` inside the transaction, as before.
//!
//! A batch without dedup keys, conditions, fences or relaxed events (the common awaited
//! append) is one statement in its own implicit transaction: the same steps in the same
//! order, in one round trip (`append.rs`). Any other batch is one call of a function that
//! takes the same steps when the database holds what the batch's plan assumes
//! (`checked.rs`), and a transaction that reads first when it does not.
//!
//! Wake-ups are sent after the commit, by the notifier task on a pool connection, never
//! inside the write transaction: PostgreSQL commits the transactions that `NOTIFY` one at
//! a time under a database-wide lock held through the WAL flush, which serialised every
//! writer of the cluster. A notification lost to a crash between the commit and its send
//! is covered by the tails' polling, as one lost with the LISTEN connection is.

use sqlx::Connection as _;
use sqlx::postgres::PgConnection;
use tokio::sync::mpsc;

use super::notify::Notifier;
use super::{append, checked};
use crate::writer::{Answer, Batch, Msg, Pending, Request, Settle, drain_after_close};

/// The PostgreSQL writer task. Runs until `Close` or until every handle is dropped.
///
/// Batching: after the first queued request, everything already queued is taken, and the
/// task yields once whenever the queue runs dry, to let producers that were just
/// acknowledged join this commit (up to `max_batch` events).
pub(crate) async fn run(
    mut conn: sqlx::PgConnection,
    notifier: Notifier,
    mut rx: mpsc::Receiver<Msg>,
    mut settle: Settle,
    max_batch: usize,
    #[cfg(feature = "test-hooks")] hook: Option<crate::hooks::WriteHook>,
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
        let (pending, closing) = settle.begin(batch);
        close = closing;
        if let Some(Pending { requests, acks }) = pending {
            let result = write_batch(
                &mut conn,
                &requests,
                #[cfg(feature = "test-hooks")]
                hook.as_ref(),
            )
            .await;
            if let Ok(answers) = &result {
                notifier.send(written_threads(&requests, answers));
            }
            settle.finish(&requests, acks, result);
        }
    }
    if let Err(err) = conn.close().await {
        tracing::warn!(%err, "closing the journal's write connection failed");
    }
    // A close returns once every commit's wake-up is sent: a process that appends, closes
    // and exits does not leave other processes' tails to find its events by polling.
    notifier.flush().await;
    drain_after_close(&mut rx, close);
}

/// The threads that a committed batch wrote new events to, each once.
fn written_threads(batch: &[Request], answers: &[Answer]) -> Vec<String> {
    let mut threads: Vec<String> = batch
        .iter()
        .zip(answers)
        .filter(|(_, answer)| {
            answer
                .as_ref()
                .is_ok_and(|acks| acks.iter().any(|a| !a.deduplicated))
        })
        .flat_map(|(request, _)| request.events.iter().map(|e| e.thread.clone()))
        .collect();
    threads.sort_unstable();
    threads.dedup();
    threads
}

async fn write_batch(
    conn: &mut PgConnection,
    batch: &[Request],
    #[cfg(feature = "test-hooks")] hook: Option<&crate::hooks::WriteHook>,
) -> Result<Vec<Answer>, sqlx::Error> {
    #[cfg(feature = "test-hooks")]
    if let Some(hook) = hook {
        // Held open between the inserts and the commit: only a transaction can be.
        return append::in_transaction(conn, batch, || async {
            (hook.0)().await == crate::hooks::HookAction::Commit
        })
        .await;
    }
    if append::is_plain(batch) {
        return append::plain(conn, batch).await;
    }
    if let Some(answers) = checked::write(conn, batch).await? {
        return Ok(answers);
    }
    append::in_transaction(conn, batch, || async { true }).await
}
