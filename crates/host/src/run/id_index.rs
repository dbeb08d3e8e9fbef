//! Where a record is in one of a fold's lists, by its id: a call by its call id, a steer
//! by its id, a child run by its run id.
//!
//! Invariant: the index holds no copy of the ids (they are in the records themselves), only
//! a 64-bit hash of each. The first record with a hash owns its slot; a later one whose id
//! hashes the same is found by a scan, so a lookup is exact whatever the ids are.

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};

use super::records::CallRecord;
use super::state::{ChildRecord, SteerRecord};

/// A record an [`IdIndex`] finds by its id.
pub(crate) trait Keyed {
    /// The id.
    fn key(&self) -> &str;
}

impl Keyed for CallRecord {
    fn key(&self) -> &str {
        &self.call_id
    }
}

impl Keyed for SteerRecord {
    fn key(&self) -> &str {
        &self.id
    }
}

impl Keyed for ChildRecord {
    fn key(&self) -> &str {
        &self.run_id
    }
}

/// Record positions by a hash of their id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct IdIndex(HashMap<u64, usize>);

impl IdIndex {
    /// The position in `records` of the one with `id`.
    pub(crate) fn find<T: Keyed>(&self, records: &[T], id: &str) -> Option<usize> {
        let &i = self.0.get(&id_hash(id))?;
        if records.get(i).is_some_and(|r| r.key() == id) {
            return Some(i);
        }
        records.iter().position(|r| r.key() == id)
    }

    /// Records that the record with `id` is at position `i`.
    pub(crate) fn insert(&mut self, id: &str, i: usize) {
        self.0.entry(id_hash(id)).or_insert(i);
    }

    /// The index of `records`.
    pub(crate) fn of<T: Keyed>(records: &[T]) -> IdIndex {
        let mut index = IdIndex(HashMap::with_capacity(records.len()));
        for (i, record) in records.iter().enumerate() {
            index.insert(record.key(), i);
        }
        index
    }
}

/// Deterministic (fixed keys), so two folds of the same events hold the same index.
fn id_hash(id: &str) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    id.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::records::CallProgress;

    fn call(id: &str) -> CallRecord {
        CallRecord {
            call_id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
            step: 1,
            progress: CallProgress::New,
            approvals: Vec::new(),
        }
    }

    #[test]
    fn finds_each_call_and_nothing_else() {
        let calls: Vec<_> = (0..50).map(|i| call(&format!("call_{i}"))).collect();
        let index = IdIndex::of(&calls);
        for (i, c) in calls.iter().enumerate() {
            assert_eq!(index.find(&calls, &c.call_id), Some(i));
        }
        assert_eq!(index.find(&calls, "call_50"), None);
        assert_eq!(index.find(&calls, ""), None);
    }

    #[test]
    fn a_call_whose_slot_another_holds_is_found_by_a_scan() {
        // Two ids forced onto one slot, as a hash collision would put them.
        let calls = vec![call("a"), call("b")];
        let mut index = IdIndex::default();
        index.0.insert(id_hash("a"), 0);
        index.0.insert(id_hash("b"), 0);
        assert_eq!(index.find(&calls, "a"), Some(0));
        assert_eq!(index.find(&calls, "b"), Some(1));
        // A stale slot (its call trimmed away) is not taken for the call.
        assert_eq!(index.find(&calls[1..], "a"), None);
    }
}
