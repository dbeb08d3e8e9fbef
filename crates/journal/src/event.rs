//! Event types.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::JournalError;

/// A journaled event. `seq` is unique and increasing across the journal; `at` is the
/// append time in Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The event's position in the whole journal: unique, and increasing in commit order.
    pub seq: i64,
    /// The thread the event belongs to.
    ///
    /// Names are shared: a SQLite or `memory:` read hands every event of the thread the
    /// same `thread` and each kind one allocation, instead of two strings per event.
    pub thread: Arc<str>,
    /// What happened (the caller's vocabulary).
    pub kind: Arc<str>,
    /// The event's data, as appended.
    pub payload: serde_json::Value,
    /// When it was appended, in Unix milliseconds.
    pub at: i64,
    /// The dedup key the event was appended with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
    /// The lease epoch of the fenced handle that appended it ([`Journal::fenced`]), if any.
    ///
    /// [`Journal::fenced`]: crate::Journal::fenced
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i64>,
}

/// An event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// The thread to append to (at most [`MAX_THREAD_BYTES`](crate::MAX_THREAD_BYTES)).
    pub thread: String,
    /// What happened (at most [`MAX_KIND_BYTES`](crate::MAX_KIND_BYTES)).
    pub kind: String,
    /// The event's data (at most [`MAX_PAYLOAD_BYTES`](crate::MAX_PAYLOAD_BYTES) as JSON).
    pub payload: Payload,
    /// Idempotency key within the thread: a second append with the same key writes nothing
    /// and returns the first event's seq.
    pub dedup_key: Option<String>,
    /// See [`NewEvent::relaxed`].
    relaxed: bool,
}

impl NewEvent {
    /// An event of `kind` on `thread`, without a dedup key.
    pub fn new(
        thread: impl Into<String>,
        kind: impl Into<String>,
        payload: impl Into<Payload>,
    ) -> Self {
        NewEvent {
            thread: thread.into(),
            kind: kind.into(),
            payload: payload.into(),
            dedup_key: None,
            relaxed: false,
        }
    }

    /// An event whose payload is `payload` serialised to JSON text now (see
    /// [`Payload::encode`]). A payload that cannot be serialised (a map with non-string
    /// keys) is [`JournalError::InvalidInput`].
    pub fn encoded<T: Serialize + ?Sized>(
        thread: impl Into<String>,
        kind: impl Into<String>,
        payload: &T,
    ) -> Result<Self, JournalError> {
        let payload = Payload::encode(payload)
            .map_err(|e| JournalError::invalid("payload", e.to_string()))?;
        Ok(NewEvent::new(thread, kind, payload))
    }

    /// Sets the per-thread dedup key.
    pub fn with_dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }

    /// Marks the event as one whose acknowledgement need not wait for the disk: the append
    /// is committed (readable, ordered, and kept if the process is killed) when it is
    /// acknowledged, and durable against power loss once any later durable commit of the
    /// journal is (a commit makes everything committed before it durable). For an event
    /// that only a later durable event acts on, such as a call's intent before the durable
    /// start that precedes its effect. An append is relaxed only when all its events are;
    /// under [`Durability::Normal`](crate::Durability::Normal) every append already is.
    pub fn relaxed(mut self) -> Self {
        self.relaxed = true;
        self
    }

    /// Whether [`relaxed`](Self::relaxed) was called.
    pub fn is_relaxed(&self) -> bool {
        self.relaxed
    }
}

/// The payload of an event to append: a JSON value, or JSON text already encoded.
///
/// Both are stored as JSON text and read back as a [`serde_json::Value`]. The encoded
/// forms let a caller serialise its own types straight to text ([`Payload::encode`]), or
/// hand over text it holds ([`Payload::raw`]), without building a `Value` tree only for
/// the journal to encode it again. Text is valid JSON by construction.
#[derive(Debug, Clone)]
pub struct Payload(Repr);

#[derive(Debug, Clone)]
enum Repr {
    Value(serde_json::Value),
    /// Made by `serde_json` from a `Serialize` type: reads back as a value.
    Text(String),
    /// Handed over by the caller: JSON syntax, checked for replay on append.
    Raw(String),
}

impl Payload {
    /// Serialises `value` to compact JSON text now.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Payload, serde_json::Error> {
        // Room for a typical event up front: growing from serde_json's default 128 bytes
        // copied most payloads once.
        let mut text = Vec::with_capacity(256);
        serde_json::to_writer(&mut text, value)?;
        String::from_utf8(text)
            .map(|text| Payload(Repr::Text(text)))
            .map_err(serde::ser::Error::custom)
    }

    /// JSON text the caller already holds (stored as given, whitespace included).
    pub fn raw(raw: Box<RawValue>) -> Payload {
        Payload(Repr::Raw(Box::<str>::from(raw).into_string()))
    }

    /// The payload's JSON text, when it was handed over or encoded as text (`None` for a
    /// [`serde_json::Value`]).
    pub fn as_text(&self) -> Option<&str> {
        match &self.0 {
            Repr::Value(_) => None,
            Repr::Text(text) | Repr::Raw(text) => Some(text),
        }
    }

    /// The payload as JSON text; `Err` for raw text that would not replay as a value.
    pub(crate) fn into_json(self) -> Result<String, serde_json::Error> {
        match self.0 {
            Repr::Value(value) => serde_json::to_string(&value),
            Repr::Text(text) => Ok(text),
            Repr::Raw(text) => crate::readable::check(&text).map(|()| text),
        }
    }

    /// The payload as the value a read of the event returns; `None` for text that does not
    /// parse (an append refuses it).
    pub fn to_value(&self) -> Option<serde_json::Value> {
        match &self.0 {
            Repr::Value(value) => Some(value.clone()),
            Repr::Text(text) | Repr::Raw(text) => agent_schema::json::from_str(text).ok(),
        }
    }
}

impl From<serde_json::Value> for Payload {
    fn from(value: serde_json::Value) -> Self {
        Payload(Repr::Value(value))
    }
}

impl PartialEq for Payload {
    /// Equal when they are the same JSON value (key order and whitespace aside).
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Value(a), Repr::Value(b)) => a == b,
            _ => self.to_value().is_some_and(|a| Some(a) == other.to_value()),
        }
    }
}

/// The acknowledgement of one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The event's seq.
    pub seq: i64,
    /// True when the dedup key existed and nothing was written; `seq` is the first event's.
    pub deduplicated: bool,
    /// The event's `at` as written, in Unix milliseconds. When `deduplicated`, the time of
    /// this attempt (the stored event keeps its own).
    pub at: i64,
}
