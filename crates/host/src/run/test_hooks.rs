//! Hooks for the crash tests, compiled only with the `test-hooks` feature (which only test
//! builds turn on): a released host has no way to kill itself and reads no test variable.
//!
//! The hook: `DriveOptions::crash_after_events` makes the process SIGKILL itself once it
//! has seen that many new events of the run's thread, so a test can crash a real run at
//! every journal boundary. Without the feature, `CrashHook` is empty and does nothing.

use agent_journal::Journal;

/// The variable a test sets to crash a spawned `agentctl` (see
/// `DriveOptions::with_env_test_hooks`).
#[cfg(feature = "test-hooks")]
pub const CRASH_AFTER_EVENTS_VAR: &str = "AGENTCTL_TEST_CRASH_AFTER_EVENTS";

/// The variable a test sets to crash a spawned `agentctl` inside a sub-agent: the first
/// child run driven by the process to see this many new events of its own thread kills it
/// (the parent's hook is [`CRASH_AFTER_EVENTS_VAR`]).
#[cfg(feature = "test-hooks")]
pub const CRASH_CHILD_AFTER_EVENTS_VAR: &str = "AGENTCTL_TEST_CRASH_CHILD_AFTER_EVENTS";

/// The crash hook of one drive: kill this process after this many new events.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CrashHook(#[cfg(feature = "test-hooks")] pub(crate) Option<usize>);

#[cfg(feature = "test-hooks")]
impl CrashHook {
    /// The count from the environment, if a test set it.
    pub(crate) fn from_env() -> Option<usize> {
        std::env::var(CRASH_AFTER_EVENTS_VAR)
            .ok()
            .and_then(|v| v.parse().ok())
    }

    /// The count for a child run's drive, if a test set it.
    pub(crate) fn child_from_env() -> Option<usize> {
        std::env::var(CRASH_CHILD_AFTER_EVENTS_VAR)
            .ok()
            .and_then(|v| v.parse().ok())
    }

    /// A task that follows the thread and SIGKILLs this process right after the `n`-th
    /// event past `after` is committed.
    ///
    /// A tail can lag (PostgreSQL's is woken by `NOTIFY`), so the driver also checks
    /// before each of its appends ([`before_append`](Self::before_append)): whichever sees
    /// the `n`-th event first kills.
    pub(crate) fn arm(self, journal: &Journal, thread: &str, after: i64) {
        let Some(n) = self.0 else { return };
        let mut tail = journal.tail(thread, after);
        tokio::spawn(async move {
            use futures::StreamExt as _;
            let mut seen = 0;
            while let Some(Ok(_)) = tail.next().await {
                seen += 1;
                if seen >= n {
                    kill_self();
                }
            }
        });
    }

    /// Nothing of the driver's is written past the `n`-th event, even when the tail has
    /// not caught up yet.
    pub(crate) fn before_append(self, folded: usize) {
        if self.0.is_some_and(|n| folded >= n) {
            kill_self();
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
impl CrashHook {
    pub(crate) fn arm(self, _: &Journal, _: &str, _: i64) {}

    pub(crate) fn before_append(self, _: usize) {}
}

/// SIGKILLs this process. The syscall, not a spawned `kill`: the process must die before
/// the run goes further (a spawned one once landed after the run ended).
#[cfg(feature = "test-hooks")]
fn kill_self() {
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
}
