//! Following a journal thread: its events so far, then each new one as it is appended.
//!
//! Invariants: events come in `seq` order with none skipped (the journal's tail guarantees
//! it, retrying a failed read itself); a failed read is logged and retried, never shown as
//! an event; a refused request (an invalid thread name) or a corrupt stored event is
//! yielded once, since it will not get better, and the caller should stop there.

use agent_journal::{Event, Journal, JournalError};
use futures::{Stream, StreamExt as _};

/// The events of `thread` with a seq greater than `after`, then the new ones, forever (or
/// until the journal closes). Only errors that will not go away by retrying are yielded.
///
/// # Cancel safety
/// Dropping the stream (or a pending `next()`) stops following; nothing is left behind.
pub fn follow_thread(
    journal: &Journal,
    thread: &str,
    after: i64,
) -> impl Stream<Item = Result<Event, JournalError>> + Send + use<> {
    journal
        .tail(thread, after)
        .filter_map(|next| std::future::ready(keep_fatal(next)))
}

/// Drops transient read errors (the tail retries them) and keeps events and what retrying
/// cannot change: a refusal, a stored payload that is not JSON, a schema from a newer build.
fn keep_fatal(next: Result<Event, JournalError>) -> Option<Result<Event, JournalError>> {
    match next {
        Ok(event) => Some(Ok(event)),
        Err(
            err @ (JournalError::InvalidInput { .. }
            | JournalError::CorruptPayload { .. }
            | JournalError::SchemaTooNew { .. }),
        ) => Some(Err(err)),
        Err(err) => {
            tracing::warn!(%err, "journal follow: read failed; retrying");
            None
        }
    }
}
