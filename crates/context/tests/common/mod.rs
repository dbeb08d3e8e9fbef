//! Backends for the conformance suite (test code: unwrap and panic are fine here).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use agent_context::ContextStore;

pub struct Sqlite {
    pub store: ContextStore,
    _dir: tempfile::TempDir,
}

pub async fn sqlite() -> Sqlite {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("context.db").display());
    Sqlite {
        store: ContextStore::open(&url).await.unwrap(),
        _dir: dir,
    }
}

pub struct Pg {
    pub store: ContextStore,
    admin_url: String,
    name: String,
}

/// A store on a fresh PostgreSQL database, or `None` (with the SKIPPED line) when
/// `AGENTCTL_TEST_PG_URL` is unset outside CI.
pub async fn pg() -> Option<Pg> {
    let Ok(admin_url) = std::env::var("AGENTCTL_TEST_PG_URL") else {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("AGENTCTL_TEST_PG_URL must be set in CI");
        }
        eprintln!("SKIPPED: PostgreSQL suite (AGENTCTL_TEST_PG_URL unset)");
        return None;
    };
    use sqlx::Connection as _;
    let name = format!("ctx_test_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    let url = with_database(&admin_url, &name);
    Some(Pg {
        store: ContextStore::open(&url).await.unwrap(),
        admin_url,
        name,
    })
}

impl Pg {
    pub async fn drop_database(self) {
        use sqlx::Connection as _;
        self.store.close().await;
        let mut admin = sqlx::PgConnection::connect(&self.admin_url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut admin)
        .await
        .unwrap();
    }
}

/// Replace the database name in a postgres URL (keeping any `?query`).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_and_path = &base[scheme_end..];
    let host = host_and_path.split('/').next().unwrap_or(host_and_path);
    format!("{}{host}/{name}{query}", &base[..scheme_end])
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
