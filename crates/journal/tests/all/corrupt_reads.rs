//! A stored payload that is not JSON (the database was edited by hand) fails the read that
//! decodes it, but every stream delivers the good events read before it first, then the
//! error: a page read with the corrupt event no longer hides the events ahead of it.

use std::time::Duration;

use agent_journal::{Journal, JournalError, NewEvent, Position};
use futures::{Stream, StreamExt as _};
use serde_json::json;

/// A file journal whose thread `t` holds six events of kinds `a`, `b`, `a`, `b`, `a`, `b`
/// (payloads `{"n": 0..6}`), the fifth (`a`, n = 4) stored corrupt; and the journal reopened.
async fn journal_with_a_corrupt_event() -> (tempfile::TempDir, Journal) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let url = format!("sqlite://{}", path.display());
    let journal = Journal::open(&url).await.unwrap();
    for n in 0..6 {
        let kind = if n % 2 == 0 { "a" } else { "b" };
        journal
            .append(NewEvent::new("t", kind, json!({ "n": n })))
            .await
            .unwrap();
    }
    journal.close().await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    let changed = conn
        .execute(
            "UPDATE journal_events SET payload = '{not json' WHERE thread = 't' AND seq = \
             (SELECT seq FROM journal_events WHERE thread = 't' ORDER BY seq LIMIT 1 OFFSET 4)",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    (dir, Journal::open(&url).await.unwrap())
}

/// The `n`s `stream` yields before its first error, and that error.
async fn until_error<S, T>(stream: S, n: impl Fn(&T) -> i64) -> (Vec<i64>, JournalError)
where
    S: Stream<Item = Result<T, JournalError>>,
{
    let mut stream = std::pin::pin!(stream);
    let mut seen = Vec::new();
    loop {
        let item = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("the stream stalled")
            .expect("the stream ended without the error");
        match item {
            Ok(item) => seen.push(n(&item)),
            Err(err) => return (seen, err),
        }
    }
}

fn payload_n(event: &agent_journal::Event) -> i64 {
    event.payload["n"].as_i64().unwrap()
}

#[tokio::test]
async fn every_stream_delivers_the_good_events_before_a_corrupt_one() {
    let (_dir, journal) = journal_with_a_corrupt_event().await;
    let corrupt = |err: &JournalError| matches!(err, JournalError::CorruptPayload { .. });

    let (seen, err) = until_error(journal.replay_stream("t", 0), payload_n).await;
    assert_eq!(seen, [0, 1, 2, 3]);
    assert!(corrupt(&err), "{err}");

    let (seen, err) = until_error(journal.tail("t", 0), payload_n).await;
    assert_eq!(seen, [0, 1, 2, 3]);
    assert!(corrupt(&err), "{err}");

    let (seen, err) = until_error(journal.tail_kind("t", "a", 0), payload_n).await;
    assert_eq!(seen, [0, 2]);
    assert!(corrupt(&err), "{err}");
    // Events of other kinds are not decoded by a tail of one kind: the corrupt `a` is.
    let b: Vec<i64> = journal
        .tail_kind("t", "b", 0)
        .take(3)
        .map(|event| payload_n(&event.unwrap()))
        .collect()
        .await;
    assert_eq!(b, [1, 3, 5]);

    let (seen, err) = until_error(journal.tail_all(Position::START), |(_, event)| {
        payload_n(event)
    })
    .await;
    assert_eq!(seen, [0, 1, 2, 3]);
    assert!(corrupt(&err), "{err}");

    // A tail that goes on after the error does not deliver the good events twice.
    let mut tail = std::pin::pin!(journal.tail("t", 0));
    for _ in 0..4 {
        tail.next().await.unwrap().unwrap();
    }
    assert!(tail.next().await.unwrap().is_err());
    let again = tokio::time::timeout(Duration::from_secs(10), tail.next())
        .await
        .unwrap()
        .unwrap();
    assert!(again.is_err(), "{again:?}");
    journal.close().await;
}
