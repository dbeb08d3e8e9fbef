//! A job's settlement: its outcome, set once by the job and awaited by any number of
//! waiters (`result`, turn endings, `close`).
//!
//! Invariants:
//! - The outcome is set at most once; waiters see it or learn that it never will be.
//! - A job that goes away without settling (its task aborted, its launch failed) leaves
//!   the settlement abandoned, which wakes every waiter: they then ask the journal.

use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

use crate::outcome::Outcome;

/// The shared state: `Some(outcome)` once settled, `None` once abandoned.
#[derive(Default)]
pub(crate) struct Settlement {
    state: OnceLock<Option<Arc<Outcome>>>,
    changed: Notify,
}

impl Settlement {
    /// A new settlement and the one handle that settles it.
    pub(crate) fn new() -> (Arc<Settlement>, Settler) {
        let shared = Arc::new(Settlement::default());
        (Arc::clone(&shared), Settler(shared))
    }

    /// Waits until the job settles (`Some`) or is abandoned (`None`).
    pub(crate) async fn wait(&self) -> Option<Arc<Outcome>> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the check: a settlement after the check wakes this wait.
            notified.as_mut().enable();
            if let Some(state) = self.state.get() {
                return state.clone();
            }
            notified.await;
        }
    }

    fn finish(&self, state: Option<Arc<Outcome>>) {
        if self.state.set(state).is_ok() {
            self.changed.notify_waiters();
        }
    }
}

/// The job's side: settles once, or abandons the settlement when dropped unsettled.
pub(crate) struct Settler(Arc<Settlement>);

impl Settler {
    pub(crate) fn settle(self, outcome: Outcome) {
        self.0.finish(Some(Arc::new(outcome)));
    }
}

impl Drop for Settler {
    fn drop(&mut self) {
        // A no-op after `settle`: the state is already set.
        self.0.finish(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiter that is already waiting when the test goes on.
    async fn waiting(shared: &Arc<Settlement>) -> tokio::task::JoinHandle<Option<Arc<Outcome>>> {
        let shared = Arc::clone(shared);
        let waiter = tokio::spawn(async move { shared.wait().await });
        tokio::task::yield_now().await;
        waiter
    }

    #[tokio::test]
    async fn waiters_before_and_after_see_the_outcome() {
        let (shared, settler) = Settlement::new();
        let early = waiting(&shared).await;
        settler.settle(Outcome::cancelled(3, false));
        let early = early.await.unwrap().unwrap();
        assert_eq!(early.revision, 3);
        assert_eq!(shared.wait().await.unwrap().revision, 3);
    }

    #[tokio::test]
    async fn a_dropped_settler_abandons() {
        let (shared, settler) = Settlement::new();
        let waiter = waiting(&shared).await;
        drop(settler);
        assert!(waiter.await.unwrap().is_none());
        assert!(shared.wait().await.is_none());
    }
}
