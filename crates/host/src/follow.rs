//! Following a journal thread: its events so far, then each new one as it is appended.
//!
//! Invariants: events come in `seq` order with none skipped (the journal's tail guarantees
//! it, retrying a failed read itself); a failed read is logged and retried, never shown as
//! an event; a refused request (an invalid thread name) or a corrupt stored event is
//! yielded once, since it will not get better, and the stream ends there (the journal's
//! tail would report it again at every poll).

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
    until_fatal(journal.tail(thread, after))
}

/// `tail` without its transient errors, ending after its first fatal one.
fn until_fatal(
    tail: impl Stream<Item = Result<Event, JournalError>>,
) -> impl Stream<Item = Result<Event, JournalError>> {
    tail.filter_map(|next| std::future::ready(keep_fatal(next)))
        .scan(false, |ended, next| {
            if *ended {
                return std::future::ready(None);
            }
            *ended = next.is_err();
            std::future::ready(Some(next))
        })
}

/// Drops transient read errors (the tail retries them) and keeps events and what retrying
/// cannot change: a refusal, a stored payload that is not JSON, a schema from a newer build.
fn keep_fatal(next: Result<Event, JournalError>) -> Option<Result<Event, JournalError>> {
    match next {
        Ok(event) => Some(Ok(event)),
        Err(err) if is_fatal(&err) => Some(Err(err)),
        Err(err) => {
            tracing::warn!(%err, "journal follow: read failed; retrying");
            None
        }
    }
}

/// Whether a failed read will fail again however often it is retried: a refusal, a stored
/// payload that is not JSON, a schema from a newer build. Anything else (a connection cut,
/// a database restarting, a pool timing out) may succeed on the next try.
pub(crate) fn is_fatal(err: &JournalError) -> bool {
    matches!(
        err,
        JournalError::InvalidInput { .. }
            | JournalError::CorruptPayload { .. }
            | JournalError::SchemaTooNew { .. }
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn event(seq: i64) -> Event {
        Event {
            seq,
            thread: Arc::from("t"),
            kind: Arc::from("k"),
            payload: serde_json::Value::Null,
            at: 0,
            dedup_key: None,
            epoch: None,
        }
    }

    fn corrupt() -> JournalError {
        JournalError::CorruptPayload {
            seq: 2,
            source: serde_json::from_str::<serde_json::Value>("{").unwrap_err(),
        }
    }

    /// The journal's tail reports a corrupt event at every poll; a follower shows it once
    /// and ends (every caller used to have to stop by itself, and one did not).
    #[tokio::test]
    async fn a_fatal_error_is_yielded_once_and_ends_the_stream() {
        let tail = futures::stream::iter([
            Ok(event(1)),
            Err(JournalError::Closed),
            Err(corrupt()),
            Err(corrupt()),
            Ok(event(3)),
        ])
        .chain(futures::stream::pending());
        let seen = tokio::time::timeout(
            Duration::from_secs(5),
            until_fatal(tail).collect::<Vec<_>>(),
        )
        .await
        .expect("the stream did not end after the fatal error");
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].as_ref().map(|e| e.seq).ok(), Some(1));
        assert!(matches!(seen[1], Err(JournalError::CorruptPayload { .. })));
    }
}
