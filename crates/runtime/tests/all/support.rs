//! Fresh journals for tests: a temp SQLite file, or a fresh PostgreSQL database.

#![allow(dead_code)]

use agent_journal::Journal;

pub struct Fixture {
    pub journal: Journal,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    /// Dropped last: the test's database goes away after the journal handle.
    _pg: Option<agent_testkit::PgDatabase>,
}

impl Fixture {
    /// Opens a second handle on the same journal (a "restarted process").
    pub async fn reopen(&self) -> Journal {
        Journal::open(&self.url).await.unwrap()
    }
}

pub async fn sqlite() -> Fixture {
    sqlite_with(agent_journal::JournalOptions::default()).await
}

pub async fn sqlite_with(options: agent_journal::JournalOptions) -> Fixture {
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

pub async fn postgres() -> Option<Fixture> {
    let db = agent_testkit::fresh_pg_database("runtime_test").await?;
    let url = db.url().to_string();
    let journal = Journal::open(&url).await.unwrap();
    Some(Fixture {
        journal,
        url,
        _dir: None,
        _pg: Some(db),
    })
}

/// The in-process `memory:` journal (nothing to reopen: a restart is a new runtime over
/// the same handle).
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
