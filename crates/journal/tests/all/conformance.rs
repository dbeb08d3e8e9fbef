//! The journal's contracts, run against SQLite and PostgreSQL alike.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use agent_journal::{
    Durability, Event, Journal, JournalError, JournalOptions, NewEvent, Payload, Position,
};
use futures::StreamExt as _;
use serde_json::json;

use support::{Fixture, defaults};

agent_testkit::backend_tests!(defaults, [sqlite, postgres, memory]:
        seq_increases_and_replay_filters_by_thread_and_after,
        batch_is_atomic_consecutive_and_ordered,
        dedup_key_returns_first_seq_and_writes_nothing,
        concurrent_appends_are_group_committed_in_ack_order,
        bad_input_is_refused_and_writes_nothing,
        replay_stream_pages_through_long_threads,
        replay_is_whole_on_either_side_of_a_page,
        long_replays_are_whole_when_the_thread_thins_or_thickens,
        tail_yields_existing_then_new_events,
        threads_and_last_seq,
        last_of_kind_finds_the_newest_event_of_a_kind_in_its_thread,
        close_refuses_later_appends,
        unicode_and_nested_payloads_round_trip,
        encoded_payloads_read_back_as_values,
        payloads_with_serde_json_private_keys_read_back_as_appended,
        payloads_too_deep_to_read_back_are_refused,
        append_expecting_none_succeeds_on_a_fresh_thread_only,
        append_expecting_the_last_seq_succeeds_and_a_stale_one_writes_nothing,
        append_expecting_keeps_dedup_keys_and_refuses_other_threads,
        concurrent_appenders_expecting_the_same_seq_exactly_one_wins,
        conflicts_in_a_group_commit_leave_the_other_appends_written,
        dropped_appends_and_replays_leave_the_journal_consistent,
        tail_all_yields_every_thread_in_order_and_resumes,
);
// Reopening the same URL: not for the in-process `memory:` journal.
agent_testkit::backend_tests!(defaults, [sqlite, postgres]: reopen_keeps_every_event, relaxed_appends_commit_in_order_and_are_counted);

fn ev(thread: &str, kind: &str, n: i64) -> NewEvent {
    NewEvent::new(thread, kind, json!({ "n": n }))
}

async fn seq_increases_and_replay_filters_by_thread_and_after(f: Fixture) {
    let j = &f.journal;
    let mut seqs = Vec::new();
    for n in 0..10 {
        let thread = if n % 2 == 0 { "a" } else { "b" };
        seqs.push(j.append(ev(thread, "k", n)).await.unwrap().seq);
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let a = j.replay("a", 0).await.unwrap();
    assert_eq!(a.len(), 5);
    assert!(a.iter().all(|e| &*e.thread == "a"));
    assert_eq!(
        a.iter()
            .map(|e| e.payload["n"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        vec![0, 2, 4, 6, 8]
    );
    let after = a[2].seq;
    let tail = j.replay("a", after).await.unwrap();
    assert_eq!(
        tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![a[3].seq, a[4].seq]
    );
    assert!(j.replay("nobody", 0).await.unwrap().is_empty());
    assert!(a.iter().all(|e| e.at > 1_600_000_000_000));
}

async fn batch_is_atomic_consecutive_and_ordered(f: Fixture) {
    let j = &f.journal;
    j.append(ev("t", "first", 0)).await.unwrap();
    let acks = j
        .append_batch((1..=50).map(|n| ev("t", "batch", n)).collect())
        .await
        .unwrap();
    let seqs: Vec<i64> = acks.iter().map(|a| a.seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "not consecutive: {seqs:?}"
    );
    // An invalid event anywhere in a batch refuses the whole batch.
    let mut bad: Vec<NewEvent> = (0..5).map(|n| ev("t", "never", n)).collect();
    bad.push(NewEvent::new("", "never", json!({})));
    assert!(matches!(
        j.append_batch(bad).await,
        Err(JournalError::InvalidInput {
            field: "thread",
            ..
        })
    ));
    let all = j.replay("t", 0).await.unwrap();
    assert_eq!(all.len(), 51);
    assert!(all.iter().all(|e| &*e.kind != "never"));
}

async fn dedup_key_returns_first_seq_and_writes_nothing(f: Fixture) {
    let j = &f.journal;
    let first = j
        .append(ev("t", "launch", 1).with_dedup_key("call-1"))
        .await
        .unwrap();
    assert!(!first.deduplicated);
    let again = j
        .append(ev("t", "launch", 2).with_dedup_key("call-1"))
        .await
        .unwrap();
    assert_eq!(again.seq, first.seq);
    assert!(again.deduplicated);
    // Same key on another thread is independent.
    let other = j
        .append(ev("u", "launch", 3).with_dedup_key("call-1"))
        .await
        .unwrap();
    assert!(!other.deduplicated);
    // Within one batch, the first occurrence wins.
    let acks = j
        .append_batch(vec![
            ev("t", "launch", 4).with_dedup_key("call-2"),
            ev("t", "launch", 5).with_dedup_key("call-2"),
            ev("t", "launch", 6).with_dedup_key("call-1"),
        ])
        .await
        .unwrap();
    assert_eq!(acks[1].seq, acks[0].seq);
    assert!(acks[1].deduplicated && acks[2].deduplicated);
    assert_eq!(acks[2].seq, first.seq);
    let events = j.replay("t", 0).await.unwrap();
    assert_eq!(
        events
            .iter()
            .map(|e| e.payload["n"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        vec![1, 4]
    );
    let found = j.find_by_dedup_key("t", "call-2").await.unwrap().unwrap();
    assert_eq!(found.seq, acks[0].seq);
    assert_eq!(found.dedup_key.as_deref(), Some("call-2"));
    assert!(j.find_by_dedup_key("t", "missing").await.unwrap().is_none());
}

async fn last_of_kind_finds_the_newest_event_of_a_kind_in_its_thread(f: Fixture) {
    let j = &f.journal;
    assert!(j.last_of_kind("t", "mark").await.unwrap().is_none());
    // Across chunks of the in-memory log and pages of the databases: 2,500 events.
    let mut marks = Vec::new();
    for n in 0..2500 {
        let kind = if n % 700 == 3 { "mark" } else { "step" };
        let seq = j.append(ev("t", kind, n)).await.unwrap().seq;
        if kind == "mark" {
            marks.push((seq, n));
        }
        // Another thread's newer marks are not this thread's.
        if n % 900 == 0 {
            j.append(ev("u", "mark", -n)).await.unwrap();
        }
    }
    let (seq, n) = *marks.last().unwrap();
    let found = j.last_of_kind("t", "mark").await.unwrap().unwrap();
    assert_eq!((found.seq, found.payload["n"].as_i64().unwrap()), (seq, n));
    assert_eq!(&*found.thread, "t");
    assert_eq!(&*found.kind, "mark");
    let last_step = j.last_of_kind("t", "step").await.unwrap().unwrap();
    assert_eq!(last_step.payload["n"].as_i64().unwrap(), 2499);
    assert!(j.last_of_kind("t", "none").await.unwrap().is_none());
    assert!(j.last_of_kind("nobody", "mark").await.unwrap().is_none());
    assert_eq!(
        j.last_of_kind("u", "mark").await.unwrap().unwrap().payload["n"],
        json!(-1800)
    );
}

async fn concurrent_appends_are_group_committed_in_ack_order(f: Fixture) {
    let j = f.journal.clone();
    let producers = 64;
    let per = 40;
    let mut tasks = Vec::new();
    for p in 0..producers {
        let j = j.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for n in 0..per {
                let ack = j
                    .append(NewEvent::new("c", "e", json!({ "p": p, "n": n })))
                    .await
                    .unwrap();
                seqs.push(ack.seq);
            }
            seqs
        }));
    }
    let mut by_producer = HashMap::new();
    for (p, task) in tasks.into_iter().enumerate() {
        by_producer.insert(p as i64, task.await.unwrap());
    }
    // Each producer's acks come back in increasing seq order (ack order = seq order).
    for seqs in by_producer.values() {
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    }
    let events = j.replay("c", 0).await.unwrap();
    assert_eq!(events.len(), (producers * per) as usize);
    for e in &events {
        let p = e.payload["p"].as_i64().unwrap();
        let n = e.payload["n"].as_i64().unwrap() as usize;
        assert_eq!(
            by_producer[&p][n], e.seq,
            "ack for ({p},{n}) names another event"
        );
    }
    // Seqs in the journal are unique and increasing.
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
}

async fn bad_input_is_refused_and_writes_nothing(f: Fixture) {
    let j = &f.journal;
    let cases = vec![
        (NewEvent::new("", "k", json!({})), "thread"),
        (NewEvent::new("x".repeat(257), "k", json!({})), "thread"),
        (NewEvent::new("t", "", json!({})), "kind"),
        (
            NewEvent::new("t", "k", json!({})).with_dedup_key(""),
            "dedup key",
        ),
        (
            NewEvent::new("t", "k", json!({ "big": "x".repeat(4 * 1024 * 1024) })),
            "payload",
        ),
        (
            NewEvent::new("t", "k", json!({ "nul": "a\u{0}b" })),
            "payload",
        ),
    ];
    for (event, field) in cases {
        match j.append(event).await {
            Err(JournalError::InvalidInput { field: got, reason }) => {
                assert_eq!(got, field);
                assert!(!reason.is_empty());
            }
            other => panic!("expected InvalidInput for {field}, got {other:?}"),
        }
    }
    assert!(matches!(
        j.replay("", 0).await,
        Err(JournalError::InvalidInput {
            field: "thread",
            ..
        })
    ));
    // The streaming reads refuse it too, as their first and only item.
    for mut stream in [j.replay_stream("", 0), j.tail(&"x".repeat(257), 0)] {
        assert!(matches!(
            stream.next().await,
            Some(Err(JournalError::InvalidInput {
                field: "thread",
                ..
            }))
        ));
        assert!(stream.next().await.is_none());
    }
    assert!(j.threads().await.unwrap().is_empty());
    // The journal still works after refusing bad input.
    j.append(ev("t", "k", 1)).await.unwrap();
    assert_eq!(j.replay("t", 0).await.unwrap().len(), 1);
}

async fn replay_stream_pages_through_long_threads(f: Fixture) {
    let j = &f.journal;
    for chunk in 0..5 {
        j.append_batch((0..700).map(|n| ev("long", "e", chunk * 700 + n)).collect())
            .await
            .unwrap();
        j.append(ev("other", "e", chunk)).await.unwrap();
    }
    let streamed: Vec<_> = j
        .replay_stream("long", 0)
        .map(|e| e.unwrap())
        .collect()
        .await;
    let replayed = j.replay("long", 0).await.unwrap();
    assert_eq!(streamed.len(), 3500);
    assert_eq!(streamed, replayed);
    let after = replayed[1999].seq;
    let rest: Vec<_> = j
        .replay_stream("long", after)
        .map(|e| e.unwrap())
        .collect()
        .await;
    assert_eq!(rest.len(), 1500);
    assert_eq!(rest[0].seq, replayed[2000].seq);
}

/// A replay reads a first page, then the rest: every count around a page comes back whole
/// and in order, with another thread's events in between.
async fn replay_is_whole_on_either_side_of_a_page(f: Fixture) {
    let j = &f.journal;
    for total in [255, 256, 257, 512, 513] {
        let thread = format!("p{total}");
        let mut written = 0;
        while written < total {
            let upto = (written + 64).min(total);
            j.append_batch((written..upto).map(|n| ev(&thread, "e", n)).collect())
                .await
                .unwrap();
            j.append(ev("noise", "e", written)).await.unwrap();
            written = upto;
        }
        replays_whole(j, &thread, total, 100).await;
    }
}

/// Replays `thread` and checks it holds events 0..`total` in seq order, and that a replay
/// after its event `cut` is the rest.
async fn replays_whole(j: &Journal, thread: &str, total: i64, cut: usize) {
    let replayed = j.replay(thread, 0).await.unwrap();
    let ns: Vec<i64> = replayed
        .iter()
        .map(|e| e.payload["n"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ns,
        (0..total).collect::<Vec<i64>>(),
        "{thread}: {total} events"
    );
    assert!(replayed.windows(2).all(|w| w[0].seq < w[1].seq));
    let after = replayed[cut].seq;
    assert_eq!(j.replay(thread, after).await.unwrap(), replayed[cut + 1..]);
}

/// A long replay is read in ranges (in parallel on SQLite) sized from its first page's
/// share of the journal: a thread that turns sparse after it (the ranges sized too large)
/// or dense (too small) still comes back whole and in order.
async fn long_replays_are_whole_when_the_thread_thins_or_thickens(f: Fixture) {
    let j = &f.journal;
    // (events of the thread, noise events after each) for each stretch.
    let shapes = [
        ("thins", [(300, 0), (6_000, 4)]),
        ("thickens", [(300, 9), (25_000, 0)]),
    ];
    for (thread, stretches) in shapes {
        let mut batch = Vec::new();
        let mut n = 0;
        for (events, noise) in stretches {
            for _ in 0..events {
                batch.push(ev(thread, "e", n));
                batch.extend((0..noise).map(|k| ev("noise", "e", k)));
                n += 1;
                if batch.len() >= 2_000 {
                    j.append_batch(std::mem::take(&mut batch)).await.unwrap();
                }
            }
        }
        j.append_batch(batch).await.unwrap();
        replays_whole(j, thread, n, 1_000).await;
    }
}

async fn tail_yields_existing_then_new_events(f: Fixture) {
    let j = f.journal.clone();
    j.append(ev("live", "e", 0)).await.unwrap();
    j.append(ev("live", "e", 1)).await.unwrap();
    let mut tail = j.tail("live", 0);
    for n in 0..2 {
        let e = tail.next().await.unwrap().unwrap();
        assert_eq!(e.payload["n"], n);
    }
    let writer = j.clone();
    let appends = tokio::spawn(async move {
        for n in 2..20 {
            writer.append(ev("live", "e", n)).await.unwrap();
            writer.append(ev("noise", "e", n)).await.unwrap();
        }
    });
    for n in 2..20 {
        let e = next_within(&mut tail, "tail stalled").await;
        assert_eq!(&*e.thread, "live");
        assert_eq!(e.payload["n"], n);
    }
    appends.await.unwrap();
}

/// The whole journal, existing events then new ones, each once, in position order (each
/// thread's in seq order); a tail resumed after a position goes on from there.
async fn tail_all_yields_every_thread_in_order_and_resumes(f: Fixture) {
    let j = f.journal.clone();
    let mut acks = Vec::new();
    for n in 0..6 {
        let thread = ["a", "b", "c"][n as usize % 3];
        acks.push(j.append(ev(thread, "e", n)).await.unwrap().seq);
    }
    acks.extend(
        j.append_batch(vec![ev("b", "e", 6), ev("a", "e", 7)])
            .await
            .unwrap()
            .iter()
            .map(|a| a.seq),
    );
    let mut tail = j.tail_all(Position::START);
    let mut positions = Vec::new();
    for (n, seq) in acks.iter().enumerate() {
        let (position, event) = tail.next().await.unwrap().unwrap();
        assert_eq!(
            (event.seq, event.payload["n"].as_i64()),
            (*seq, Some(n as i64))
        );
        assert_eq!(position.seq, event.seq);
        positions.push(position);
    }
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    let mut resumed = j.tail_all(positions[4]);
    for seq in &acks[5..] {
        assert_eq!(resumed.next().await.unwrap().unwrap().1.seq, *seq);
    }
    // New events reach both tails, from this process's commits.
    let writer = j.clone();
    let appends = tokio::spawn(async move {
        let mut seqs = Vec::new();
        for n in 8..20 {
            let thread = if n % 2 == 0 { "new" } else { "a" };
            seqs.push(writer.append(ev(thread, "e", n)).await.unwrap().seq);
        }
        seqs
    });
    let mut from_tail = Vec::new();
    let mut from_resumed = Vec::new();
    for _ in 8..20 {
        let next = tokio::time::timeout(Duration::from_secs(30), tail.next());
        from_tail.push(
            next.await
                .expect("tail_all stalled")
                .unwrap()
                .unwrap()
                .1
                .seq,
        );
        let next = tokio::time::timeout(Duration::from_secs(30), resumed.next());
        from_resumed.push(
            next.await
                .expect("tail_all stalled")
                .unwrap()
                .unwrap()
                .1
                .seq,
        );
    }
    let appended = appends.await.unwrap();
    assert_eq!(from_tail, appended);
    assert_eq!(from_resumed, appended);
}

fn conflict_of(
    result: Result<Vec<agent_journal::Appended>, JournalError>,
) -> (String, Option<i64>, Option<i64>) {
    match result {
        Err(JournalError::Conflict {
            thread,
            expected,
            actual,
        }) => (thread, expected, actual),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

async fn append_expecting_none_succeeds_on_a_fresh_thread_only(f: Fixture) {
    let j = &f.journal;
    j.append(ev("other", "k", 0)).await.unwrap();
    let acks = j
        .append_expecting("t", None, vec![ev("t", "a", 1), ev("t", "a", 2)])
        .await
        .unwrap();
    assert_eq!(acks.len(), 2);
    assert_eq!(acks[1].seq, acks[0].seq + 1);
    let again = j.append_expecting("t", None, vec![ev("t", "a", 3)]).await;
    assert_eq!(
        conflict_of(again),
        ("t".to_string(), None, Some(acks[1].seq))
    );
    let events = j.replay("t", 0).await.unwrap();
    assert_eq!(events.len(), 2);
    // The acks carry what a read returns, so a writer can fold its own events unread.
    let acked: Vec<(i64, i64)> = acks.iter().map(|a| (a.seq, a.at)).collect();
    let read: Vec<(i64, i64)> = events.iter().map(|e| (e.seq, e.at)).collect();
    assert_eq!(acked, read);
    assert!(acks[0].at > 0);
}

async fn append_expecting_the_last_seq_succeeds_and_a_stale_one_writes_nothing(f: Fixture) {
    let j = &f.journal;
    let first = j.append(ev("t", "a", 0)).await.unwrap().seq;
    // Events of other threads in between do not move `t`.
    j.append(ev("u", "a", 0)).await.unwrap();
    let second = j
        .append_expecting("t", Some(first), vec![ev("t", "b", 1)])
        .await
        .unwrap()[0]
        .seq;
    assert!(second > first);
    let stale = j
        .append_expecting(
            "t",
            Some(first),
            vec![ev("t", "never", 2), ev("t", "never", 3)],
        )
        .await;
    assert_eq!(
        conflict_of(stale),
        ("t".to_string(), Some(first), Some(second))
    );
    // An expectation past the head conflicts too.
    let ahead = j
        .append_expecting("t", Some(second + 100), vec![ev("t", "never", 4)])
        .await;
    assert_eq!(conflict_of(ahead).2, Some(second));
    let events = j.replay("t", 0).await.unwrap();
    assert_eq!(kinds_of(&events), vec!["a", "b"]);
    // The writer is not latched: the right expectation and plain appends still work.
    j.append_expecting("t", Some(second), vec![ev("t", "c", 5)])
        .await
        .unwrap();
    j.append(ev("t", "d", 6)).await.unwrap();
    assert_eq!(j.replay("t", 0).await.unwrap().len(), 4);
    // With no events, the answer says whether the expectation holds.
    let last = j.last_seq("t").await.unwrap();
    assert!(
        j.append_expecting("t", last, vec![])
            .await
            .unwrap()
            .is_empty()
    );
    conflict_of(j.append_expecting("t", Some(first), vec![]).await);
}

async fn append_expecting_keeps_dedup_keys_and_refuses_other_threads(f: Fixture) {
    let j = &f.journal;
    let first = j
        .append_expecting("t", None, vec![ev("t", "a", 1).with_dedup_key("k")])
        .await
        .unwrap()[0];
    assert!(!first.deduplicated);
    let acks = j
        .append_expecting(
            "t",
            Some(first.seq),
            vec![ev("t", "a", 2).with_dedup_key("k"), ev("t", "b", 3)],
        )
        .await
        .unwrap();
    assert_eq!((acks[0].seq, acks[0].deduplicated), (first.seq, true));
    assert!(!acks[1].deduplicated);
    // A fully deduplicated request writes nothing and leaves the head where it was.
    let dup = j
        .append_expecting(
            "t",
            Some(acks[1].seq),
            vec![ev("t", "a", 4).with_dedup_key("k")],
        )
        .await
        .unwrap();
    assert!(dup[0].deduplicated);
    assert_eq!(j.last_seq("t").await.unwrap(), Some(acks[1].seq));
    let mixed = j
        .append_expecting(
            "t",
            Some(acks[1].seq),
            vec![ev("t", "a", 5), ev("u", "a", 6)],
        )
        .await;
    assert!(matches!(
        mixed,
        Err(JournalError::InvalidInput {
            field: "thread",
            ..
        })
    ));
    assert!(matches!(
        j.append_expecting("", None, vec![]).await,
        Err(JournalError::InvalidInput {
            field: "thread",
            ..
        })
    ));
    assert_eq!(j.replay("t", 0).await.unwrap().len(), 2);
    assert!(j.replay("u", 0).await.unwrap().is_empty());
}

async fn concurrent_appenders_expecting_the_same_seq_exactly_one_wins(f: Fixture) {
    let j = f.journal.clone();
    let appenders = 8;
    for round in 0..10 {
        let expected = j.last_seq("race").await.unwrap();
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(appenders));
        let tasks: Vec<_> = (0..appenders)
            .map(|p| {
                let (j, barrier) = (j.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    j.append_expecting(
                        "race",
                        expected,
                        vec![NewEvent::new(
                            "race",
                            "win",
                            json!({ "round": round, "p": p }),
                        )],
                    )
                    .await
                })
            })
            .collect();
        let mut wins = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(acks) => wins.push(acks[0].seq),
                Err(JournalError::Conflict {
                    expected: e,
                    actual,
                    ..
                }) => {
                    assert_eq!(e, expected);
                    assert!(actual > expected);
                }
                Err(other) => panic!("{other}"),
            }
        }
        assert_eq!(wins.len(), 1, "round {round}: {wins:?}");
        assert_eq!(j.last_seq("race").await.unwrap(), Some(wins[0]));
    }
    assert_eq!(j.replay("race", 0).await.unwrap().len(), 10);
}

async fn conflicts_in_a_group_commit_leave_the_other_appends_written(f: Fixture) {
    let j = f.journal.clone();
    let stale = j.append(ev("x", "first", 0)).await.unwrap().seq;
    j.append(ev("x", "second", 0)).await.unwrap();
    // Plain appends, stale conditional appends and fresh conditional appends on their own
    // threads, released together so that the writer takes them in shared batches.
    let per_kind = 24;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(per_kind * 3));
    let mut plain = Vec::new();
    let mut stale_tasks = Vec::new();
    let mut fresh = Vec::new();
    for n in 0..per_kind {
        let (jp, bp) = (j.clone(), barrier.clone());
        plain.push(tokio::spawn(async move {
            bp.wait().await;
            jp.append(ev("plain", "p", n as i64)).await
        }));
        let (js, bs) = (j.clone(), barrier.clone());
        stale_tasks.push(tokio::spawn(async move {
            bs.wait().await;
            js.append_expecting("x", Some(stale), vec![ev("x", "never", n as i64)])
                .await
        }));
        let (jf, bf) = (j.clone(), barrier.clone());
        fresh.push(tokio::spawn(async move {
            bf.wait().await;
            let thread = format!("fresh-{n}");
            jf.append_expecting(&thread, None, vec![ev(&thread, "f", n as i64)])
                .await
        }));
    }
    for task in plain {
        task.await.unwrap().unwrap();
    }
    for task in stale_tasks {
        conflict_of(task.await.unwrap());
    }
    for task in fresh {
        task.await.unwrap().unwrap();
    }
    assert_eq!(j.replay("plain", 0).await.unwrap().len(), per_kind);
    assert_eq!(
        kinds_of(&j.replay("x", 0).await.unwrap()),
        vec!["first", "second"]
    );
    for n in 0..per_kind {
        assert_eq!(j.replay(&format!("fresh-{n}"), 0).await.unwrap().len(), 1);
    }
    // Nothing latched.
    j.append(ev("plain", "after", 0)).await.unwrap();
}

/// Every dropped append is written whole or not at all, and the journal goes on: for each
/// number of polls before the drop, `append` (then retried with its dedup key),
/// `append_expecting` and `replay` are abandoned mid-way.
async fn dropped_appends_and_replays_leave_the_journal_consistent(f: Fixture) {
    let j = &f.journal;
    let mut expecting_written = 0;
    for polls in 0..24 {
        let n = polls as i64;
        let key = format!("k{polls}");
        let dropped = agent_testkit::poll_then_drop(
            j.append(ev("d", "a", n).with_dedup_key(key.clone())),
            polls,
        )
        .await;
        let again = j.append(ev("d", "a", n).with_dedup_key(key)).await.unwrap();
        if let Some(done) = dropped {
            let done = done.unwrap();
            assert!(again.deduplicated);
            assert_eq!(again.seq, done.seq);
        }

        let head = j.last_seq("e").await.unwrap();
        let dropped = agent_testkit::poll_then_drop(
            j.append_expecting("e", head, vec![ev("e", "b", n), ev("e", "b", n)]),
            polls,
        )
        .await;
        // Requests commit in arrival order: once a later append is acknowledged, the
        // dropped one (if it reached the writer) is settled.
        j.append(ev("sync", "s", n)).await.unwrap();
        let now = j.last_seq("e").await.unwrap();
        match dropped {
            Some(done) => assert_eq!(now, Some(done.unwrap()[1].seq)),
            None => assert!(now >= head),
        }
        if now != head {
            expecting_written += 2;
        }
        assert_eq!(j.replay("e", 0).await.unwrap().len(), expecting_written);

        let read = agent_testkit::poll_then_drop(j.replay("d", 0), polls).await;
        if let Some(read) = read {
            assert_eq!(read.unwrap().len(), polls + 1);
        }
    }
    let d = j.replay("d", 0).await.unwrap();
    assert_eq!(d.len(), 24);
    assert!(d.windows(2).all(|w| w[0].seq < w[1].seq));
    // Pairs written by one request stay adjacent.
    let e = j.replay("e", 0).await.unwrap();
    assert!(e.chunks(2).all(|p| p[1].seq == p[0].seq + 1));
}

fn kinds_of(events: &[agent_journal::Event]) -> Vec<&str> {
    events.iter().map(|e| &*e.kind).collect()
}

async fn threads_and_last_seq(f: Fixture) {
    let j = &f.journal;
    assert!(j.threads().await.unwrap().is_empty());
    assert_eq!(j.last_seq("b").await.unwrap(), None);
    j.append(ev("b", "e", 0)).await.unwrap();
    let last_a = j.append(ev("a", "e", 0)).await.unwrap().seq;
    let last_b = j.append(ev("b", "e", 1)).await.unwrap().seq;
    assert_eq!(j.threads().await.unwrap(), vec!["a", "b"]);
    assert_eq!(j.last_seq("a").await.unwrap(), Some(last_a));
    assert_eq!(j.last_seq("b").await.unwrap(), Some(last_b));
}

async fn relaxed_appends_commit_in_order_and_are_counted(f: Fixture) {
    let j = &f.journal;
    let before = j.stats();
    let first = j.append(ev("x", "relaxed", 0).relaxed()).await.unwrap();
    assert!(ev("x", "relaxed", 0).relaxed().is_relaxed());
    // Readable at once, from the read side.
    assert_eq!(kinds_of(&j.replay("x", 0).await.unwrap()), ["relaxed"]);
    let second = j.append(ev("x", "durable", 1)).await.unwrap();
    let mixed = j
        .append_batch(vec![ev("x", "relaxed", 2).relaxed(), ev("x", "durable", 3)])
        .await
        .unwrap();
    let last = j
        .append_expecting(
            "x",
            Some(mixed[1].seq),
            vec![ev("x", "relaxed", 4).relaxed()],
        )
        .await
        .unwrap();
    assert!(first.seq < second.seq && second.seq < mixed[0].seq && mixed[1].seq < last[0].seq);
    let after = j.stats();
    assert_eq!(after.commits - before.commits, 4);
    // The two appends of relaxed events only; a batch with a durable event is durable.
    assert_eq!(after.relaxed_commits - before.relaxed_commits, 2);
    j.close().await;
    let reopened = Journal::open(&f.url).await.unwrap();
    assert_eq!(
        kinds_of(&reopened.replay("x", 0).await.unwrap()),
        ["relaxed", "durable", "relaxed", "durable", "relaxed"]
    );
}

async fn reopen_keeps_every_event(f: Fixture) {
    let acks = f
        .journal
        .append_batch((0..100).map(|n| ev("r", "e", n)).collect())
        .await
        .unwrap();
    f.journal.close().await;
    let reopened = Journal::open(&f.url).await.unwrap();
    let events = reopened.replay("r", 0).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        acks.iter().map(|a| a.seq).collect::<Vec<_>>()
    );
    // New seqs continue after the old ones.
    let next = reopened.append(ev("r", "e", 100)).await.unwrap().seq;
    assert!(next > acks.last().unwrap().seq);
}

async fn close_refuses_later_appends(f: Fixture) {
    let j = f.journal.clone();
    j.append(ev("t", "e", 0)).await.unwrap();
    j.close().await;
    assert!(matches!(
        j.append(ev("t", "e", 1)).await,
        Err(JournalError::Closed)
    ));
}

async fn unicode_and_nested_payloads_round_trip(f: Fixture) {
    let payload = json!({
        "text": "先整理验收清单 — ✓",
        "nested": { "list": [1, 2.5, null, true, { "z": "a", "a": "z" }] },
        "empty": {},
    });
    let j = &f.journal;
    j.append(NewEvent::new("线程", "steer.accepted", payload.clone()))
        .await
        .unwrap();
    let events = j.replay("线程", 0).await.unwrap();
    assert_eq!(events[0].payload, payload);
    assert_eq!(&*events[0].kind, "steer.accepted");
}

async fn encoded_payloads_read_back_as_values(f: Fixture) {
    #[derive(serde::Serialize)]
    struct Started<'a> {
        call_id: &'a str,
        revision: u64,
        note: Option<&'a str>,
    }
    let j = &f.journal;
    let typed = Started {
        call_id: "c\"1",
        revision: 7,
        note: None,
    };
    j.append(NewEvent::encoded("t", "tool.started", &typed).unwrap())
        .await
        .unwrap();
    let raw = serde_json::value::RawValue::from_string(r#"{"a": [1, "二"]}"#.into()).unwrap();
    j.append(NewEvent::new("t", "raw", Payload::raw(raw)))
        .await
        .unwrap();
    let events = j.replay("t", 0).await.unwrap();
    assert_eq!(
        events[0].payload,
        json!({"call_id": "c\"1", "revision": 7, "note": null})
    );
    assert_eq!(events[1].payload, json!({"a": [1, "二"]}));
    // A map with non-string keys cannot be JSON: refused before anything is written.
    let bad: std::collections::HashMap<(i32, i32), i32> = [((1, 2), 3)].into();
    assert!(matches!(
        NewEvent::encoded("t", "bad", &bad),
        Err(JournalError::InvalidInput { .. })
    ));
}

/// `serde_json` gives keys of its own a meaning when it reads a `Value`: with its
/// `raw_value` feature, an object whose first key is `$serde_json::private::RawValue` is
/// read as the JSON its string holds, and refused when the string holds none. Such keys
/// can come from anywhere a payload does (a tool's output, an MCP server's result), and a
/// replay hands back what was appended: not another value, and not a thread that no longer
/// replays.
async fn payloads_with_serde_json_private_keys_read_back_as_appended(f: Fixture) {
    const RAW: &str = "$serde_json::private::RawValue";
    let payloads = [
        json!({ RAW: "[1]" }),
        json!({ RAW: "not json" }),
        json!({ "args": { RAW: "{\"cmd\":\"rm -rf /\"}" } }),
        json!([{ RAW: "a\"b\u{1}" }, { "$serde_json::private::Number": "1" }, 1e300]),
        json!({ RAW: 7, "x": 123456789012345678901234567890.0 }),
        // Nested this deep, a payload is read by the decoder's other path.
        (0..70).fold(json!({ RAW: "[2]" }), |inner, _| json!([inner])),
    ];
    let j = &f.journal;
    for payload in &payloads {
        j.append(NewEvent::new("t", "e", payload.clone()))
            .await
            .unwrap();
    }
    let text = format!(r#"{{"{RAW}": "not json either"}}"#);
    let raw = serde_json::value::RawValue::from_string(text).unwrap();
    j.append(NewEvent::new("t", "raw", Payload::raw(raw)))
        .await
        .unwrap();
    let events = j.replay("t", 0).await.unwrap();
    let read: Vec<_> = events.iter().map(|e| e.payload.clone()).collect();
    let mut expected = payloads.to_vec();
    expected.push(json!({ RAW: "not json either" }));
    assert_eq!(read, expected);
}

/// A value nested deeper than a replay can read (`serde_json` reads 127 levels)
/// serialises without complaint; appended, it would leave its thread unreplayable. It is
/// refused as invalid input instead, and what can be read back is still taken.
async fn payloads_too_deep_to_read_back_are_refused(f: Fixture) {
    let nested = |levels: usize| (1..levels).fold(json!([]), |inner, _| json!([inner]));
    let j = &f.journal;
    for levels in [128, 500] {
        let err = j
            .append(NewEvent::new("t", "deep", nested(levels)))
            .await
            .unwrap_err();
        assert!(matches!(err, JournalError::InvalidInput { .. }), "{err}");
    }
    j.append(NewEvent::new("t", "deep", nested(127)))
        .await
        .unwrap();
    let events = j.replay("t", 0).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].payload, nested(127));
}

// ---- backend-specific behaviour ----

#[tokio::test]
async fn invalid_urls_are_typed_errors() {
    for url in ["mysql://x/y", "", "journal.db", "http://127.0.0.1/"] {
        match Journal::open(url).await {
            Err(JournalError::InvalidUrl { reason, .. }) => assert!(!reason.is_empty()),
            other => panic!("{url}: expected InvalidUrl, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn unreachable_postgres_is_an_open_error_without_the_password() {
    let err = Journal::open("postgres://user:hunter2@127.0.0.1:1/db")
        .await
        .unwrap_err();
    assert!(matches!(err, JournalError::Open { .. }), "{err:?}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("hunter2"), "password leaked: {shown}");
}

/// No error of the journal shows a database password, whether our URL check refuses the
/// URL or a driver quotes it (userinfo, `password=` and `sslpassword=` alike), in its
/// `Display`, its `Debug` or the message of any of its sources.
#[tokio::test]
async fn errors_never_show_a_password() {
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let urls = [
        "mysql://u:SECRETPW@h/x".to_string(),
        "mysql://h/x?password=SECRETPW".to_string(),
        "sqlite:///tmp/never.db?password=SECRETPW".to_string(),
        "sqlite://u:SECRETPW@x.db?mode=bogus".to_string(),
        "postgres://u:SECRETPW@127.0.0.1:notaport/x".to_string(),
        format!("postgres://u:SECRETPW@127.0.0.1:{closed_port}/x"),
        format!("postgresql://u@127.0.0.1:{closed_port}/x?password=SECRETPW"),
        format!("postgres://u:SECRETPW@127.0.0.1:{closed_port}/x?sslmode=bogus"),
        format!(
            "postgres://u:SECRETPW@127.0.0.1:{closed_port}/x?sslpassword=SECRETPW&sslmode=require"
        ),
    ];
    for url in &urls {
        let err = Journal::open(url).await.unwrap_err();
        let mut shown = format!("{err} {err:?}");
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            shown.push_str(&format!(" {cause} {cause:?}"));
            source = cause.source();
        }
        assert!(!shown.contains("SECRETPW"), "{url}: {shown}");
    }
}

#[tokio::test]
async fn sqlite_directory_that_cannot_exist_is_an_open_error() {
    let err = Journal::open("sqlite:///proc/definitely/not/here.db")
        .await
        .unwrap_err();
    assert!(matches!(err, JournalError::Open { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_schema_1_files_upgrade_and_keep_their_seqs() {
    use sqlx::Connection as _;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("old.db").display());
    // A file written by schema 1 (seq index, no head row), events up to seq 7.
    {
        let mut old = sqlx::SqliteConnection::connect(&format!("{url}?mode=rwc"))
            .await
            .unwrap();
        sqlx::raw_sql(include_str!("../../migrations/sqlite/0001_events.sql"))
            .execute(&mut old)
            .await
            .unwrap();
        sqlx::raw_sql(
            "CREATE TABLE journal_schema (version INTEGER PRIMARY KEY);
             INSERT INTO journal_schema (version) VALUES (1);
             INSERT INTO journal_events (thread, seq, kind, payload, at, dedup_key)
             VALUES ('a', 3, 'e', '{}', 0, 'k'), ('b', 7, 'e', '{}', 0, NULL);",
        )
        .execute(&mut old)
        .await
        .unwrap();
        old.close().await.unwrap();
    }
    let j = Journal::open(&url).await.unwrap();
    let next = j.append(ev("a", "e", 1)).await.unwrap();
    assert_eq!(next.seq, 8, "seqs continue after the old maximum");
    let again = j.append(ev("a", "e", 2).with_dedup_key("k")).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.seq, 3, "old dedup keys still hold");
    let seqs: Vec<i64> = j
        .replay("a", 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, vec![3, 8]);
}

#[tokio::test]
async fn memory_journal_is_per_open_and_gone_after_close() {
    let a = Journal::open("memory:").await.unwrap();
    let b = Journal::open("memory:").await.unwrap();
    a.append(ev("t", "e", 0)).await.unwrap();
    assert_eq!(a.replay("t", 0).await.unwrap().len(), 1);
    assert!(
        b.replay("t", 0).await.unwrap().is_empty(),
        "each open is its own journal"
    );
    a.close().await;
    assert!(matches!(a.replay("t", 0).await, Err(JournalError::Closed)));
    assert!(matches!(a.threads().await, Err(JournalError::Closed)));
}

#[tokio::test]
async fn in_memory_sqlite_works_for_reads_and_writes() {
    let j = Journal::open("sqlite::memory:").await.unwrap();
    let acks = j
        .append_batch((0..10).map(|n| ev("m", "e", n)).collect())
        .await
        .unwrap();
    assert_eq!(acks.len(), 10);
    assert_eq!(j.replay("m", 0).await.unwrap().len(), 10);
    let mut tail = j.tail("m", acks[8].seq);
    assert_eq!(tail.next().await.unwrap().unwrap().seq, acks[9].seq);
}

#[tokio::test]
async fn normal_durability_appends_and_replays() {
    let f = support::sqlite(JournalOptions::default().durability(Durability::Normal)).await;
    assert_eq!(f.journal.durability(), Durability::Normal);
    f.journal
        .append_batch((0..10).map(|n| ev("n", "e", n)).collect())
        .await
        .unwrap();
    assert_eq!(f.journal.replay("n", 0).await.unwrap().len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_failure_is_reported_to_every_later_caller() {
    let f = support::sqlite(Default::default()).await;
    f.journal.append(ev("t", "e", 0)).await.unwrap();
    // Break the database underneath the writer from another connection.
    {
        use sqlx::Connection as _;
        let mut other = sqlx::SqliteConnection::connect(&f.url).await.unwrap();
        sqlx::query("DROP TABLE journal_events")
            .execute(&mut other)
            .await
            .unwrap();
        other.close().await.unwrap();
    }
    let first = f.journal.append(ev("t", "e", 1)).await.unwrap_err();
    assert!(matches!(first, JournalError::WriterFailed(_)), "{first:?}");
    for n in 2..5 {
        let later = f.journal.append(ev("t", "e", n)).await.unwrap_err();
        assert!(matches!(later, JournalError::WriterFailed(_)), "{later:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latched_writer_writes_nothing_more() {
    use sqlx::Connection as _;
    let f = support::sqlite(Default::default()).await;
    f.journal.append(ev("t", "e", 0)).await.unwrap();
    let mut other = sqlx::SqliteConnection::connect(&f.url).await.unwrap();
    let table: String =
        sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE name = 'journal_events'")
            .fetch_one(&mut other)
            .await
            .unwrap();
    sqlx::query("DROP TABLE journal_events")
        .execute(&mut other)
        .await
        .unwrap();
    let first = f.journal.append(ev("t", "e", 1)).await.unwrap_err();
    assert!(matches!(first, JournalError::WriterFailed(_)), "{first:?}");
    // The table is back, so a write would succeed now; a latched writer must not try.
    sqlx::query(sqlx::AssertSqlSafe(table))
        .execute(&mut other)
        .await
        .unwrap();
    for n in 2..5 {
        let later = f.journal.append(ev("t", "e", n)).await.unwrap_err();
        assert!(matches!(later, JournalError::WriterFailed(_)), "{later:?}");
    }
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM journal_events")
        .fetch_one(&mut other)
        .await
        .unwrap();
    assert_eq!(rows, 0, "a latched writer wrote");
    other.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_tail_sees_appends_from_another_handle_by_polling() {
    let f = support::sqlite(Default::default()).await;
    let options = JournalOptions {
        tail_poll: Duration::from_millis(20),
        ..Default::default()
    };
    let watcher = Journal::open_with(&f.url, options).await.unwrap();
    let mut tail = watcher.tail("x", 0);
    for n in 0..3 {
        f.journal.append(ev("x", "e", n)).await.unwrap();
        let e = next_within(&mut tail, "tail stalled").await;
        assert_eq!(e.payload["n"], n);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tail_sees_other_writers_through_listen_notify() {
    let Some(f) = support::postgres(Default::default()).await else {
        return;
    };
    // Polling is effectively off: only NOTIFY can wake this tail.
    let watcher = Journal::open_with(&f.url, polling_off()).await.unwrap();
    let mut tail = watcher.tail("x", 0);
    // Drain nothing: the first read finds no events and waits on LISTEN.
    let writer = f.journal.clone();
    let appends = tokio::spawn(async move {
        for n in 0..5 {
            writer.append(ev("other-thread", "e", n)).await.unwrap();
            writer.append(ev("x", "e", n)).await.unwrap();
        }
    });
    for n in 0..5 {
        let e = next_within(&mut tail, "tail did not wake on NOTIFY").await;
        assert_eq!(e.payload["n"], n);
    }
    appends.await.unwrap();
}

/// Wake-ups go out after the commit, on their own connection: a writer that appends and
/// closes at once has still sent them when `close` returns.
#[tokio::test]
async fn postgres_close_sends_the_wake_ups_of_its_last_commits() {
    let Some(f) = support::postgres(Default::default()).await else {
        return;
    };
    let watcher = Journal::open_with(&f.url, polling_off()).await.unwrap();
    let mut tail = watcher.tail("closing", 0);
    // Let the tail read once and find nothing, so only a notification can wake it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for n in 0..3 {
        // The writer's runtime is dropped as soon as `close` returns, as a process exits:
        // a wake-up not sent by then is never sent.
        let url = f.url.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let writer = Journal::open(&url).await.unwrap();
                writer.append(ev("closing", "e", n)).await.unwrap();
                writer.close().await;
            });
        })
        .join()
        .unwrap();
        let e = next_within(&mut tail, "the closed writer's commit woke no tail").await;
        assert_eq!(e.payload["n"], n);
    }
}

/// Polling off: only this process's commits can wake a tail, and a commit must wake the
/// tails of every thread it wrote (a batch spanning threads included).
async fn commits_wake_the_tails_of_the_threads_they_write(j: Journal) {
    let mut tails: Vec<_> = ["a", "b", "c"].iter().map(|t| j.tail(t, 0)).collect();
    // Let every tail read once and find nothing, so each is waiting for a wake.
    tokio::time::sleep(Duration::from_millis(50)).await;
    j.append(ev("a", "e", 0)).await.unwrap();
    j.append_batch(vec![ev("b", "e", 1), ev("c", "e", 2), ev("noise", "e", 3)])
        .await
        .unwrap();
    for (tail, n) in tails.iter_mut().zip(0..) {
        let e = next_within(tail, "a commit did not wake its thread's tail").await;
        assert_eq!(e.payload["n"], n);
    }
}

/// The next event of `tail`, or a failure saying `why` when none comes within 30 s.
async fn next_within<S>(tail: &mut S, why: &str) -> Event
where
    S: futures::Stream<Item = Result<Event, JournalError>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(30), tail.next())
        .await
        .expect(why)
        .unwrap()
        .unwrap()
}

fn polling_off() -> JournalOptions {
    JournalOptions {
        tail_poll: Duration::from_secs(3600),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_commits_wake_the_tails_of_the_threads_they_write() {
    let f = support::sqlite(polling_off()).await;
    commits_wake_the_tails_of_the_threads_they_write(f.journal.clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_commits_wake_the_tails_of_the_threads_they_write() {
    let j = Journal::open_with("memory:", polling_off()).await.unwrap();
    commits_wake_the_tails_of_the_threads_they_write(j).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_commits_wake_the_tails_of_the_threads_they_write() {
    let Some(f) = support::postgres(polling_off()).await else {
        return;
    };
    commits_wake_the_tails_of_the_threads_they_write(f.journal.clone()).await;
}

/// Polling off: a tail of one kind yields only that kind, across pages and from the middle
/// of a batch, each event once, and a commit writing the kind wakes it.
async fn a_kind_tail_yields_only_its_kind_and_its_commits_wake_it(j: Journal) {
    j.append_batch(vec![ev("w", "e", 0), ev("w", "stop", 1), ev("w", "e", 2)])
        .await
        .unwrap();
    let mut tail = j.tail_kind("w", "stop", 0);
    let mut next =
        async || next_within(&mut tail, "a commit of the tail's kind did not wake it").await;
    let first = next().await;
    assert_eq!(
        (&*first.kind, first.payload["n"].as_i64()),
        ("stop", Some(1))
    );
    // More than a page of other kinds, then the kind in the middle of a batch.
    for chunk in 0..3 {
        let batch = (0..500)
            .map(|i| ev("w", "e", 10 + chunk * 500 + i))
            .collect();
        j.append_batch(batch).await.unwrap();
    }
    j.append_batch(vec![ev("w", "e", 3), ev("w", "stop", 4), ev("w", "e", 5)])
        .await
        .unwrap();
    j.append(ev("w", "stop", 6)).await.unwrap();
    for n in [4, 6] {
        let e = next().await;
        assert_eq!((&*e.kind, e.payload["n"].as_i64()), ("stop", Some(n)));
    }
    j.append(ev("w", "e", 7)).await.unwrap();
    let quiet = tokio::time::timeout(Duration::from_millis(200), tail.next()).await;
    assert!(
        quiet.is_err(),
        "yielded another kind or a repeat: {quiet:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_kind_tail_yields_only_its_kind_and_its_commits_wake_it() {
    let f = support::sqlite(polling_off()).await;
    a_kind_tail_yields_only_its_kind_and_its_commits_wake_it(f.journal.clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_kind_tail_yields_only_its_kind_and_its_commits_wake_it() {
    let j = Journal::open_with("memory:", polling_off()).await.unwrap();
    a_kind_tail_yields_only_its_kind_and_its_commits_wake_it(j).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_kind_tail_yields_only_its_kind_and_its_commits_wake_it() {
    let Some(f) = support::postgres(polling_off()).await else {
        return;
    };
    a_kind_tail_yields_only_its_kind_and_its_commits_wake_it(f.journal.clone()).await;
}

/// A tail of one kind reads more than a page of its kind (a full page means more may
/// follow: it reads on at once), interleaved with other kinds, each once and in order.
async fn a_kind_tail_reads_pages_of_its_kind_in_order(j: Journal) {
    let total = 2_500;
    let batch: Vec<_> = (0..total)
        .flat_map(|i| [ev("k", "e", -1), ev("k", "stop", i)])
        .collect();
    j.append_batch(batch).await.unwrap();
    let mut tail = j.tail_kind("k", "stop", 0);
    for want in 0..total {
        let e = next_within(&mut tail, "tail stalled").await;
        assert_eq!((&*e.kind, e.payload["n"].as_i64()), ("stop", Some(want)));
    }
    j.append_batch(vec![ev("k", "e", -1), ev("k", "stop", total)])
        .await
        .unwrap();
    let e = next_within(
        &mut tail,
        "a commit of the kind after the backlog did not wake the tail",
    )
    .await;
    assert_eq!(e.payload["n"].as_i64(), Some(total));
    let quiet = tokio::time::timeout(Duration::from_millis(200), tail.next()).await;
    assert!(quiet.is_err(), "yielded a repeat: {quiet:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_kind_tail_reads_pages_of_its_kind_in_order() {
    let f = support::sqlite(polling_off()).await;
    a_kind_tail_reads_pages_of_its_kind_in_order(f.journal.clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_kind_tail_reads_pages_of_its_kind_in_order() {
    let j = Journal::open_with("memory:", polling_off()).await.unwrap();
    a_kind_tail_reads_pages_of_its_kind_in_order(j).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_kind_tail_reads_pages_of_its_kind_in_order() {
    let Some(f) = support::postgres(polling_off()).await else {
        return;
    };
    a_kind_tail_reads_pages_of_its_kind_in_order(f.journal.clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_kind_tail_sees_another_handles_append_by_polling() {
    let f = support::sqlite(Default::default()).await;
    let options = JournalOptions {
        tail_poll: Duration::from_millis(20),
        ..Default::default()
    };
    let watcher = Journal::open_with(&f.url, options).await.unwrap();
    let mut tail = watcher.tail_kind("x", "stop", 0);
    f.journal.append(ev("x", "e", 0)).await.unwrap();
    f.journal.append(ev("x", "stop", 1)).await.unwrap();
    let e = next_within(&mut tail, "tail stalled").await;
    assert_eq!(e.payload["n"], 1);
}

/// LISTEN connections open on the test's database now.
async fn listen_connections(url: &str) -> i64 {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tails_share_one_listen_connection_that_stops_with_the_journal() {
    let Some(f) = support::postgres(Default::default()).await else {
        return;
    };
    let watcher = Journal::open_with(&f.url, polling_off()).await.unwrap();
    let mut tails: Vec<_> = (0..10).map(|i| watcher.tail(&format!("t{i}"), 0)).collect();
    let mut listening = 0;
    for _ in 0..100 {
        listening = listen_connections(&f.url).await;
        if listening > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(listening, 1, "ten tails, one LISTEN connection");
    // Another handle's commit reaches the right tail through the shared connection.
    f.journal.append(ev("t3", "e", 3)).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(30), tails[3].next())
        .await
        .expect("the shared LISTEN did not wake the tail")
        .unwrap()
        .unwrap();
    assert_eq!(e.payload["n"], 3);
    watcher.close().await;
    for _ in 0..100 {
        listening = listen_connections(&f.url).await;
        if listening == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(listening, 0, "closing the journal stops its LISTEN task");
}
