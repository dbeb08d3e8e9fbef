//! Wake-ups for other processes' tails, sent after the commits they announce.
//!
//! Invariants:
//! - A thread is notified only after a commit that wrote to it (the writer hands the
//!   threads over once the commit returned), so a woken tail finds the events.
//! - Threads handed over while a send is under way, or within [`INTERVAL`] of the last
//!   send's start, are sent together next, each once: under load a process sends at most
//!   one statement per interval, not one per commit (each is a transaction, and their
//!   commits queue on the server's notification lock); after a quiet interval the first
//!   commit's wake-up goes out at once.
//! - [`Notifier::flush`] returns once everything handed over before it was sent (or its
//!   send failed, which is logged; tails poll).
//! - Sends go out on one connection of the notifier's own, whose server process id is
//!   published in [`OwnSender`] before anything is sent on it, so that the journal's LISTEN
//!   connection can tell this journal's notifications from other processes' (see there).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::{Connection as _, PgPool};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::CHANNEL;

/// The shortest time between the starts of two sends: how long a wake-up for another
/// process may wait while this one commits steadily. Each send is a server transaction
/// and a round trip; at 10 ms, 16 journals appending at once (16 processes' worth) lost
/// 6-10% of their append rate to them on a 2-core machine.
const INTERVAL: Duration = Duration::from_millis(25);

/// Which server process sends this journal's notifications.
///
/// The journal's own commits wake its tails in this process, each with its kinds, when they
/// commit; their notifications come back on its LISTEN connection too, naming only the
/// thread, and would wake every tail of that thread again, a run's interrupt watch
/// included, each to read and find nothing. The listener skips notifications sent by
/// [`OwnSender::is_own`] (PostgreSQL gives each notification its sender's process id).
///
/// A process id is only trusted while its connection is believed alive: the listener
/// forgets it whenever it (re)connects ([`OwnSender::listener_connected`]: a server restart
/// ends both connections and may hand the id to another backend), and the notifier
/// publishes it as it starts each send on that connection, which then shows whether the
/// connection (and so the id) is still its own: a failed send forgets it until a new
/// connection is made. It is published before the send, not after: the send's own
/// notification can reach the listener before the notifier has seen the send's reply, and
/// would then not be skipped. Should the notifier's connection alone end and its id go to
/// another process's backend, that process's notifications are skipped until the
/// notifier's next send fails, and its tails here see its commits by polling meanwhile.
#[derive(Debug, Default)]
pub(crate) struct OwnSender {
    /// The notifier connection's server process id; 0 while there is none to trust.
    pid: AtomicU32,
}

impl OwnSender {
    /// Whether a notification from server process `pid` is this journal's own.
    pub(crate) fn is_own(&self, pid: u32) -> bool {
        pid != 0 && self.pid.load(Ordering::Acquire) == pid
    }

    /// The listener has a new connection: nothing is skipped until the notifier's next send
    /// starts.
    pub(crate) fn listener_connected(&self) {
        self.pid.store(0, Ordering::Release);
    }
}

/// The writer's handle on its notifier task.
pub(crate) struct Notifier {
    tx: mpsc::UnboundedSender<Vec<String>>,
    task: JoinHandle<()>,
}

impl Notifier {
    /// Starts the task; it sends on a connection made with `pool`'s options, whose
    /// process id it publishes in `own` before each send. The connection is made here,
    /// while the journal opens, not by the task when it first sends (a connection being
    /// made in the background when a test's runtime stops leaves a server backend waiting
    /// for the rest of its handshake); if that fails, the task makes one before its first
    /// send.
    pub(crate) async fn spawn(pool: PgPool, own: Arc<OwnSender>) -> Self {
        let conn = match connect(&pool).await {
            Ok(opened) => Some(opened),
            Err(err) => {
                tracing::warn!(%err, "the journal's notifier cannot connect yet; it retries when it sends");
                None
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        Notifier {
            tx,
            task: tokio::spawn(run(pool, own, conn, rx)),
        }
    }

    /// Hands over the threads a commit wrote.
    pub(crate) fn send(&self, threads: Vec<String>) {
        if !threads.is_empty() {
            // The task ends only once this sender is dropped.
            let _ = self.tx.send(threads);
        }
    }

    /// Sends what was handed over and stops the task.
    pub(crate) async fn flush(self) {
        let Notifier { tx, task } = self;
        drop(tx);
        match task.await {
            Ok(()) => {}
            // The runtime is shutting down (a process that returned from `main` with the
            // journal still closing): its tasks are cancelled, this one's too. Nothing
            // failed that a warning could help with; a process that wants every wake-up
            // sent closes the journal before it returns.
            Err(err) if err.is_cancelled() => {
                tracing::debug!(%err, "the journal's notifier task was cancelled by the runtime's shutdown");
            }
            Err(err) => tracing::warn!(%err, "the journal's notifier task failed"),
        }
    }
}

async fn run(
    pool: PgPool,
    own: Arc<OwnSender>,
    mut conn: Option<(PgConnection, u32)>,
    mut rx: mpsc::UnboundedReceiver<Vec<String>>,
) {
    let mut last: Option<Instant> = None;
    while let Some(mut threads) = rx.recv().await {
        if let Some(last) = last {
            tokio::time::sleep_until(last + INTERVAL).await;
        }
        last = Some(Instant::now());
        while let Ok(more) = rx.try_recv() {
            threads.extend(more);
        }
        threads.sort_unstable();
        threads.dedup();
        let open = match conn.take() {
            Some(open) => Ok(open),
            None => connect(&pool).await,
        };
        let sent = match open {
            Ok((mut open, pid)) => {
                // Again before every send: the listener forgets it when it reconnects.
                own.pid.store(pid, Ordering::Release);
                let sent = send(&mut open, &threads).await;
                conn = Some((open, pid));
                sent
            }
            Err(err) => Err(err),
        };
        if let Err(err) = sent {
            own.pid.store(0, Ordering::Release);
            conn = None;
            tracing::warn!(%err, threads = threads.len(), "journal NOTIFY failed; other processes' tails poll");
        }
    }
    if let Some((open, _)) = conn {
        let _ = open.close().await;
    }
}

/// A connection for notifications, and its server process id.
async fn connect(pool: &PgPool) -> Result<(PgConnection, u32), sqlx::Error> {
    let mut conn = PgConnection::connect_with(&pool.connect_options()).await?;
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut conn)
        .await?;
    Ok((conn, u32::try_from(pid).unwrap_or(0)))
}

async fn send(conn: &mut PgConnection, threads: &[String]) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t")
        .bind(CHANNEL)
        .bind(threads)
        .execute(conn)
        .await
        .map(drop)
}
