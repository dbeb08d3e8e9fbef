//! `agent-context`: conversation history kept in whole units, windows over it, indexed
//! substring search, and long-term memory materialised from evidence with provenance.
//!
//! One API ([`ContextStore`]) over two backends, chosen by URL: SQLite (`sqlite://PATH`,
//! `sqlite::memory:`; the embedded default, may share a file with the journal) and
//! PostgreSQL (`postgres://...`). Every table is prefixed `context_`; the schema version
//! lives in `context_schema`.
//!
//! Contracts (each is a test in `tests/all/`, run on both backends):
//! - A unit keeps each tool call with its output: a unit whose calls and outputs do not
//!   pair up by `call_id` is refused, naming the unpaired ids. Unit ids are unique per thread.
//! - `window` = pinned goal + the last k units, in order, never splitting a unit;
//!   `window_budget` = as many recent units as fit a byte budget (see its docs).
//! - `search` is a case-insensitive substring search within one thread, in thread order,
//!   CJK included, served by a trigram index (SQLite FTS5 `trigram` without positions,
//!   whose candidates are tested for the term; PostgreSQL `pg_trgm` GIN). Terms under 3
//!   characters fall back to a scan bounded to the thread.
//! - The index is deferred, never the results: a unit acknowledged by `append_unit(s)` is
//!   found by the next `search` and shown by the next `window`. Appends write the units
//!   only; a fold moves each thread's oldest un-indexed units into the index in batches
//!   (in the background when the store is idle, or in the append when the thread's
//!   un-indexed tail outgrows [`ContextOptions::index_tail_bytes`]), and a search scans
//!   that tail after the index. A fold is one transaction with the thread's watermark, so
//!   a crash loses and duplicates nothing (`tests/all/crash.rs` kills a process mid-fold).
//! - Memory: per (project, key), the confirmed, unrevoked evidence with the latest
//!   `observed` (ties: greatest source) wins, source kept as provenance. `consolidate` is
//!   atomic and recomputes only the pairs whose evidence changed since the last run.
//! - `recall` returns one project's entries, flagging those older than `max_age`.
//! - Evidence is observed between 1970 and a day from now (Unix seconds): a time in the
//!   far future would win for good, so the store refuses it, whoever the caller is.
//! - No error shows a database password: URLs are shown redacted, and the drivers' error
//!   types stay private behind [`DatabaseError`].
//!
//! Costs (SQLite): a unit id packs (thread, position), so a window is a primary-key range
//! scan, O(log n + k), and a search first tests the thread's first few units directly (a
//! common term is answered there), then walks the trigram index restricted to the rest of
//! the thread's id range in order, stopping at `limit`, then scans the un-indexed tail
//! (bounded per thread in bytes, see above). Writes are one transaction each on
//! a writer thread; short reads run on the caller's thread (see `backend/sqlite/worker.rs`).
//! Input limits are in [`limits`].
//!
//! ```
//! use agent_context::{ContextError, ContextStore};
//! use serde_json::json;
//!
//! async fn demo() -> Result<(), ContextError> {
//!     // A private in-memory SQLite database; `sqlite://PATH` and `postgres://...` persist.
//!     let store = ContextStore::open("sqlite::memory:").await?;
//!     let ask = json!({"type": "message", "role": "user", "content": "Find the bug"});
//!     store.append_unit("t", "u1", &[ask]).await?;
//!     // A tool call is stored with its output, in one unit.
//!     let call = json!({"type": "function_call", "call_id": "c1", "name": "grep", "arguments": "{}"});
//!     let output = json!({"type": "function_call_output", "call_id": "c1", "output": "src/lib.rs:3"});
//!     store.append_unit("t", "u2", &[call.clone(), output]).await?;
//!     // A call without its output is refused.
//!     assert!(matches!(
//!         store.append_unit("t", "u3", &[call]).await,
//!         Err(ContextError::UnpairedCalls { .. })
//!     ));
//!     let window = store.window("t", "fix the bug", 1).await?;
//!     assert_eq!(window.recent_units[0].unit, "u2");
//!     let hits = store.search("t", "BUG", 10).await?;
//!     assert_eq!(hits.len(), 1);
//!     assert_eq!(hits[0].unit, "u1");
//!     Ok(())
//! }
//!
//! tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod backend;
mod error;
pub mod limits;
mod memory;
mod options;
mod store;
mod unit;

pub use error::{ContextError, DatabaseError, DatabaseErrorKind, MAX_FUTURE_SKEW_SECS, Result};
pub use memory::{Consolidation, Evidence, MemoryEntry, NewEvidence, Revocation};
pub use options::{Access, ContextOptions, DEFAULT_INDEX_TAIL_BYTES, StoreDurability};
pub use store::{BackendKind, ContextStore, ThreadInfo};
pub use unit::{CALL_OUTPUT_TYPES, NewUnit, Unit, UnitsAppended, Window, fold};
