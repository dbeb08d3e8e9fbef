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
use crate::error::{ContextError, Result};
use crate::options::{Access, ContextOptions};

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
        let path = match &target {
            url::Target::File { path, mode } if !mode.writes() => {
                return Self::open_read_only(path, options).await;
            }
            url::Target::File { path, .. } => Some(path.clone()),
            url::Target::Memory => None,
        };
        let opened = Self::open_target(target, options).await;
        match (opened, path) {
            // SQLite said the file cannot be written (a read-only file or mount, no room for
            // the `-shm` file); any other failure (a corrupt file, a lock, a schema it
            // cannot take) is said as it is.
            (Err(ContextError::Database(db)), Some(path))
                if options.access == Access::ReadOnlyWhenUnwritable
                    && db.refuses_writes()
                    && path.is_file() =>
            {
                let err = ContextError::Database(db);
                tracing::debug!(%err, "cannot write the context store; opening it read-only");
                match Self::open_read_only(&path, options).await {
                    Err(
                        schema @ (ContextError::SchemaNotReadable { .. }
                        | ContextError::SchemaTooNew { .. }),
                    ) => Err(schema),
                    // Otherwise the read-write error says more when reading fails too.
                    read_only => read_only.map_err(|_| err),
                }
            }
            (opened, _) => opened,
        }
    }

    /// Opens an existing file read-only, applying no schema step: `mode=ro`, then, when
    /// SQLite cannot read it that way and its `-wal` holds no commits, `immutable=1`
    /// (see [`agent_schema::sqlite_file`]).
    async fn open_read_only(path: &std::path::Path, options: &ContextOptions) -> Result<Self> {
        let target = |mode| url::Target::File {
            path: path.to_path_buf(),
            mode,
        };
        match Self::open_target(target(url::FileMode::Read), options).await {
            Err(ContextError::Database(_))
                if agent_schema::sqlite_file::wal_holds_nothing(path) =>
            {
                Self::open_target(target(url::FileMode::Immutable), options).await
            }
            opened => opened,
        }
    }

    /// Opens `target`: applies the schema steps it lacks, or, read-only, checks it needs none.
    async fn open_target(target: url::Target, options: &ContextOptions) -> Result<Self> {
        let read_only = target.read_only();
        // A writable file may hold a tail left by a process that stopped before folding it;
        // a read-only one is never folded (a search scans its tail).
        let fold = FoldSignal::new(!read_only);
        // The background fold waits for another connection's lock only briefly (see
        // `index::IDLE_LOCK_WAIT`); `:memory:` has no other connection.
        let busy_timeout = match &target {
            url::Target::File { .. } => Some(options.busy_timeout),
            url::Target::Memory => None,
        };
        let folder = Folder::new(fold.clone(), busy_timeout);
        let db = Db::open(&target, options, Box::new(folder)).await?;
        if read_only {
            db.read(schema::check_readable).await?;
        } else {
            db.write(schema::migrate).await?;
        }
        Ok(SqliteBackend {
            db,
            threads: Arc::new(Mutex::new(HashMap::new())),
            fold,
            tail_bound: options.index_tail_bytes,
        })
    }

    /// Whether writes are refused ([`ContextError::ReadOnly`]).
    pub(crate) fn is_read_only(&self) -> bool {
        self.db.is_read_only()
    }
}

impl StoreBackend for SqliteBackend {
    async fn close(&self) {
        self.db.close().await;
    }
}
