//! What the emulator remembers is bounded: a long-running `agentctl mock serve` keeps the
//! most recent requests and stored responses and forgets older ones, instead of growing
//! until the machine runs out of memory.
//!
//! Recorded requests (HTTP requests, WebSocket client frames) are bounded twice: by count
//! ([`MAX_RECORDED`]) and by the bytes they were received as ([`MAX_RECORDED_BYTES`] per
//! store), and they are kept in that received form (raw bytes or text), parsed only when
//! someone asks for them: a 2 MiB message kept as a parsed JSON value took ~40 MiB.
//!
//! Stored responses (HTTP and WebSocket `store: true` ones, and each WebSocket
//! connection's cache) are bounded by count ([`MAX_STORED`]) and by their estimated size
//! ([`MAX_STORED_BYTES`] per store): their JSON length, see [`json_len`]. They are kept
//! parsed, which takes a few times that in memory.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// Requests (or WebSocket frames) kept for inspection.
pub(crate) const MAX_RECORDED: usize = 1000;
/// The bytes of recorded requests (or WebSocket frames) kept for inspection, per store: the
/// oldest are forgotten beyond it (the newest is always kept; one is at most the 2 MiB of
/// a request body or a WebSocket message).
pub(crate) const MAX_RECORDED_BYTES: usize = 32 * 1024 * 1024;
/// Stored responses kept for `previous_response_id` and retrieval; an older one is
/// answered like an unknown id, as the real API does for an expired response.
pub(crate) const MAX_STORED: usize = 1000;
/// The estimated bytes ([`Weigh`]) of stored responses kept, per store (the server's, or a
/// WebSocket connection's cache): the oldest are forgotten beyond it, answered like an
/// unknown id (the newest is always kept). 1000 stored responses of 2 MiB requests held
/// ~6 GB before.
pub(crate) const MAX_STORED_BYTES: usize = 64 * 1024 * 1024;

/// What an item costs to keep, in bytes (about: its variable-size parts).
pub(crate) trait Weigh {
    fn weight(&self) -> usize;
}

/// The length of `value` serialized as JSON, without keeping the text (0 if it does not
/// serialize): what a stored value is estimated to weigh.
pub(crate) fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

impl Weigh for Box<str> {
    fn weight(&self) -> usize {
        self.len()
    }
}

/// The last `cap` items pushed, oldest first, weighing `max_bytes` at most together (the
/// newest is kept whatever it weighs).
#[derive(Debug)]
pub(crate) struct Recent<T> {
    items: VecDeque<T>,
    cap: usize,
    bytes: usize,
    max_bytes: usize,
}

impl<T: Clone + Weigh> Recent<T> {
    pub(crate) fn new(cap: usize, max_bytes: usize) -> Self {
        Recent {
            items: VecDeque::new(),
            cap,
            bytes: 0,
            max_bytes,
        }
    }

    pub(crate) fn push(&mut self, item: T) {
        self.bytes = self.bytes.saturating_add(item.weight());
        self.items.push_back(item);
        while self.items.len() > 1 && (self.items.len() > self.cap || self.bytes > self.max_bytes) {
            if let Some(oldest) = self.items.pop_front() {
                self.bytes = self.bytes.saturating_sub(oldest.weight());
            }
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter()
    }

    /// The weight of what is kept.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl<T: Clone + Weigh> Default for Recent<T> {
    fn default() -> Self {
        Recent::new(MAX_RECORDED, MAX_RECORDED_BYTES)
    }
}

/// A map that keeps its `cap` most recently inserted keys, weighing `max_bytes` at most
/// together (the newest is kept whatever it weighs).
#[derive(Debug)]
pub(crate) struct RecentMap<K, V> {
    /// Each value with its weight when inserted.
    map: HashMap<K, (V, usize)>,
    order: VecDeque<K>,
    cap: usize,
    bytes: usize,
    max_bytes: usize,
}

impl<K: Eq + Hash + Clone, V: Weigh> RecentMap<K, V> {
    pub(crate) fn new(cap: usize, max_bytes: usize) -> Self {
        RecentMap {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
            bytes: 0,
            max_bytes,
        }
    }

    pub(crate) fn insert(&mut self, key: K, value: V) {
        let weight = value.weight();
        self.bytes = self.bytes.saturating_add(weight);
        match self.map.insert(key.clone(), (value, weight)) {
            Some((_, old)) => self.bytes = self.bytes.saturating_sub(old),
            None => self.order.push_back(key),
        }
        while self.order.len() > 1 && (self.order.len() > self.cap || self.bytes > self.max_bytes) {
            if let Some(oldest) = self.order.pop_front()
                && let Some((_, old)) = self.map.remove(&oldest)
            {
                self.bytes = self.bytes.saturating_sub(old);
            }
        }
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key).map(|(value, _)| value)
    }
}

impl<K: Eq + Hash + Clone, V: Weigh> Default for RecentMap<K, V> {
    fn default() -> Self {
        RecentMap::new(MAX_STORED, MAX_STORED_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Box<str> {
        s.into()
    }

    fn kept(recent: &Recent<Box<str>>) -> Vec<&str> {
        recent.iter().map(|s| &**s).collect()
    }

    #[test]
    fn recent_keeps_the_newest_items_in_order() {
        let mut recent = Recent::new(3, usize::MAX);
        for n in ["0", "1", "2", "3", "4"] {
            recent.push(text(n));
        }
        assert_eq!(kept(&recent), ["2", "3", "4"]);
    }

    #[test]
    fn recent_forgets_the_oldest_items_beyond_its_bytes() {
        let mut recent = Recent::new(100, 10);
        for n in ["aaaa", "bbbb", "cccc"] {
            recent.push(text(n));
        }
        assert_eq!(kept(&recent), ["bbbb", "cccc"]);
        assert_eq!(recent.bytes(), 8);
        // One heavier than the whole budget is still kept, alone.
        recent.push(text("dddddddddddd"));
        assert_eq!(kept(&recent), ["dddddddddddd"]);
        assert_eq!(recent.bytes(), 12);
        recent.push(text("e"));
        assert_eq!(kept(&recent), ["e"]);
        assert_eq!(recent.bytes(), 1);
    }

    #[test]
    fn recent_map_forgets_the_oldest_inserted_keys() {
        let mut map = RecentMap::new(2, usize::MAX);
        map.insert("a", text("1"));
        map.insert("b", text("2"));
        map.insert("a", text("10")); // an update does not make it newer or count twice
        map.insert("c", text("3"));
        assert_eq!(map.get(&"a"), None);
        assert_eq!(map.get(&"b"), Some(&text("2")));
        assert_eq!(map.get(&"c"), Some(&text("3")));
        assert_eq!(map.order.len(), 2);
    }

    #[test]
    fn recent_map_forgets_the_oldest_keys_beyond_its_bytes() {
        let mut map = RecentMap::new(100, 10);
        map.insert("a", text("aaaa"));
        map.insert("b", text("bbbb"));
        map.insert("c", text("cccc"));
        assert_eq!(map.get(&"a"), None);
        assert_eq!(map.get(&"b"), Some(&text("bbbb")));
        assert_eq!(map.bytes, 8);
        // An update replaces the old value's weight.
        map.insert("b", text("bb"));
        assert_eq!(map.bytes, 6);
        // One heavier than the whole budget is still kept, alone.
        map.insert("d", text("dddddddddddd"));
        assert_eq!((map.order.len(), map.map.len(), map.bytes), (1, 1, 12));
        assert_eq!(map.get(&"d"), Some(&text("dddddddddddd")));
        map.insert("e", text("e"));
        assert_eq!((map.order.len(), map.bytes), (1, 1));
        assert_eq!(map.get(&"e"), Some(&text("e")));
    }
}
