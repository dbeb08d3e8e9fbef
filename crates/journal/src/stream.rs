//! Replay and tail as streams.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use tokio::sync::watch;

use crate::backend::{ReadSide as _, Reads};
use crate::error::JournalError;
use crate::event::Event;
use crate::page_limit::PageLimit;
use crate::position::Position;

/// A stream of events; an `Err` item reports a failed read (tail keeps going after it,
/// unless it is [`JournalError::Closed`]: then the stream ends).
/// A stored event that does not decode ([`JournalError::CorruptPayload`]) comes as an
/// `Err` after every good event before it, never in place of them.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<Event, JournalError>> + Send>>;

/// A stream of the whole journal's events with their positions
/// ([`Journal::tail_all`](crate::Journal::tail_all)); an `Err` item reports a failed read,
/// and the stream keeps going after it (it ends after [`JournalError::Closed`]).
pub type PositionedStream =
    Pin<Box<dyn Stream<Item = Result<(Position, Event), JournalError>> + Send>>;

pub(crate) fn replay(reads: Reads, thread: String, after: i64) -> EventStream {
    struct State {
        reads: Reads,
        thread: String,
        last: i64,
        buffer: VecDeque<Event>,
        limit: PageLimit,
        /// Yielded once the buffer (the good events before it) is drained; then the end.
        failed: Option<JournalError>,
        done: bool,
    }
    let state = State {
        reads,
        thread,
        last: after,
        buffer: VecDeque::new(),
        limit: PageLimit::new(),
        failed: None,
        done: false,
    };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.buffer.pop_front() {
                s.last = event.seq;
                return Some((Ok(event), s));
            }
            if let Some(err) = s.failed.take() {
                return Some((Err(err), s));
            }
            if s.done {
                return None;
            }
            let limit = s.limit;
            match s.reads.replay_page(&s.thread, s.last, limit.get()).await {
                Ok(page) => {
                    s.done = !s.limit.read(&page);
                    s.buffer.extend(page);
                }
                Err(err) => {
                    s.done = true;
                    let next = thread_events(&s.reads, &s.thread);
                    let (good, _, err) = salvage(err, s.last, next, limit).await;
                    s.buffer.extend(good);
                    s.failed = Some(err);
                }
            }
        }
    }))
}

struct TailState {
    reads: Reads,
    thread: String,
    /// Only events of this kind are yielded (the others are read and passed over).
    kind: Option<String>,
    last: i64,
    buffer: VecDeque<Event>,
    limit: PageLimit,
    /// Yielded once the buffer (the good events before it) is drained.
    failed: Option<JournalError>,
    /// Changes when this thread is written by this process, or (PostgreSQL) notified by
    /// another one ([`crate::commits`]).
    committed: watch::Receiver<u64>,
    /// PostgreSQL, until the first read: whether the journal's LISTEN is active.
    listening: Option<watch::Receiver<bool>>,
    poll: Duration,
    wait_first: bool,
    /// The journal was closed: the stream ends after the error that said so.
    closed: bool,
}

/// The longest a new tail waits for the journal's LISTEN to be active.
const LISTEN_WAIT: Duration = Duration::from_secs(5);

/// What wakes a tail: its thread's commits (of its kind, for a tail of one kind) and
/// notifications, and (PostgreSQL) whether notifications can arrive yet.
pub(crate) struct Wakes {
    pub(crate) committed: watch::Receiver<u64>,
    pub(crate) listening: Option<watch::Receiver<bool>>,
}

/// A stream that yields `err` and ends (a request refused before reading anything).
pub(crate) fn failed(err: JournalError) -> EventStream {
    Box::pin(futures::stream::once(async move { Err(err) }))
}

/// Events of `thread` after `after` (of `kind` only, when given), then new ones as `wakes`
/// and the poll interval find them.
///
/// Invariant: a read that returns a short page has seen every event of the thread up to
/// its snapshot, and the commit watermark was marked before it, so the tail can wait: a
/// later commit changes the watermark (or the poll finds it).
pub(crate) fn tail(
    reads: Reads,
    thread: String,
    kind: Option<String>,
    after: i64,
    wakes: Wakes,
    poll: Duration,
) -> EventStream {
    let state = TailState {
        reads,
        thread,
        kind,
        last: after,
        buffer: VecDeque::new(),
        limit: PageLimit::new(),
        failed: None,
        committed: wakes.committed,
        listening: wakes.listening,
        poll,
        wait_first: false,
        closed: false,
    };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        loop {
            // `last` is where the reads got to (it moved when the buffered page was read).
            if let Some(event) = s.buffer.pop_front() {
                return Some((Ok(event), s));
            }
            if let Some(err) = s.failed.take() {
                s.closed = is_closed(&err);
                return Some((Err(err), s));
            }
            if s.closed {
                return None;
            }
            if let Some(listening) = s.listening.take() {
                wait_for_listen(listening, s.poll).await;
            }
            if s.wait_first {
                wait_for_change(&mut s.committed, s.poll).await;
            }
            // Mark the current commit as seen before reading, so a commit that lands after
            // the read wakes the next wait.
            s.committed.borrow_and_update();
            // Boxed: a read's future is most of this stream's size, and a tail spends its
            // life waiting, not reading (a run's interrupt watch is one per run).
            let limit = s.limit;
            match Box::pin(read_page(&s)).await {
                Ok((page, seen)) => {
                    s.wait_first = !s.limit.read(&page);
                    s.last = seen;
                    s.buffer.extend(page);
                }
                Err(err) => {
                    s.wait_first = true;
                    let (good, last, err) = match &s.kind {
                        None => {
                            let next = thread_events(&s.reads, &s.thread);
                            salvage(err, s.last, next, limit).await
                        }
                        Some(kind) => {
                            let next = kind_events(&s.reads, &s.thread, kind);
                            salvage(err, s.last, next, limit).await
                        }
                    };
                    s.last = last;
                    s.buffer.extend(good);
                    s.failed = Some(err);
                }
            }
        }
    }))
}

/// Whether a tail's failed read says the journal was closed: no later read can succeed,
/// so the tail ends after reporting it (it kept reading, and failing, at every poll).
fn is_closed(err: &JournalError) -> bool {
    matches!(err, JournalError::Closed)
}

/// One read of [`salvage`]: the next item after a cursor, and the cursor after it.
type Next<T, C> = Pin<Box<dyn Future<Output = Result<Option<(T, C)>, JournalError>> + Send>>;

/// After a page read from `cursor` failed with `err`: when `err` is a corrupt stored
/// payload, the good items before it, read one at a time with `next` (at most a page of
/// them, the most the failed read could have held), so a reader gets everything up to the
/// corrupt event before its error; the cursor after them; and the error to report (the
/// corrupt event's as read again, or `err` when the items ran out first). Any other error
/// is reported as it is, with nothing read.
async fn salvage<T, C: Copy>(
    err: JournalError,
    mut cursor: C,
    next: impl Fn(C) -> Next<T, C>,
    page: PageLimit,
) -> (Vec<T>, C, JournalError) {
    if !matches!(err, JournalError::CorruptPayload { .. }) {
        return (Vec::new(), cursor, err);
    }
    let mut good = Vec::new();
    while !page.filled_by(good.len()) {
        match next(cursor).await {
            Ok(Some((item, after))) => {
                good.push(item);
                cursor = after;
            }
            Ok(None) => break,
            Err(again) => return (good, cursor, again),
        }
    }
    (good, cursor, err)
}

/// [`salvage`]'s reads of `thread`'s events, cursor the seq.
fn thread_events(reads: &Reads, thread: &str) -> impl Fn(i64) -> Next<Event, i64> {
    let (reads, thread) = (reads.clone(), thread.to_string());
    move |after| {
        let (reads, thread) = (reads.clone(), thread.clone());
        Box::pin(async move {
            let page = reads.replay_page(&thread, after, 1).await?;
            Ok(page.into_iter().next().map(|event| {
                let seq = event.seq;
                (event, seq)
            }))
        })
    }
}

/// [`salvage`]'s reads of `thread`'s events of `kind`, cursor the seq read up to.
fn kind_events(reads: &Reads, thread: &str, kind: &str) -> impl Fn(i64) -> Next<Event, i64> {
    let (reads, thread, kind) = (reads.clone(), thread.to_string(), kind.to_string());
    move |after| {
        let (reads, thread, kind) = (reads.clone(), thread.clone(), kind.clone());
        Box::pin(async move {
            let page = reads.replay_kind_page(&thread, &kind, after, 1).await?;
            let seen = page.seen;
            Ok(page.events.into_iter().next().map(|event| (event, seen)))
        })
    }
}

/// [`salvage`]'s reads of the whole journal, cursor the position.
fn journal_events(reads: &Reads) -> impl Fn(Position) -> Next<(Position, Event), Position> {
    let reads = reads.clone();
    move |after| {
        let reads = reads.clone();
        Box::pin(async move {
            let page = reads.journal_page(after, 1).await?;
            Ok(page.into_iter().next().map(|item| {
                let position = item.0;
                (item, position)
            }))
        })
    }
}

/// The tail's next page after `s.last` and the seq the read saw up to. A tail of one kind
/// reads only that kind: the others are skipped by the database, not decoded here.
async fn read_page(s: &TailState) -> Result<(Vec<Event>, i64), JournalError> {
    match &s.kind {
        Some(kind) => {
            let page = s
                .reads
                .replay_kind_page(&s.thread, kind, s.last, s.limit.get())
                .await?;
            Ok((page.events, page.seen))
        }
        None => {
            let page = s
                .reads
                .replay_page(&s.thread, s.last, s.limit.get())
                .await?;
            let seen = page.last().map_or(s.last, |e| e.seq);
            Ok((page, seen))
        }
    }
}

/// Before a tail's first read, so another process's commit after it is notified: waits
/// for the journal's LISTEN to be active, bounded, since a tail also polls when LISTEN
/// cannot connect.
async fn wait_for_listen(mut listening: watch::Receiver<bool>, poll: Duration) {
    let bound = poll.min(LISTEN_WAIT);
    let _ = tokio::time::timeout(bound, listening.wait_for(|up| *up)).await;
}

/// Waits until `committed` changes (a commit or notification the tail watches), or the
/// poll interval passes.
async fn wait_for_change(committed: &mut watch::Receiver<u64>, poll: Duration) {
    let poll = tokio::time::sleep(poll);
    tokio::pin!(poll);
    tokio::select! {
        changed = committed.changed() => {
            if changed.is_err() {
                // The journal is gone; keep polling for other processes' appends.
                (&mut poll).await;
            }
        }
        () = &mut poll => {}
    }
}

struct TailAllState {
    reads: Reads,
    last: Position,
    buffer: VecDeque<(Position, Event)>,
    limit: PageLimit,
    /// Yielded once the buffer (the good events before it) is drained.
    failed: Option<JournalError>,
    /// Changes on every commit of this process and every notification from another one.
    committed: watch::Receiver<u64>,
    listening: Option<watch::Receiver<bool>>,
    poll: Duration,
    wait_first: bool,
    /// The journal was closed: the stream ends after the error that said so.
    closed: bool,
}

/// Every event of the journal after `after`, then new ones as `wakes` and the poll
/// interval find them, in [`Position`] order.
///
/// Invariant: each read returns events above `last` that no later commit can precede
/// ([`ReadSide::journal_page`](crate::backend::ReadSide::journal_page)), so resuming after the
/// last one delivered skips nothing and repeats nothing. On PostgreSQL an event can be
/// committed but not yet readable (an older transaction still runs): the commit or
/// notification that ends that transaction wakes the tail, and a rolled-back one (which
/// notifies nobody) is covered by the poll interval.
pub(crate) fn tail_all(
    reads: Reads,
    after: Position,
    wakes: Wakes,
    poll: Duration,
) -> PositionedStream {
    let state = TailAllState {
        reads,
        last: after,
        buffer: VecDeque::new(),
        limit: PageLimit::new(),
        failed: None,
        committed: wakes.committed,
        listening: wakes.listening,
        poll,
        wait_first: false,
        closed: false,
    };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(item) = s.buffer.pop_front() {
                return Some((Ok(item), s));
            }
            if let Some(err) = s.failed.take() {
                s.closed = is_closed(&err);
                return Some((Err(err), s));
            }
            if s.closed {
                return None;
            }
            if let Some(listening) = s.listening.take() {
                wait_for_listen(listening, s.poll).await;
            }
            if s.wait_first {
                wait_for_change(&mut s.committed, s.poll).await;
            }
            s.committed.borrow_and_update();
            let limit = s.limit;
            match Box::pin(s.reads.journal_page(s.last, limit.get())).await {
                Ok(page) => {
                    s.wait_first = !s.limit.read(page.iter().map(|(_, event)| event));
                    if let Some((position, _)) = page.last() {
                        s.last = *position;
                    }
                    s.buffer.extend(page);
                }
                Err(err) => {
                    s.wait_first = true;
                    let next = journal_events(&s.reads);
                    let (good, last, err) = Box::pin(salvage(err, s.last, next, limit)).await;
                    s.last = last;
                    s.buffer.extend(good);
                    s.failed = Some(err);
                }
            }
        }
    }))
}
