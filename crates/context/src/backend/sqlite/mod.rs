//! SQLite backend on rusqlite: every write is one `BEGIN IMMEDIATE` transaction run whole on
//! the writer thread (it never fails half-way on a lock upgrade, and costs one thread
//! hand-off); reads run on pooled read-only connections (WAL: readers see the last
//! committed state and never block the writer). See [`worker`] for who runs what.
//!
//! One file per domain, mirrored by the PostgreSQL backend: `units` (history units,
//! windows, search), `memory` (evidence and consolidated memory), `schema` (the versioned
//! migration).

mod checkpoint;
mod holds;
mod index;
mod memory;
mod relaxed;
mod schema;
mod units;
mod url;
mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::backend::StoreBackend;
use crate::error::Result;
use crate::options::ContextOptions;

use index::{FoldSignal, Folder};
use worker::Db;

/// thread name -> thread id; ids are never reused or changed, so entries stay valid.
type ThreadIds = Arc<Mutex<HashMap<String, i64>>>;

/// A SQLite store: the writer thread and read pool, the thread ids seen so far, and the
/// background fold's signal.
#[derive(Clone)]
pub(crate) struct SqliteBackend {
    db: Arc<Db>,
    threads: ThreadIds,
    fold: Arc<FoldSignal>,
    /// [`ContextOptions::index_tail_bytes`].
    tail_bound: u64,
}

/// The longest busy timeout SQLite takes (milliseconds in a C `int`, about 24.8 days; rusqlite
/// panics on a longer one). A longer [`ContextOptions::busy_timeout`] is this.
const MAX_BUSY_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

impl SqliteBackend {
    pub(crate) async fn open(url: &str, options: &ContextOptions) -> Result<Self> {
        let options = &ContextOptions {
            busy_timeout: options.busy_timeout.min(MAX_BUSY_TIMEOUT),
            ..options.clone()
        };
        let target = url::parse(url)?;
        let read_only = matches!(
            target,
            url::Target::File {
                read_only: true,
                ..
            }
        );
        // A file may hold a tail left by a process that stopped before folding it.
        let fold = FoldSignal::new(!read_only);
        let db = Db::open(&target, options, Box::new(Folder::new(fold.clone()))).await?;
        db.write(schema::migrate).await?;
        Ok(SqliteBackend {
            db,
            threads: Arc::new(Mutex::new(HashMap::new())),
            fold,
            tail_bound: options.index_tail_bytes,
        })
    }
}

impl StoreBackend for SqliteBackend {
    async fn close(&self) {
        self.db.close().await;
    }
}
