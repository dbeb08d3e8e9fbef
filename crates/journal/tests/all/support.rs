//! Opening fresh journals for tests: a temp SQLite file, or a fresh PostgreSQL database.

#![allow(dead_code)]

use agent_journal::{Journal, JournalOptions};

pub struct Fixture {
    pub journal: Journal,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    /// Dropped last: the test's database goes away after the journal handle.
    _pg: Option<agent_testkit::PgDatabase>,
}

pub async fn sqlite(options: JournalOptions) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("journal.db").display());
    let journal = Journal::open_with(&url, options).await.unwrap();
    Fixture {
        journal,
        url,
        _dir: Some(dir),
        _pg: None,
    }
}

pub async fn memory() -> Fixture {
    let url = agent_journal::MEMORY_URL.to_string();
    let journal = Journal::open(&url).await.unwrap();
    Fixture {
        journal,
        url,
        _dir: None,
        _pg: None,
    }
}

pub async fn postgres(options: JournalOptions) -> Option<Fixture> {
    let db = agent_testkit::fresh_pg_database("journal_test").await?;
    let url = db.url().to_string();
    let journal = Journal::open_with(&url, options).await.unwrap();
    Some(Fixture {
        journal,
        url,
        _dir: None,
        _pg: Some(db),
    })
}

/// Default-option fixtures, in the shape `agent_testkit::backend_tests!` calls.
pub mod defaults {
    use super::Fixture;

    pub async fn sqlite() -> Fixture {
        super::sqlite(Default::default()).await
    }

    pub async fn postgres() -> Option<Fixture> {
        super::postgres(Default::default()).await
    }

    pub async fn memory() -> Fixture {
        super::memory().await
    }
}
