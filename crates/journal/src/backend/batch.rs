//! What both database backends share: the pure part of a group commit (deduplication,
//! conditions and seq assignment), and PostgreSQL's row decoding.
//!
//! Both backends plan a batch the same way, inside its write transaction: look up the
//! batch's dedup keys and the heads its conditions name, then give each new row a seq in
//! request order. SQLite holds the whole database's write lock (`BEGIN IMMEDIATE`) and
//! assigns consecutive seqs after its `journal_head` row, so commit order equals seq order.
//! PostgreSQL holds only the locks of the threads the batch writes and takes seqs from a
//! sequence (see `postgres/write.rs`): each thread's commits are in seq order, the
//! journal's as a whole are not, and readers of every thread order by transaction.

use std::collections::HashMap;

use sqlx::{Database, Decode, Type};

use crate::error::JournalError;
use crate::event::{Appended, Event};
use crate::payload::Decoder;
use crate::writer::{Answer, Prepared, Request};

/// One row to insert.
pub(crate) struct Row<'a> {
    pub(crate) seq: i64,
    pub(crate) event: &'a Prepared,
}

/// The conditions of a batch, read under the write lock (PostgreSQL: the locks of the
/// batch's threads): the last seq of every thread an
/// [`Expected`](crate::writer::Expected) names, and the epoch of every lease a
/// [`Fence`](crate::writer::Fence) names (`None`: no such thread events / no such lease).
#[derive(Default, Clone)]
pub(crate) struct Conditions {
    pub(crate) heads: HashMap<String, Option<i64>>,
    pub(crate) epochs: HashMap<String, Option<i64>>,
}

/// The outcome of planning one batch: rows to insert and one answer per request.
pub(crate) struct Plan<'a> {
    pub(crate) rows: Vec<Row<'a>>,
    pub(crate) acks: Vec<Answer>,
}

/// Assigns seqs after `max_seq` in request order. An event whose `(thread, key)` is in
/// `existing`, or appeared earlier in the batch, is acknowledged with the first seq and
/// not inserted.
///
/// `conditions` holds what the batch's conditions are checked against. A request whose
/// fence names another epoch than its lease's gets [`JournalError::Fenced`]; one whose
/// [`Expected`] condition does not hold against the thread's head, advanced by the rows
/// planned for the batch's earlier requests, gets [`JournalError::Conflict`]. Either plans
/// nothing.
///
/// [`Expected`]: crate::writer::Expected
pub(crate) fn plan<'a>(
    requests: &'a [Request],
    max_seq: i64,
    existing: HashMap<(String, String), i64>,
    conditions: Conditions,
) -> Plan<'a> {
    let mut next = max_seq;
    plan_with(
        requests,
        || {
            next += 1;
            next
        },
        existing,
        conditions,
    )
}

/// As [`plan`], with each new row's seq taken from `next_seq` in row order (PostgreSQL
/// allocates them from its sequence). The rows and answers are those [`plan`] gives for
/// the same inputs, seqs aside, so a dry run of [`plan`] counts the seqs to allocate.
pub(crate) fn plan_with<'a>(
    requests: &'a [Request],
    mut next_seq: impl FnMut() -> i64,
    mut existing: HashMap<(String, String), i64>,
    conditions: Conditions,
) -> Plan<'a> {
    let Conditions { mut heads, epochs } = conditions;
    let mut rows = Vec::new();
    let mut acks = Vec::with_capacity(requests.len());
    for request in requests {
        if let Some(fence) = &request.fence {
            let current = epochs.get(&fence.lease).copied().flatten();
            if current != Some(fence.epoch) {
                acks.push(Err(JournalError::Fenced {
                    lease: fence.lease.clone(),
                    epoch: fence.epoch,
                    current,
                }));
                continue;
            }
        }
        if let Some(expected) = &request.expected {
            let actual = heads.get(&expected.thread).copied().flatten();
            if actual != expected.last {
                acks.push(Err(JournalError::Conflict {
                    thread: expected.thread.clone(),
                    expected: expected.last,
                    actual,
                }));
                continue;
            }
        }
        let mut request_acks = Vec::with_capacity(request.events.len());
        for event in &request.events {
            let mut key_id = None;
            if let Some(key) = &event.dedup_key {
                let id = (event.thread.clone(), key.clone());
                if let Some(&seq) = existing.get(&id) {
                    request_acks.push(Appended {
                        seq,
                        deduplicated: true,
                        at: event.at,
                    });
                    continue;
                }
                key_id = Some(id);
            }
            let next = next_seq();
            if let Some(id) = key_id {
                existing.insert(id, next);
            }
            if let Some(head) = heads.get_mut(&event.thread) {
                *head = Some(next);
            }
            rows.push(Row { seq: next, event });
            request_acks.push(Appended {
                seq: next,
                deduplicated: false,
                at: event.at,
            });
        }
        acks.push(Ok(request_acks));
    }
    Plan { rows, acks }
}

/// The distinct threads named by the batch's [`Expected`](crate::writer::Expected)
/// conditions, whose heads [`plan`] needs.
pub(crate) fn expected_threads(requests: &[Request]) -> Vec<&str> {
    let mut threads: Vec<&str> = requests
        .iter()
        .filter_map(|r| r.expected.as_ref().map(|e| e.thread.as_str()))
        .collect();
    threads.sort_unstable();
    threads.dedup();
    threads
}

/// The distinct leases named by the batch's [`Fence`](crate::writer::Fence)s, whose epochs
/// [`plan`] needs.
pub(crate) fn fenced_leases(requests: &[Request]) -> Vec<&str> {
    let mut leases: Vec<&str> = requests
        .iter()
        .filter_map(|r| r.fence.as_ref().map(|f| f.lease.as_str()))
        .collect();
    leases.sort_unstable();
    leases.dedup();
    leases
}

/// The distinct `(thread, key)` pairs of a batch, for the dedup lookup.
pub(crate) fn dedup_pairs(requests: &[Request]) -> Vec<(&str, &str)> {
    let mut seen = std::collections::HashSet::new();
    let mut pairs = Vec::new();
    for event in requests.iter().flat_map(|r| &r.events) {
        if let Some(key) = &event.dedup_key
            && seen.insert((event.thread.as_str(), key.as_str()))
        {
            pairs.push((event.thread.as_str(), key.as_str()));
        }
    }
    pairs
}

/// `SELECT <event columns> FROM journal_events <rest>` as a static string (sqlx only takes
/// static SQL); columns come in the order the backends' `decode` reads them.
macro_rules! select_events {
    ($rest:literal) => {
        concat!(
            "SELECT seq, thread, kind, payload, at, dedup_key, epoch FROM journal_events ",
            $rest
        )
    };
}
pub(crate) use select_events;

/// Decodes a row selected by [`select_events!`] (PostgreSQL; SQLite decodes its own rows);
/// the rows of one read share `payloads`, the payload decoder's scratch.
pub(crate) fn decode<R>(row: &R, payloads: &mut Decoder) -> Result<Event, JournalError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    i64: for<'r> Decode<'r, <R as sqlx::Row>::Database> + Type<<R as sqlx::Row>::Database>,
    String: for<'r> Decode<'r, <R as sqlx::Row>::Database> + Type<<R as sqlx::Row>::Database>,
    for<'r> &'r str: Decode<'r, <R as sqlx::Row>::Database> + Type<<R as sqlx::Row>::Database>,
    <R as sqlx::Row>::Database: Database,
{
    let seq: i64 = row.try_get(0)?;
    let payload: &str = row.try_get(3)?;
    let thread: &str = row.try_get(1)?;
    let kind: &str = row.try_get(2)?;
    Ok(Event {
        seq,
        thread: thread.into(),
        kind: kind.into(),
        payload: payloads
            .decode(payload)
            .map_err(|source| JournalError::CorruptPayload { seq, source })?,
        at: row.try_get(4)?,
        dedup_key: row.try_get(5)?,
        epoch: row.try_get(6)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::{Expected, Fence};

    fn ev(thread: &str, key: Option<&str>) -> Prepared {
        Prepared::for_test(thread, key)
    }

    fn plain(events: Vec<Prepared>) -> Request {
        Request {
            events,
            expected: None,
            fence: None,
        }
    }

    fn fenced(lease: &str, epoch: i64, events: Vec<Prepared>) -> Request {
        Request {
            events,
            expected: None,
            fence: Some(Fence {
                lease: lease.into(),
                epoch,
            }),
        }
    }

    fn expecting(thread: &str, last: Option<i64>, events: Vec<Prepared>) -> Request {
        Request {
            events,
            expected: Some(Expected {
                thread: thread.into(),
                last,
            }),
            fence: None,
        }
    }

    fn seqs(answer: &Answer) -> Vec<i64> {
        answer.as_ref().unwrap().iter().map(|a| a.seq).collect()
    }

    #[test]
    fn plan_assigns_consecutive_seqs_and_dedups_within_and_across_batches() {
        let requests = vec![
            plain(vec![ev("a", Some("x")), ev("a", None)]),
            plain(vec![
                ev("a", Some("x")),
                ev("b", Some("x")),
                ev("a", Some("old")),
            ]),
        ];
        let existing = HashMap::from([(("a".to_string(), "old".to_string()), 3)]);
        let plan = plan(&requests, 10, existing, Conditions::default());
        let seqs: Vec<i64> = plan.rows.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![11, 12, 13]);
        assert_eq!(
            plan.acks[1].as_ref().unwrap(),
            &vec![
                Appended {
                    seq: 11,
                    deduplicated: true,
                    at: 0,
                },
                Appended {
                    seq: 13,
                    deduplicated: false,
                    at: 0,
                },
                Appended {
                    seq: 3,
                    deduplicated: true,
                    at: 0,
                },
            ]
        );
        assert_eq!(dedup_pairs(&requests).len(), 3);
    }

    #[test]
    fn expectations_see_the_batch_s_earlier_rows_and_conflicts_plan_nothing() {
        let requests = vec![
            // Holds against the database head.
            expecting("a", Some(4), vec![ev("a", Some("k"))]),
            // Stale: the first request moved `a` to 11.
            expecting("a", Some(4), vec![ev("a", Some("other"))]),
            plain(vec![ev("b", None)]),
            // Sees the first request's row.
            expecting("a", Some(11), vec![ev("a", None)]),
            // A thread without events.
            expecting("c", None, vec![ev("c", Some("k"))]),
            expecting("c", None, vec![ev("c", None)]),
        ];
        let heads = HashMap::from([("a".to_string(), Some(4)), ("c".to_string(), None)]);
        let conditions = Conditions {
            heads,
            epochs: HashMap::new(),
        };
        let plan = plan(&requests, 10, HashMap::new(), conditions);
        assert_eq!(seqs(&plan.acks[0]), vec![11]);
        assert!(matches!(
            &plan.acks[1],
            Err(JournalError::Conflict { thread, expected: Some(4), actual: Some(11) }) if thread == "a"
        ));
        assert_eq!(seqs(&plan.acks[2]), vec![12]);
        assert_eq!(seqs(&plan.acks[3]), vec![13]);
        assert_eq!(seqs(&plan.acks[4]), vec![14]);
        assert!(matches!(
            &plan.acks[5],
            Err(JournalError::Conflict {
                expected: None,
                actual: Some(14),
                ..
            })
        ));
        assert_eq!(plan.rows.len(), 4);
        // The refused request's dedup key was not taken.
        assert!(
            plan.rows
                .iter()
                .all(|r| r.event.dedup_key.as_deref() != Some("other"))
        );
        assert_eq!(expected_threads(&requests), vec!["a", "c"]);
    }

    #[test]
    fn a_stale_or_missing_fence_fails_its_request_alone() {
        let requests = vec![
            fenced("run:a", 2, vec![ev("a", None)]),
            fenced("run:a", 1, vec![ev("a", Some("k"))]),
            fenced("run:gone", 1, vec![ev("b", None)]),
            plain(vec![ev("b", None)]),
        ];
        let conditions = Conditions {
            heads: HashMap::new(),
            epochs: HashMap::from([("run:a".to_string(), Some(2)), ("run:gone".into(), None)]),
        };
        let plan = plan(&requests, 0, HashMap::new(), conditions);
        assert_eq!(seqs(&plan.acks[0]), vec![1]);
        assert!(matches!(
            &plan.acks[1],
            Err(JournalError::Fenced { lease, epoch: 1, current: Some(2) }) if lease == "run:a"
        ));
        assert!(matches!(
            &plan.acks[2],
            Err(JournalError::Fenced { current: None, .. })
        ));
        assert_eq!(seqs(&plan.acks[3]), vec![2]);
        assert_eq!(plan.rows.len(), 2);
        assert_eq!(fenced_leases(&requests), vec!["run:a", "run:gone"]);
    }
}
