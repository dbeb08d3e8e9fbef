//! Backends for the conformance suite (test code: unwrap and panic are fine here), shaped
//! for [`agent_testkit::backend_tests!`]: `sqlite()`, `memory()` and
//! `postgres()` give a [`Db`].

use agent_context::{ContextOptions, ContextStore};

/// A store on a fresh database; dropping it drops the database (PostgreSQL) or its file.
pub struct Db {
    pub store: ContextStore,
    _dir: Option<tempfile::TempDir>,
    /// Declared after `store`, so dropped after it.
    _pg: Option<agent_testkit::PgDatabase>,
}

/// A store on a fresh SQLite file.
pub async fn sqlite() -> Db {
    sqlite_with(ContextOptions::default()).await
}

/// A store on a fresh SQLite file, opened with `options`.
pub async fn sqlite_with(options: ContextOptions) -> Db {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("context.db").display());
    Db {
        store: ContextStore::open_with(&url, options).await.unwrap(),
        _dir: Some(dir),
        _pg: None,
    }
}

/// A store on `sqlite::memory:` (nothing on disk).
pub async fn memory() -> Db {
    memory_with(ContextOptions::default()).await
}

/// A store on `sqlite::memory:`, opened with `options`.
pub async fn memory_with(options: ContextOptions) -> Db {
    Db {
        store: ContextStore::open_with("sqlite::memory:", options)
            .await
            .unwrap(),
        _dir: None,
        _pg: None,
    }
}

/// A store on a fresh PostgreSQL database, or `None` (with the SKIPPED line) when
/// `AGENTCTL_TEST_PG_URL` is unset outside CI.
pub async fn postgres() -> Option<Db> {
    postgres_with(ContextOptions::default()).await
}

/// [`postgres`] opened with `options`.
pub async fn postgres_with(options: ContextOptions) -> Option<Db> {
    let db = agent_testkit::fresh_pg_database("ctx_test").await?;
    Some(Db {
        store: ContextStore::open_with(db.url(), options).await.unwrap(),
        _dir: None,
        _pg: Some(db),
    })
}

/// A store on the PostgreSQL database `db` (which goes with the store's [`Db`]).
pub async fn postgres_on(db: agent_testkit::PgDatabase) -> Db {
    Db {
        store: ContextStore::open(db.url()).await.unwrap(),
        _dir: None,
        _pg: Some(db),
    }
}
