//! One LISTEN connection per opened journal, shared by all its tails.
//!
//! Commits of other processes arrive as notifications on [`CHANNEL`] (payload: the
//! thread); each wakes that thread's tails through [`Commits`], as a commit of this
//! process does. (A connection per tail put a process tailing a few hundred runs past
//! PostgreSQL's default `max_connections`.)
//!
//! Invariants:
//! - At most one LISTEN connection per opened journal, however many tails it serves, from
//!   a pool of its own: the read pool's connections all serve reads.
//! - A lost connection is reopened with a growing pause (up to 5 s); a notification sent
//!   in between is missed, which the tails' polling (`tail_poll`) covers.
//! - `connected` is true exactly while LISTEN is active; a new tail waits for it (within
//!   its poll interval) before its first read, so a commit after that read is notified.
//! - The task ends, closing its connection, when the journal is closed or dropped (its
//!   stop sender goes away), without a warning.
//! - Notifications this journal sent are skipped ([`OwnSender`]): its commits woke its
//!   tails, with their kinds, when they committed.

use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio::sync::watch;

use super::CHANNEL;
use super::notify::OwnSender;
use crate::commits::Commits;

const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// Starts the listener task; it stops when `stop` changes or its sender is dropped.
///
/// LISTEN holds its connection for as long as it is active, so it is made by a pool of one
/// of its own, with the read pool's options: taken from the read pool, it left one read
/// fewer than [`read_connections`](crate::JournalOptions::read_connections) says, and with
/// `read_connections: 1` none: every read and every tail then timed out, for good.
pub(crate) fn spawn(
    pool: &PgPool,
    own: Arc<OwnSender>,
    commits: Weak<Commits>,
    stop: watch::Receiver<bool>,
    connected: watch::Sender<bool>,
) {
    let options = (*pool.connect_options()).clone();
    tokio::spawn(async move {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            // As the read pool's: a server that cannot be reached fails an attempt.
            .acquire_timeout(super::CONNECT_TIMEOUT)
            .connect_lazy_with(options);
        listen(&pool, &own, &commits, stop, &connected).await;
        // The listener, and with it the connection, was dropped as `listen` returned.
        pool.close().await;
    });
}

/// LISTENs on `pool`'s connection, reconnecting when it is lost, until `stop` changes or
/// its sender is dropped.
async fn listen(
    pool: &PgPool,
    own: &OwnSender,
    commits: &Weak<Commits>,
    mut stop: watch::Receiver<bool>,
    connected: &watch::Sender<bool>,
) {
    let mut pause = FIRST_PAUSE;
    loop {
        let attempt = tokio::select! {
            _ = stop.changed() => return,
            attempt = connect(pool) => attempt,
        };
        match attempt {
            Ok(mut listener) => {
                pause = FIRST_PAUSE;
                own.listener_connected();
                connected.send_replace(true);
                loop {
                    let note = tokio::select! {
                        _ = stop.changed() => return,
                        note = listener.recv() => note,
                    };
                    match note {
                        Ok(note) if own.is_own(note.process_id()) => {}
                        Ok(note) => {
                            let Some(commits) = commits.upgrade() else {
                                return;
                            };
                            commits.publish([(note.payload(), None)]);
                        }
                        Err(err) => {
                            connected.send_replace(false);
                            if closing(&stop, &err) {
                                return;
                            }
                            tracing::warn!(%err, "journal LISTEN connection lost; tails poll until it is back");
                            break;
                        }
                    }
                }
            }
            Err(err) => {
                if closing(&stop, &err) {
                    return;
                }
                tracing::warn!(%err, "journal LISTEN failed; tails poll until it connects");
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Whether `err` is the journal closing rather than a lost connection: the close asks the
/// task to stop and then closes the pool, and the listener (whose connection is one of the
/// pool's) can see the pool's close before the stop (both wake it, `select!` picks
/// either). Nothing is lost then, so nothing is worth a warning.
fn closing(stop: &watch::Receiver<bool>, err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::PoolClosed) || *stop.borrow() || stop.has_changed().is_err()
}

async fn connect(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}
