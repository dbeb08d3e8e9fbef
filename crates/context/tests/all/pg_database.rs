//! The PostgreSQL database a store is given: whatever its default isolation, concurrent
//! appends all land; an encoding that cannot hold every character is refused at open; a
//! URL the driver cannot read is the caller's mistake, shown without its password.

use agent_context::{ContextError, ContextStore};
use serde_json::json;

/// A DBA may default a database to SERIALIZABLE. The store's appends to one thread then
/// failed with "could not serialize access due to concurrent update" (37 of 80 from four
/// processes); its sessions now read committed, as the journal's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_appends_land_whatever_the_database_s_isolation() {
    let Some(db) = agent_testkit::fresh_pg_database("ctx_iso").await else {
        return;
    };
    agent_testkit::set_database_defaults(
        db.url(),
        &[("default_transaction_isolation", "'serializable'")],
    )
    .await;
    // Four stores, as four processes would be, each appending to the same thread.
    let mut tasks = Vec::new();
    for store_no in 0..4 {
        let store = ContextStore::open(db.url()).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let mut failed = Vec::new();
            for unit_no in 0..15 {
                let unit = format!("s{store_no}-u{unit_no}");
                let items = [json!({"type": "message", "text": unit})];
                if let Err(err) = store.append_unit("shared", &unit, &items).await {
                    failed.push(format!("{unit}: {err}"));
                }
            }
            store.close().await;
            failed
        }));
    }
    let mut failed = Vec::new();
    for task in tasks {
        failed.extend(task.await.unwrap());
    }
    assert!(failed.is_empty(), "{failed:#?}");
    let store = ContextStore::open(db.url()).await.unwrap();
    let threads = store.threads().await.unwrap();
    assert_eq!(threads[0].units, 60, "{threads:?}");
    store.close().await;
}

/// A LATIN1 database took ASCII units, then failed at the first other character with the
/// driver's error; it is refused when the store opens, naming the encoding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_database_that_cannot_hold_every_character_is_refused_at_open() {
    let Some(latin1) = agent_testkit::fresh_pg_database_encoded("ctx_enc", "LATIN1").await else {
        return;
    };
    let err = ContextStore::open(latin1.url()).await.unwrap_err();
    assert!(matches!(err, ContextError::Unsuitable(_)), "{err}");
    assert!(err.to_string().contains("LATIN1"), "{err}");
}

/// `history` and `memory` exited 1 for a URL `runs list` called a usage error (exit 2).
#[tokio::test]
async fn an_unreadable_postgres_url_is_refused_as_input_without_its_password() {
    for url in [
        "postgres://u:hunter2@127.0.0.1:notaport/db",
        "postgres://u:hunter2@127.0.0.1:5432/db?sslmode=bogus",
    ] {
        let err = ContextStore::open(url).await.unwrap_err();
        assert!(matches!(err, ContextError::InvalidUrl { .. }), "{err}");
        assert!(err.is_input_refused(), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}

/// A reader of a hot standby, or a role whose transactions are read-only, failed at open:
/// the store wrote its schema first. A current schema is now read, not written, and the
/// store searches what is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_database_that_refuses_writes_is_read() {
    let Some(db) = agent_testkit::fresh_pg_database("ctx_ro").await else {
        return;
    };
    let store = ContextStore::open(db.url()).await.unwrap();
    let items = [json!({"type": "message", "text": "E42 in the old login"})];
    store.append_unit("a", "u1", &items).await.unwrap();
    store.close().await;
    agent_testkit::set_database_defaults(db.url(), &[("default_transaction_read_only", "on")])
        .await;
    let store = ContextStore::open(db.url()).await.unwrap();
    let hits = store.search("a", "e42", 10).await.unwrap();
    assert_eq!(hits.len(), 1);
    let err = store.append_unit("a", "u2", &items).await.unwrap_err();
    match &err {
        ContextError::Database(db) => assert!(db.refuses_writes(), "{err}"),
        other => panic!("expected the database's refusal, got {other}"),
    }
    store.close().await;
}
