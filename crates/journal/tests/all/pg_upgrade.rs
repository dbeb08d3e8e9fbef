//! A PostgreSQL journal written by the schema before issue 35 (versions 1 and 2: seqs
//! from `MAX(seq)+1` under one advisory lock, no `tx` column, no sequence) upgrades in
//! place: it opens, replays identically, and takes new appends after its old seqs.
//!
//! The old database is built here with that schema's SQL, copied verbatim (the fixture),
//! and rows inserted the way its writer inserted them.

use agent_journal::{Journal, JournalError, NewEvent, Position};
use futures::StreamExt as _;
use serde_json::json;
use sqlx::Connection as _;

/// `migrations/postgres/0001_events.sql` as of schema 2.
const OLD_0001: &str = "
CREATE TABLE IF NOT EXISTS journal_events (
    seq       BIGINT PRIMARY KEY,
    thread    TEXT   NOT NULL,
    kind      TEXT   NOT NULL,
    payload   TEXT   NOT NULL,
    at        BIGINT NOT NULL,
    dedup_key TEXT
);
CREATE INDEX IF NOT EXISTS journal_events_thread_seq ON journal_events (thread, seq);
CREATE UNIQUE INDEX IF NOT EXISTS journal_events_dedup
    ON journal_events (thread, dedup_key) WHERE dedup_key IS NOT NULL;
";

/// `migrations/postgres/0002_leases.sql` as of schema 2.
const OLD_0002: &str = "
ALTER TABLE journal_events ADD COLUMN IF NOT EXISTS epoch BIGINT;
CREATE TABLE IF NOT EXISTS journal_leases (
    name       TEXT   PRIMARY KEY,
    status     TEXT   NOT NULL,
    holder     TEXT,
    epoch      BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    info       TEXT   NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_leases_claimable
    ON journal_leases (updated_at) WHERE status = 'open';
";

/// One old row: (seq, thread, kind, n, dedup key, epoch).
type OldRow = (
    i64,
    &'static str,
    &'static str,
    i64,
    Option<&'static str>,
    Option<i64>,
);

const OLD_ROWS: &[OldRow] = &[
    (1, "a", "start", 0, None, None),
    (2, "b", "start", 0, Some("b-start"), None),
    (3, "a", "step", 1, Some("a-1"), Some(1)),
    (4, "a", "step", 2, None, Some(1)),
    (5, "c", "note", 0, None, None),
    (6, "b", "step", 1, None, None),
    (7, "a", "done", 3, None, Some(1)),
];

/// Builds a schema-2 journal: the old schema, its version rows, and events written in seq
/// order as the old writer did (one transaction each, under its advisory lock).
async fn old_journal(url: &str) {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql("CREATE TABLE journal_schema (version BIGINT PRIMARY KEY)")
        .execute(&mut conn)
        .await
        .unwrap();
    for (version, sql) in [(1, OLD_0001), (2, OLD_0002)] {
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
        sqlx::query("INSERT INTO journal_schema (version) VALUES ($1)")
            .bind(version)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    for &(seq, thread, kind, n, key, epoch) in OLD_ROWS {
        let mut tx = conn.begin().await.unwrap();
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(0x6167_656e_746a_6e6c_i64)
            .execute(&mut *tx)
            .await
            .unwrap();
        let next: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) + 1 FROM journal_events")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        assert_eq!(next, seq);
        sqlx::query(
            "INSERT INTO journal_events (seq, thread, kind, payload, at, dedup_key, epoch) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(seq)
        .bind(thread)
        .bind(kind)
        .bind(json!({ "n": n }).to_string())
        .bind(1_700_000_000_000 + seq)
        .bind(key)
        .bind(epoch)
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
    sqlx::query(
        "INSERT INTO journal_leases (name, status, holder, epoch, expires_at, info, updated_at) \
         VALUES ('run:a', 'open', NULL, 1, 0, '{}', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
}

/// What a replay must keep of an event: (seq, kind, n, dedup key, epoch, at).
type Shape = (i64, String, i64, Option<String>, Option<i64>, i64);

fn old_events_of(thread: &str) -> Vec<Shape> {
    OLD_ROWS
        .iter()
        .filter(|row| row.1 == thread)
        .map(|&(seq, _, kind, n, key, epoch)| {
            (
                seq,
                kind.to_string(),
                n,
                key.map(str::to_string),
                epoch,
                1_700_000_000_000 + seq,
            )
        })
        .collect()
}

fn shape(events: &[agent_journal::Event]) -> Vec<Shape> {
    events
        .iter()
        .map(|e| {
            (
                e.seq,
                e.kind.to_string(),
                e.payload["n"].as_i64().unwrap(),
                e.dedup_key.clone(),
                e.epoch,
                e.at,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_2_journal_upgrades_replays_identically_and_takes_new_appends() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_upgrade").await else {
        return;
    };
    let url = db.url().to_string();
    old_journal(&url).await;

    // Read-only opening refuses to apply the step; reading and writing applies it.
    assert!(matches!(
        Journal::open_read_only(&url).await,
        Err(JournalError::Open { .. })
    ));
    let journal = Journal::open(&url).await.unwrap();
    for thread in ["a", "b", "c"] {
        assert_eq!(
            shape(&journal.replay(thread, 0).await.unwrap()),
            old_events_of(thread),
            "thread {thread} replays as it was written"
        );
    }
    assert_eq!(journal.threads().await.unwrap(), ["a", "b", "c"]);
    assert_eq!(journal.last_seq("a").await.unwrap(), Some(7));
    // The whole journal in the old commit order, which was seq order.
    let mut all = journal.tail_all(Position::START);
    let mut old_positions = Vec::new();
    for seq in 1..=7 {
        let (position, event) = all.next().await.unwrap().unwrap();
        assert_eq!(event.seq, seq);
        old_positions.push(position);
    }
    assert!(old_positions.windows(2).all(|w| w[0] < w[1]));

    // Old dedup keys still deduplicate; the old head holds for an expected-version append;
    // new seqs continue after the old ones; a fenced append sees the old lease.
    let again = journal
        .append(NewEvent::new("a", "step", json!({"n": 9})).with_dedup_key("a-1"))
        .await
        .unwrap();
    assert_eq!((again.seq, again.deduplicated), (3, true));
    let next = journal
        .append_expecting(
            "a",
            Some(7),
            vec![NewEvent::new("a", "step", json!({"n": 4}))],
        )
        .await
        .unwrap();
    // (Above the highest old one; not necessarily next to it: a batch takes a seq per
    // event before it reads its dedup keys, and the deduplicated append left its unused.)
    assert!(
        next[0].seq > 7,
        "the first new seq follows the highest old one: {}",
        next[0].seq
    );
    let stale = journal
        .append_expecting("b", Some(2), vec![NewEvent::new("b", "x", json!({"n": 0}))])
        .await;
    assert!(matches!(
        stale,
        Err(JournalError::Conflict {
            actual: Some(6),
            ..
        })
    ));
    let lease = journal
        .claim_lease("run:", "me", std::time::Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the old lease is claimable");
    assert_eq!(lease.epoch, 2, "the old lease's epoch moves on");
    let fenced = journal
        .fenced(&lease)
        .append(NewEvent::new("a", "step", json!({"n": 5})))
        .await
        .unwrap();
    assert!(fenced.seq > next[0].seq);
    let new_c = journal
        .append(NewEvent::new("c", "note", json!({"n": 1})))
        .await
        .unwrap();
    assert!(new_c.seq > fenced.seq);

    // The tail of the whole journal goes on after the old events, with the new ones.
    for seq in [next[0].seq, fenced.seq, new_c.seq] {
        let (position, event) = all.next().await.unwrap().unwrap();
        assert_eq!(event.seq, seq);
        assert!(position > *old_positions.last().unwrap());
    }
    journal.close().await;

    // Reopening applies nothing more and reads the same; read-only opening works now.
    let reopened = Journal::open_read_only(&url).await.unwrap();
    let a = reopened.replay("a", 0).await.unwrap();
    let mut want = old_events_of("a");
    want.push((next[0].seq, "step".into(), 4, None, None, a[4].at));
    want.push((fenced.seq, "step".into(), 5, None, Some(2), a[5].at));
    assert_eq!(shape(&a), want);
    let versions: Vec<i64> = {
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT version FROM journal_schema ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .unwrap()
    };
    assert_eq!(versions, [1, 2, 3, 4, 5]);
}
