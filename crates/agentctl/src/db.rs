//! Opening the journal and the context store named by `--db`.
//!
//! Invariant: every command opens them here, so a failure to open carries the same one
//! hint about `--db`, attached once.

use agent_context::ContextStore;
use agent_journal::Journal;

use crate::global::GlobalArgs;
use crate::output::with_hint;

/// The hint shown when the database named by `--db` cannot be opened.
pub const DB_HINT: &str =
    "check --db / AGENTCTL_DB (sqlite://PATH, sqlite::memory:, postgres://USER:PASS@HOST/DB)";

/// The journal named by `--db`.
pub async fn open_journal(global: &GlobalArgs) -> anyhow::Result<Journal> {
    let url = global.database_url()?;
    Journal::open(&url)
        .await
        .map_err(|err| with_hint(err, DB_HINT))
}

/// The journal named by `--db`, for a command that only reads it: opened read-only when it
/// cannot be written (an archived file, a read-only mount), so it can still be inspected.
pub async fn open_journal_for_reading(global: &GlobalArgs) -> anyhow::Result<Journal> {
    let url = global.database_url()?;
    Journal::open_for_reading(&url)
        .await
        .map_err(|err| with_hint(err, DB_HINT))
}

/// The context store (history and memory) named by `--db`.
pub async fn open_context(global: &GlobalArgs) -> anyhow::Result<ContextStore> {
    let url = global.database_url()?;
    open_context_at(&url).await
}

/// The context store at `url` (a URL the command chose, such as a private in-memory store).
pub async fn open_context_at(url: &str) -> anyhow::Result<ContextStore> {
    ContextStore::open(url)
        .await
        .map_err(|err| with_hint(err, DB_HINT))
}
