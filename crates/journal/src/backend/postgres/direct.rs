//! Direct appends: a producer that finds the PostgreSQL writer idle writes its request on
//! its own task instead of handing it to the writer task and waiting to be woken.
//!
//! A lone producer (one run of the host, a worker's one step) otherwise pays two task
//! hand-offs per append, producer to writer and acknowledgement back; on a small machine
//! their wake-ups cost the client about as much CPU as the statement itself.
//!
//! Invariants (with those of [`Shared`]):
//! - A direct write takes the same lock, latch and settle path as the writer task's
//!   batches, so its answer, failure latch and wake-ups are the same as if it had queued.
//! - Cancel safety is the queue's: once polled, the write finishes even if the caller's
//!   future is dropped (the rest of it is spawned as a task of its own), so a dropped
//!   append is written whole or not at all and never leaves the connection mid-statement.
//!   Dropped outside a runtime it cannot finish; the next writer then finds
//!   [`WriteSide`]'s `writing` flag set and latches failed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{OwnedMutexGuard, oneshot};

use super::write::{Shared, WriteSide};
use crate::error::JournalError;
use crate::event::Appended;
use crate::writer::{Answer, Batch, Msg, Request};

/// What [`try_write`] decided.
pub(crate) enum Direct {
    /// The write under way; await [`DirectWrite::finish`].
    Writing(DirectWrite),
    /// The writer is busy or has requests queued: queue this one behind them.
    Queue(Request),
    /// The journal is closed.
    Closed,
}

/// Writes `request` on the caller's task if the writer is idle and nothing is queued.
pub(crate) fn try_write(shared: &Shared, request: Request) -> Direct {
    if shared.queued.load(Ordering::SeqCst) != 0 {
        return Direct::Queue(request);
    }
    let Ok(side) = Arc::clone(&shared.side).try_lock_owned() else {
        return Direct::Queue(request);
    };
    // Checked again under the lock: a message queued before this point is taken by the
    // writer task only under the lock, so it is still counted here.
    if shared.queued.load(Ordering::SeqCst) != 0 {
        return Direct::Queue(request);
    }
    if side.closed() {
        return Direct::Closed;
    }
    let (ack, answer) = oneshot::channel();
    Direct::Writing(DirectWrite {
        write: Some(Box::pin(write(side, request, ack))),
        answer,
    })
}

async fn write(
    mut side: OwnedMutexGuard<WriteSide>,
    request: Request,
    ack: oneshot::Sender<Answer>,
) {
    let mut batch = Batch::default();
    batch.take(Msg::Write { request, ack }, usize::MAX);
    // A direct write carries no `Close`.
    let _ = side.write(batch, true).await;
}

/// A direct write under way. Dropped before it finished, the rest of it runs as a task.
pub(crate) struct DirectWrite {
    write: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    answer: oneshot::Receiver<Answer>,
}

impl DirectWrite {
    /// Waits for the write and returns its answer.
    pub(crate) async fn finish(mut self) -> Result<Vec<Appended>, JournalError> {
        if let Some(write) = self.write.as_mut() {
            write.await;
        }
        self.write = None;
        (&mut self.answer).await.map_err(|_| JournalError::Closed)?
    }
}

impl Drop for DirectWrite {
    fn drop(&mut self) {
        if let Some(write) = self.write.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(write);
        }
    }
}
