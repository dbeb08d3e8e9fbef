//! A SQLite file whose tables clash with the context schema: a one-line typed error, and
//! nothing of the schema left behind.

use agent_context::{ContextError, ContextStore};

#[tokio::test]
async fn foreign_tables_of_the_same_name_fail_on_one_line_and_keep_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE context_units (y TEXT)")
        .unwrap();
    let err = ContextStore::open(&format!("sqlite://{}", path.display()))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ContextError::Migration(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("context_units already exists"), "{text}");
    assert!(!text.contains('\n'), "{text}");
    let tables = agent_testkit::sqlite_tables(&path);
    assert_eq!(tables, ["context_units"]);
}
