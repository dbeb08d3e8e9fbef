//! The journal the server answers from, replaced by a reopened one when its writer has
//! latched failed (a full disk, a lost PostgreSQL connection): a process serving for days
//! must take writes again once the database does, as a new CLI process would.
//!
//! Invariants:
//! - A handler takes the journal once per request ([`JournalSlot::get`]); streams keep the
//!   handle they started with, which still reads after its writer failed.
//! - At most one reopen runs at a time, and at most one starts per [`RETRY`]: while the
//!   database still refuses writes, requests are answered from the latched journal (reads
//!   work; a write answers 503 `journal_unavailable`) instead of each opening another.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agent_journal::{Journal, JournalError};
use futures::future::BoxFuture;

/// Opens the server's journal again (the CLI's `--db`).
pub type Reopen = Arc<dyn Fn() -> BoxFuture<'static, Result<Journal, JournalError>> + Send + Sync>;

/// The least time between two reopens of a journal whose writer failed.
pub const RETRY: Duration = Duration::from_secs(1);

pub(crate) struct JournalSlot {
    current: Mutex<Journal>,
    reopen: Option<Reopen>,
    /// Held while a reopen runs; the time the last one started.
    last_reopen: tokio::sync::Mutex<Option<Instant>>,
}

impl JournalSlot {
    pub(crate) fn new(journal: Journal, reopen: Option<Reopen>) -> JournalSlot {
        JournalSlot {
            current: Mutex::new(journal),
            reopen,
            last_reopen: tokio::sync::Mutex::new(None),
        }
    }

    fn current(&self) -> Journal {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The journal to answer a request from: the current one, or a reopened one when the
    /// current one's writer failed and a reopen is due and succeeds.
    pub(crate) async fn get(&self) -> Journal {
        let journal = self.current();
        let Some(reopen) = self.reopen.as_ref().filter(|_| journal.writer_failed()) else {
            return journal;
        };
        let mut last = self.last_reopen.lock().await;
        let journal = self.current();
        if !journal.writer_failed() || last.is_some_and(|at| at.elapsed() < RETRY) {
            return journal;
        }
        *last = Some(Instant::now());
        match reopen().await {
            Ok(fresh) => {
                tracing::info!(target: "agent_serve", "journal reopened after its writer failed");
                *self.current.lock().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
                fresh
            }
            Err(err) => {
                tracing::warn!(target: "agent_serve", %err, "cannot reopen the journal");
                journal
            }
        }
    }
}
