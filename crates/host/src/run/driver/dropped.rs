//! What a drive leaves running once its future is dropped before it ended (a worker that
//! lost the run's lease or whose journal failed, a caller that gave up): nothing.
//!
//! Invariants:
//! - A drive dropped mid-run stops where it stands, as a crash would stop it: its runtime is
//!   abandoned ([`Runtime::abandon`]: every call's task is aborted, so a shell command's
//!   process group is killed, and nothing more is journaled), and its interrupt watcher
//!   ends. Its open calls read as cut off to the next drive, which follows the resume rules.
//! - A drive that ended on its own is not touched: it closed its runtime itself.

use agent_runtime::Runtime;
use tokio::task::AbortHandle;

/// Held by a drive from its runtime's first turn to its end; stops what the drive started
/// when dropped before [`disarm`](Self::disarm).
pub(crate) struct StopOnDrop {
    runtime: Option<Runtime>,
    watcher: Option<AbortHandle>,
}

impl StopOnDrop {
    /// Guards the drive of `runtime`.
    pub(crate) fn new(runtime: Runtime) -> StopOnDrop {
        StopOnDrop {
            runtime: Some(runtime),
            watcher: None,
        }
    }

    /// Also ends the drive's interrupt watcher.
    pub(crate) fn watcher(&mut self, watcher: AbortHandle) {
        self.watcher = Some(watcher);
    }

    /// The drive ended on its own: its runtime is closed, and the caller ends the watcher.
    pub(crate) fn disarm(&mut self) {
        self.runtime = None;
        self.watcher = None;
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.abandon();
        }
    }
}
