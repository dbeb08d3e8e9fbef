//! `journal_append` (PostgreSQL schema steps 4 and 5) called directly: its short paths for
//! one thread, one row, one head, one dedup key and one lease must answer exactly as its
//! general paths over arrays do. Each case is asked twice, once in the short shape and once
//! padded to two elements that mean the same (a lease or a head named twice, a second dedup
//! key nobody wrote), each call in a transaction rolled back after it, so every case sees
//! the same database: `NULL` where a check fails, the seqs where every one holds.

use agent_journal::{Journal, NewEvent};
use serde_json::json;
use sqlx::Connection as _;
use sqlx::postgres::PgConnection;

/// The seed the journal's writer keys thread locks with (any value serves here).
const SEED: i64 = 7;

/// The checks and rows of one call; `None` in a head or an epoch is SQL `NULL`.
#[derive(Clone, Default)]
struct Call {
    locks: Vec<&'static str>,
    heads: Vec<(&'static str, Option<i64>)>,
    dedups: Vec<(&'static str, &'static str)>,
    fences: Vec<(String, Option<i64>)>,
    rows: Vec<(&'static str, Option<&'static str>)>,
}

impl Call {
    fn row(thread: &'static str) -> Call {
        Call {
            locks: vec![thread],
            rows: vec![(thread, None)],
            ..Call::default()
        }
    }

    /// The same checks over two elements each (the general paths): every list that has
    /// one element gets it again, or, for dedup keys, a key nobody wrote.
    fn padded(&self) -> Call {
        let mut padded = self.clone();
        if let [lock] = self.locks[..] {
            padded.locks.push(lock);
        }
        if let [head] = self.heads[..] {
            padded.heads.push(head);
        }
        if let [(thread, _)] = self.dedups[..] {
            padded.dedups.push((thread, "never-written"));
        }
        if let [fence] = &self.fences[..] {
            padded.fences.push(fence.clone());
        }
        padded
    }
}

/// Runs `call` in a transaction that is rolled back: the seqs it wrote, or `None`.
async fn ask(conn: &mut PgConnection, call: &Call) -> Option<Vec<i64>> {
    let mut tx = conn.begin().await.unwrap();
    let column = |f: fn(&(&'static str, Option<&'static str>)) -> Option<String>| {
        call.rows.iter().map(f).collect::<Vec<_>>()
    };
    let seqs: Option<Vec<i64>> = sqlx::query_scalar(
        "SELECT journal_append($1, $2, false, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
    )
    .bind(SEED)
    .bind(&call.locks)
    .bind(call.heads.iter().map(|h| h.0).collect::<Vec<_>>())
    .bind(call.heads.iter().map(|h| h.1).collect::<Vec<_>>())
    .bind(call.dedups.iter().map(|d| d.0).collect::<Vec<_>>())
    .bind(call.dedups.iter().map(|d| d.1).collect::<Vec<_>>())
    .bind(call.fences.iter().map(|f| f.0.as_str()).collect::<Vec<_>>())
    .bind(call.fences.iter().map(|f| f.1).collect::<Vec<_>>())
    .bind(column(|r| Some(r.0.to_string())))
    .bind(call.rows.iter().map(|_| "k").collect::<Vec<_>>())
    .bind(call.rows.iter().map(|_| "{}").collect::<Vec<_>>())
    .bind(call.rows.iter().map(|_| 0_i64).collect::<Vec<_>>())
    .bind(column(|r| r.1.map(str::to_string)))
    .bind(call.rows.iter().map(|_| None::<i64>).collect::<Vec<_>>())
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    if let Some(seqs) = &seqs {
        // The rows are there, with the seqs returned, in row order.
        let written: Vec<(i64, String, Option<String>)> = sqlx::query_as(
            "SELECT seq, thread, dedup_key FROM journal_events WHERE seq = ANY($1) ORDER BY seq",
        )
        .bind(seqs)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
        let want: Vec<_> = seqs
            .iter()
            .zip(&call.rows)
            .map(|(seq, (thread, key))| (*seq, thread.to_string(), key.map(str::to_string)))
            .collect();
        assert_eq!(written, want);
    }
    tx.rollback().await.unwrap();
    seqs
}

#[tokio::test]
async fn short_paths_answer_as_the_general_paths_do() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_append_fn").await else {
        return;
    };
    let journal = Journal::open(db.url()).await.unwrap();
    let mut head = 0;
    for n in 0..3 {
        let mut event = NewEvent::new("a", "k", json!({ "n": n }));
        if n == 0 {
            event = event.with_dedup_key("written");
        }
        head = journal.append(event).await.unwrap().seq;
    }
    journal.offer_lease("run:L", &json!({})).await.unwrap();
    let lease = journal
        .claim_lease("run:", "me", std::time::Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let (name, epoch) = (lease.name.clone(), lease.epoch);
    journal.close().await;

    let with = |f: fn(&mut Call)| {
        let mut call = Call::row("a");
        f(&mut call);
        call
    };
    let cases: Vec<(&str, Call, bool)> = vec![
        ("a plain row", Call::row("a"), true),
        (
            "two rows of two threads",
            {
                let mut call = Call::row("a");
                call.locks.push("b");
                call.rows.push(("b", None));
                call
            },
            true,
        ),
        (
            "no head for a written thread",
            with(|c| c.heads = vec![("a", None)]),
            false,
        ),
        (
            "an empty thread's head",
            with(|c| c.heads = vec![("empty", None)]),
            true,
        ),
        (
            "a head one behind",
            with(|c| c.heads = vec![("a", Some(-1))]),
            false,
        ),
        (
            "a new dedup key",
            with(|c| {
                c.dedups = vec![("a", "new")];
                c.rows = vec![("a", Some("new"))];
            }),
            true,
        ),
        (
            "a written dedup key",
            with(|c| c.dedups = vec![("a", "written")]),
            false,
        ),
        (
            "the key written on another thread",
            with(|c| c.dedups = vec![("b", "written")]),
            true,
        ),
        (
            "a lease that does not exist",
            with(|c| c.fences = vec![("run:none".into(), Some(1))]),
            false,
        ),
    ];
    let mut conn = PgConnection::connect(db.url()).await.unwrap();
    let mut asked = 0;
    let mut check = async |label: &str, call: Call, writes: bool| {
        for (shape, call) in [("short", call.clone()), ("padded", call.padded())] {
            let got = ask(&mut conn, &call).await;
            assert_eq!(
                got.as_ref().map(Vec::len),
                writes.then_some(call.rows.len()),
                "{label}, {shape}: {got:?}"
            );
            if let Some(seqs) = got {
                assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{label}: {seqs:?}");
                assert!(seqs[0] > head, "{label}: {seqs:?}");
            }
            asked += 1;
        }
    };
    for (label, call, writes) in cases {
        check(label, call, writes).await;
    }
    // The cases that need values known only now.
    let at = |h: i64| {
        let mut call = Call::row("a");
        call.heads = vec![("a", Some(h))];
        call
    };
    check("the head as it is, named", at(head), true).await;
    check("a head one behind, named", at(head - 1), false).await;
    let fenced = |e: Option<i64>| {
        let mut call = Call::row("a");
        call.fences = vec![(name.clone(), e)];
        call
    };
    check("the lease at its epoch", fenced(Some(epoch)), true).await;
    check(
        "the lease at an older epoch",
        fenced(Some(epoch - 1)),
        false,
    )
    .await;
    check("the lease with no epoch", fenced(None), false).await;
    let mut all = fenced(Some(epoch));
    all.heads = vec![("a", Some(head))];
    all.dedups = vec![("a", "new")];
    all.rows = vec![("a", Some("new"))];
    check("every check holding", all, true).await;
    assert_eq!(asked, 2 * 15);
}
