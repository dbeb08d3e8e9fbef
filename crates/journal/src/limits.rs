//! Documented input limits. Appends beyond them are refused with
//! [`JournalError::InvalidInput`](crate::JournalError::InvalidInput) before anything is written.

use crate::writer::Prepared;
use crate::{JournalError, NewEvent};

/// Longest thread name, in bytes (UTF-8). Thread names must also be non-empty.
pub const MAX_THREAD_BYTES: usize = 256;
/// Longest event kind, in bytes. Kinds must be non-empty.
pub const MAX_KIND_BYTES: usize = 128;
/// Longest dedup key, in bytes. Keys must be non-empty when given.
pub const MAX_DEDUP_KEY_BYTES: usize = 512;
/// Largest payload, in bytes of its compact JSON encoding (4 MiB).
pub const MAX_PAYLOAD_BYTES: usize = 4 * 1024 * 1024;
/// Largest append ([`Journal::append_batch`](crate::Journal::append_batch),
/// [`Journal::append_expecting`](crate::Journal::append_expecting)): the bytes of its
/// events' threads, kinds, payloads and dedup keys together, plus 64 per event (128 MiB:
/// 31 payloads of the largest size). PostgreSQL takes no statement over 1 GiB, and an append is one statement
/// (or one call): a larger one failed there, and latched the writer.
pub const MAX_APPEND_BYTES: usize = 128 * 1024 * 1024;
/// What [`MAX_APPEND_BYTES`] counts for an event besides its strings (the lengths of its
/// row's elements and its numbers), so that many small events are bounded too.
pub const APPEND_BYTES_PER_EVENT: usize = 64;

/// Whether the journal takes `thread` as a thread name (non-empty, at most
/// [`MAX_THREAD_BYTES`], no NUL): [`JournalError::InvalidInput`] saying why not. Every read
/// and append checks it; a caller may check first, to refuse bad input before opening.
pub fn check_thread(thread: &str) -> Result<(), JournalError> {
    check_name("thread", thread, MAX_THREAD_BYTES)
}

fn check_name(field: &'static str, value: &str, max: usize) -> Result<(), JournalError> {
    if value.is_empty() {
        return Err(JournalError::invalid(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(JournalError::invalid(
            field,
            format!("is {} bytes, the limit is {max}", value.len()),
        ));
    }
    if value.contains('\0') {
        return Err(JournalError::invalid(field, "must not contain NUL"));
    }
    Ok(())
}

/// [`JournalError::InvalidInput`] when `value`, a name a read looks for (a kind, a dedup key,
/// a lease prefix), holds NUL: no stored name can, and PostgreSQL refuses such text with an
/// error where SQLite and `memory:` would find nothing; every backend refuses it alike.
pub(crate) fn check_nul(field: &'static str, value: &str) -> Result<(), JournalError> {
    if value.contains('\0') {
        return Err(JournalError::invalid(field, "must not contain NUL"));
    }
    Ok(())
}

/// Validates an event and returns it with its payload encoded as compact JSON, stamped
/// with the append time `at` and the epoch of the handle's fence, if any.
pub(crate) fn check_event(
    event: NewEvent,
    at: i64,
    epoch: Option<i64>,
) -> Result<Prepared, JournalError> {
    let relaxed = event.is_relaxed();
    check_thread(&event.thread)?;
    check_name("kind", &event.kind, MAX_KIND_BYTES)?;
    if let Some(key) = &event.dedup_key {
        check_name("dedup key", key, MAX_DEDUP_KEY_BYTES)?;
    }
    let payload = event
        .payload
        .into_json()
        .map_err(|e| JournalError::invalid("payload", e.to_string()))?;
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(JournalError::invalid(
            "payload",
            format!(
                "is {} bytes of JSON, the limit is {MAX_PAYLOAD_BYTES}",
                payload.len()
            ),
        ));
    }
    // It would serialise, and no replay could read it back.
    check_nesting("payload", &payload)?;
    if contains_nul_escape(&payload) {
        // PostgreSQL's jsonb cannot store NUL; refuse it on every backend alike.
        return Err(JournalError::invalid(
            "payload",
            "must not contain NUL characters",
        ));
    }
    Ok(Prepared {
        thread: event.thread,
        kind: event.kind,
        payload,
        dedup_key: event.dedup_key,
        relaxed,
        at,
        epoch,
    })
}

/// Most threads one append ([`Journal::append_batch`](crate::Journal::append_batch)) may
/// write to. PostgreSQL takes a lock per thread a transaction writes, from a table the
/// whole server shares (64 locks per connection by default): an append to some 20,000
/// threads failed there with "out of shared memory", and latched the writer.
pub const MAX_APPEND_THREADS: usize = 1024;

/// [`JournalError::InvalidInput`] when the events of one append hold more than
/// [`MAX_APPEND_BYTES`] or write to more than [`MAX_APPEND_THREADS`] threads.
pub(crate) fn check_append(events: &[Prepared]) -> Result<(), JournalError> {
    let threads = distinct_threads(events);
    if threads > MAX_APPEND_THREADS {
        return Err(JournalError::invalid(
            "events",
            format!("write to {threads} threads, the limit of one append is {MAX_APPEND_THREADS}"),
        ));
    }
    let bytes = events.iter().map(Prepared::bytes).sum::<usize>();
    if bytes > MAX_APPEND_BYTES {
        return Err(JournalError::invalid(
            "events",
            format!("hold {bytes} bytes together, the limit of one append is {MAX_APPEND_BYTES}"),
        ));
    }
    Ok(())
}

/// The distinct threads `events` write to.
fn distinct_threads(events: &[Prepared]) -> usize {
    match events {
        [] => 0,
        [_] => 1,
        _ => {
            let threads: std::collections::HashSet<&str> =
                events.iter().map(|e| e.thread.as_str()).collect();
            threads.len()
        }
    }
}

/// [`JournalError::InvalidInput`] for `field` when `json` nests deeper than any read of it
/// can take back ([`agent_schema::json::MAX_NESTING`]).
pub(crate) fn check_nesting(field: &'static str, json: &str) -> Result<(), JournalError> {
    agent_schema::json::check_nesting(json).map_err(|_| {
        JournalError::invalid(
            field,
            format!(
                "nests arrays and objects more than {} levels deep",
                agent_schema::json::MAX_NESTING
            ),
        )
    })
}

/// Whether a string or key anywhere in `value` holds a NUL character, which no event can
/// carry (PostgreSQL's jsonb cannot store it, and every backend refuses it alike).
pub fn holds_nul(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

/// Whether JSON text holds the escape `\u0000` (NUL, the only way JSON can carry it). A
/// `u0000` preceded by an even number of backslashes is text that spells it, not NUL
/// (`"\\u0000"` is a backslash, then `u0000`).
fn contains_nul_escape(json: &str) -> bool {
    json.match_indices("u0000").any(|(at, _)| {
        let slashes = json.as_bytes()[..at]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        slashes % 2 == 1
    })
}

#[cfg(test)]
mod tests {
    use super::contains_nul_escape;

    #[test]
    fn finds_nul_escapes_and_not_text_that_spells_one() {
        assert!(contains_nul_escape(r#"{"a":"\u0000"}"#));
        assert!(contains_nul_escape(r#"{"a":"\\\u0000"}"#));
        assert!(contains_nul_escape(r#"{"\u0000":1}"#));
        assert!(!contains_nul_escape(r#"{"a":"\\u0000"}"#));
        assert!(!contains_nul_escape(r#"{"u0000":"x\\\\u0000"}"#));
    }
}
