#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! Opening a database the journal did not write, or that a newer build wrote: a one-line
//! typed error, and nothing of a failed schema step left behind.

use agent_journal::{Journal, JournalError};
use sqlx::Connection as _;

fn sqlite_url(dir: &tempfile::TempDir) -> (std::path::PathBuf, String) {
    let path = dir.path().join("j.db");
    let url = format!("sqlite://{}", path.display());
    (path, url)
}

fn one_line(err: &JournalError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    assert!(!text.contains('\n'), "more than one line: {text}");
    text
}

fn newer_schema(err: &JournalError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(JournalError::SchemaTooNew { found: 999, .. }) = e.downcast_ref() {
            return true;
        }
        cause = e.source();
    }
    false
}

#[tokio::test]
async fn sqlite_refuses_a_schema_newer_than_this_build() {
    let dir = tempfile::tempdir().unwrap();
    let (path, url) = sqlite_url(&dir);
    Journal::open(&url).await.unwrap().close().await;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("INSERT INTO journal_schema (version) VALUES (999)")
        .unwrap();
    let err = Journal::open(&url).await.err().unwrap();
    assert!(newer_schema(&err), "{err:?}");
    assert!(one_line(&err).contains("journal schema version 999 is newer"));
}

#[tokio::test]
async fn sqlite_with_foreign_tables_of_the_same_name_fails_on_one_line_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (path, url) = sqlite_url(&dir);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE journal_events (x TEXT)")
        .unwrap();
    let err = Journal::open(&url).await.err().unwrap();
    let text = one_line(&err);
    assert!(
        text.contains("cannot apply journal schema step 1"),
        "{text}"
    );
    let tables = agent_testkit::sqlite_tables(&path);
    assert_eq!(tables, ["journal_events"]);
}

#[tokio::test]
async fn postgres_refuses_a_schema_newer_than_this_build() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_schema_test").await else {
        return;
    };
    Journal::open(db.url()).await.unwrap().close().await;
    let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
    sqlx::query("INSERT INTO journal_schema (version) VALUES (999)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let err = Journal::open(db.url()).await.err().unwrap();
    assert!(newer_schema(&err), "{err:?}");
    assert!(one_line(&err).contains("journal schema version 999 is newer"));
}
