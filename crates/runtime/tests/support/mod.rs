//! Fresh journals for tests: a temp SQLite file, or a fresh PostgreSQL database.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use agent_journal::Journal;
use sqlx::Connection as _;

pub struct Fixture {
    pub journal: Journal,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Fixture {
    /// Opens a second handle on the same journal (a "restarted process").
    pub async fn reopen(&self) -> Journal {
        Journal::open(&self.url).await.unwrap()
    }
}

pub async fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("journal.db").display());
    let journal = Journal::open(&url).await.unwrap();
    Fixture {
        journal,
        url,
        _dir: Some(dir),
    }
}

/// The PostgreSQL server URL for tests, or `None` (after saying so) when it is not set.
/// Under `CI=true` a missing URL is a failure: CI must run the PostgreSQL suite.
pub fn pg_base_url() -> Option<String> {
    match std::env::var("AGENTCTL_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "CI=true but AGENTCTL_TEST_PG_URL is unset: the PostgreSQL suite must run in CI"
                );
            }
            eprintln!("SKIPPED: PostgreSQL suite (AGENTCTL_TEST_PG_URL unset)");
            None
        }
    }
}

pub async fn postgres() -> Option<Fixture> {
    let base = pg_base_url()?;
    let name = format!("runtime_test_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&base).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    let (without_query, query) = match base.split_once('?') {
        Some((a, q)) => (a, format!("?{q}")),
        None => (base.as_str(), String::new()),
    };
    let prefix = &without_query[..without_query.rfind('/').unwrap()];
    let url = format!("{prefix}/{name}{query}");
    let journal = Journal::open(&url).await.unwrap();
    Some(Fixture {
        journal,
        url,
        _dir: None,
    })
}
