//! Test-only seams (feature `test-hooks`, never enabled by a shipped build): a hook the
//! PostgreSQL writer awaits inside each write transaction, after its rows are inserted and
//! before it commits, so tests can hold transactions open for as long as they like and
//! roll some back.

use std::sync::Arc;

use futures::future::BoxFuture;

/// What the writer does with the transaction a [`WriteHook`] paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookAction {
    /// Commit it, as without a hook.
    Commit,
    /// Roll it back: the batch fails and the writer latches failed, as after any failed
    /// commit (reopen the journal to write again).
    Rollback,
}

/// Awaited by the PostgreSQL writer between a batch's inserts and its commit.
#[derive(Clone)]
pub struct WriteHook(pub Arc<dyn Fn() -> BoxFuture<'static, HookAction> + Send + Sync>);

impl std::fmt::Debug for WriteHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteHook")
    }
}
