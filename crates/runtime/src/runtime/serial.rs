//! The per-thread lock that serialises a thread's turn operations.
//!
//! Invariant: a thread has an entry only while one of its operations holds or waits for the
//! lock; the last one to let go removes it. So the map is bounded by the threads with an
//! operation in progress, not by every thread a long-lived runtime (one that
//! [`recover`](crate::Runtime::recover)s a whole journal and drives its threads for days)
//! has served.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use foldhash::HashMap;
use tokio::sync::OwnedMutexGuard;

type Lock = Arc<tokio::sync::Mutex<()>>;

/// The locks of the threads with an operation in progress.
#[derive(Default)]
pub(crate) struct ThreadLocks(Mutex<HashMap<String, Lock>>);

impl ThreadLocks {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Lock>> {
        // Nothing panics while holding it: the map is whole at every step.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for `thread`'s turn; the thread is serialised until the returned guard drops.
    /// Dropped while it waits, it takes nothing and leaves no entry behind.
    pub(crate) async fn serial(&self, thread: &str) -> Serial<'_> {
        let lock = Arc::clone(self.map().entry(thread.to_owned()).or_default());
        let mut serial = Serial {
            locks: self,
            thread: thread.to_owned(),
            lock: Some(Arc::clone(&lock)),
            held: None,
        };
        serial.held = Some(lock.lock_owned().await);
        serial
    }

    /// Threads with an entry.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

/// A thread's turn (or the wait for it).
pub(crate) struct Serial<'a> {
    locks: &'a ThreadLocks,
    thread: String,
    /// This guard's reference to the entry, counted by the last-one-out check.
    lock: Option<Lock>,
    held: Option<OwnedMutexGuard<()>>,
}

impl Drop for Serial<'_> {
    fn drop(&mut self) {
        // Under the map's lock nobody takes a new reference: an entry that only the map
        // refers to once ours are gone has no operation holding or waiting for it.
        let mut map = self.locks.map();
        self.held = None;
        self.lock = None;
        if map
            .get(&self.thread)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            map.remove(&self.thread);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use agent_journal::Journal;
    use futures::FutureExt as _;
    use serde_json::json;

    use super::*;
    use crate::{Runtime, RuntimeOptions};

    #[tokio::test]
    async fn a_runtime_keeps_no_lock_of_a_thread_whose_operations_ended() {
        let journal = Journal::open("memory:").await.unwrap();
        let runtime = Runtime::open(journal, RuntimeOptions::default());
        for i in 0..200 {
            let thread = format!("t{i}");
            let turn = runtime.start(&thread).await.unwrap();
            let revision = runtime.steer(&thread, &turn, "more").await.unwrap();
            runtime
                .commit(&thread, &turn, revision, json!({"n": i}))
                .await
                .unwrap();
            if i % 2 == 0 {
                runtime.finish(&thread, &turn).await.unwrap();
            } else {
                runtime.cancel(&thread, &turn).await.unwrap();
            }
        }
        assert_eq!(runtime.inner.thread_locks.len(), 0);
        runtime.close().await;
    }

    #[tokio::test]
    async fn the_lock_serialises_and_the_last_one_out_removes_it() {
        let locks = ThreadLocks::default();
        let first = locks.serial("t").await;
        // A second operation waits; one given up while waiting leaves the entry to the
        // holder.
        let waiting = locks.serial("t").now_or_never();
        assert!(waiting.is_none(), "the lock was taken twice");
        assert_eq!(locks.len(), 1);
        let other = locks.serial("u").await;
        assert_eq!(locks.len(), 2);
        drop(first);
        drop(other);
        assert_eq!(locks.len(), 0);
        let again = locks.serial("t").await;
        assert_eq!(locks.len(), 1);
        drop(again);
        assert_eq!(locks.len(), 0);
    }
}
