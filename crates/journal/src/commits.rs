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
//! A tail of one kind ([`Commits::subscribe`] with a kind) is woken only by commits that write
//! that kind to its thread, and by every notification from another process (which names
//! the thread, not the kinds). A run's interrupt watch is one: it waits on the run's
//! thread, which its own host writes five times per step, for a kind no host writes.
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

pub(crate) struct Commits {
    /// Entries in `threads`; read without the lock on every commit.
    entries: AtomicUsize,
    threads: Mutex<Threads>,
    /// Bumped by every publish: what wakes the tails of the whole journal.
    all: watch::Sender<u64>,
}

impl Default for Commits {
    fn default() -> Self {
        Commits {
            entries: AtomicUsize::new(0),
            threads: Mutex::default(),
            all: watch::channel(0).0,
        }
    }
}

#[derive(Default)]
struct Threads {
    /// Per thread, its tails' wakes (few per thread).
    by_name: HashMap<String, Vec<Wake>>,
    sweep_at: usize,
}

/// A generation per filter (`None`: every event, else one kind), bumped by every publish
/// the filter lets through.
type Wake = (Option<String>, watch::Sender<u64>);

fn live(wakes: &[Wake]) -> bool {
    wakes.iter().any(|(_, tx)| tx.receiver_count() > 0)
}

/// One written event as a publish names it: its thread, and its kind when known (a
/// notification from another process names only the thread).
pub(crate) type Written<'a> = (&'a str, Option<&'a str>);

impl Commits {
    fn threads(&self) -> MutexGuard<'_, Threads> {
        // Nothing panics while holding the lock; the map is whole at every step.
        self.threads.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A receiver that changes when this process commits events of `thread` (of `kind`
    /// only, when given), or, for every filter, when another process's commit of `thread`
    /// is notified.
    pub(crate) fn subscribe(&self, thread: &str, kind: Option<&str>) -> watch::Receiver<u64> {
        let mut threads = self.threads();
        if threads.by_name.len() >= threads.sweep_at.max(FIRST_SWEEP) {
            threads.by_name.retain(|_, wakes| live(wakes));
            threads.sweep_at = threads.by_name.len() * 2;
        }
        let wakes = threads.by_name.entry(thread.to_owned()).or_default();
        wakes.retain(|(_, tx)| tx.receiver_count() > 0);
        let rx = match wakes.iter().find(|(filter, _)| filter.as_deref() == kind) {
            Some((_, tx)) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(0);
                wakes.push((kind.map(str::to_owned), tx));
                rx
            }
        };
        self.entries.store(threads.by_name.len(), Ordering::Release);
        rx
    }

    /// A receiver that changes on every commit of this process and every notification
    /// from another one: for tails of the whole journal.
    pub(crate) fn subscribe_all(&self) -> watch::Receiver<u64> {
        self.all.subscribe()
    }

    /// True when some thread may have a tail, or the whole journal has one, so callers can
    /// skip collecting threads.
    pub(crate) fn any(&self) -> bool {
        self.entries.load(Ordering::Acquire) > 0 || self.all.receiver_count() > 0
    }

    /// Wakes the tails that `written` concerns (a thread may be named twice), and the tails
    /// of the whole journal.
    pub(crate) fn publish<'a>(&self, written: impl IntoIterator<Item = Written<'a>>) {
        if self.all.receiver_count() > 0 {
            self.all
                .send_modify(|generation| *generation = generation.wrapping_add(1));
        }
        if self.entries.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut threads = self.threads();
        let mut gone = Vec::new();
        for (thread, kind) in written {
            let Some(wakes) = threads.by_name.get(thread) else {
                continue;
            };
            if !live(wakes) {
                gone.push(thread);
                continue;
            }
            for (filter, tx) in wakes {
                if filter.is_none() || kind.is_none() || filter.as_deref() == kind {
                    tx.send_modify(|generation| *generation = generation.wrapping_add(1));
                }
            }
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
        let mut a = commits.subscribe("a", None);
        let b = commits.subscribe("b", None);
        commits.publish([("a", None)]);
        assert!(a.has_changed().unwrap());
        assert!(!b.has_changed().unwrap());
        a.borrow_and_update();
        commits.publish([("b", None), ("c", None), ("b", None)]);
        assert!(b.has_changed().unwrap());
        assert!(!a.has_changed().unwrap());
    }

    #[test]
    fn entries_of_dropped_tails_go_away() {
        let commits = Commits::default();
        drop(commits.subscribe("a", None));
        assert!(commits.any());
        commits.publish([("a", None)]);
        assert!(
            !commits.any(),
            "a commit drops the entry of a thread without tails"
        );
        for i in 0..(FIRST_SWEEP * 3) {
            drop(commits.subscribe(&format!("t{i}"), None));
        }
        let kept = commits.subscribe("live", Some("k"));
        assert!(commits.threads().by_name.len() < FIRST_SWEEP + 2);
        drop(kept);
    }

    #[test]
    fn a_kind_tail_wakes_only_for_its_kind_or_an_unknown_one() {
        let commits = Commits::default();
        let mut all = commits.subscribe("a", None);
        let mut kind = commits.subscribe("a", Some("interrupt.requested"));
        commits.publish([("a", Some("model.requested")), ("a", Some("tool.started"))]);
        assert!(all.has_changed().unwrap());
        assert!(!kind.has_changed().unwrap(), "other kinds do not wake it");
        all.borrow_and_update();
        commits.publish([("a", Some("interrupt.requested"))]);
        assert!(kind.has_changed().unwrap());
        assert!(all.has_changed().unwrap());
        kind.borrow_and_update();
        commits.publish([("b", Some("interrupt.requested"))]);
        assert!(
            !kind.has_changed().unwrap(),
            "another thread's commit does not wake it"
        );
        commits.publish([("a", None)]);
        assert!(
            kind.has_changed().unwrap(),
            "a notification without kinds wakes it"
        );
        drop(all);
        drop(kind);
        commits.publish([("a", None)]);
        assert!(!commits.any(), "the entry goes with its last tail");
    }
}
