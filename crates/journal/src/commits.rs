//! In-process commit notifications, per thread.
//!
//! A tail waits on its own thread's watermark, so a commit wakes only the tails of the
//! threads it wrote. (One process-wide watermark woke every tail on every commit, and each
//! then read its thread to find nothing: with N runs tailing their own threads that was
//! O(N) empty reads per commit, which on SQLite and PostgreSQL dominated a host driving
//! a hundred runs.)
//!
//! The same wakes come from other processes on PostgreSQL: its shared LISTEN connection
//! (`backend/postgres/listen.rs`) publishes each notified thread here.
//!
//! Invariants:
//! - A tail subscribes before its first read, so a commit of its thread that lands after
//!   that read changes its receiver (each publish bumps the thread's generation): no
//!   commit is missed.
//! - Only threads with a live tail have an entry; entries whose tails are gone are dropped
//!   on the thread's next commit or by the sweep in [`Commits::subscribe`], so the map stays
//!   bounded by the live tails, not by the threads ever written.
//! - Without any subscriber, a commit costs one atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

/// Sweep stale entries when the map reaches this many (then twice the live count).
const FIRST_SWEEP: usize = 64;

#[derive(Default)]
pub(crate) struct Commits {
    /// Entries in `threads`; read without the lock on every commit.
    entries: AtomicUsize,
    threads: Mutex<Threads>,
}

#[derive(Default)]
struct Threads {
    /// Per thread, a generation bumped by every publish that names it.
    by_name: HashMap<String, watch::Sender<u64>>,
    sweep_at: usize,
}

impl Commits {
    fn threads(&self) -> MutexGuard<'_, Threads> {
        // Nothing panics while holding the lock; the map is whole at every step.
        self.threads.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A receiver that changes when this process commits events of `thread`.
    pub(crate) fn subscribe(&self, thread: &str) -> watch::Receiver<u64> {
        let mut threads = self.threads();
        if threads.by_name.len() >= threads.sweep_at.max(FIRST_SWEEP) {
            threads.by_name.retain(|_, tx| tx.receiver_count() > 0);
            threads.sweep_at = threads.by_name.len() * 2;
        }
        let rx = match threads.by_name.get(thread) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(0);
                threads.by_name.insert(thread.to_owned(), tx);
                rx
            }
        };
        self.entries.store(threads.by_name.len(), Ordering::Release);
        rx
    }

    /// True when some thread may have a tail, so callers can skip collecting threads.
    pub(crate) fn any(&self) -> bool {
        self.entries.load(Ordering::Acquire) > 0
    }

    /// Wakes the tails of every thread in `written` (a thread may be named twice).
    pub(crate) fn publish<'a>(&self, written: impl IntoIterator<Item = &'a str>) {
        if !self.any() {
            return;
        }
        let mut threads = self.threads();
        let mut gone = Vec::new();
        for thread in written {
            let Some(tx) = threads.by_name.get(thread) else {
                continue;
            };
            if tx.receiver_count() == 0 {
                gone.push(thread);
                continue;
            }
            tx.send_modify(|generation| *generation = generation.wrapping_add(1));
        }
        for thread in gone {
            threads.by_name.remove(thread);
        }
        self.entries.store(threads.by_name.len(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_wakes_only_its_threads_tails() {
        let commits = Commits::default();
        let mut a = commits.subscribe("a");
        let b = commits.subscribe("b");
        commits.publish(["a"]);
        assert!(a.has_changed().unwrap());
        assert!(!b.has_changed().unwrap());
        a.borrow_and_update();
        commits.publish(["b", "c", "b"]);
        assert!(b.has_changed().unwrap());
        assert!(!a.has_changed().unwrap());
    }

    #[test]
    fn entries_of_dropped_tails_go_away() {
        let commits = Commits::default();
        drop(commits.subscribe("a"));
        assert!(commits.any());
        commits.publish(["a"]);
        assert!(
            !commits.any(),
            "a commit drops the entry of a thread without tails"
        );
        for i in 0..(FIRST_SWEEP * 3) {
            drop(commits.subscribe(&format!("t{i}")));
        }
        let kept = commits.subscribe("live");
        assert!(commits.threads().by_name.len() < FIRST_SWEEP + 2);
        drop(kept);
    }
}
