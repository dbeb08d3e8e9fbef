//! `agent-journal`: an append-only event log that never loses an acknowledged event.
//!
//! One API over two backends: SQLite (embedded default, one file, WAL) and PostgreSQL
//! (shared by processes and hosts). Open with [`Journal::open`] or [`Journal::open_with`].
//!
//! Contracts (each is a test in `tests/all/conformance.rs`):
//! - `seq` is unique across the whole journal and increases along each thread, and from
//!   an acknowledged append to any append made after it; within a thread, replay returns
//!   exactly that thread's events with `seq > after`, in `seq` order.
//! - [`Journal::tail_all`] delivers every committed event of every thread exactly once,
//!   in [`Position`] order (each thread's events in seq order), never skipping one that
//!   commits late: on PostgreSQL writers of different threads take no common lock.
//! - An append is acknowledged only after its transaction committed at the configured
//!   [`Durability`]. Under [`Durability::Full`] (the default) that means fsync'd: an
//!   acknowledged event survives `kill -9`.
//! - Group commit: one writer (a dedicated thread on SQLite, a task on PostgreSQL) owns the
//!   write connection; appends that arrive while a commit is in flight are written together
//!   in the next transaction and acknowledged after it. Acknowledgement order equals `seq`
//!   order.
//! - A dedup key makes an append idempotent per thread: the first event with a given
//!   `(thread, key)` is written, later ones write nothing and return the first `seq`.
//! - [`Journal::append_expecting`] writes only if the thread's last seq is still the one
//!   the caller expects, checked atomically with the write (under the thread's write lock, after
//!   the earlier requests of its group commit); otherwise [`JournalError::Conflict`], which
//!   fails that request alone.
//! - A writer failure is latched: every waiting and every later append gets the error,
//!   and nothing after the failed batch is written. (SQLite's write lock held by another
//!   connection past `busy_timeout` is not one: the transaction never began, so that
//!   batch alone fails, with a database error.) The failed batch was not acknowledged,
//!   but may turn up, whole, when the journal is reopened: a commit can fail after it
//!   reached the disk (see [`JournalError::WriterFailed`]).
//! - `(thread, seq)` is indexed, so replay costs O(events of the thread).
//! - [`Journal::fenced`] appends are written only while their lease is at the handle's
//!   epoch (see [`Lease`]): a holder that lost its lease cannot write after the new
//!   holder claimed it.
//!
//! ```
//! use agent_journal::{Journal, JournalError, MEMORY_URL, NewEvent};
//! use serde_json::json;
//!
//! async fn demo() -> Result<(), JournalError> {
//!     // `memory:` keeps the journal in this process; `sqlite://PATH` and
//!     // `postgres://...` keep it on disk with the same API.
//!     let journal = Journal::open(MEMORY_URL).await?;
//!     let first = journal
//!         .append(NewEvent::new("thread-1", "note", json!({"text": "hello"})).with_dedup_key("n1"))
//!         .await?;
//!     // The same dedup key again writes nothing and answers the first seq.
//!     let again = journal
//!         .append(NewEvent::new("thread-1", "note", json!({"text": "hello"})).with_dedup_key("n1"))
//!         .await?;
//!     assert_eq!((again.seq, again.deduplicated), (first.seq, true));
//!     journal.append(NewEvent::new("thread-1", "note", json!({"text": "world"}))).await?;
//!     let texts: Vec<_> = journal
//!         .replay("thread-1", 0)
//!         .await?
//!         .into_iter()
//!         .map(|event| event.payload["text"].clone())
//!         .collect();
//!     assert_eq!(texts, [json!("hello"), json!("world")]);
//!     Ok(())
//! }
//!
//! tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod backend;
mod commits;
mod error;
mod event;
#[cfg(feature = "test-hooks")]
pub mod hooks;
mod journal;
mod lease;
mod limits;
mod options;
mod page_limit;
mod payload;
mod position;
mod readable;
mod stream;
mod writer;

pub use backend::MEMORY_URL;
pub use error::{DatabaseError, DatabaseErrorKind, JournalError};
pub use event::{Appended, Event, NewEvent, Payload};
pub use journal::{Journal, JournalStats};
pub use lease::{Lease, LeaseRow, LeaseStatus};
pub use limits::{
    APPEND_BYTES_PER_EVENT, MAX_APPEND_BYTES, MAX_APPEND_THREADS, MAX_DEDUP_KEY_BYTES,
    MAX_KIND_BYTES, MAX_PAYLOAD_BYTES, MAX_THREAD_BYTES, check_thread, holds_nul,
};
pub use options::{Access, DEFAULT_LINGER, DEFAULT_READ_IDLE_TIMEOUT, Durability, JournalOptions};
pub use position::Position;
pub use stream::{EventStream, PositionedStream};
