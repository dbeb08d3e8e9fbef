//! Hostile use of the journal as a library: inputs at and past the limits, many producers
//! at once, leases pushed to their edges and operations after close, on every backend; and
//! PostgreSQL databases set up otherwise than the journal assumed (their collation,
//! encoding, isolation and timeouts, a pool of one read connection).

use crate::support;

use std::time::Duration;

use agent_journal::{
    Journal, JournalError, Lease, LeaseStatus, MAX_APPEND_BYTES, MAX_APPEND_THREADS,
    MAX_PAYLOAD_BYTES, NewEvent, Payload, Position,
};
use futures::StreamExt as _;
use serde_json::json;

use support::{Fixture, defaults};

agent_testkit::backend_tests!(defaults, [sqlite, postgres, memory]:
    an_append_of_more_than_the_size_limit_is_refused_and_one_within_it_written,
    an_append_to_more_than_the_thread_limit_is_refused_and_one_within_it_written,
    leases_take_the_longest_ttls_alike,
    names_holding_nul_are_refused_by_every_read_alike,
    a_closed_journal_refuses_every_later_operation_alike,
);
agent_testkit::backend_tests!(defaults, [sqlite, postgres]:
    a_read_only_journal_refuses_lease_writes_as_it_refuses_appends,
);
agent_testkit::backend_tests!(defaults, [postgres]:
    large_appends_too_many_for_one_statement_are_committed_in_several,
    a_database_s_lock_timeout_does_not_fail_the_writer,
    an_expected_version_append_conflicts_whatever_the_database_s_isolation,
    a_reader_opens_a_database_that_refuses_writes_read_only,
    names_are_listed_in_byte_order_whatever_the_database_s_collation,
);

/// A payload of the largest size, as JSON text.
fn largest_payload(n: usize) -> Payload {
    let n = format!("{n}");
    let text = format!("\"{}{n}\"", " ".repeat(MAX_PAYLOAD_BYTES - 2 - n.len()));
    assert_eq!(text.len(), MAX_PAYLOAD_BYTES);
    Payload::raw(serde_json::value::RawValue::from_string(text).unwrap())
}

fn largest(thread: &str, n: usize) -> NewEvent {
    NewEvent::new(thread, "big", largest_payload(n))
}

/// `MAX_APPEND_BYTES` bounds one call on every backend alike: past it the call is refused
/// before anything is written (on PostgreSQL it was one statement over the server's 1 GiB
/// and latched the writer); up to it, it is written whole.
async fn an_append_of_more_than_the_size_limit_is_refused_and_one_within_it_written(f: Fixture) {
    let j = &f.journal;
    let fits = MAX_APPEND_BYTES / (MAX_PAYLOAD_BYTES + 1024);
    let over: Vec<NewEvent> = (0..=fits).map(|n| largest("t", n)).collect();
    let err = j.append_batch(over.clone()).await.unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::InvalidInput {
                field: "events",
                ..
            }
        ),
        "{err}"
    );
    let err = j.append_expecting("t", None, over).await.unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::InvalidInput {
                field: "events",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(j.last_seq("t").await.unwrap(), None);

    let within: Vec<NewEvent> = (0..fits).map(|n| largest("t", n)).collect();
    let acks = j.append_batch(within).await.unwrap();
    assert_eq!(acks.len(), fits);
    assert!(!j.writer_failed());
    let events = j.replay("t", 0).await.unwrap();
    assert_eq!(events.len(), fits);
    assert_eq!(events[3].payload.as_str().unwrap().trim_start(), "3");
}

/// More than PostgreSQL takes in one statement (1 GiB), in one append or in many at once.
/// One append that large was sent as one statement, and many were written together by the
/// group commit: the server refused it by dropping the connection, and the writer latched
/// failed for good. Now the one append is refused (`MAX_APPEND_BYTES`), a batch stops taking
/// requests at `MAX_BATCH_BYTES`, and every one of the many appends is written.
async fn large_appends_too_many_for_one_statement_are_committed_in_several(f: Fixture) {
    let j = &f.journal;
    let appends = (1 << 30) / MAX_PAYLOAD_BYTES + 24;
    let one: Vec<NewEvent> = (0..appends).map(|n| largest("one", n)).collect();
    let err = j.append_batch(one).await.unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::InvalidInput {
                field: "events",
                ..
            }
        ),
        "{err}"
    );
    assert!(!j.writer_failed());
    let tasks: Vec<_> = (0..appends)
        .map(|n| {
            let (j, event) = (j.clone(), largest(&format!("t{}", n % 8), n));
            tokio::spawn(async move { j.append(event).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert!(!j.writer_failed());
    let stats = j.stats();
    assert_eq!(stats.events, appends as u64);
    assert!(stats.commits >= 32, "{stats:?}");
    let mut written = 0;
    for t in 0..8 {
        written += j.replay(&format!("t{t}"), 0).await.unwrap().len();
    }
    assert_eq!(written, appends);
}

fn refused(result: Result<impl std::fmt::Debug, JournalError>, field: &str) {
    match result {
        Err(JournalError::InvalidInput { field: got, .. }) if got == field => {}
        other => panic!("expected invalid {field}, got {other:?}"),
    }
}

/// A ttl as long as a `Duration` or an `i64` of ms can say: PostgreSQL added it to the
/// server's time in SQL, where `i64::MAX` ms overflowed into "bigint out of range", while
/// SQLite and `memory:` saturated. Now every backend caps it and holds the lease.
async fn leases_take_the_longest_ttls_alike(f: Fixture) {
    let j = &f.journal;
    let longest = Duration::from_millis(u64::try_from(i64::MAX).unwrap());
    j.offer_lease("l", &json!({})).await.unwrap();
    let lease = j.claim_lease("", "me", longest).await.unwrap().unwrap();
    assert!(lease.expires_at > i64::MAX / 8, "{lease:?}");
    for ttl in [longest, Duration::MAX, longest / 2] {
        let renewed = j.renew_lease(&lease, ttl, None).await.unwrap();
        assert!(renewed.expires_at > i64::MAX / 8, "{renewed:?}");
    }
    let again = j.reclaim_lease("l", "me", longest).await.unwrap().unwrap();
    assert_eq!(again.epoch, lease.epoch + 1);
    j.release_lease(&again, LeaseStatus::Open, &json!({}))
        .await
        .unwrap();
    let rows = j.leases("l").await.unwrap();
    assert_eq!(
        (rows[0].holder.as_deref(), rows[0].epoch),
        (None, again.epoch)
    );
}

/// A kind, dedup key or lease name holding NUL names nothing the journal can hold. On
/// PostgreSQL, which refuses NUL in text, each read that took one failed with a database
/// error while SQLite and `memory:` found nothing; now each is refused as bad input alike.
async fn names_holding_nul_are_refused_by_every_read_alike(f: Fixture) {
    let j = &f.journal;
    j.append(NewEvent::new("t", "k", json!({})).with_dedup_key("a"))
        .await
        .unwrap();
    refused(j.find_by_dedup_key("t", "a\0").await, "dedup key");
    refused(j.last_of_kind("t", "k\0").await, "kind");
    let first = j.tail_kind("t", "k\0", 0).next().await.unwrap();
    refused(first, "kind");
    refused(j.leases("l\0").await, "lease prefix");
    let ttl = Duration::from_secs(60);
    refused(j.claim_lease("l\0", "me", ttl).await, "lease prefix");
    let forged = Lease {
        name: "l\0".into(),
        holder: "me".into(),
        epoch: 1,
        expires_at: 0,
    };
    refused(j.renew_lease(&forged, ttl, None).await, "lease name");
    refused(
        j.release_lease(&forged, LeaseStatus::Open, &json!({}))
            .await,
        "lease name",
    );
    // Names without NUL still find what is there, and nothing where nothing is.
    assert_eq!(j.find_by_dedup_key("t", "a").await.unwrap().unwrap().seq, 1);
    assert!(j.find_by_dedup_key("t", "").await.unwrap().is_none());
    assert!(j.last_of_kind("t", "").await.unwrap().is_none());
    assert!(j.leases("").await.unwrap().is_empty());
}

/// `threads` and `leases` list names in byte order on SQLite and `memory:` (as Rust sorts
/// strings). PostgreSQL sorted them by the database's collation, which on a server
/// initialised with a language's locale (`en_US.UTF-8`, ICU) puts `run:a` before `run:B`
/// and ignores punctuation: the same journal listed in another order on each backend.
async fn names_are_listed_in_byte_order_whatever_the_database_s_collation(f: Fixture) {
    let j = &f.journal;
    // What a database created with a language's collation gives every text column.
    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&f.url)
        .await
        .unwrap();
    for column in [
        "journal_events ALTER COLUMN thread",
        "journal_leases ALTER COLUMN name",
    ] {
        let sql = format!("ALTER TABLE {column} TYPE text COLLATE \"en-US-x-icu\"");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let mut names = vec!["run:b", "run:B", "run:a-2", "run:a1", "run:_", "run:Z"];
    for name in &names {
        j.append(NewEvent::new(*name, "k", json!({})))
            .await
            .unwrap();
        j.offer_lease(name, &json!({})).await.unwrap();
    }
    names.sort_unstable();
    assert_eq!(j.threads().await.unwrap(), names);
    let leases: Vec<String> = j
        .leases("run:")
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(leases, names);
}

fn closed<T: std::fmt::Debug>(result: Result<T, JournalError>, what: &str) {
    assert!(
        matches!(result, Err(JournalError::Closed)),
        "{what} after close: {result:?}"
    );
}

/// After `close`, every operation on any clone fails with `Closed`, and tails end. On
/// SQLite the lease operations still wrote (a claim after close took a lease, with the
/// connection close was to have closed); on PostgreSQL reads and lease operations failed
/// with a database error about a closed pool; and every backend's tails yielded the error
/// at every poll, forever.
async fn a_closed_journal_refuses_every_later_operation_alike(f: Fixture) {
    let j = &f.journal;
    j.append(NewEvent::new("t", "k", json!({})).with_dedup_key("a"))
        .await
        .unwrap();
    j.offer_lease("l", &json!({})).await.unwrap();
    let mut tail = j.tail("t", 0);
    let mut kind_tail = j.tail_kind("t", "k", 0);
    let mut all = j.tail_all(Position::START);
    tail.next().await.unwrap().unwrap();
    kind_tail.next().await.unwrap().unwrap();
    all.next().await.unwrap().unwrap();
    let lease = j
        .claim_lease("", "me", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let clone: Journal = j.clone();
    j.close().await;

    let ttl = Duration::from_secs(60);
    closed(
        clone.append(NewEvent::new("t", "k", json!({}))).await,
        "append",
    );
    closed(clone.replay("t", 0).await, "replay");
    closed(clone.threads().await, "threads");
    closed(clone.last_seq("t").await, "last_seq");
    closed(clone.find_by_dedup_key("t", "a").await, "find_by_dedup_key");
    closed(clone.last_of_kind("t", "k").await, "last_of_kind");
    closed(clone.offer_lease("m", &json!({})).await, "offer_lease");
    closed(clone.put_lease("m", None, &json!({})).await, "put_lease");
    closed(clone.claim_lease("", "you", ttl).await, "claim_lease");
    closed(clone.reclaim_lease("l", "me", ttl).await, "reclaim_lease");
    closed(clone.renew_lease(&lease, ttl, None).await, "renew_lease");
    closed(
        clone
            .release_lease(&lease, LeaseStatus::Open, &json!({}))
            .await,
        "release_lease",
    );
    closed(clone.leases("").await, "leases");
    for (tail, what) in [(&mut tail, "tail"), (&mut kind_tail, "tail_kind")] {
        closed(tail.next().await.unwrap(), what);
        assert!(tail.next().await.is_none(), "{what} ends");
    }
    closed(all.next().await.unwrap(), "tail_all");
    assert!(all.next().await.is_none(), "tail_all ends");
}

/// A thread whose seqs end at the largest there is (a database edited by hand: appends
/// refuse to go past it with `SeqsExhausted`) still replays whole. A long replay is read
/// as seq ranges in parallel, and the last range's end was computed past `i64::MAX`: an
/// overflow panic in a debug build, and in a release build a wrapped, empty range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_long_replay_of_seqs_up_to_the_largest_is_whole() {
    let f = support::sqlite(Default::default()).await;
    let j = &f.journal;
    // Long enough to be read in parallel ranges; the rest after the first page spans an
    // even number of seqs, which took the last range one past its end.
    let events = 20_301;
    for chunk in (0..events).collect::<Vec<_>>().chunks(4000) {
        let batch = chunk
            .iter()
            .map(|n| NewEvent::new("t", "k", json!({ "n": n })))
            .collect();
        j.append_batch(batch).await.unwrap();
    }
    j.close().await;
    let path = f.url.strip_prefix("sqlite://").unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    let shift = i64::MAX - i64::try_from(events).unwrap();
    conn.execute("UPDATE journal_events SET seq = seq + ?1", [shift])
        .unwrap();
    conn.execute("UPDATE journal_head SET seq = ?1", [i64::MAX])
        .unwrap();
    drop(conn);

    let j = Journal::open(&f.url).await.unwrap();
    let replayed = j.replay("t", 0).await.unwrap();
    assert_eq!(replayed.len(), events);
    assert_eq!(replayed.last().unwrap().seq, i64::MAX);
    assert!(replayed.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    let err = j
        .append(NewEvent::new("t", "k", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, JournalError::SeqsExhausted { .. }), "{err}");
}

/// An append takes a PostgreSQL lock per thread it writes, from a lock table the whole
/// server shares: one append to 40,000 threads failed there with "out of shared memory"
/// and latched the writer. `MAX_APPEND_THREADS` bounds one append on every backend alike.
async fn an_append_to_more_than_the_thread_limit_is_refused_and_one_within_it_written(f: Fixture) {
    let j = &f.journal;
    let to = |threads: usize| -> Vec<NewEvent> {
        (0..threads)
            .map(|n| NewEvent::new(format!("t{n}"), "k", json!({})))
            .collect()
    };
    let err = j.append_batch(to(40_000)).await.unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::InvalidInput {
                field: "events",
                ..
            }
        ),
        "{err}"
    );
    let err = j
        .append_batch(to(MAX_APPEND_THREADS + 1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::InvalidInput {
                field: "events",
                ..
            }
        ),
        "{err}"
    );
    assert!(j.threads().await.unwrap().is_empty());
    // Many events of few threads are not many threads.
    let mut within = to(MAX_APPEND_THREADS);
    within.extend(to(MAX_APPEND_THREADS));
    assert_eq!(
        j.append_batch(within).await.unwrap().len(),
        2 * MAX_APPEND_THREADS
    );
    assert!(!j.writer_failed());
    assert_eq!(j.threads().await.unwrap().len(), MAX_APPEND_THREADS);
}

/// On PostgreSQL the first tail starts the journal's LISTEN connection, held for as long as
/// the journal is open. It was taken from the read pool: with `read_connections: 1` (the
/// least the option takes) it held the only one, and every read after it, the tail's own
/// included, waited for a connection until it timed out, for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_tail_leaves_every_read_connection_to_reads() {
    let options = agent_journal::JournalOptions {
        read_connections: 1,
        ..Default::default()
    };
    let Some(f) = support::postgres(options).await else {
        return;
    };
    let j = &f.journal;
    j.append(NewEvent::new("t", "k", json!({}))).await.unwrap();
    let mut tail = j.tail("t", 0);
    let first = tokio::time::timeout(Duration::from_secs(20), tail.next())
        .await
        .expect("the tail's read waited")
        .unwrap();
    assert_eq!(first.unwrap().seq, 1);
    let read = tokio::time::timeout(Duration::from_secs(20), j.replay("t", 0)).await;
    assert_eq!(read.expect("a read waited").unwrap().len(), 1);
    assert!(j.leases("").await.unwrap().is_empty());
    // The tail still sees what comes next.
    let other = Journal::open(&f.url).await.unwrap();
    other
        .append(NewEvent::new("t", "k", json!({})))
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(20), tail.next())
        .await
        .expect("the tail saw nothing")
        .unwrap();
    assert_eq!(next.unwrap().seq, 2);
    other.close().await;
    j.close().await;
}

fn read_only<T: std::fmt::Debug>(result: Result<T, JournalError>, what: &str) {
    assert!(
        matches!(result, Err(JournalError::ReadOnly { .. })),
        "{what} on a read-only journal: {result:?}"
    );
}

/// A journal opened read-only refuses appends with `ReadOnly`; its lease writes reached
/// the database, which refused them with an error of its own (SQLite: "attempt to write a
/// readonly database", PostgreSQL: "cannot execute INSERT in a read-only transaction").
/// Now they are refused as appends are, before reaching it, and reads still answer.
async fn a_read_only_journal_refuses_lease_writes_as_it_refuses_appends(f: Fixture) {
    let ttl = Duration::from_secs(60);
    f.journal.offer_lease("l", &json!({})).await.unwrap();
    let lease = f.journal.claim_lease("", "me", ttl).await.unwrap().unwrap();
    let j = Journal::open_read_only(&f.url).await.unwrap();
    read_only(j.append(NewEvent::new("t", "k", json!({}))).await, "append");
    read_only(j.offer_lease("m", &json!({})).await, "offer_lease");
    read_only(j.put_lease("m", None, &json!({})).await, "put_lease");
    read_only(j.claim_lease("", "you", ttl).await, "claim_lease");
    read_only(j.reclaim_lease("l", "me", ttl).await, "reclaim_lease");
    read_only(j.renew_lease(&lease, ttl, None).await, "renew_lease");
    read_only(
        j.release_lease(&lease, LeaseStatus::Open, &json!({})).await,
        "release_lease",
    );
    let rows = j.leases("").await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].holder.as_deref(), rows[0].epoch),
        (Some("me"), lease.epoch)
    );
    j.close().await;
}

/// The seed of the hash that keys a thread's lock (`backend/postgres/append.rs`).
const THREAD_LOCK_SEED: i64 = 0x6a6e_6c74_6872_6561;

/// A database whose sessions default to a `lock_timeout` (or `statement_timeout`), as a
/// DBA may set: the writer's append waiting for a thread's lock that another process's
/// writer holds timed out, and the writer latched failed for good, though nothing was
/// wrong but a wait. The writer's session now sets neither: its waits are bounded by the
/// other writers' `idle_in_transaction_session_timeout`.
async fn a_database_s_lock_timeout_does_not_fail_the_writer(f: Fixture) {
    let mut admin = agent_testkit::set_database_defaults(
        &f.url,
        &[("lock_timeout", "'1ms'"), ("statement_timeout", "'2s'")],
    )
    .await;
    // Its sessions take the defaults when they connect.
    let j = Journal::open(&f.url).await.unwrap();
    // Another writer holds thread `t`.
    sqlx::query("SELECT pg_advisory_lock(hashtextextended('t', $1))")
        .bind(THREAD_LOCK_SEED)
        .execute(&mut admin)
        .await
        .unwrap();
    let append = tokio::spawn({
        let j = j.clone();
        async move { j.append(NewEvent::new("t", "k", json!({}))).await }
    });
    // Until the append has waited for the lock well past the timeouts' 1 ms (or ended).
    while !append.is_finished() {
        let waited: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event = 'advisory' AND clock_timestamp() - query_start > interval '50 ms')",
        )
        .fetch_one(&mut admin)
        .await
        .unwrap();
        if waited {
            break;
        }
    }
    sqlx::query("SELECT pg_advisory_unlock_all()")
        .execute(&mut admin)
        .await
        .unwrap();
    let appended = tokio::time::timeout(Duration::from_secs(20), append)
        .await
        .unwrap()
        .unwrap();
    assert!(appended.is_ok(), "{appended:?}");
    assert!(!j.writer_failed());
    j.append(NewEvent::new("t", "k", json!({}))).await.unwrap();
    j.close().await;
}

/// Until the writer of `db`'s journal waits for a thread's lock (or `task` ended).
async fn until_a_writer_waits<T>(
    admin: &mut sqlx::PgConnection,
    task: &tokio::task::JoinHandle<T>,
) {
    while !task.is_finished() {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event = 'advisory')",
        )
        .fetch_one(&mut *admin)
        .await
        .unwrap();
        if waiting {
            return;
        }
    }
}

/// The writer reads a thread's head (and dedup keys) after taking the thread's lock, in a
/// snapshot taken after it: READ COMMITTED. A database whose sessions default to
/// REPEATABLE READ (or SERIALIZABLE), as a DBA may set, gave the writer one snapshot for
/// the whole transaction, taken before the lock: an append expecting the head that
/// another process's commit had just moved, made while it waited for that lock, read the
/// old head and was written (a lost update), instead of failing with `Conflict`.
async fn an_expected_version_append_conflicts_whatever_the_database_s_isolation(f: Fixture) {
    let mut admin = agent_testkit::set_database_defaults(
        &f.url,
        &[("default_transaction_isolation", "'repeatable read'")],
    )
    .await;
    let j = Journal::open(&f.url).await.unwrap();
    let head = j
        .append(NewEvent::new("t", "k", json!({})))
        .await
        .unwrap()
        .seq;
    // Another process's writer, mid-commit on thread `t`.
    let mut other = <sqlx::PgConnection as sqlx::Connection>::connect(&f.url)
        .await
        .unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut other).await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('t', $1))")
        .bind(THREAD_LOCK_SEED)
        .execute(&mut other)
        .await
        .unwrap();
    let theirs: i64 = sqlx::query_scalar(
        "INSERT INTO journal_events (seq, thread, kind, payload, at, tx) \
         VALUES (nextval('journal_seq'), 't', 'k', '{}', 0, pg_current_xact_id()::text::bigint) \
         RETURNING seq",
    )
    .fetch_one(&mut other)
    .await
    .unwrap();
    let expecting = tokio::spawn({
        let j = j.clone();
        async move {
            let event = NewEvent::new("t", "k", json!({"expects": head}));
            j.append_expecting("t", Some(head), vec![event]).await
        }
    });
    until_a_writer_waits(&mut admin, &expecting).await;
    sqlx::raw_sql("COMMIT").execute(&mut other).await.unwrap();
    let result = expecting.await.unwrap();
    match result {
        Err(JournalError::Conflict {
            expected, actual, ..
        }) => {
            assert_eq!((expected, actual), (Some(head), Some(theirs)));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(j.replay("t", 0).await.unwrap().len(), 2);
    j.close().await;
}

/// A reading command on a hot standby, or as a role whose transactions are read-only,
/// failed at open: `open_for_reading` tried to write the schema. It opens such a database
/// read-only now (appends refused), and reads what is there.
async fn a_reader_opens_a_database_that_refuses_writes_read_only(f: Fixture) {
    let j = Journal::open(&f.url).await.unwrap();
    j.append(NewEvent::new("t", "k", json!({"n": 1})))
        .await
        .unwrap();
    j.close().await;
    agent_testkit::set_database_defaults(&f.url, &[("default_transaction_read_only", "on")]).await;
    let j = Journal::open_for_reading(&f.url).await.unwrap();
    assert!(j.is_read_only());
    assert_eq!(j.replay("t", 0).await.unwrap()[0].payload["n"], 1);
    let err = j
        .append(NewEvent::new("t", "k", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, JournalError::ReadOnly { .. }), "{err}");
    j.close().await;
    // A writer is told why, as before.
    assert!(Journal::open(&f.url).await.is_err());
}

/// Thread names, kinds and payloads are any Unicode; a database whose encoding cannot hold
/// it all (LATIN1) refused an event of CJK text when the writer sent it, and the writer
/// latched failed for good. Such a database is now refused when the journal opens, saying
/// why; one that can (UTF8) takes every character.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_database_that_cannot_hold_every_character_is_refused_at_open() {
    let Some(latin1) = agent_testkit::fresh_pg_database_encoded("journal_enc", "LATIN1").await
    else {
        return;
    };
    let err = Journal::open(latin1.url()).await.unwrap_err();
    assert!(matches!(err, JournalError::Open { .. }), "{err}");
    assert!(err.to_string().contains("LATIN1"), "{err}");
    let err = Journal::open_read_only(latin1.url()).await.unwrap_err();
    assert!(err.to_string().contains("LATIN1"), "{err}");

    let Some(utf8) = agent_testkit::fresh_pg_database_encoded("journal_enc", "UTF8").await else {
        return;
    };
    let j = Journal::open(utf8.url()).await.unwrap();
    let event = NewEvent::new("线程", "种类", json!({"text": "日本語 😀"}));
    j.append(event).await.unwrap();
    assert_eq!(
        j.replay("线程", 0).await.unwrap()[0].payload["text"],
        "日本語 😀"
    );
    j.close().await;
}

/// Two journals on one file, or a tool, take SQLite's write lock in turn. One that held it
/// past the other's `busy_timeout` made that journal's next commit fail to begin, and its
/// writer latched failed for good, though nothing had been written and the connection was
/// fine (lease writes on it went on). Now that batch alone fails, with the database's
/// error, and the journal writes again once the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_write_lock_held_elsewhere_fails_the_appends_meanwhile_only() {
    let options = agent_journal::JournalOptions {
        busy_timeout: Duration::from_millis(50),
        ..Default::default()
    };
    let f = support::sqlite(options).await;
    let j = &f.journal;
    j.append(NewEvent::new("t", "k", json!({"n": 0})))
        .await
        .unwrap();
    let other = rusqlite::Connection::open(f.url.strip_prefix("sqlite://").unwrap()).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let refused = j.append(NewEvent::new("t", "k", json!({"n": 1}))).await;
    assert!(
        matches!(refused, Err(JournalError::Database(_))),
        "{refused:?}"
    );
    assert!(!j.writer_failed());
    other.execute_batch("COMMIT").unwrap();
    let written = j
        .append(NewEvent::new("t", "k", json!({"n": 2})))
        .await
        .unwrap();
    assert_eq!(written.seq, 2);
    let ns: Vec<i64> = j
        .replay("t", 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.payload["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns, [0, 2]);
}
