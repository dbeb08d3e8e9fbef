//! A call's scheduling (its `tool.scheduled` made durable), shared between the launch
//! future that drives it and a turn's end, which takes it over when that future is not
//! polled any more.
//!
//! Invariants: the scheduling future is polled by one party at a time, under the stage's
//! lock: the launch future while it is [`Stage::Driven`], the task [`Scheduling::adopt`]
//! spawns afterwards; once adopted, the launch future only waits for the task's answer.
//! A launch future dropped while it drives the scheduling drops the scheduling with it, so
//! that its `PendingLaunch` finishes the launch in a task of its own. The stage's lock is
//! never taken under the runtime's state lock.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use super::job::Job;
use super::launch::spawn_call;
use super::{Inner, JobKey};
use crate::error::RuntimeError;

/// What scheduling a call gives: the job to run, none (the call was settled from the
/// journal), or why the call cannot be launched.
pub(crate) type Scheduled = Result<Option<Job>, RuntimeError>;

/// The scheduling of one call.
pub(crate) type SchedulingFuture = Pin<Box<dyn Future<Output = Scheduled> + Send>>;

#[derive(Default)]
enum Stage {
    /// Not begun, or over.
    #[default]
    Idle,
    /// Polled by the launch future.
    Driven(SchedulingFuture),
    /// Finished by a task of its own, which answers the launch future here.
    Adopted {
        answer: Option<Result<(), RuntimeError>>,
        waker: Option<Waker>,
    },
}

/// How the launch future learns that its call is scheduled.
pub(crate) enum Progress {
    /// It finished the scheduling itself: the job (if any) is the caller's to spawn.
    Scheduled(Scheduled),
    /// The scheduling was adopted, and the task that finished it runs the call.
    Answered(Result<(), RuntimeError>),
}

/// See the module documentation.
#[derive(Default)]
pub(crate) struct Scheduling {
    stage: Mutex<Stage>,
}

impl Scheduling {
    fn stage(&self) -> MutexGuard<'_, Stage> {
        self.stage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands the scheduling to the launch future, which then drives it ([`poll_drive`]).
    ///
    /// [`poll_drive`]: Self::poll_drive
    pub(crate) fn begin(&self, scheduling: SchedulingFuture) {
        *self.stage() = Stage::Driven(scheduling);
    }

    /// Polled by the launch future: drives the scheduling, or waits for the task that
    /// adopted it.
    pub(crate) fn poll_drive(&self, cx: &mut Context<'_>) -> Poll<Progress> {
        let mut stage = self.stage();
        match &mut *stage {
            Stage::Driven(scheduling) => match scheduling.as_mut().poll(cx) {
                Poll::Ready(scheduled) => {
                    *stage = Stage::Idle;
                    Poll::Ready(Progress::Scheduled(scheduled))
                }
                Poll::Pending => Poll::Pending,
            },
            Stage::Adopted { answer, waker } => match answer.take() {
                Some(answer) => {
                    *stage = Stage::Idle;
                    Poll::Ready(Progress::Answered(answer))
                }
                None => {
                    *waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            },
            // Polled after it answered: a launch future polls it until it does, then stops.
            Stage::Idle => Poll::Ready(Progress::Answered(Err(RuntimeError::Closed))),
        }
    }

    /// Takes over a scheduling its launch future has not finished: a task of its own
    /// finishes it, answers the launch future and runs the call. Nothing to do otherwise.
    pub(crate) fn adopt(self: &Arc<Self>, inner: &Arc<Inner>, key: Arc<JobKey>) {
        let scheduling = {
            let mut stage = self.stage();
            match std::mem::take(&mut *stage) {
                Stage::Driven(scheduling) => {
                    *stage = Stage::Adopted {
                        answer: None,
                        waker: None,
                    };
                    scheduling
                }
                other => {
                    *stage = other;
                    return;
                }
            }
        };
        let this = Arc::clone(self);
        spawn_call(inner, key, async move {
            let scheduled = scheduling.await;
            let (answer, job) = match scheduled {
                Ok(job) => (Ok(()), job),
                Err(err) => (Err(err), None),
            };
            this.answer(answer);
            if let Some(job) = job {
                job.run().await;
            }
        });
    }

    fn answer(&self, result: Result<(), RuntimeError>) {
        let waker = match &mut *self.stage() {
            Stage::Adopted { answer, waker } => {
                *answer = Some(result);
                waker.take()
            }
            _ => None,
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The launch future went away. A scheduling it was driving is dropped here, outside
    /// the lock: its `PendingLaunch` then finishes the launch in a task of its own.
    pub(crate) fn caller_gone(&self) {
        let dropped = {
            let mut stage = self.stage();
            match std::mem::take(&mut *stage) {
                Stage::Driven(scheduling) => Some(scheduling),
                other => {
                    *stage = other;
                    None
                }
            }
        };
        drop(dropped);
    }
}

/// Held by the launch future while it drives or waits: dropped early, it lets go of the
/// scheduling ([`Scheduling::caller_gone`]).
pub(crate) struct Caller<'a>(pub(crate) &'a Scheduling);

impl Drop for Caller<'_> {
    fn drop(&mut self) {
        self.0.caller_gone();
    }
}
