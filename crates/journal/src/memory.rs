//! The `memory:` backend: the journal kept in this process's memory.
//!
//! Same contracts as the database backends (validation, consecutive seqs per batch, dedup
//! keys, ack order = seq order, tail), except durability: nothing survives the process, and
//! opening `memory:` again gives a new, empty journal. Meant for tests, demos and throwaway
//! runs. An append takes the lock once; there is no writer thread and nothing to batch.
//! Payloads are kept as their JSON text (already produced by validation): a few hundred
//! bytes per event instead of a tree of allocations, decoded again only when read.

use std::collections::BTreeMap;

use foldhash::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use crate::error::JournalError;
use crate::event::{Appended, Event};
use crate::writer::{Counters, Prepared, publish_commit};

/// One process-local journal; shared by every clone of its [`Journal`](crate::Journal).
pub(crate) struct MemoryJournal {
    state: Mutex<State>,
    committed: watch::Sender<i64>,
    counters: Arc<Counters>,
}

#[derive(Default)]
struct State {
    last_seq: i64,
    /// Sorted by name, so `threads()` needs no sort.
    threads: BTreeMap<String, ThreadLog>,
    closed: bool,
}

impl State {
    /// Appends one event (or finds its dedup key), assigning the next seq.
    fn push(&mut self, event: Prepared) -> Appended {
        let next = self.last_seq + 1;
        let log = match self.threads.get_mut(&event.thread) {
            Some(log) => log,
            None => self.threads.entry(event.thread.clone()).or_default(),
        };
        if let Some(key) = &event.dedup_key {
            if let Some(&seq) = log.keys.get(key) {
                return Appended {
                    seq,
                    deduplicated: true,
                };
            }
            log.keys.insert(key.clone(), next);
        }
        log.push(Stored {
            seq: next,
            kind: event.kind,
            payload: event.payload,
            at: event.at,
            dedup_key: event.dedup_key,
        });
        self.last_seq = next;
        Appended {
            seq: next,
            deduplicated: false,
        }
    }
}

/// Events per chunk of a thread's log.
const CHUNK: usize = 4096;

/// One thread's events in seq order, and its dedup keys. Events live in fixed-size chunks,
/// so a growing log never copies what it holds.
#[derive(Default)]
struct ThreadLog {
    chunks: Vec<Vec<Stored>>,
    keys: HashMap<String, i64>,
}

/// An event without its thread (the log's key), payload as JSON text.
struct Stored {
    seq: i64,
    kind: String,
    payload: String,
    at: i64,
    dedup_key: Option<String>,
}

impl Stored {
    fn event(&self, thread: &str) -> Result<Event, JournalError> {
        Ok(Event {
            seq: self.seq,
            thread: thread.to_string(),
            kind: self.kind.clone(),
            payload: serde_json::from_str(&self.payload).map_err(|source| {
                JournalError::CorruptPayload {
                    seq: self.seq,
                    source,
                }
            })?,
            at: self.at,
            dedup_key: self.dedup_key.clone(),
        })
    }
}

impl ThreadLog {
    fn push(&mut self, stored: Stored) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push(stored),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(stored);
                self.chunks.push(chunk);
            }
        }
    }

    fn last(&self) -> Option<&Stored> {
        self.chunks.last().and_then(|chunk| chunk.last())
    }

    /// Events with `seq > after`, in order.
    fn after(&self, after: i64) -> impl Iterator<Item = &Stored> {
        // The first chunk whose last event is past `after`, then the position inside it.
        let first = self
            .chunks
            .partition_point(|chunk| chunk.last().is_none_or(|e| e.seq <= after));
        let skip = self
            .chunks
            .get(first)
            .map_or(0, |chunk| chunk.partition_point(|e| e.seq <= after));
        self.chunks[first.min(self.chunks.len())..]
            .iter()
            .flatten()
            .skip(skip)
    }

    fn by_seq(&self, seq: i64) -> Option<&Stored> {
        self.after(seq.saturating_sub(1))
            .next()
            .filter(|e| e.seq == seq)
    }
}

impl MemoryJournal {
    pub(crate) fn new(committed: watch::Sender<i64>, counters: Arc<Counters>) -> Self {
        MemoryJournal {
            state: Mutex::new(State::default()),
            committed,
            counters,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; the state is consistent at every await-free step.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open_state(&self) -> Result<MutexGuard<'_, State>, JournalError> {
        let state = self.state();
        if state.closed {
            return Err(JournalError::Closed);
        }
        Ok(state)
    }

    /// Appends validated events as one atomic step.
    pub(crate) fn append(&self, events: Vec<Prepared>) -> Result<Vec<Appended>, JournalError> {
        let mut state = self.open_state()?;
        let first = state.last_seq;
        let acks = events.into_iter().map(|event| state.push(event)).collect();
        self.publish(state, first);
        Ok(acks)
    }

    /// Appends one validated event (the common case, without the batch's vectors).
    pub(crate) fn append_one(&self, event: Prepared) -> Result<Appended, JournalError> {
        let mut state = self.open_state()?;
        let first = state.last_seq;
        let ack = state.push(event);
        self.publish(state, first);
        Ok(ack)
    }

    /// Releases the lock, then counts the commit and wakes tails if anything was written.
    fn publish(&self, state: MutexGuard<'_, State>, first: i64) {
        let last = state.last_seq;
        drop(state);
        let written = last - first;
        publish_commit(
            &self.committed,
            &self.counters,
            u64::try_from(written).unwrap_or(0),
            (written > 0).then_some(last),
        );
    }

    /// Up to `limit` events of `thread` with `seq > after`.
    pub(crate) fn replay_page(
        &self,
        thread: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Event>, JournalError> {
        let state = self.open_state()?;
        match state.threads.get(thread) {
            Some(log) => log
                .after(after)
                .take(limit)
                .map(|stored| stored.event(thread))
                .collect(),
            None => Ok(Vec::new()),
        }
    }

    pub(crate) fn find_by_key(
        &self,
        thread: &str,
        key: &str,
    ) -> Result<Option<Event>, JournalError> {
        let state = self.open_state()?;
        state
            .threads
            .get(thread)
            .and_then(|log| log.by_seq(*log.keys.get(key)?))
            .map(|stored| stored.event(thread))
            .transpose()
    }

    pub(crate) fn threads(&self) -> Result<Vec<String>, JournalError> {
        Ok(self.open_state()?.threads.keys().cloned().collect())
    }

    pub(crate) fn last_seq(&self, thread: &str) -> Result<Option<i64>, JournalError> {
        let state = self.open_state()?;
        Ok(state
            .threads
            .get(thread)
            .and_then(ThreadLog::last)
            .map(|e| e.seq))
    }

    /// Refuses later appends and reads and frees the events.
    pub(crate) fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.threads.clear();
    }
}
