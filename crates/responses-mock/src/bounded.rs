//! What the emulator remembers is bounded: a long-running `agentctl mock serve` keeps the
//! most recent requests and stored responses and forgets older ones, instead of growing
//! until the machine runs out of memory.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// Requests (or WebSocket frames) kept for inspection.
pub(crate) const MAX_RECORDED: usize = 1000;
/// Stored responses kept for `previous_response_id` and retrieval; an older one is
/// answered like an unknown id, as the real API does for an expired response.
pub(crate) const MAX_STORED: usize = 1000;

/// The last `cap` items pushed, oldest first.
#[derive(Debug)]
pub(crate) struct Recent<T> {
    items: VecDeque<T>,
    cap: usize,
}

impl<T: Clone> Recent<T> {
    pub(crate) fn new(cap: usize) -> Self {
        Recent {
            items: VecDeque::new(),
            cap,
        }
    }

    pub(crate) fn push(&mut self, item: T) {
        if self.items.len() == self.cap {
            self.items.pop_front();
        }
        self.items.push_back(item);
    }

    pub(crate) fn to_vec(&self) -> Vec<T> {
        self.items.iter().cloned().collect()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter()
    }
}

impl<T: Clone> Default for Recent<T> {
    fn default() -> Self {
        Recent::new(MAX_RECORDED)
    }
}

/// A map that keeps its `cap` most recently inserted keys.
#[derive(Debug)]
pub(crate) struct RecentMap<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    cap: usize,
}

impl<K: Eq + Hash + Clone, V> RecentMap<K, V> {
    pub(crate) fn new(cap: usize) -> Self {
        RecentMap {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
        }
    }

    pub(crate) fn insert(&mut self, key: K, value: V) {
        if self.map.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
            while self.order.len() > self.cap {
                if let Some(oldest) = self.order.pop_front() {
                    self.map.remove(&oldest);
                }
            }
        }
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key)
    }
}

impl<K: Eq + Hash + Clone, V> Default for RecentMap<K, V> {
    fn default() -> Self {
        RecentMap::new(MAX_STORED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_keeps_the_newest_items_in_order() {
        let mut recent = Recent::new(3);
        for n in 0..5 {
            recent.push(n);
        }
        assert_eq!(recent.to_vec(), [2, 3, 4]);
    }

    #[test]
    fn recent_map_forgets_the_oldest_inserted_keys() {
        let mut map = RecentMap::new(2);
        map.insert("a", 1);
        map.insert("b", 2);
        map.insert("a", 10); // an update does not make it newer or count twice
        map.insert("c", 3);
        assert_eq!(map.get(&"a"), None);
        assert_eq!(map.get(&"b"), Some(&2));
        assert_eq!(map.get(&"c"), Some(&3));
        assert_eq!(map.order.len(), 2);
    }
}
