//! Replay and tail as streams.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use sqlx::postgres::PgListener;
use tokio::sync::watch;

use crate::backend::postgres::CHANNEL;
use crate::backend::{PAGE, ReadSide as _, Reads};
use crate::error::JournalError;
use crate::event::Event;

/// A stream of events; an `Err` item reports a failed read (tail keeps going after it).
pub type EventStream = Pin<Box<dyn Stream<Item = Result<Event, JournalError>> + Send>>;

pub(crate) fn replay(reads: Reads, thread: String, after: i64) -> EventStream {
    struct State {
        reads: Reads,
        thread: String,
        last: i64,
        buffer: VecDeque<Event>,
        done: bool,
    }
    let state = State {
        reads,
        thread,
        last: after,
        buffer: VecDeque::new(),
        done: false,
    };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.buffer.pop_front() {
                s.last = event.seq;
                return Some((Ok(event), s));
            }
            if s.done {
                return None;
            }
            match s.reads.replay_page(&s.thread, s.last, PAGE).await {
                Ok(page) => {
                    s.done = (page.len() as i64) < PAGE;
                    s.buffer.extend(page);
                }
                Err(err) => {
                    s.done = true;
                    return Some((Err(err), s));
                }
            }
        }
    }))
}

struct TailState {
    reads: Reads,
    thread: String,
    last: i64,
    buffer: VecDeque<Event>,
    committed: watch::Receiver<i64>,
    listener: Listener,
    poll: Duration,
    wait_first: bool,
}

enum Listener {
    /// PostgreSQL: not connected yet.
    Pending,
    Connected(Box<PgListener>),
    /// SQLite, or the PostgreSQL listener failed: rely on in-process wakeups (this thread's
    /// commits only, [`crate::commits`]) and polling.
    None,
}

/// A stream that yields `err` and ends (a request refused before reading anything).
pub(crate) fn failed(err: JournalError) -> EventStream {
    Box::pin(futures::stream::once(async move { Err(err) }))
}

pub(crate) fn tail(
    reads: Reads,
    thread: String,
    after: i64,
    committed: watch::Receiver<i64>,
    poll: Duration,
) -> EventStream {
    let listener = match reads {
        Reads::Postgres(_) => Listener::Pending,
        Reads::Sqlite(_) | Reads::Memory(_) => Listener::None,
    };
    let state = TailState {
        reads,
        thread,
        last: after,
        buffer: VecDeque::new(),
        committed,
        listener,
        poll,
        wait_first: false,
    };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.buffer.pop_front() {
                s.last = event.seq;
                return Some((Ok(event), s));
            }
            if let Listener::Pending = s.listener {
                s.listener = connect_listener(&s.reads).await;
            }
            if s.wait_first {
                wait_for_change(&mut s).await;
            }
            // Mark the current commit as seen before reading, so a commit that lands after
            // the read wakes the next wait.
            s.committed.borrow_and_update();
            match s.reads.replay_page(&s.thread, s.last, PAGE).await {
                Ok(page) => {
                    s.wait_first = page.is_empty();
                    s.buffer.extend(page);
                }
                Err(err) => {
                    s.wait_first = true;
                    return Some((Err(err), s));
                }
            }
        }
    }))
}

async fn connect_listener(reads: &Reads) -> Listener {
    let Reads::Postgres(reader) = reads else {
        return Listener::None;
    };
    let mut listener = match PgListener::connect_with(reader.pool()).await {
        Ok(listener) => listener,
        Err(err) => {
            tracing::warn!(%err, "journal tail: LISTEN connection failed; polling instead");
            return Listener::None;
        }
    };
    match listener.listen(CHANNEL).await {
        Ok(()) => Listener::Connected(Box::new(listener)),
        Err(err) => {
            tracing::warn!(%err, "journal tail: LISTEN failed; polling instead");
            Listener::None
        }
    }
}

/// Waits until this process commits, another process notifies for our thread, or the
/// poll interval passes.
async fn wait_for_change(s: &mut TailState) {
    let TailState {
        listener,
        thread,
        committed,
        poll,
        ..
    } = s;
    let poll = tokio::time::sleep(*poll);
    tokio::pin!(poll);
    loop {
        let notified = async {
            match &mut *listener {
                Listener::Connected(l) => match l.recv().await {
                    Ok(note) => Some(note.payload() == thread.as_str()),
                    Err(err) => {
                        tracing::warn!(%err, "journal tail: LISTEN connection lost; polling");
                        None
                    }
                },
                Listener::Pending | Listener::None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            changed = committed.changed() => {
                if changed.is_err() {
                    // The writer is gone; keep polling for other processes' appends.
                    (&mut poll).await;
                }
                Wake::Now
            }
            note = notified => match note {
                Some(true) => Wake::Now,
                Some(false) => Wake::NotOurs,
                None => Wake::ListenerLost,
            },
            () = &mut poll => Wake::Now,
        };
        match outcome {
            Wake::Now => return,
            Wake::NotOurs => {}
            Wake::ListenerLost => *listener = Listener::None,
        }
    }
}

enum Wake {
    Now,
    NotOurs,
    ListenerLost,
}
