//! How many events a stream's next read asks for.
//!
//! Invariant: a stream ([`Journal::tail`](crate::Journal::tail) and its kin) holds at most
//! one page of decoded events, and a page asks for [`PAGE`] events or fewer: as many as
//! hold about [`PAGE_BYTES`] at the size of the stream's last page's events (at least
//! one), and [`FIRST`] before any was read. Counted alone, 1,000 events of the largest
//! payload (4 MiB) would be 4 GiB for every open stream (a console tab watching a run).

use serde_json::Value;

use crate::backend::PAGE;
use crate::event::Event;

/// About how many bytes of events a page holds (a unit test's pages are small, so that
/// paging is exercised with small events).
pub(crate) const PAGE_BYTES: usize = if cfg!(test) {
    4 * 1024
} else {
    16 * 1024 * 1024
};

/// The first page's size, before the stream knows how large its events are (at most 64
/// MiB of the largest payloads).
const FIRST: i64 = 16;

/// The size of a stream's next page.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageLimit(i64);

impl PageLimit {
    pub(crate) fn new() -> Self {
        PageLimit(FIRST.min(PAGE))
    }

    /// How many events the next read asks for.
    pub(crate) fn get(self) -> i64 {
        self.0
    }

    /// Whether `read` events are a full page for a read that asked for
    /// [`get`](Self::get) (more may follow).
    pub(crate) fn filled_by(self, read: usize) -> bool {
        read as i64 >= self.0
    }

    /// After a read that asked for [`get`](Self::get): whether `page` is full (more may
    /// follow); a full page sizes the next one. A short page (a tail caught up, reading
    /// what was just committed) leaves the size as it was and costs no walk of its events.
    pub(crate) fn read<'a, I>(&mut self, page: I) -> bool
    where
        I: IntoIterator<Item = &'a Event>,
        I::IntoIter: ExactSizeIterator,
    {
        let page = page.into_iter();
        if !self.filled_by(page.len()) {
            return false;
        }
        self.adapt(page);
        true
    }

    /// Sizes the next page from `events`, the page just read (an empty one changes nothing).
    fn adapt<'a>(&mut self, events: impl IntoIterator<Item = &'a Event>) {
        let (count, bytes) = events.into_iter().fold((0usize, 0usize), |(n, b), e| {
            (n + 1, b.saturating_add(event_bytes(e)))
        });
        if count == 0 {
            return;
        }
        let each = (bytes / count).max(1);
        let fits = (PAGE_BYTES / each).max(1);
        self.0 = i64::try_from(fits).unwrap_or(PAGE).min(PAGE);
    }
}

/// About how much memory `event` holds: its strings and its payload's.
fn event_bytes(event: &Event) -> usize {
    let names = event.thread.len() + event.kind.len();
    let dedup = event.dedup_key.as_ref().map_or(0, String::len);
    64 + names + dedup + value_bytes(&event.payload)
}

/// About how much memory `value` holds: its strings, and a word for every other node.
fn value_bytes(value: &Value) -> usize {
    let mut total = 0usize;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        total = total.saturating_add(match value {
            Value::String(s) => 24 + s.len(),
            Value::Array(items) => {
                stack.extend(items);
                24
            }
            Value::Object(map) => {
                for (key, item) in map {
                    total = total.saturating_add(24 + key.len());
                    stack.push(item);
                }
                24
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        });
    }
    total
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn event(payload: Value) -> Event {
        Event {
            seq: 1,
            thread: Arc::from("t"),
            kind: Arc::from("k"),
            payload,
            at: 0,
            dedup_key: None,
            epoch: None,
        }
    }

    #[test]
    fn a_page_of_large_events_is_short_and_one_of_small_ones_long() {
        let mut limit = PageLimit::new();
        assert_eq!(limit.get(), FIRST);
        // A short page changes nothing, whatever its events.
        let large = event(json!({ "output": "x".repeat(2 * PAGE_BYTES) }));
        assert!(!limit.read([&large]));
        assert_eq!(limit.get(), FIRST);
        // A full page of events about twice the page's bytes: one at a time after it.
        let full = vec![&large; FIRST as usize];
        assert!(limit.read(full));
        assert_eq!(limit.get(), 1);
        // Small events: as many as fit, at most `PAGE`.
        let small = event(json!({ "n": 1 }));
        assert!(limit.read([&small]));
        assert!(limit.get() > 1 && limit.get() <= PAGE, "{limit:?}");
        let bytes = limit.get() as usize * event_bytes(&small);
        assert!(bytes <= PAGE_BYTES, "{bytes}");
        // Nothing read: a short page, as before.
        let before = limit.get();
        assert!(!limit.read(std::iter::empty::<&Event>()));
        assert_eq!(limit.get(), before);
    }

    /// Events of mixed sizes, several to a page or one: every stream delivers each once,
    /// in order, across pages sized as it goes (a unit test's pages hold ~4 KiB).
    #[tokio::test]
    async fn streams_deliver_every_event_across_pages_sized_as_they_go() {
        use futures::StreamExt as _;

        use crate::{Journal, NewEvent, Position};

        let j = Journal::open(crate::backend::MEMORY_URL).await.unwrap();
        for i in 0..90i64 {
            let (kind, pad) = if i % 3 == 0 {
                ("big", 3000)
            } else {
                ("small", 10)
            };
            j.append(NewEvent::new(
                "t",
                kind,
                json!({"i": i, "pad": "x".repeat(pad)}),
            ))
            .await
            .unwrap();
        }
        let numbers = |events: Vec<Event>| -> Vec<i64> {
            events
                .iter()
                .map(|e| e.payload["i"].as_i64().unwrap())
                .collect()
        };
        let all: Vec<i64> = (0..90).collect();
        let replayed = j.replay_stream("t", 0).map(Result::unwrap).collect().await;
        assert_eq!(numbers(replayed), all);
        let tailed = j.tail("t", 0).take(90).map(Result::unwrap).collect().await;
        assert_eq!(numbers(tailed), all);
        let big = j
            .tail_kind("t", "big", 0)
            .take(30)
            .map(Result::unwrap)
            .collect()
            .await;
        assert_eq!(numbers(big), (0..90).step_by(3).collect::<Vec<_>>());
        let everything: Vec<Event> = j
            .tail_all(Position::START)
            .take(90)
            .map(|item| item.unwrap().1)
            .collect()
            .await;
        assert_eq!(numbers(everything), all);
    }

    #[test]
    fn the_estimate_counts_nested_strings() {
        let nested = json!({"a": [{"b": "x".repeat(1000)}, "y".repeat(500)]});
        assert!(value_bytes(&nested) >= 1500);
        assert!(value_bytes(&json!(null)) > 0);
    }
}
