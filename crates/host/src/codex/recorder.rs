//! Journals a Codex turn's server events on a task of its own, in batches.
//!
//! Invariants:
//! - Every event passed to [`Recorder::record`] is journaled, in the order recorded, under
//!   the recorder's thread: nothing is dropped. The queue is bounded
//!   ([`QUEUE_CAPACITY`]) and `record` waits for room, so a slow journal slows the turn's
//!   consumer down instead of growing memory.
//! - The writer task appends whatever is queued, up to [`MAX_BATCH`] events and
//!   [`MAX_BATCH_BYTES`], as one `append_batch` (one transaction, one fsync), so recording
//!   never waits for an fsync per event, and no batch is larger than the journal takes
//!   in one append.
//! - Kinds are `codex:<method>` for notifications and `codex-request:<method>` for server
//!   requests (payload: id, params and the reply we sent). A kind longer than the journal
//!   allows is cut at a character boundary; a payload larger than the journal allows is
//!   replaced by a note with its size, so one oversized event cannot fail the turn.
//! - [`Recorder::finish`] returns only after every recorded event is durable.

use agent_appserver::{AppServerEvent, RpcError};
use agent_journal::{
    APPEND_BYTES_PER_EVENT, Journal, JournalError, MAX_APPEND_BYTES, MAX_KIND_BYTES,
    MAX_PAYLOAD_BYTES, NewEvent,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Events waiting for the writer task; `record` waits when this many are queued.
pub const QUEUE_CAPACITY: usize = 1024;
/// Most events written in one `append_batch`.
pub const MAX_BATCH: usize = 256;
/// Most bytes (threads, kinds and payloads, and 64 per event, as the journal counts them)
/// written in one `append_batch`: half what the journal takes in one append, so 256
/// events of the largest payload are several batches instead of a refused one.
pub const MAX_BATCH_BYTES: usize = MAX_APPEND_BYTES / 2;

/// Why the turn's events could not be journaled.
#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    /// The journal refused a batch.
    #[error("cannot journal the turn's events")]
    Journal(#[source] JournalError),
    /// The writer task stopped (after a journal failure, reported by `finish`).
    #[error("the journal writer stopped")]
    WriterStopped,
    /// The writer task panicked or was cancelled.
    #[error("the journal task failed")]
    Task(#[source] tokio::task::JoinError),
}

/// Journals server events under one thread; see the module docs. Without a journal
/// ([`Recorder::disabled`]) it records nothing.
#[derive(Debug)]
pub struct Recorder {
    tx: Option<mpsc::Sender<(NewEvent, usize)>>,
    task: Option<JoinHandle<Result<u64, JournalError>>>,
    thread: String,
}

impl Recorder {
    /// Starts the writer task for `thread` on `journal`; `None` gives a recorder that
    /// records nothing. Must be called inside a Tokio runtime.
    pub fn start(journal: Option<Journal>, thread: impl Into<String>) -> Self {
        let thread = thread.into();
        let Some(journal) = journal else {
            return Self::disabled(thread);
        };
        let (tx, rx) = mpsc::channel::<(NewEvent, usize)>(QUEUE_CAPACITY);
        let task = tokio::spawn(write_batches(journal, rx));
        Recorder {
            tx: Some(tx),
            task: Some(task),
            thread,
        }
    }

    /// A recorder that records nothing (`--no-journal`).
    pub fn disabled(thread: impl Into<String>) -> Self {
        Recorder {
            tx: None,
            task: None,
            thread: thread.into(),
        }
    }

    /// The journal thread events are recorded under.
    pub fn thread(&self) -> &str {
        &self.thread
    }

    /// Queues `event` for the journal; waits while the queue is full.
    ///
    /// # Cancel safety
    /// Cancel-safe: if the future is dropped, `event` was either queued whole or not at all.
    pub async fn record(&self, event: &AppServerEvent) -> Result<(), RecorderError> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let (kind, payload, payload_bytes) = entry(event);
        let bytes = APPEND_BYTES_PER_EVENT + self.thread.len() + kind.len() + payload_bytes;
        tx.send((NewEvent::new(self.thread.clone(), kind, payload), bytes))
            .await
            .map_err(|_| RecorderError::WriterStopped)
    }

    /// Closes the queue and waits until every recorded event is durable; returns how many
    /// events were journaled.
    ///
    /// # Cancel safety
    /// Dropping the future does not lose events: the queue is already closed and the
    /// writer task runs on, journaling what is queued, but nobody learns its result.
    pub async fn finish(mut self) -> Result<u64, RecorderError> {
        drop(self.tx.take());
        let Some(task) = self.task.take() else {
            return Ok(0);
        };
        let written = task
            .await
            .map_err(RecorderError::Task)?
            .map_err(RecorderError::Journal)?;
        tracing::info!(written, thread = %self.thread, "journaled the turn's events");
        Ok(written)
    }
}

/// The writer task: batches of up to [`MAX_BATCH`] queued events and [`MAX_BATCH_BYTES`]
/// until the queue closes.
async fn write_batches(
    journal: Journal,
    mut rx: mpsc::Receiver<(NewEvent, usize)>,
) -> Result<u64, JournalError> {
    let mut written = 0u64;
    let mut next = None;
    loop {
        let held = match next.take() {
            Some(held) => Some(held),
            None => rx.recv().await,
        };
        let Some((first, mut bytes)) = held else {
            break;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok((event, size)) if bytes + size > MAX_BATCH_BYTES => {
                    // Starts the next batch.
                    next = Some((event, size));
                    break;
                }
                Ok((event, size)) => {
                    bytes += size;
                    batch.push(event);
                }
                Err(_) => break,
            }
        }
        let n = batch.len() as u64;
        journal.append_batch(batch).await?;
        written += n;
    }
    Ok(written)
}

/// The journal kind and payload of a server event (see the module docs).
pub fn journal_entry(event: &AppServerEvent) -> (String, Value) {
    let (kind, payload, _) = entry(event);
    (kind, payload)
}

/// [`journal_entry`], and the bytes of the payload's JSON.
fn entry(event: &AppServerEvent) -> (String, Value, usize) {
    let (kind, payload) = match event {
        AppServerEvent::Notification(note) => {
            (format!("codex:{}", note.method), note.params.clone())
        }
        AppServerEvent::Request { request, reply } => (
            format!("codex-request:{}", request.method),
            json!({"id": request.id, "params": request.params, "reply": reply_json(reply)}),
        ),
    };
    let kind = truncate(kind, MAX_KIND_BYTES);
    let size = payload.to_string().len();
    if size > MAX_PAYLOAD_BYTES {
        let note = json!({"omitted": "payload larger than the journal's limit", "bytes": size});
        let note_size = note.to_string().len();
        (kind, note, note_size)
    } else {
        (kind, payload, size)
    }
}

/// The reply we sent to a server request: `{"result": ...}` or `{"error": {code, message}}`.
pub fn reply_json(reply: &Result<Value, RpcError>) -> Value {
    match reply {
        Ok(result) => json!({"result": result}),
        Err(err) => json!({"error": {"code": err.code, "message": err.message}}),
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use agent_appserver::Notification;

    fn note(method: &str, n: u64) -> AppServerEvent {
        AppServerEvent::Notification(Notification {
            method: method.into(),
            params: json!({"n": n}),
            emitted_at_ms: None,
        })
    }

    #[test]
    fn a_long_kind_is_cut_at_a_character_boundary() {
        let kind = truncate("é".repeat(MAX_KIND_BYTES), MAX_KIND_BYTES);
        assert!(kind.len() <= MAX_KIND_BYTES);
        assert!(kind.chars().all(|c| c == 'é'));
    }

    #[test]
    fn an_oversized_payload_becomes_a_note_with_its_size() {
        let big = AppServerEvent::Notification(Notification {
            method: "item/completed".into(),
            params: json!({"text": "x".repeat(MAX_PAYLOAD_BYTES)}),
            emitted_at_ms: None,
        });
        let (kind, payload) = journal_entry(&big);
        assert_eq!(kind, "codex:item/completed");
        assert!(payload["bytes"].as_u64().unwrap() > MAX_PAYLOAD_BYTES as u64);
    }

    /// The `n` of each event's payload, in journal order.
    fn numbers(events: &[agent_journal::Event]) -> Vec<u64> {
        events
            .iter()
            .map(|e| e.payload["n"].as_u64().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn every_recorded_event_is_journaled_in_order() {
        let journal = Journal::open("memory:").await.unwrap();
        let recorder = Recorder::start(Some(journal.clone()), "codex-thread");
        let count = (MAX_BATCH * 3 + 7) as u64;
        for n in 0..count {
            recorder.record(&note("turn/progress", n)).await.unwrap();
        }
        assert_eq!(recorder.finish().await.unwrap(), count);
        let events = journal.replay("codex-thread", 0).await.unwrap();
        let seen = numbers(&events);
        assert_eq!(seen, (0..count).collect::<Vec<_>>());
        assert!(events.iter().all(|e| &*e.kind == "codex:turn/progress"));
        journal.close().await;
    }

    /// 40 events of nearly the largest payload are more than the journal takes in one
    /// append: they are written in several batches, all of them, in order (one batch was
    /// refused before).
    #[tokio::test]
    async fn events_too_large_for_one_append_together_are_written_in_several() {
        let journal = Journal::open("memory:").await.unwrap();
        let recorder = Recorder::start(Some(journal.clone()), "codex-thread");
        let text = "x".repeat(MAX_PAYLOAD_BYTES - 100);
        let count = 40;
        assert!(count as usize * MAX_PAYLOAD_BYTES > agent_journal::MAX_APPEND_BYTES);
        // On this test's one-threaded runtime the writer task first runs once this task
        // waits, so all of them are queued by then and it could take them as one batch.
        for n in 0..count {
            let event = AppServerEvent::Notification(Notification {
                method: "item/completed".into(),
                params: json!({"n": n, "text": text}),
                emitted_at_ms: None,
            });
            recorder.record(&event).await.unwrap();
        }
        assert_eq!(recorder.finish().await.unwrap(), count);
        let events = journal.replay("codex-thread", 0).await.unwrap();
        let seen = numbers(&events);
        assert_eq!(seen, (0..count).collect::<Vec<_>>());
        journal.close().await;
    }

    #[tokio::test]
    async fn a_disabled_recorder_records_nothing() {
        let recorder = Recorder::disabled("t");
        recorder.record(&note("x", 1)).await.unwrap();
        assert_eq!(recorder.finish().await.unwrap(), 0);
    }
}
