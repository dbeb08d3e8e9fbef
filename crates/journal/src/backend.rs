//! What both database backends share: the schema steps still to apply, the pure part of a
//! group commit (deduplication and seq assignment), and PostgreSQL's row decoding.
//!
//! Both backends write the same way: inside one transaction that holds the journal's write
//! lock (SQLite `BEGIN IMMEDIATE`, PostgreSQL an advisory transaction lock), read the highest
//! assigned `seq` (SQLite: the `journal_head` row; PostgreSQL: `MAX(seq)`), look up the
//! batch's dedup keys, and insert the new rows with explicit, consecutive seqs. Holding the
//! write lock while assigning makes commit order equal seq order, also across processes,
//! which is what lets `tail` read "everything after my last seq".

use std::collections::HashMap;

use sqlx::{Database, Decode, Type};

use crate::error::JournalError;
use crate::event::{Appended, Event};
use crate::writer::Prepared;

/// A schema: numbered steps of SQL, applied in order and recorded in `journal_schema`.
pub(crate) type Schema = [(i64, &'static str)];

/// The steps of `schema` a database at version `current` still needs; a database that a
/// newer build wrote (a version past the last step) is refused.
pub(crate) fn pending_steps(
    schema: &'static Schema,
    current: i64,
) -> Result<impl Iterator<Item = &'static (i64, &'static str)>, JournalError> {
    let supported = schema.last().map_or(0, |(v, _)| *v);
    if current > supported {
        return Err(JournalError::SchemaTooNew {
            found: current,
            supported,
        });
    }
    Ok(schema.iter().filter(move |(v, _)| *v > current))
}

/// One row to insert.
pub(crate) struct Row<'a> {
    pub seq: i64,
    pub event: &'a Prepared,
}

/// The outcome of planning one batch: rows to insert and one ack list per request.
pub(crate) struct Plan<'a> {
    pub rows: Vec<Row<'a>>,
    pub acks: Vec<Vec<Appended>>,
}

/// Assigns seqs after `max_seq` in request order. An event whose `(thread, key)` is in
/// `existing`, or appeared earlier in the batch, is acknowledged with the first seq and
/// not inserted.
pub(crate) fn plan<'a>(
    requests: &'a [Vec<Prepared>],
    max_seq: i64,
    mut existing: HashMap<(String, String), i64>,
) -> Plan<'a> {
    let mut next = max_seq;
    let mut rows = Vec::new();
    let mut acks = Vec::with_capacity(requests.len());
    for request in requests {
        let mut request_acks = Vec::with_capacity(request.len());
        for event in request {
            if let Some(key) = &event.dedup_key {
                let id = (event.thread.clone(), key.clone());
                if let Some(&seq) = existing.get(&id) {
                    request_acks.push(Appended {
                        seq,
                        deduplicated: true,
                    });
                    continue;
                }
                existing.insert(id, next + 1);
            }
            next += 1;
            rows.push(Row { seq: next, event });
            request_acks.push(Appended {
                seq: next,
                deduplicated: false,
            });
        }
        acks.push(request_acks);
    }
    Plan { rows, acks }
}

/// The distinct `(thread, key)` pairs of a batch, for the dedup lookup.
pub(crate) fn dedup_pairs(requests: &[Vec<Prepared>]) -> Vec<(&str, &str)> {
    let mut seen = std::collections::HashSet::new();
    let mut pairs = Vec::new();
    for event in requests.iter().flatten() {
        if let Some(key) = &event.dedup_key
            && seen.insert((event.thread.as_str(), key.as_str()))
        {
            pairs.push((event.thread.as_str(), key.as_str()));
        }
    }
    pairs
}

/// Rows per INSERT statement: 6 bind variables each stays far below SQLite's 32766 and
/// PostgreSQL's 65535 limits.
pub(crate) const ROWS_PER_STATEMENT: usize = 1000;
/// Pairs per dedup lookup statement.
pub(crate) const PAIRS_PER_LOOKUP: usize = 1000;

/// `SELECT <event columns> FROM journal_events <rest>` as a static string (sqlx only takes
/// static SQL); columns come in the order the backends' `decode` reads them.
macro_rules! select_events {
    ($rest:literal) => {
        concat!(
            "SELECT seq, thread, kind, payload, at, dedup_key FROM journal_events ",
            $rest
        )
    };
}
pub(crate) use select_events;

/// Decodes a row selected by [`select_events!`] (PostgreSQL; SQLite decodes its own rows).
pub(crate) fn decode<R>(row: &R) -> Result<Event, JournalError>
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
        payload: serde_json::from_str(payload)
            .map_err(|source| JournalError::CorruptPayload { seq, source })?,
        at: row.try_get(4)?,
        dedup_key: row.try_get(5)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(thread: &str, key: Option<&str>) -> Prepared {
        Prepared {
            thread: thread.into(),
            kind: "k".into(),
            payload: "{}".into(),
            dedup_key: key.map(Into::into),
            at: 0,
        }
    }

    #[test]
    fn plan_assigns_consecutive_seqs_and_dedups_within_and_across_batches() {
        let requests = vec![
            vec![ev("a", Some("x")), ev("a", None)],
            vec![ev("a", Some("x")), ev("b", Some("x")), ev("a", Some("old"))],
        ];
        let existing = HashMap::from([(("a".to_string(), "old".to_string()), 3)]);
        let plan = plan(&requests, 10, existing);
        let seqs: Vec<i64> = plan.rows.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![11, 12, 13]);
        assert_eq!(
            plan.acks[1],
            vec![
                Appended {
                    seq: 11,
                    deduplicated: true
                },
                Appended {
                    seq: 13,
                    deduplicated: false
                },
                Appended {
                    seq: 3,
                    deduplicated: true
                },
            ]
        );
        assert_eq!(dedup_pairs(&requests).len(), 3);
    }
}
