//! Journals a Codex turn's server events on a task of its own, in batches.
//!
//! Invariants:
//! - Every event passed to [`Recorder::record`] is journaled, in the order recorded, under
//!   the recorder's thread: nothing is dropped. The queue is bounded
//!   ([`QUEUE_CAPACITY`]) and `record` waits for room, so a slow journal slows the turn's
//!   consumer down instead of growing memory.
//! - The thread is checked against the journal's limits when the recorder starts
//!   ([`Recorder::start`]): a thread id the journal cannot take is refused there, with why.
//! - What is journaled is cleaned first ([`clean_event`]): the API key (`OPENAI_API_KEY`)
//!   is replaced by `***` and NUL characters (which the journal cannot store) by U+FFFD, in
//!   every string and key, as `agentctl run` cleans its events.
//! - The writer task appends whatever is queued, up to [`MAX_BATCH`] events and
//!   [`MAX_BATCH_BYTES`], as one `append_batch` (one transaction, one fsync), so recording
//!   never waits for an fsync per event, and no batch is larger than the journal takes
//!   in one append. When the journal refuses a batch as invalid input, its events are
//!   appended one by one and one still refused is replaced by a note saying why, so one
//!   bad event never loses the others.
//! - Kinds are `codex:<method>` for notifications and `codex-request:<method>` for server
//!   requests (payload: id, params and the reply we sent). A kind longer than the journal
//!   allows is cut at a character boundary; a payload larger than the journal allows is
//!   replaced by a note with its size, so one oversized event cannot fail the turn.
//! - When the journal fails (a database error), the writer stops and the next `record`, or
//!   [`Recorder::finish`], returns that failure ([`RecorderError::Journal`]), also logged.
//! - [`Recorder::finish`] returns only after every recorded event is durable.

use agent_appserver::{AppServerEvent, RpcError};
use agent_journal::{
    APPEND_BYTES_PER_EVENT, Journal, JournalError, MAX_APPEND_BYTES, MAX_KIND_BYTES,
    MAX_PAYLOAD_BYTES, NewEvent, Payload,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::tools::secrets::{api_key, scrub, scrub_text};

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
    /// The journal cannot take the Codex thread id as a thread name (empty, too long).
    #[error("cannot journal Codex thread `{thread}`")]
    Thread {
        /// The thread id, cut to a readable length.
        thread: String,
        /// The journal's reason.
        #[source]
        source: JournalError,
    },
    /// The journal refused a batch.
    #[error("cannot journal the turn's events")]
    Journal(#[source] JournalError),
    /// The writer task stopped without saying why (its failure was already reported).
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
    /// records nothing. A thread the journal cannot take (empty, longer than
    /// [`agent_journal::MAX_THREAD_BYTES`]) is [`RecorderError::Thread`]. Must be called
    /// inside a Tokio runtime.
    pub fn start(
        journal: Option<Journal>,
        thread: impl Into<String>,
    ) -> Result<Self, RecorderError> {
        let thread = thread.into();
        let Some(journal) = journal else {
            return Ok(Self::disabled(thread));
        };
        if let Err(source) = agent_journal::check_thread(&thread) {
            return Err(RecorderError::Thread {
                thread: truncate(thread.replace('\0', "\u{FFFD}"), 80),
                source,
            });
        }
        let (tx, rx) = mpsc::channel::<(NewEvent, usize)>(QUEUE_CAPACITY);
        let task = tokio::spawn(write_batches(journal, rx));
        Ok(Recorder {
            tx: Some(tx),
            task: Some(task),
            thread,
        })
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

    /// Queues `event` for the journal (cleaned: see the module docs); waits while the
    /// queue is full. When the writer stopped, returns why ([`RecorderError::Journal`]).
    ///
    /// # Cancel safety
    /// Cancel-safe: if the future is dropped, `event` was either queued whole or not at all.
    /// Dropped while it collects the writer's failure, the failure is lost (a later
    /// `record` or `finish` says [`RecorderError::WriterStopped`]).
    pub async fn record(&mut self, event: &AppServerEvent) -> Result<(), RecorderError> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let (kind, payload, payload_bytes) = entry(event);
        let bytes = APPEND_BYTES_PER_EVENT + self.thread.len() + kind.len() + payload_bytes;
        if tx
            .send((NewEvent::new(self.thread.clone(), kind, payload), bytes))
            .await
            .is_ok()
        {
            return Ok(());
        }
        // The writer task ended: it only does so after a failure, which it returned.
        Err(match self.task.take() {
            Some(task) => match task.await {
                Ok(Err(err)) => RecorderError::Journal(err),
                Ok(Ok(_)) => RecorderError::WriterStopped,
                Err(err) => RecorderError::Task(err),
            },
            None => RecorderError::WriterStopped,
        })
    }

    /// Closes the queue and waits until every recorded event is durable; returns how many
    /// events were journaled.
    ///
    /// # Cancel safety
    /// Dropping the future does not lose events: the queue is already closed and the
    /// writer task runs on, journaling what is queued, but nobody learns its result.
    pub async fn finish(mut self) -> Result<u64, RecorderError> {
        let enabled = self.tx.take().is_some();
        let Some(task) = self.task.take() else {
            // A `record` already collected the writer's failure.
            return if enabled {
                Err(RecorderError::WriterStopped)
            } else {
                Ok(0)
            };
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
/// until the queue closes. A failure is logged and returned; the task then ends.
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
        if let Err(err) = append(&journal, batch).await {
            tracing::error!(error = %err, "cannot journal the Codex turn's events; the journal writer stops");
            return Err(err);
        }
        written += n;
    }
    Ok(written)
}

/// Appends `batch` as one append; when the journal refuses it as invalid input, its
/// events one by one, each one still refused replaced by a note saying why.
async fn append(journal: &Journal, batch: Vec<NewEvent>) -> Result<(), JournalError> {
    // Payloads are text (see `entry`): keeping a copy for the fallback is one copy of bytes.
    let copy = batch.clone();
    match journal.append_batch(batch).await {
        Err(JournalError::InvalidInput { field, reason }) => {
            tracing::warn!(%field, %reason, events = copy.len(), "the journal refused a batch; appending its events one by one");
            for event in copy {
                let (thread, kind) = (event.thread.clone(), event.kind.clone());
                match journal.append_batch(vec![event]).await {
                    Err(JournalError::InvalidInput { field, reason }) => {
                        tracing::warn!(%kind, %field, %reason, "the journal refused an event; a note replaces it");
                        let note = json!({
                            "omitted": "the journal refused this event",
                            "error": format!("invalid {field}: {reason}"),
                        });
                        journal
                            .append_batch(vec![NewEvent::new(thread, kind, note)])
                            .await?;
                    }
                    other => {
                        other?;
                    }
                }
            }
            Ok(())
        }
        other => other.map(|_| ()),
    }
}

/// The journal kind and payload of a server event (see the module docs), cleaned.
pub fn journal_entry(event: &AppServerEvent) -> (String, Value) {
    let (kind, payload, _) = entry(event);
    let payload = payload.to_value().unwrap_or(Value::Null);
    (kind, payload)
}

/// `event` with the API key masked (`***`) and NUL characters replaced by U+FFFD in every
/// string and key of its params (and, for a request, its reply), as the journal gets it.
pub fn clean_event(event: &mut AppServerEvent) {
    match event {
        AppServerEvent::Notification(note) => {
            clean_text(&mut note.method);
            clean_value(&mut note.params);
        }
        AppServerEvent::Request { request, reply } => {
            clean_text(&mut request.method);
            clean_value(&mut request.params);
            clean_value(&mut request.id);
            match reply {
                Ok(result) => clean_value(result),
                Err(err) => {
                    clean_text(&mut err.message);
                    if let Some(data) = &mut err.data {
                        clean_value(data);
                    }
                }
            }
        }
    }
}

/// `value` with the key masked and NUL replaced (see [`clean_event`]); left as it is (not
/// rebuilt) when it holds neither.
fn clean_value(value: &mut Value) {
    let key = api_key();
    if is_dirty(value, key) {
        scrub(value, key);
    }
}

/// `text` with the key masked and NUL replaced.
fn clean_text(text: &mut String) {
    scrub_text(text, api_key());
}

/// Whether a string or key of `value` holds NUL, or the key (also possibly spelled with
/// escapes in JSON text: any backslash), so that [`scrub`] has work to do.
fn is_dirty(value: &Value, key: Option<&str>) -> bool {
    let dirty_text = |text: &str| {
        text.contains('\0') || key.is_some_and(|key| text.contains(key) || text.contains('\\'))
    };
    match value {
        Value::String(text) => dirty_text(text),
        Value::Array(items) => items.iter().any(|v| is_dirty(v, key)),
        Value::Object(map) => map.iter().any(|(k, v)| dirty_text(k) || is_dirty(v, key)),
        _ => false,
    }
}

/// [`journal_entry`] as the journal gets it: the kind, the payload as JSON text, and its
/// bytes.
fn entry(event: &AppServerEvent) -> (String, Payload, usize) {
    let (kind, mut payload) = match event {
        AppServerEvent::Notification(note) => {
            (format!("codex:{}", note.method), note.params.clone())
        }
        AppServerEvent::Request { request, reply } => (
            format!("codex-request:{}", request.method),
            json!({"id": request.id, "params": request.params, "reply": reply_json(reply)}),
        ),
    };
    let mut kind = kind;
    clean_text(&mut kind);
    let kind = truncate(kind, MAX_KIND_BYTES);
    clean_value(&mut payload);
    let encoded = Payload::encode(&payload).ok();
    let size = encoded
        .as_ref()
        .and_then(Payload::as_text)
        .map_or(usize::MAX, str::len);
    match encoded {
        Some(encoded) if size <= MAX_PAYLOAD_BYTES => (kind, encoded, size),
        _ => {
            let note = json!({"omitted": "payload larger than the journal's limit", "bytes": size});
            let note_size = note.to_string().len();
            (kind, Payload::from(note), note_size)
        }
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
        let mut recorder = Recorder::start(Some(journal.clone()), "codex-thread").unwrap();
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
        let mut recorder = Recorder::start(Some(journal.clone()), "codex-thread").unwrap();
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
        let mut recorder = Recorder::disabled("t");
        recorder.record(&note("x", 1)).await.unwrap();
        assert_eq!(recorder.finish().await.unwrap(), 0);
    }

    fn event(method: &str, params: Value) -> AppServerEvent {
        AppServerEvent::Notification(Notification {
            method: method.into(),
            params,
            emitted_at_ms: None,
        })
    }

    /// A NUL anywhere in an event (the journal refuses it) failed the whole batch: the
    /// writer stopped, the turn ended with "the journal writer stopped", and the batch's
    /// other events were lost. It arrives as U+FFFD, as `agentctl run` stores it.
    #[tokio::test]
    async fn nul_in_strings_and_keys_arrives_as_replacement_characters() {
        let journal = Journal::open("memory:").await.unwrap();
        let mut recorder = Recorder::start(Some(journal.clone()), "codex-thread").unwrap();
        recorder.record(&note("turn/started", 0)).await.unwrap();
        let nul = json!({"n": 1, "item": {"text": "before\u{0}after"}, "k\u{0}": ["\u{0}"]});
        recorder
            .record(&event("item/\u{0}completed", nul))
            .await
            .unwrap();
        recorder.record(&note("turn/completed", 2)).await.unwrap();
        assert_eq!(recorder.finish().await.unwrap(), 3);
        let events = journal.replay("codex-thread", 0).await.unwrap();
        assert_eq!(numbers(&events), [0, 1, 2]);
        assert_eq!(&*events[1].kind, "codex:item/\u{FFFD}completed");
        assert_eq!(
            events[1].payload,
            json!({"n": 1, "item": {"text": "before\u{FFFD}after"}, "k\u{FFFD}": ["\u{FFFD}"]})
        );
        journal.close().await;
    }

    /// An event the journal refuses for a reason the recorder does not foresee (here: nested
    /// deeper than a read can take back) is replaced by a note saying why; the others of its
    /// batch are journaled, in order.
    #[tokio::test]
    async fn an_event_the_journal_refuses_is_replaced_by_a_note_and_its_batch_kept() {
        let journal = Journal::open("memory:").await.unwrap();
        let mut recorder = Recorder::start(Some(journal.clone()), "codex-thread").unwrap();
        let mut deep = json!("bottom");
        for _ in 0..200 {
            deep = json!([deep]);
        }
        // One batch: the writer first runs once this task waits (one-threaded runtime).
        recorder.record(&note("a", 0)).await.unwrap();
        recorder
            .record(&event("deep", json!({"n": 1, "deep": deep})))
            .await
            .unwrap();
        recorder.record(&note("b", 2)).await.unwrap();
        assert_eq!(recorder.finish().await.unwrap(), 3);
        let events = journal.replay("codex-thread", 0).await.unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| &*e.kind).collect();
        assert_eq!(kinds, ["codex:a", "codex:deep", "codex:b"]);
        assert_eq!(
            events[1].payload["omitted"],
            "the journal refused this event"
        );
        assert!(
            events[1].payload["error"]
                .as_str()
                .unwrap()
                .contains("nests"),
            "{}",
            events[1].payload
        );
        journal.close().await;
    }

    /// A thread id the journal cannot take (empty, or longer than its limit) is refused
    /// when the recorder starts, saying why; it stopped the writer at the first event, with
    /// only "the journal writer stopped" to show.
    #[tokio::test]
    async fn a_thread_the_journal_cannot_take_is_refused_at_the_start() {
        let journal = Journal::open("memory:").await.unwrap();
        for thread in [
            String::new(),
            "t".repeat(agent_journal::MAX_THREAD_BYTES + 1),
        ] {
            let err = Recorder::start(Some(journal.clone()), thread.clone()).unwrap_err();
            let RecorderError::Thread { source, .. } = &err else {
                panic!("{err:?}");
            };
            assert!(
                matches!(
                    source,
                    JournalError::InvalidInput {
                        field: "thread",
                        ..
                    }
                ),
                "{source}"
            );
        }
        // Without a journal nothing is checked: nothing is written.
        assert!(Recorder::start(None, "").is_ok());
        journal.close().await;
    }

    /// When the journal fails, `record` returns the journal's own error, not only "the
    /// writer stopped" (the cause stayed in a task nobody awaited).
    #[tokio::test]
    async fn a_journal_failure_is_reported_with_its_cause() {
        let journal = Journal::open("memory:").await.unwrap();
        let mut recorder = Recorder::start(Some(journal.clone()), "codex-thread").unwrap();
        journal.close().await;
        let mut failure = None;
        for n in 0..(QUEUE_CAPACITY as u64 + 10) {
            if let Err(err) = recorder.record(&note("x", n)).await {
                failure = Some(err);
                break;
            }
            tokio::task::yield_now().await;
        }
        let failure = failure.expect("recording into a closed journal never failed");
        assert!(
            matches!(failure, RecorderError::Journal(JournalError::Closed)),
            "{failure:?}"
        );
    }
}
