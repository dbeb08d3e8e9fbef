//! The `memory:` backend: the journal kept in this process's memory.
//!
//! Same contracts as the database backends (validation, consecutive seqs per batch, dedup
//! keys, ack order = seq order, tail), except durability: nothing survives the process, and
//! opening `memory:` again gives a new, empty journal. Meant for tests, demos and throwaway
//! runs. An append takes the lock once; there is no writer thread and nothing to batch.
//! Payloads are kept as their JSON text (already produced by validation), copied into
//! per-chunk buffers: a few hundred bytes per event instead of a tree of allocations,
//! decoded again only when read.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::backend::{KindPage, ReadSide};
use crate::commits::Commits;
use crate::error::JournalError;
use crate::event::{Appended, Event};
use crate::lease::LeaseRow;
use crate::position::Position;
use crate::writer::{Counters, Expected, Fence, Prepared, count_commit};

/// One process-local journal; shared by every clone of its [`Journal`](crate::Journal).
pub(crate) struct InMemoryJournal {
    state: Mutex<State>,
    commits: Arc<Commits>,
    counters: Arc<Counters>,
}

#[derive(Default)]
pub(crate) struct State {
    last_seq: i64,
    /// Sorted by name, so `threads()` needs no sort.
    threads: BTreeMap<String, ThreadLog>,
    /// Each distinct kind once; events share it.
    kinds: HashSet<Arc<str>>,
    /// The lease table, by name.
    pub(crate) leases: BTreeMap<String, LeaseRow>,
    closed: bool,
}

impl State {
    /// Whether an append under `fence` may be written: its lease is still at its epoch.
    fn check_fence(&self, fence: Option<&Fence>) -> Result<(), JournalError> {
        let Some(fence) = fence else { return Ok(()) };
        let current = self.leases.get(&fence.lease).map(|row| row.epoch);
        if current == Some(fence.epoch) {
            Ok(())
        } else {
            Err(JournalError::Fenced {
                lease: fence.lease.clone(),
                epoch: fence.epoch,
                current,
            })
        }
    }

    /// Appends one event (or finds its dedup key), assigning the next seq.
    fn push(&mut self, event: Prepared) -> Appended {
        let next = self.last_seq + 1;
        let log = match self.threads.get_mut(&event.thread) {
            Some(log) => log,
            None => self.threads.entry(event.thread.clone()).or_default(),
        };
        let dedup_key = match event.dedup_key {
            Some(key) => {
                if let Some(&seq) = log.keys.get(key.as_str()) {
                    return Appended {
                        seq,
                        deduplicated: true,
                        at: event.at,
                    };
                }
                let key: Arc<str> = key.into();
                log.keys.insert(Arc::clone(&key), next);
                Some(key)
            }
            None => None,
        };
        let kind = match self.kinds.get(event.kind.as_str()) {
            Some(kind) => Arc::clone(kind),
            None => {
                let kind: Arc<str> = event.kind.into();
                self.kinds.insert(Arc::clone(&kind));
                kind
            }
        };
        log.push(next, event.at, event.epoch, kind, &event.payload, dedup_key);
        self.last_seq = next;
        Appended {
            seq: next,
            deduplicated: false,
            at: event.at,
        }
    }
}

/// Most events per chunk of a thread's log.
const CHUNK_EVENTS: usize = 4096;
/// Payload bytes per chunk (a larger payload gets a chunk of its own size).
const CHUNK_TEXT: usize = 256 * 1024;

/// One thread's events in seq order, and its dedup keys. Events live in chunks whose
/// payload text shares one buffer allocated once, so a growing log never copies what it
/// holds and an event costs no allocation of its own beyond a dedup key.
#[derive(Default)]
struct ThreadLog {
    chunks: Vec<Chunk>,
    keys: HashMap<Arc<str>, i64>,
}

struct Chunk {
    events: Vec<Stored>,
    /// The payloads of `events`, back to back; never grows past its first capacity.
    text: String,
}

/// An event without its thread (the log's key); its payload is a range of the chunk's text.
struct Stored {
    seq: i64,
    at: i64,
    epoch: Option<i64>,
    kind: Arc<str>,
    start: usize,
    len: usize,
    dedup_key: Option<Arc<str>>,
}

impl Chunk {
    fn with_room_for(payload: usize) -> Self {
        Chunk {
            events: Vec::new(),
            text: String::with_capacity(payload.max(CHUNK_TEXT)),
        }
    }

    fn has_room_for(&self, payload: usize) -> bool {
        self.events.len() < CHUNK_EVENTS && self.text.len() + payload <= self.text.capacity()
    }

    fn event(&self, stored: &Stored, thread: &Arc<str>) -> Result<Event, JournalError> {
        let text = self
            .text
            .get(stored.start..stored.start + stored.len)
            .unwrap_or_default();
        Ok(Event {
            seq: stored.seq,
            thread: Arc::clone(thread),
            kind: Arc::clone(&stored.kind),
            payload: agent_schema::json::from_str(text).map_err(|source| {
                JournalError::CorruptPayload {
                    seq: stored.seq,
                    source,
                }
            })?,
            at: stored.at,
            dedup_key: stored.dedup_key.as_deref().map(str::to_string),
            epoch: stored.epoch,
        })
    }
}

impl ThreadLog {
    fn push(
        &mut self,
        seq: i64,
        at: i64,
        epoch: Option<i64>,
        kind: Arc<str>,
        payload: &str,
        key: Option<Arc<str>>,
    ) {
        let chunk = match self.chunks.last_mut() {
            Some(chunk) if chunk.has_room_for(payload.len()) => chunk,
            _ => {
                self.chunks.push(Chunk::with_room_for(payload.len()));
                let last = self.chunks.len() - 1;
                &mut self.chunks[last]
            }
        };
        let start = chunk.text.len();
        chunk.text.push_str(payload);
        chunk.events.push(Stored {
            seq,
            at,
            epoch,
            kind,
            start,
            len: payload.len(),
            dedup_key: key,
        });
    }

    fn last(&self) -> Option<&Stored> {
        self.chunks.last().and_then(|chunk| chunk.events.last())
    }

    /// Events with `seq > after`, in order, each with its chunk.
    fn after(&self, after: i64) -> impl Iterator<Item = (&Chunk, &Stored)> {
        // The first chunk whose last event is past `after`, then the position inside it.
        let first = self
            .chunks
            .partition_point(|chunk| chunk.events.last().is_none_or(|e| e.seq <= after));
        let skip = self
            .chunks
            .get(first)
            .map_or(0, |chunk| chunk.events.partition_point(|e| e.seq <= after));
        self.chunks[first.min(self.chunks.len())..]
            .iter()
            .flat_map(|chunk| chunk.events.iter().map(move |e| (chunk, e)))
            .skip(skip)
    }

    fn by_seq(&self, seq: i64) -> Option<(&Chunk, &Stored)> {
        self.after(seq.saturating_sub(1))
            .next()
            .filter(|(_, e)| e.seq == seq)
    }
}

impl InMemoryJournal {
    pub(crate) fn new(commits: Arc<Commits>, counters: Arc<Counters>) -> Self {
        InMemoryJournal {
            state: Mutex::new(State::default()),
            commits,
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

    /// Appends validated events as one atomic step, if `fence` (when given) still holds.
    pub(crate) fn append(
        &self,
        events: Vec<Prepared>,
        fence: Option<&Fence>,
    ) -> Result<Vec<Appended>, JournalError> {
        self.write(
            events,
            |events| names(events),
            |state, events| {
                state.check_fence(fence)?;
                Ok(events.into_iter().map(|event| state.push(event)).collect())
            },
        )?
    }

    /// Appends validated events as one atomic step if the last seq of `expected.thread` is
    /// still `expected.last` (and `fence`, when given, still holds); otherwise writes
    /// nothing and answers [`JournalError::Conflict`] (or [`JournalError::Fenced`]). The
    /// checks and the write hold the lock together.
    pub(crate) fn append_expecting(
        &self,
        expected: Expected,
        events: Vec<Prepared>,
        fence: Option<&Fence>,
    ) -> Result<Vec<Appended>, JournalError> {
        self.write(
            events,
            |events| names(events),
            |state, events| {
                state.check_fence(fence)?;
                let actual = state
                    .threads
                    .get(&expected.thread)
                    .and_then(ThreadLog::last)
                    .map(|e| e.seq);
                if actual != expected.last {
                    return Err(JournalError::Conflict {
                        thread: expected.thread,
                        expected: expected.last,
                        actual,
                    });
                }
                Ok(events.into_iter().map(|event| state.push(event)).collect())
            },
        )?
    }

    /// Appends one validated event (the common case, without the batch's vectors).
    pub(crate) fn append_one(&self, event: Prepared) -> Result<Appended, JournalError> {
        self.write(
            event,
            |event| names(std::slice::from_ref(event)),
            |state, event| state.push(event),
        )
    }

    /// Runs `f` on the state under the lock (lease operations: they write no events).
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> Result<R, JournalError> {
        let mut state = self.open_state()?;
        Ok(f(&mut state))
    }

    /// Runs `push` of `events` under the lock as one commit, then, with the lock released,
    /// counts the commit and, if anything was written, wakes the tails of the threads
    /// `names` lists.
    ///
    /// Whether any tail waits is asked under the lock: a tail subscribes before it first
    /// reads, and its read waits for this lock, so a tail that subscribed too late to be
    /// woken reads the events instead (asked before the lock, a tail subscribing and
    /// reading in between would wait for its next poll).
    fn write<E, R>(
        &self,
        events: E,
        names: impl FnOnce(&E) -> Vec<(String, String)>,
        push: impl FnOnce(&mut State, E) -> R,
    ) -> Result<R, JournalError> {
        let mut state = self.open_state()?;
        // Nothing to collect when no tail can be waiting.
        let touched = if self.commits.any() {
            names(&events)
        } else {
            Vec::new()
        };
        let first = state.last_seq;
        let acks = push(&mut state, events);
        let last = state.last_seq;
        drop(state);
        let written = last - first;
        count_commit(&self.counters, u64::try_from(written).unwrap_or(0));
        if written > 0 {
            self.commits.publish(
                touched
                    .iter()
                    .map(|(thread, kind)| (thread.as_str(), Some(kind.as_str()))),
            );
        }
        Ok(acks)
    }

    /// Up to `limit` events of `thread` with `seq > after`.
    fn events_after(
        &self,
        thread: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Event>, JournalError> {
        let state = self.open_state()?;
        match state.threads.get(thread) {
            Some(log) => {
                let thread = Arc::from(thread);
                log.after(after)
                    .take(limit)
                    .map(|(chunk, stored)| chunk.event(stored, &thread))
                    .collect()
            }
            None => Ok(Vec::new()),
        }
    }
}

impl ReadSide for InMemoryJournal {
    async fn replay_page(
        &self,
        thread: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Event>, JournalError> {
        self.events_after(thread, after, usize::try_from(limit).unwrap_or(0))
    }

    async fn replay_kind_page(
        &self,
        thread: &str,
        kind: &str,
        after: i64,
        limit: i64,
    ) -> Result<KindPage, JournalError> {
        let state = self.open_state()?;
        let Some(log) = state.threads.get(thread) else {
            return Ok(KindPage::new(Vec::new(), after, None, limit));
        };
        let name = Arc::from(thread);
        let events = log
            .after(after)
            .filter(|(_, e)| &*e.kind == kind)
            .take(usize::try_from(limit).unwrap_or(0))
            .map(|(chunk, stored)| chunk.event(stored, &name))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KindPage::new(
            events,
            after,
            log.last().map(|e| e.seq),
            limit,
        ))
    }

    async fn replay_all(&self, thread: &str, after: i64) -> Result<Vec<Event>, JournalError> {
        self.events_after(thread, after, usize::MAX)
    }

    async fn find_by_key(&self, thread: &str, key: &str) -> Result<Option<Event>, JournalError> {
        let state = self.open_state()?;
        state
            .threads
            .get(thread)
            .and_then(|log| log.by_seq(*log.keys.get(key)?))
            .map(|(chunk, stored)| chunk.event(stored, &Arc::from(thread)))
            .transpose()
    }

    async fn last_of_kind(&self, thread: &str, kind: &str) -> Result<Option<Event>, JournalError> {
        let state = self.open_state()?;
        let Some(log) = state.threads.get(thread) else {
            return Ok(None);
        };
        log.chunks
            .iter()
            .rev()
            .flat_map(|chunk| chunk.events.iter().rev().map(move |e| (chunk, e)))
            .find(|(_, e)| &*e.kind == kind)
            .map(|(chunk, stored)| chunk.event(stored, &Arc::from(thread)))
            .transpose()
    }

    async fn threads(&self) -> Result<Vec<String>, JournalError> {
        Ok(self.open_state()?.threads.keys().cloned().collect())
    }

    /// Appends hold the lock, so seq alone is the journal's order. A page merges every
    /// thread's events after `after`: fine for the tests and demos `memory:` is for.
    async fn journal_page(
        &self,
        after: Position,
        limit: i64,
    ) -> Result<Vec<(Position, Event)>, JournalError> {
        let state = self.open_state()?;
        let limit = usize::try_from(limit).unwrap_or(0);
        let mut found: Vec<(i64, &str, &Chunk, &Stored)> = Vec::new();
        for (name, log) in &state.threads {
            found.extend(
                log.after(after.seq)
                    .take(limit)
                    .map(|(chunk, stored)| (stored.seq, name.as_str(), chunk, stored)),
            );
        }
        found.sort_unstable_by_key(|(seq, ..)| *seq);
        found.truncate(limit);
        found
            .into_iter()
            .map(|(seq, name, chunk, stored)| {
                let event = chunk.event(stored, &Arc::from(name))?;
                Ok((Position::START.with_seq(seq), event))
            })
            .collect()
    }

    async fn last_seq(&self, thread: &str) -> Result<Option<i64>, JournalError> {
        let state = self.open_state()?;
        Ok(state
            .threads
            .get(thread)
            .and_then(ThreadLog::last)
            .map(|e| e.seq))
    }

    /// Refuses later appends and reads and frees the events.
    async fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.threads.clear();
    }
}

/// The threads and kinds `events` write (repeats are fine: a publish that names a thread
/// twice wakes it once).
fn names(events: &[Prepared]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|event| (event.thread.clone(), event.kind.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tail subscribes and then reads; an append that finds no tail must look while it
    /// holds the lock that read takes, or a tail subscribing and reading between the look
    /// and the write is neither woken nor shown the event. Here the tail's read holds the
    /// lock from before the append starts until after the tail subscribed: the tail reads
    /// nothing, so the append must wake it. (With the look before the lock, it found no
    /// tail and woke none.)
    #[test]
    fn a_tail_subscribing_while_an_append_waits_is_woken() {
        let commits = Arc::new(Commits::default());
        let j = Arc::new(InMemoryJournal::new(
            Arc::clone(&commits),
            Arc::new(Counters::default()),
        ));
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (subscribed_tx, subscribed_rx) = std::sync::mpsc::channel::<()>();
        let read = {
            let j = Arc::clone(&j);
            std::thread::spawn(move || {
                j.with_state(|state| {
                    held_tx.send(()).unwrap();
                    subscribed_rx.recv().unwrap();
                    state.last_seq
                })
                .unwrap()
            })
        };
        held_rx.recv().unwrap();
        let appender = {
            let j = Arc::clone(&j);
            std::thread::spawn(move || j.append_one(event(1, "{}".into(), None)).unwrap())
        };
        // The append is under way (waiting for the lock) before the tail subscribes.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let woken = commits.subscribe("t", None);
        subscribed_tx.send(()).unwrap();
        assert_eq!(read.join().unwrap(), 0, "the tail read before the append");
        appender.join().unwrap();
        assert!(
            woken.has_changed().unwrap(),
            "the tail read nothing and was not woken"
        );
    }

    fn journal() -> InMemoryJournal {
        InMemoryJournal::new(Arc::default(), Arc::new(Counters::default()))
    }

    fn event(n: usize, payload: String, key: Option<String>) -> Prepared {
        Prepared {
            thread: "t".into(),
            kind: if n.is_multiple_of(2) { "even" } else { "odd" }.into(),
            payload,
            dedup_key: key,
            at: i64::try_from(n).unwrap(),
            epoch: None,
            relaxed: false,
        }
    }

    #[tokio::test]
    async fn events_read_back_across_chunk_boundaries() {
        let j = journal();
        // Enough events to fill chunks by count, with payloads of growing size, and a few
        // payloads larger than a chunk's text buffer.
        let mut expected = Vec::new();
        for n in 0..(CHUNK_EVENTS * 2 + 10) {
            let body = if n % 1000 == 999 {
                "x".repeat(CHUNK_TEXT + 17)
            } else {
                "y".repeat(n % 300)
            };
            let payload =
                serde_json::to_string(&serde_json::json!({ "n": n, "body": body })).unwrap();
            expected.push(payload.clone());
            let ack = j
                .append_one(event(n, payload, Some(format!("k{n}"))))
                .unwrap();
            assert_eq!(ack.seq, i64::try_from(n).unwrap() + 1);
        }
        let log_chunks = j.state().threads["t"].chunks.len();
        assert!(log_chunks > 2, "{log_chunks} chunks");
        for after in [0, 1, 4095, 4096, 4097, 8191, 8200] {
            let page = j.replay_page("t", after, 3).await.unwrap();
            for (i, e) in page.iter().enumerate() {
                let n = usize::try_from(after).unwrap() + i;
                assert_eq!(e.seq, i64::try_from(n).unwrap() + 1);
                assert_eq!(
                    e.payload,
                    serde_json::from_str::<serde_json::Value>(&expected[n]).unwrap()
                );
                assert_eq!(&*e.kind, if n.is_multiple_of(2) { "even" } else { "odd" });
                assert_eq!(e.dedup_key.as_deref(), Some(format!("k{n}").as_str()));
            }
        }
        let found = j.find_by_key("t", "k8199").await.unwrap().unwrap();
        assert_eq!(found.seq, 8200);
        // A repeated key writes nothing and answers the first seq.
        let again = j
            .append_one(event(1, "{}".into(), Some("k5".into())))
            .unwrap();
        assert_eq!((again.seq, again.deduplicated), (6, true));
        assert_eq!(
            j.last_seq("t").await.unwrap(),
            Some(i64::try_from(expected.len()).unwrap())
        );
    }
}
