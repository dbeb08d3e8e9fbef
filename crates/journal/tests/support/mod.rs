#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! Opening fresh journals for tests: a temp SQLite file, or a fresh PostgreSQL database.

#![allow(dead_code)]

use agent_journal::{Journal, JournalOptions};
use sqlx::Connection as _;

pub struct Fixture {
    pub journal: Journal,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

pub async fn sqlite(options: JournalOptions) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("journal.db").display());
    let journal = Journal::open_with(&url, options).await.unwrap();
    Fixture {
        journal,
        url,
        _dir: Some(dir),
    }
}

pub async fn memory() -> Fixture {
    let url = agent_journal::MEMORY_URL.to_string();
    let journal = Journal::open(&url).await.unwrap();
    Fixture {
        journal,
        url,
        _dir: None,
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

/// Creates a fresh database on the test server and returns its URL.
pub async fn fresh_pg_database() -> Option<String> {
    let base = pg_base_url()?;
    let name = format!("journal_test_{}", uuid::Uuid::new_v4().simple());
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
    Some(format!("{prefix}/{name}{query}"))
}

pub async fn postgres(options: JournalOptions) -> Option<Fixture> {
    let url = fresh_pg_database().await?;
    let journal = Journal::open_with(&url, options).await.unwrap();
    Some(Fixture {
        journal,
        url,
        _dir: None,
    })
}
