//! Backends for the conformance suite (test code: unwrap and panic are fine here).

use agent_context::{ContextOptions, ContextStore};

pub struct Sqlite {
    pub store: ContextStore,
    _dir: tempfile::TempDir,
}

pub async fn sqlite() -> Sqlite {
    sqlite_with(ContextOptions::default()).await
}

/// A store on a fresh SQLite file, opened with `options`.
pub async fn sqlite_with(options: ContextOptions) -> Sqlite {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("context.db").display());
    Sqlite {
        store: ContextStore::open_with(&url, options).await.unwrap(),
        _dir: dir,
    }
}

pub struct Pg {
    pub store: ContextStore,
    db: agent_testkit::PgDatabase,
}

/// A store on a fresh PostgreSQL database, or `None` (with the SKIPPED line) when
/// `AGENTCTL_TEST_PG_URL` is unset outside CI.
pub async fn pg() -> Option<Pg> {
    pg_with(ContextOptions::default()).await
}

/// [`pg`] opened with `options`.
pub async fn pg_with(options: ContextOptions) -> Option<Pg> {
    let db = agent_testkit::fresh_pg_database("ctx_test").await?;
    Some(Pg {
        store: ContextStore::open_with(db.url(), options).await.unwrap(),
        db,
    })
}

impl Pg {
    /// Closes the store, then drops the test's database.
    pub async fn drop_database(self) {
        self.store.close().await;
        drop(self.db);
    }
}

#[macro_export]
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let db = $crate::common::sqlite().await;
                    super::$name(&db.store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let Some(db) = $crate::common::pg().await else { return };
                    super::$name(&db.store).await;
                    db.drop_database().await;
                }
            )*
        }
    };
}
