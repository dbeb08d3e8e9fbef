//! A conditional batch in one round trip: the writer plans the batch on what it assumes
//! (no dedup key is written yet, each thread's first expected-version condition holds, each
//! lease is at its first fence's epoch), and `journal_append` (schema step 4) checks those
//! assumptions under the threads' locks and writes the planned rows when they hold.
//!
//! Invariant: when the function writes, the plan it wrote is the plan a transaction that
//! read the database would have made (`append::in_transaction`). What that plan reads is
//! exactly what the function checks: the batch's dedup keys (all absent), the heads the
//! conditions name (as assumed) and the fenced leases' epochs (as assumed). When a check
//! fails the function writes nothing and the caller falls back to the transaction.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;

use super::append::{THREAD_LOCK_SEED, batch_threads, column};
use crate::backend::batch::{self, Conditions, Plan};
use crate::writer::{Answer, Prepared, Request, relaxed_batch};

const APPEND_SQL: &str = "SELECT journal_append(\
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)";

/// Writes `batch` with `journal_append` when its assumed plan acknowledges every request.
/// `Ok(None)`: nothing was written (the plan would refuse a request, or the database did
/// not match an assumption); the batch needs a transaction that reads.
pub(super) async fn write(
    conn: &mut PgConnection,
    batch: &[Request],
) -> Result<Option<Vec<Answer>>, sqlx::Error> {
    let Some(assumed) = assumptions(batch) else {
        return Ok(None);
    };
    // What the function checks, as array parameters (owned: the plan takes `assumed`).
    let (head_threads, heads): (Vec<String>, Vec<Option<i64>>) =
        assumed.heads.iter().map(|(t, h)| (t.clone(), *h)).unzip();
    let (leases, epochs): (Vec<String>, Vec<Option<i64>>) =
        assumed.epochs.iter().map(|(l, e)| (l.clone(), *e)).unzip();
    // Stand-in seqs below every real one (`STAND_IN_BASE` + 1, + 2, ... in row order): no
    // condition can name them, so a condition that holds in this plan compared the
    // database's head, which the function checks.
    let mut stand_in = STAND_IN_BASE;
    let Plan { rows, mut acks } = batch::plan_with(
        batch,
        || {
            stand_in += 1;
            stand_in
        },
        HashMap::new(),
        assumed,
    );
    if acks.iter().any(Result::is_err) {
        return Ok(None);
    }
    let rows: Vec<&Prepared> = rows.iter().map(|r| r.event).collect();
    let pairs = batch::dedup_pairs(batch);
    let seqs: Option<Vec<i64>> = sqlx::query_scalar(APPEND_SQL)
        .bind(THREAD_LOCK_SEED)
        .bind(batch_threads(batch))
        .bind(relaxed_batch(batch))
        .bind(head_threads)
        .bind(heads)
        .bind(pairs.iter().map(|(thread, _)| *thread).collect::<Vec<_>>())
        .bind(pairs.iter().map(|(_, key)| *key).collect::<Vec<_>>())
        .bind(leases)
        .bind(epochs)
        .bind(column(&rows, |e| e.thread.as_str()))
        .bind(column(&rows, |e| e.kind.as_str()))
        .bind(column(&rows, |e| e.payload.as_str()))
        .bind(column(&rows, |e| e.at))
        .bind(column(&rows, |e| e.dedup_key.as_deref()))
        .bind(column(&rows, |e| e.epoch))
        .fetch_one(&mut *conn)
        .await?;
    let Some(seqs) = seqs else {
        return Ok(None);
    };
    if seqs.len() != rows.len() {
        return Err(sqlx::Error::Protocol(
            "the journal wrote another number of events than its plan holds".into(),
        ));
    }
    // The plan the function confirmed, with the real seqs: the n-th stand-in is the n-th
    // row's (an ack of a key repeated within the batch names its first row's).
    for appended in acks.iter_mut().flatten().flatten() {
        let row = appended
            .seq
            .checked_sub(STAND_IN_BASE + 1)
            .and_then(|n| usize::try_from(n).ok());
        appended.seq = row.and_then(|n| seqs.get(n)).copied().ok_or_else(|| {
            sqlx::Error::Protocol("an acknowledgement names no row of the batch".into())
        })?;
    }
    Ok(Some(acks))
}

/// Below every stand-in seq.
const STAND_IN_BASE: i64 = i64::MIN;

/// What the plan assumes: each thread's head as its first expected-version condition
/// names it, each lease's epoch as its first fence names it. `None` when a condition names
/// a seq below zero, which a stand-in seq could equal (no real seq is one).
fn assumptions(batch: &[Request]) -> Option<Conditions> {
    let mut assumed = Conditions::default();
    for request in batch {
        if let Some(expected) = &request.expected {
            if expected.last.is_some_and(|last| last < 0) {
                return None;
            }
            assumed
                .heads
                .entry(expected.thread.clone())
                .or_insert(expected.last);
        }
        if let Some(fence) = &request.fence {
            assumed
                .epochs
                .entry(fence.lease.clone())
                .or_insert(Some(fence.epoch));
        }
    }
    Some(assumed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::JournalOptions;
    use crate::writer::{Expected, Fence};

    fn event(thread: &str, key: Option<&str>) -> Prepared {
        Prepared::for_test(thread, key)
    }

    fn request(
        events: Vec<Prepared>,
        expected: Option<(&str, Option<i64>)>,
        fence: Option<(&str, i64)>,
    ) -> Request {
        Request {
            events,
            expected: expected.map(|(thread, last)| Expected {
                thread: thread.into(),
                last,
            }),
            fence: fence.map(|(lease, epoch)| Fence {
                lease: lease.into(),
                epoch,
            }),
        }
    }

    fn seqs(answers: &[Answer]) -> Vec<Vec<i64>> {
        answers
            .iter()
            .map(|a| a.as_ref().unwrap().iter().map(|e| e.seq).collect())
            .collect()
    }

    /// Each assumption the function checks, one at a time: a batch whose assumptions hold
    /// is written in the one call; one that names a written dedup key, a moved head or a
    /// lease at another epoch writes nothing (the writer then takes the transaction).
    #[tokio::test]
    async fn writes_when_the_assumptions_hold_and_nothing_when_one_does_not() {
        let Some(db) = agent_testkit::fresh_pg_database("journal_checked").await else {
            return;
        };
        let opened = super::super::open(db.url(), db.url(), &JournalOptions::default(), false)
            .await
            .unwrap();
        let mut conn = opened.writer.unwrap().conn;
        sqlx::query(
            "INSERT INTO journal_leases (name, status, holder, epoch, expires_at, info, \
             updated_at) VALUES ('run:a', 'open', 'me', 3, 0, '{}', 0)",
        )
        .execute(&mut conn)
        .await
        .unwrap();

        // Two requests, one thread: the second dedups against the first within the batch.
        let first = [
            request(
                vec![event("a", Some("x")), event("a", None)],
                Some(("a", None)),
                Some(("run:a", 3)),
            ),
            request(
                vec![event("a", Some("x")), event("b", Some("y"))],
                None,
                None,
            ),
        ];
        let answers = write(&mut conn, &first).await.unwrap().unwrap();
        let got = seqs(&answers);
        assert_eq!(got[1][0], got[0][0], "the batch's own repeated key");
        assert!(got[0][0] < got[0][1] && got[0][1] < got[1][1]);
        let head = got[0][1];

        let refused = [
            // A written key.
            [request(vec![event("b", Some("y"))], None, None)],
            // A head that moved.
            [request(
                vec![event("a", None)],
                Some(("a", Some(head - 1))),
                None,
            )],
            // A lease at another epoch, and one that does not exist.
            [request(vec![event("a", None)], None, Some(("run:a", 2)))],
            [request(vec![event("a", None)], None, Some(("run:gone", 1)))],
        ];
        for batch in &refused {
            assert!(write(&mut conn, batch).await.unwrap().is_none());
        }
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM journal_events")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(count, 3, "a refused call writes nothing");

        // The head as it is, with the lease: written.
        let next = [request(
            vec![event("a", Some("z"))],
            Some(("a", Some(head))),
            Some(("run:a", 3)),
        )];
        let answers = write(&mut conn, &next).await.unwrap().unwrap();
        assert!(seqs(&answers)[0][0] > head);
    }
}
