//! PostgreSQL writes without a global lock (issue 35): writers of different threads do not
//! wait for each other, and tails of one thread and of the whole journal still deliver
//! every committed event exactly once, in each thread's order, while transactions commit
//! out of position order, pause between insert and commit, and roll back.
//!
//! Write transactions are held open by the `test-hooks` seam ([`WriteHook`]), which the
//! PostgreSQL writer awaits after its inserts and before its commit.
//!
//! The timeouts below only turn a hang into a failure (a writer waiting on another
//! thread's transaction, a tail that never delivers an event); no assertion depends on
//! how fast anything runs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_journal::hooks::{HookAction, WriteHook};
use agent_journal::{Event, Journal, JournalOptions, NewEvent, Position};
use futures::StreamExt as _;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::json;
use tokio::sync::{Notify, oneshot};

/// Long enough that only a hang reaches it, and shorter than the write connection's
/// `idle_in_transaction_session_timeout` (30 s), which would end a held transaction.
const HANG: Duration = Duration::from_secs(20);
/// How long a tail may go without an event before it counts as stalled. Longer: a tail of
/// the whole journal waits for every older transaction of the server, including other
/// tests' and other databases' (see docs/architecture.md).
const TAIL_HANG: Duration = Duration::from_secs(120);

fn options(hook: Option<WriteHook>) -> JournalOptions {
    JournalOptions {
        write_hook: hook,
        // Rolled-back transactions notify nobody: the poll wakes tails of the whole
        // journal that they held back.
        tail_poll: Duration::from_millis(50),
        ..Default::default()
    }
}

fn hook<F, Fut>(f: F) -> WriteHook
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = HookAction> + Send + 'static,
{
    WriteHook(Arc::new(move || Box::pin(f())))
}

/// A hook that holds the first transaction open until released (signalling `paused` once
/// it is), and commits every later one at once.
fn pause_first(paused: oneshot::Sender<()>, release: Arc<Notify>) -> WriteHook {
    let first = Arc::new(Mutex::new(Some(paused)));
    hook(move || {
        let paused = first.lock().unwrap().take();
        let release = Arc::clone(&release);
        async move {
            if let Some(paused) = paused {
                let _ = paused.send(());
                release.notified().await;
            }
            HookAction::Commit
        }
    })
}

async fn next<T>(
    stream: &mut (impl futures::Stream<Item = Result<T, agent_journal::JournalError>> + Unpin),
) -> T {
    tokio::time::timeout(TAIL_HANG, stream.next())
        .await
        .expect("the tail stalled")
        .expect("the tail ended")
        .unwrap()
}

/// A transaction of thread `a` is held open after its insert. Meanwhile an append to
/// thread `b` (another connection) commits, and `b`'s own tail delivers it. The tail of
/// the whole journal must not deliver `b`'s event first: `a`'s transaction is older, so
/// its event is placed before `b`'s and only commits later. Once it does, the tail
/// delivers `a`'s event, then `b`'s, each once.
///
/// Under the old design (one advisory lock for every write transaction) the append to `b`
/// waits for `a`'s transaction and this test fails at its first timeout. With a tail of
/// the whole journal that did not stop below the oldest running transaction, it would
/// deliver `b`'s event and skip `a`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_held_inside_its_transaction_blocks_no_other_thread() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_lockfree").await else {
        return;
    };
    let url = db.url().to_string();
    let (paused, is_paused) = oneshot::channel();
    let release = Arc::new(Notify::new());
    let held = Journal::open_with(
        &url,
        options(Some(pause_first(paused, Arc::clone(&release)))),
    )
    .await
    .unwrap();
    let other = Journal::open_with(&url, options(None)).await.unwrap();
    let reader = Journal::open_with(&url, options(None)).await.unwrap();
    let mut all = reader.tail_all(Position::START);
    let mut of_b = reader.tail("b", 0);

    let slow = {
        let held = held.clone();
        tokio::spawn(async move {
            held.append(NewEvent::new("a", "e", json!({"n": "a1"})))
                .await
        })
    };
    tokio::time::timeout(HANG, is_paused)
        .await
        .unwrap()
        .unwrap();
    let b1 = tokio::time::timeout(
        HANG,
        other.append(NewEvent::new("b", "e", json!({"n": "b1"}))),
    )
    .await
    .expect("an append to thread b waited for a transaction of thread a")
    .unwrap();
    let seen = next(&mut of_b).await;
    assert_eq!((seen.seq, seen.payload["n"].as_str()), (b1.seq, Some("b1")));
    // Thread a's transaction may still take more rows of its own thread; no one else may.
    let a_head = other.last_seq("a").await.unwrap();
    assert_eq!(a_head, None, "a's uncommitted row is not visible");

    // While `a`'s transaction is open, the tail of the whole journal delivers nothing: `b`'s
    // event is placed after `a`'s. (A wait that can only make this check fail when the
    // tail is wrong: nothing is deliverable, however long it reads.)
    assert!(
        tokio::time::timeout(Duration::from_millis(300), all.next())
            .await
            .is_err(),
        "the tail of the whole journal went past a transaction still running"
    );

    release.notify_one();
    let a1 = tokio::time::timeout(HANG, slow)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        a1.seq < b1.seq,
        "a's seq was taken first: {} {}",
        a1.seq,
        b1.seq
    );
    let (first_position, first) = next(&mut all).await;
    let (second_position, second) = next(&mut all).await;
    assert_eq!(
        (first.payload["n"].as_str(), second.payload["n"].as_str()),
        (Some("a1"), Some("b1")),
        "the tail of the whole journal delivers the late committer first"
    );
    assert!(first_position < second_position);
    // Nothing else: the next event delivered is one appended now.
    let c = other
        .append(NewEvent::new("c", "e", json!({"n": "c1"})))
        .await
        .unwrap();
    let (_, third) = next(&mut all).await;
    assert_eq!(third.seq, c.seq);
}

/// What one committed event must look like to every tail.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    thread: String,
    seq: i64,
    id: String,
}

fn seen(event: &Event) -> Seen {
    Seen {
        thread: event.thread.to_string(),
        seq: event.seq,
        id: event.payload["id"].as_str().unwrap().to_string(),
    }
}

/// Reads the whole journal from the start until it has seen the end mark of every thread;
/// with `resume_every`, drops its tail after that many events and resumes from the last
/// position it got. Returns the positions and events before the end marks.
async fn read_all_until_the_end(
    journal: Journal,
    resume_every: Option<usize>,
) -> (Vec<Position>, Vec<Seen>) {
    let mut tail = journal.tail_all(Position::START);
    let (mut positions, mut got, mut ends, mut since) = (Vec::new(), Vec::new(), 0, 0);
    let mut last = Position::START;
    while ends < THREADS {
        if resume_every == Some(since) {
            drop(tail);
            tail = journal.tail_all(last);
            since = 0;
        }
        let (position, event) = next(&mut tail).await;
        since += 1;
        last = position;
        if event.payload["id"] == "end" {
            ends += 1;
            continue;
        }
        positions.push(position);
        got.push(seen(&event));
    }
    (positions, got)
}

const THREADS: usize = 8;
const WRITERS: usize = 6;
/// Writers without a hook or dedup keys: their batches take the one-statement path, which
/// cannot pause, and commit between the paused ones.
const PLAIN_WRITERS: usize = 2;
/// Writers without a hook, with dedup keys: their batches take the one-call checked path
/// (`journal_append`), and their repeated keys the transaction it falls back to.
const CHECKED_WRITERS: usize = 2;
const TASKS_PER_WRITER: usize = 2;
const APPENDS_PER_TASK: usize = 30;
const ROLLBACKS: usize = 16;

/// Many connections commit to many threads, each transaction paused for a random time
/// between its inserts and its commit, some holding events of several threads, some
/// rolled back after inserting, while tails of every thread and of the whole journal run
/// (one of those dropped and resumed from its last position every 25 events). Every tail must
/// deliver exactly the committed events, each once, each thread's in seq order, and none
/// of the rolled-back ones; each committed event reads back with the seq its ack named.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tails_see_every_commit_once_while_writers_pause_and_roll_back() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_lockfree").await else {
        return;
    };
    let url = db.url().to_string();
    let seed: u64 = rand::rng().random();
    eprintln!("seed {seed}");
    let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(seed)));
    let pause = |rng: &Arc<Mutex<StdRng>>| {
        let ms = rng.lock().unwrap().random_range(0..20u64);
        Duration::from_millis(ms)
    };

    let reader = Journal::open_with(&url, options(None)).await.unwrap();
    let thread_name = |t: usize| format!("t{t}");
    // Tails run from the start, reading while transactions are in flight, until they see
    // the end marks appended once every writer is done.
    let all = tokio::spawn(read_all_until_the_end(reader.clone(), None));
    let resumed = tokio::spawn(read_all_until_the_end(reader.clone(), Some(25)));
    let per_thread: Vec<_> = (0..THREADS)
        .map(|t| {
            let mut tail = reader.tail(&thread_name(t), 0);
            tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let event = next(&mut tail).await;
                    if event.payload["id"] == "end" {
                        return got;
                    }
                    got.push(seen(&event));
                }
            })
        })
        .collect();

    // Writers: each journal is one connection; its tasks' appends share its transactions.
    let mut writers = Vec::new();
    for w in 0..WRITERS + PLAIN_WRITERS + CHECKED_WRITERS {
        let hooked = w < WRITERS;
        let plain = !hooked && w < WRITERS + PLAIN_WRITERS;
        let rng_for_hook = Arc::clone(&rng);
        let delay = hook(move || {
            let wait = pause(&rng_for_hook);
            async move {
                tokio::time::sleep(wait).await;
                HookAction::Commit
            }
        });
        let journal = Journal::open_with(&url, options(hooked.then_some(delay)))
            .await
            .unwrap();
        for task in 0..TASKS_PER_WRITER {
            let journal = journal.clone();
            let mut rng = StdRng::seed_from_u64(seed ^ ((w * 16 + task) as u64 + 1));
            writers.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                for n in 0..APPENDS_PER_TASK {
                    let id = format!("w{w}.{task}.{n}");
                    let first = rng.random_range(0..THREADS);
                    // One append in four writes two threads in one request.
                    let threads = if rng.random_range(0..4) == 0 {
                        vec![
                            first,
                            (first + 1 + rng.random_range(0..THREADS - 1)) % THREADS,
                        ]
                    } else {
                        vec![first]
                    };
                    let events: Vec<NewEvent> = threads
                        .iter()
                        .enumerate()
                        .map(|(i, t)| {
                            let event = NewEvent::new(
                                format!("t{t}"),
                                "e",
                                json!({"id": format!("{id}.{i}")}),
                            );
                            if plain {
                                event
                            } else {
                                event.with_dedup_key(format!("{id}.{i}"))
                            }
                        })
                        .collect();
                    let acks = journal.append_batch(events).await.unwrap();
                    for (i, (t, ack)) in threads.iter().zip(&acks).enumerate() {
                        assert!(!ack.deduplicated);
                        acked.push(Seen {
                            thread: format!("t{t}"),
                            seq: ack.seq,
                            id: format!("{id}.{i}"),
                        });
                    }
                    // Now and then the same key again: the first seq, nothing written.
                    if n % 7 == 0 && !plain {
                        let again = journal
                            .append(
                                NewEvent::new(
                                    format!("t{}", threads[0]),
                                    "e",
                                    json!({"id": "dup"}),
                                )
                                .with_dedup_key(format!("{id}.0")),
                            )
                            .await
                            .unwrap();
                        assert!(again.deduplicated);
                        assert_eq!(again.seq, acks[0].seq);
                    }
                }
                acked
            }));
        }
    }
    // Rollbacks: each on a journal of its own (a rolled-back batch latches its writer).
    let rollbacks = {
        let url = url.clone();
        let rng = Arc::clone(&rng);
        tokio::spawn(async move {
            for r in 0..ROLLBACKS {
                let wait = pause(&rng);
                let journal = Journal::open_with(
                    &url,
                    options(Some(hook(move || async move {
                        tokio::time::sleep(wait).await;
                        HookAction::Rollback
                    }))),
                )
                .await
                .unwrap();
                let t = r % THREADS;
                let result = journal
                    .append(NewEvent::new(
                        format!("t{t}"),
                        "e",
                        json!({"id": format!("rolled-back.{r}")}),
                    ))
                    .await;
                assert!(result.is_err(), "a rolled-back append was acknowledged");
            }
        })
    };

    let mut committed = Vec::new();
    for writer in writers {
        committed.extend(writer.await.unwrap());
    }
    rollbacks.await.unwrap();
    committed.sort();
    let expected: BTreeSet<Seen> = committed.iter().cloned().collect();
    assert_eq!(expected.len(), committed.len());
    let by_thread: BTreeMap<String, Vec<Seen>> =
        committed.iter().fold(BTreeMap::new(), |mut m, s| {
            m.entry(s.thread.clone())
                .or_insert_with(Vec::new)
                .push(s.clone());
            m
        });

    reader
        .append_batch(
            (0..THREADS)
                .map(|t| NewEvent::new(thread_name(t), "e", json!({"id": "end"})))
                .collect(),
        )
        .await
        .unwrap();

    // Tails of each thread: exactly that thread's committed events, in seq order.
    for (t, tail) in per_thread.into_iter().enumerate() {
        let want = by_thread.get(&thread_name(t)).cloned().unwrap_or_default();
        let got = tokio::time::timeout(TAIL_HANG, tail)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            got, want,
            "thread t{t}: every committed event once, in seq order"
        );
    }
    // Tails of the whole journal: every committed event once, positions increasing, each
    // thread's events in seq order.
    for (name, tail) in [("tail_all", all), ("resumed tail_all", resumed)] {
        let (positions, got) = tokio::time::timeout(TAIL_HANG, tail)
            .await
            .unwrap()
            .unwrap();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "{name}: positions increase"
        );
        let set: BTreeSet<Seen> = got.iter().cloned().collect();
        assert_eq!(set.len(), got.len(), "{name} repeated an event");
        let missing: Vec<_> = expected.difference(&set).take(5).collect();
        let extra: Vec<_> = set.difference(&expected).take(5).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{name}: {} missing (first: {missing:?}), {} not committed (first: {extra:?})",
            expected.difference(&set).count(),
            set.difference(&expected).count()
        );
        let mut last_seq: HashMap<&str, i64> = HashMap::new();
        for s in &got {
            let before = last_seq.insert(&s.thread, s.seq).unwrap_or(0);
            assert!(before < s.seq, "{name}: thread {} out of order", s.thread);
        }
    }
    // Replays agree with the tails.
    for (thread, want) in &by_thread {
        let replayed: Vec<Seen> = reader
            .replay(thread, 0)
            .await
            .unwrap()
            .iter()
            .map(seen)
            .collect();
        assert_eq!(&replayed[..want.len()], &want[..]);
    }
}
