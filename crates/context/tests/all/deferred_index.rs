//! The deferred trigram index (issue 38), on both backends: a unit acknowledged by an
//! append is found by the next search and shown by the next window at every point of the
//! fold (the background fold is paused through the `test-hooks` seam and stepped by hand),
//! appends over the tail bound fold on the write path, the background fold catches up, and
//! databases written by schema v1 open, upgrade in place and keep every unit searchable.

use agent_context::ContextStore;

use crate::common;
use serde_json::{Value, json};

/// A unit whose text holds a token found nowhere else, and a term every unit shares.
fn unit(i: usize) -> Vec<Value> {
    vec![json!({"type": "message", "text": format!("Needle step tok-{i}-Z 旧登录")})]
}

fn positions(units: &[agent_context::Unit]) -> Vec<u64> {
    units.iter().map(|u| u.position).collect()
}

/// Every appended unit so far (`1..=n`) is found by its own token (once), by the shared
/// term (in order, each once, whatever the limit) and by a CJK term, and is in the window.
async fn all_found(s: &ContextStore, n: usize, at: &str) {
    for i in 1..=n {
        let hits = s.search("t", &format!("TOK-{i}-z"), 10).await.unwrap();
        assert_eq!(positions(&hits), [i as u64], "{at}: unit {i} by its token");
    }
    let all: Vec<u64> = (1..=n as u64).collect();
    let hits = s.search("t", "needle step", 1000).await.unwrap();
    assert_eq!(positions(&hits), all, "{at}: shared term");
    let hits = s.search("t", "旧登录", 1000).await.unwrap();
    assert_eq!(positions(&hits), all, "{at}: CJK term");
    for limit in [1, 3, 7] {
        let hits = s.search("t", "needle", limit).await.unwrap();
        assert_eq!(
            positions(&hits),
            all[..limit.min(n)],
            "{at}: shared term, limit {limit}"
        );
    }
    let window = s.window("t", "goal", 10_000).await.unwrap();
    assert_eq!(positions(&window.recent_units), all, "{at}: window");
    assert!(
        s.search("t", "tok-0-z", 10).await.unwrap().is_empty(),
        "{at}"
    );
}

/// More units than a search tests directly (its prefix is 16 to 256 units), so that the
/// prefix, the index and the tail all take part.
const UNITS: usize = 60;

async fn found_at_every_point_of_the_fold(db: common::Db) {
    let s = &db.store;
    s.pause_index_fold(true).await.unwrap();
    for i in 1..=UNITS {
        s.append_unit("t", &format!("u{i}"), &unit(i))
            .await
            .unwrap();
        // Another thread's units never show up in this one's results.
        s.append_unit("other", &format!("u{i}"), &unit(i))
            .await
            .unwrap();
    }
    assert_eq!(s.index_backlog().await.unwrap(), 2 * UNITS as u64);
    all_found(s, UNITS, "nothing folded").await;
    let (mut n, mut steps) = (UNITS, 0);
    loop {
        let folded = s.fold_index_step(7).await.unwrap();
        if folded == 0 {
            break;
        }
        steps += 1;
        all_found(s, n, &format!("after fold step {steps}")).await;
        // An append between two steps of a fold is found at once too.
        if steps % 3 == 0 {
            n += 1;
            s.append_unit("t", &format!("u{n}"), &unit(n))
                .await
                .unwrap();
            all_found(s, n, &format!("append after fold step {steps}")).await;
        }
    }
    assert!(steps >= 2 * UNITS / 7, "{steps} steps");
    assert_eq!(s.index_backlog().await.unwrap(), 0);
    all_found(s, n, "all folded").await;
    s.pause_index_fold(false).await.unwrap();
}

/// Through the index (units past the part a search tests directly, all folded): a term is
/// matched as a substring, across word boundaries and in CJK, and a unit holding every
/// trigram of a term but not the term itself is no hit (the SQLite index keeps no
/// positions, so it offers such units as candidates and the search must drop them).
async fn index_hits_are_substrings_not_trigram_sets(db: common::Db) {
    let s = &db.store;
    let text = |t: &str| vec![json!({"type": "message", "text": t})];
    for i in 1..=UNITS {
        s.append_unit("t", &format!("f{i}"), &text(&format!("filler {i}")))
            .await
            .unwrap();
    }
    let probes = [
        ("spans", "Build FAILED in Login module"),
        ("scattered", "xabc bcd cde in logi gin"),
        ("cjk", "错误码 E42 是旧登录模块的故障"),
        ("cjk-scattered", "登录模 录模块"),
    ];
    for (id, t) in probes {
        s.append_unit("t", id, &text(t)).await.unwrap();
    }
    while s.fold_index_step(1000).await.unwrap() > 0 {}
    assert_eq!(s.index_backlog().await.unwrap(), 0);
    let hits = |found: Vec<agent_context::Unit>| -> Vec<String> {
        found.into_iter().map(|u| u.unit).collect()
    };
    for (term, want) in [
        ("d in lo", vec!["spans"]),
        ("FAILED IN LOGIN MODULE", vec!["spans"]),
        ("abcde", vec![]),
        ("abc bcd", vec!["scattered"]),
        ("login", vec!["spans"]),
        ("登录模块", vec!["cjk"]),
        ("旧登录模块的", vec!["cjk"]),
        ("录模", vec!["cjk", "cjk-scattered"]),
        ("模 录", vec!["cjk-scattered"]),
        ("模块的故", vec!["cjk"]),
        ("块的故障x", vec![]),
    ] {
        assert_eq!(
            hits(s.search("t", term, 1).await.unwrap()),
            want[..want.len().min(1)],
            "{term}, limit 1"
        );
        assert_eq!(hits(s.search("t", term, 10).await.unwrap()), want, "{term}");
    }
}

async fn appends_over_the_bound_fold_at_once(db: common::Db) {
    let s = &db.store;
    s.pause_index_fold(true).await.unwrap();
    s.append_unit("t", "u1", &unit(1)).await.unwrap();
    assert_eq!(
        s.index_backlog().await.unwrap(),
        0,
        "bound 0: indexed at once"
    );
    all_found(s, 1, "bound 0").await;
}

async fn tail_above_the_bound_is_folded_whole(db: common::Db) {
    let s = &db.store;
    s.pause_index_fold(true).await.unwrap();
    // Each unit's JSON is about 60 bytes; the bound is 1000.
    let mut n = 0;
    while s.index_backlog().await.unwrap() as usize == n {
        n += 1;
        s.append_unit("t", &format!("u{n}"), &unit(n))
            .await
            .unwrap();
        assert!(n < 100, "the tail never crossed its bound");
    }
    assert_eq!(s.index_backlog().await.unwrap(), 0);
    assert!(n > 5, "folded after {n} units");
    all_found(s, n, "after the bound").await;
}

async fn background_fold_catches_up(db: common::Db) {
    let s = &db.store;
    let batch: Vec<agent_context::NewUnit> = (1..=UNITS)
        .map(|i| agent_context::NewUnit {
            unit: format!("u{i}"),
            items: unit(i),
        })
        .collect();
    s.append_units("t", &batch).await.unwrap();
    all_found(s, UNITS, "just appended").await;
    // Waits for the fold task (an event, not a timing): each check is a cheap read.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while s.index_backlog().await.unwrap() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the background fold never caught up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    all_found(s, UNITS, "folded in the background").await;
}

/// Single appends (on `:memory:` they run on the caller's thread, not the writer's: the
/// writer thread must still learn that there is work and fold it when idle).
/// Two rounds: in the second the writer thread starts out waiting with nothing to do.
async fn background_fold_catches_up_after_single_appends(db: common::Db) {
    let s = &db.store;
    for (from, to) in [(1, UNITS / 2), (UNITS / 2 + 1, UNITS)] {
        for i in from..=to {
            s.append_unit("t", &format!("u{i}"), &unit(i))
                .await
                .unwrap();
        }
        all_found(s, to, "just appended").await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while s.index_backlog().await.unwrap() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the background fold never caught up (units 1..={to})"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        all_found(s, to, "folded in the background").await;
        // Long enough for the writer thread to find nothing left and wait untimed.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Appenders on several tasks at once, each unit searched and windowed as soon as it is
/// acknowledged; positions stay 1..=n, each once.
async fn concurrent_appends_are_found_at_once(db: common::Db) {
    let s = db.store.clone();
    let tasks: Vec<_> = (0..4)
        .map(|task| {
            let s = s.clone();
            tokio::spawn(async move {
                for k in 0..25 {
                    let i = task * 1000 + k;
                    let at = s
                        .append_unit("t", &format!("u{i}"), &unit(i))
                        .await
                        .unwrap()
                        .position;
                    let hits = s.search("t", &format!("tok-{i}-z"), 5).await.unwrap();
                    assert_eq!(positions(&hits), [at], "unit {i}");
                    let window = s.window("t", "g", 1000).await.unwrap();
                    assert!(positions(&window.recent_units).contains(&at), "unit {i}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let window = s.window("t", "g", 1000).await.unwrap();
    assert_eq!(
        positions(&window.recent_units),
        (1..=100).collect::<Vec<u64>>()
    );
}

agent_testkit::backend_tests!(common, [sqlite, postgres, memory]: found_at_every_point_of_the_fold);
agent_testkit::backend_tests!(common, [sqlite, postgres, memory]: index_hits_are_substrings_not_trigram_sets);
agent_testkit::backend_tests!(common, [sqlite, postgres, memory]: background_fold_catches_up);
agent_testkit::backend_tests!(common, [sqlite, postgres, memory]: background_fold_catches_up_after_single_appends);
agent_testkit::backend_tests!(common, [sqlite, postgres, memory]: concurrent_appends_are_found_at_once);
agent_testkit::backend_tests!(tail_0, [sqlite, postgres, memory]: appends_over_the_bound_fold_at_once);
agent_testkit::backend_tests!(tail_1000, [sqlite, postgres, memory]: tail_above_the_bound_is_folded_whole);

/// Stores whose index tail bound is 0 bytes: every append folds on the write path.
mod tail_0 {
    use agent_context::ContextOptions;

    use crate::common::{self, Db};

    fn options() -> ContextOptions {
        ContextOptions::default().index_tail_bytes(0)
    }

    pub async fn sqlite() -> Db {
        common::sqlite_with(options()).await
    }

    pub async fn postgres() -> Option<Db> {
        common::postgres_with(options()).await
    }

    pub async fn memory() -> Db {
        common::memory_with(options()).await
    }
}

/// Stores whose index tail bound is 1000 bytes.
mod tail_1000 {
    use agent_context::ContextOptions;

    use crate::common::{self, Db};

    fn options() -> ContextOptions {
        ContextOptions::default().index_tail_bytes(1000)
    }

    pub async fn sqlite() -> Db {
        common::sqlite_with(options()).await
    }

    pub async fn postgres() -> Option<Db> {
        common::postgres_with(options()).await
    }

    pub async fn memory() -> Db {
        common::memory_with(options()).await
    }
}

mod sqlite {
    use super::*;

    /// The index's `automerge` setting as FTS5 stores it (schema v4), if set.
    fn automerge(conn: &rusqlite::Connection) -> Option<i64> {
        use rusqlite::OptionalExtension as _;
        conn.query_row(
            "SELECT v FROM context_units_fts_config WHERE k = 'automerge'",
            [],
            |r| r.get(0),
        )
        .optional()
        .unwrap()
    }

    /// A new file's index merges 16 segments at a time (schema v4), a setting FTS5 keeps
    /// in the file: another process opening it uses the same.
    #[tokio::test]
    async fn new_index_merges_sixteen_segments_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let store = ContextStore::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        store.close().await;
        let conn = rusqlite::Connection::open(&path).unwrap();
        assert_eq!(automerge(&conn), Some(16));
    }

    /// How many FTS5 segments the index has (`_idx` holds a row per leaf page of each).
    fn segments(path: &std::path::Path) -> i64 {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row(
                "SELECT count(DISTINCT segid) FROM context_units_fts_idx",
                [],
                |r| r.get(0),
            )
            .unwrap()
    }

    /// Each fold writes an FTS5 segment, and folds leave merging to the idle writer
    /// (schema v4): once resumed, it merges them down to fewer than FTS5's `usermerge` of
    /// 4, reports the index settled, and every unit is found before, while and after it
    /// merges.
    #[tokio::test]
    async fn idle_writer_merges_the_segments_folds_wrote() {
        const FOLDS: usize = 12;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("merge.db");
        let store = ContextStore::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        store.pause_index_fold(true).await.unwrap();
        for i in 1..=FOLDS {
            store
                .append_unit("t", &format!("u{i}"), &unit(i))
                .await
                .unwrap();
            assert_eq!(store.fold_index_step(1).await.unwrap(), 1);
        }
        assert_eq!(
            segments(&path),
            FOLDS as i64,
            "one segment per fold, none merged"
        );
        assert!(!store.index_settled().await.unwrap());
        all_found(&store, FOLDS, "unmerged").await;
        store.pause_index_fold(false).await.unwrap();
        let started = std::time::Instant::now();
        while !store.index_settled().await.unwrap() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(20),
                "never settled"
            );
            all_found(&store, FOLDS, "while merging").await;
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let merged = segments(&path);
        assert!(merged < 4, "{merged} segments left");
        all_found(&store, FOLDS, "merged").await;
        store.close().await;
    }

    /// A file written by schema v1 (the trigger indexed every insert) opens, is migrated
    /// in place (v2 to v5), and every old unit is found (through the index: nothing is left
    /// to fold) beside new ones; the index merges as a new one does.
    #[tokio::test]
    async fn v1_database_upgrades_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(include_str!("../../migrations/sqlite/0001_context.sql"))
                .unwrap();
            conn.execute_batch(
                "CREATE TABLE context_schema (version INTEGER NOT NULL);
                 INSERT INTO context_schema (version) VALUES (1);
                 INSERT INTO context_threads (id, thread, last_seq) VALUES (1, 't', 3);",
            )
            .unwrap();
            for i in 1..=3i64 {
                let body = serde_json::to_string(&unit(i as usize)).unwrap();
                conn.execute(
                    "INSERT INTO context_units (id, unit, size, body, folded) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    rusqlite::params![
                        (1i64 << 32) | i,
                        format!("u{i}"),
                        body.len() as i64,
                        body,
                        agent_context::fold(&body)
                    ],
                )
                .unwrap();
            }
        }
        let url = format!("sqlite://{}", path.display());
        let store = ContextStore::open(&url).await.unwrap();
        store.pause_index_fold(true).await.unwrap();
        assert_eq!(store.index_backlog().await.unwrap(), 0);
        all_found(&store, 3, "upgraded").await;
        store.append_unit("t", "u4", &unit(4)).await.unwrap();
        all_found(&store, 4, "upgraded, then appended").await;
        store.close().await;
        let conn = rusqlite::Connection::open(&path).unwrap();
        let version: i64 = conn
            .query_row("SELECT max(version) FROM context_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 5);
        assert_eq!(automerge(&conn), Some(16));
        // The three v1 units are in the index (once each), the new one is not yet.
        let in_index: i64 = conn
            .query_row(
                "SELECT count(*) FROM context_units_fts WHERE context_units_fts MATCH '\"nee\"'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(in_index, 3);
    }

    /// A file written by schema v2 (an index with positions, `detail=full`) with a thread
    /// partly folded opens, is migrated in place (v3, v4, then v5): the new index holds exactly
    /// the units the old one did (at or below the watermark, once each) and merges as a new
    /// one does, the tail is folded later as before, and every unit is found at every point.
    #[tokio::test]
    async fn v2_database_upgrades_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v2.db");
        let folded_before = 40i64;
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(include_str!("../../migrations/sqlite/0001_context.sql"))
                .unwrap();
            conn.execute_batch(include_str!(
                "../../migrations/sqlite/0002_deferred_index.sql"
            ))
            .unwrap();
            conn.execute_batch(
                "CREATE TABLE context_schema (version INTEGER NOT NULL);
                 INSERT INTO context_schema (version) VALUES (1), (2);",
            )
            .unwrap();
            let mut tail = 0i64;
            for i in 1..=UNITS as i64 {
                let body = serde_json::to_string(&unit(i as usize)).unwrap();
                conn.execute(
                    "INSERT INTO context_units (id, unit, size, body, folded) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    rusqlite::params![
                        (1i64 << 32) | i,
                        format!("u{i}"),
                        body.len() as i64,
                        body,
                        agent_context::fold(&body)
                    ],
                )
                .unwrap();
                if i > folded_before {
                    tail += body.len() as i64;
                }
            }
            conn.execute(
                "INSERT INTO context_threads (id, thread, last_seq, indexed_seq, tail_bytes) \
                 VALUES (1, 't', ?1, ?2, ?3)",
                rusqlite::params![UNITS as i64, folded_before, tail],
            )
            .unwrap();
            // The v2 fold: the watermark's units into the index with positions.
            conn.execute(
                "INSERT INTO context_units_fts (rowid, folded) \
                 SELECT id, folded FROM context_units WHERE id <= ?1",
                [(1i64 << 32) | folded_before],
            )
            .unwrap();
        }
        let url = format!("sqlite://{}", path.display());
        let store = ContextStore::open(&url).await.unwrap();
        store.pause_index_fold(true).await.unwrap();
        let unfolded = UNITS as u64 - folded_before as u64;
        assert_eq!(store.index_backlog().await.unwrap(), unfolded);
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            let version: i64 = conn
                .query_row("SELECT max(version) FROM context_schema", [], |r| r.get(0))
                .unwrap();
            assert_eq!(version, 5);
            assert_eq!(automerge(&conn), Some(16));
            let (in_index, lowest, highest): (i64, i64, i64) = conn
                .query_row(
                    "SELECT count(*), min(rowid & 4294967295), max(rowid & 4294967295) \
                     FROM context_units_fts WHERE context_units_fts MATCH '\"nee\"'",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .unwrap();
            assert_eq!(
                (in_index, lowest, highest),
                (folded_before, 1, folded_before)
            );
        }
        all_found(&store, UNITS, "upgraded from v2").await;
        while store.fold_index_step(7).await.unwrap() > 0 {}
        assert_eq!(store.index_backlog().await.unwrap(), 0);
        all_found(&store, UNITS, "upgraded from v2, then folded").await;
        store.close().await;
    }
}

mod postgres {
    use super::*;

    /// A database written by schema v1 (a GIN index on `context_units`) is migrated to v2
    /// in place: its units are copied into the index table once, and found.
    #[tokio::test]
    async fn v1_database_upgrades_in_place() {
        let Some(db) = agent_testkit::fresh_pg_database("ctx_test").await else {
            return;
        };
        {
            use sqlx::Connection as _;
            let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
            sqlx::raw_sql(include_str!("../../migrations/postgres/0001_context.sql"))
                .execute(&mut conn)
                .await
                .unwrap();
            sqlx::raw_sql(
                "CREATE TABLE context_schema (version BIGINT NOT NULL);
                 INSERT INTO context_schema (version) VALUES (1);
                 INSERT INTO context_threads (id, thread, last_seq) VALUES (1, 't', 3);",
            )
            .execute(&mut conn)
            .await
            .unwrap();
            for i in 1..=3i64 {
                let body = serde_json::to_string(&unit(i as usize)).unwrap();
                sqlx::query(
                    "INSERT INTO context_units (thread_id, seq, unit, size, body, folded) \
                     VALUES (1, $1, $2, $3, $4, $5)",
                )
                .bind(i)
                .bind(format!("u{i}"))
                .bind(body.len() as i64)
                .bind(&body)
                .bind(agent_context::fold(&body))
                .execute(&mut conn)
                .await
                .unwrap();
            }
            conn.close().await.unwrap();
        }
        let store = ContextStore::open(db.url()).await.unwrap();
        store.pause_index_fold(true).await.unwrap();
        assert_eq!(store.index_backlog().await.unwrap(), 0);
        all_found(&store, 3, "upgraded").await;
        store.append_unit("t", "u4", &unit(4)).await.unwrap();
        assert_eq!(store.index_backlog().await.unwrap(), 1);
        all_found(&store, 4, "upgraded, then appended").await;
        store.close().await;
    }
}
