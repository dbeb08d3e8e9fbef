//! Where a call is in a fold's call list, by its call id (and a steer or a child run in
//! theirs, by its id: the same index over another list).
//!
//! Invariant: the index holds no copy of the ids (they are in the calls themselves), only
//! a 64-bit hash of each. The first call with a hash owns its slot; a later call whose id
//! hashes the same is found by a scan, so a lookup is exact whatever the ids are.

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};

use super::records::CallRecord;
use super::state::{ChildRecord, SteerRecord};

/// A record a [`CallIndex`] finds by its id.
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

/// Call positions by a hash of their call id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CallIndex(HashMap<u64, usize>);

impl CallIndex {
    /// The position in `calls` of the call with `call_id`.
    pub(crate) fn find<T: Keyed>(&self, calls: &[T], call_id: &str) -> Option<usize> {
        let &i = self.0.get(&id_hash(call_id))?;
        if calls.get(i).is_some_and(|c| c.key() == call_id) {
            return Some(i);
        }
        calls.iter().position(|c| c.key() == call_id)
    }

    /// Records that the call with `call_id` is at position `i`.
    pub(crate) fn insert(&mut self, call_id: &str, i: usize) {
        self.0.entry(id_hash(call_id)).or_insert(i);
    }

    /// The index of `calls`.
    pub(crate) fn of<T: Keyed>(calls: &[T]) -> CallIndex {
        let mut index = CallIndex(HashMap::with_capacity(calls.len()));
        for (i, call) in calls.iter().enumerate() {
            index.insert(call.key(), i);
        }
        index
    }
}

fn id_hash(call_id: &str) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    call_id.hash(&mut hasher);
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
        let index = CallIndex::of(&calls);
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
        let mut index = CallIndex::default();
        index.0.insert(id_hash("a"), 0);
        index.0.insert(id_hash("b"), 0);
        assert_eq!(index.find(&calls, "a"), Some(0));
        assert_eq!(index.find(&calls, "b"), Some(1));
        // A stale slot (its call trimmed away) is not taken for the call.
        assert_eq!(index.find(&calls[1..], "a"), None);
    }
}
