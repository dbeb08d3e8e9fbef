//! SQLite backend on rusqlite: every write is one `BEGIN IMMEDIATE` transaction run whole on
//! the writer thread (it never fails half-way on a lock upgrade, and costs one thread
//! hand-off); reads run on pooled read-only connections (WAL: readers see the last
//! committed state and never block the writer). See [`worker`] for who runs what.
//!
//! One file per domain, mirrored by the PostgreSQL backend: `units` (history units,
//! windows, search), `memory` (evidence and consolidated memory), `schema` (the versioned
//! migration).

mod memory;
mod schema;
mod units;
mod url;
mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::backend::StoreBackend;
use crate::error::Result;
use crate::options::ContextOptions;

use worker::Db;

/// thread name -> thread id; ids are never reused or changed, so entries stay valid.
type ThreadIds = Arc<Mutex<HashMap<String, i64>>>;

/// A SQLite store: the writer thread and read pool, and the thread ids seen so far.
#[derive(Clone)]
pub(crate) struct SqliteBackend {
    db: Arc<Db>,
    threads: ThreadIds,
}

impl SqliteBackend {
    pub(crate) async fn open(url: &str, options: &ContextOptions) -> Result<Self> {
        let target = url::parse(url)?;
        let db = Db::open(&target, options).await?;
        db.write(schema::migrate).await?;
        Ok(SqliteBackend {
            db,
            threads: Arc::new(Mutex::new(HashMap::new())),
        })
    }
}

impl StoreBackend for SqliteBackend {
    async fn close(&self) {
        self.db.close().await;
    }
}
