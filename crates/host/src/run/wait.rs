//! Waiting until a run stops: completes, fails, pauses or is interrupted.
//!
//! Invariant: the answer is the run's fold ([`RunState`]) at the event that stopped it, read
//! from the journal alone, so any process can wait for a run driven by any other.

use std::time::Duration;

use agent_journal::Journal;
use futures::StreamExt as _;

use crate::HostError;
use crate::follow::follow_thread;
use crate::run::{self, RunState, RunStatus, kinds};

/// How a wait ended.
#[derive(Debug)]
pub enum WaitEnd {
    /// The run stopped (its status is completed, failed, paused or interrupted).
    Stopped(Box<RunState>),
    /// The timeout passed first; the run as it was then.
    TimedOut(Box<RunState>),
    /// The timeout passed before the run could be read at all (the database out of reach
    /// all along); why the last read failed.
    Unreachable(String),
}

/// True for the statuses a waiter stops at.
pub fn has_stopped(status: Option<RunStatus>) -> bool {
    matches!(
        status,
        Some(RunStatus::Completed | RunStatus::Failed | RunStatus::Paused | RunStatus::Interrupted)
    )
}

/// Where a wait ends besides the statuses of [`has_stopped`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopAt {
    /// Only there: a run waiting for a decision is waited through (a parent following a
    /// child its worker drives, which goes on once someone decides).
    Stopped,
    /// Also at `waiting`: someone must decide before the run can go on (`runs wait`, which
    /// exits as `run` does, 3).
    StoppedOrWaiting,
}

impl StopAt {
    fn stops(self, state: &RunState) -> bool {
        has_stopped(state.status)
            || (self == StopAt::StoppedOrWaiting && state.status() == RunStatus::Waiting)
    }
}

/// How often a wait on a run recorded as running checks that its driver is still there:
/// a driver that died (`kill -9`) writes nothing more, so no event would end the wait.
const LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// Follows run `id` until it stops, or until `timeout` passes. A run that has already
/// stopped is reported at once, whatever the timeout. A run recorded as running whose
/// driver is gone (and that no worker may take over) has stopped too: it shows
/// `interrupted`, as `runs show` says, and is reported within a second.
///
/// # Cancel safety
/// Cancel-safe: it only reads; dropping it stops the wait.
pub async fn wait_until_stopped(
    journal: &Journal,
    id: &str,
    timeout: Option<Duration>,
) -> Result<WaitEnd, HostError> {
    wait_until(journal, id, timeout, StopAt::Stopped).await
}

/// [`wait_until_stopped`], also ending where `stop_at` says. A read that fails for a while
/// (the database restarting, a connection cut), the first one included, is retried, not
/// an answer, and the timeout covers those reads too.
///
/// # Cancel safety
/// Cancel-safe: it only reads; dropping it stops the wait.
pub async fn wait_until(
    journal: &Journal,
    id: &str,
    timeout: Option<Duration>,
    stop_at: StopAt,
) -> Result<WaitEnd, HostError> {
    // A timeout past the end of the clock's range (`--timeout 1e19`) is no deadline.
    let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
    let mut state = match first_load(journal, id, deadline).await? {
        Ok(state) => state,
        Err(why) => return Ok(WaitEnd::Unreachable(why)),
    };
    let mut events = std::pin::pin!(follow_thread(
        journal,
        &kinds::thread_of(id),
        state.last_seq
    ));
    let mut check_driver = true;
    loop {
        if stop_at.stops(&state) {
            return Ok(WaitEnd::Stopped(Box::new(state)));
        }
        if check_driver {
            let checked = match deadline {
                Some(at) => tokio::time::timeout_at(at, driver_gone(journal, &state)).await,
                None => Ok(driver_gone(journal, &state).await),
            };
            match checked {
                Ok(Ok(true)) => return Ok(WaitEnd::Stopped(Box::new(state))),
                Ok(Ok(false)) => {}
                Ok(Err(HostError::Journal(err))) if !crate::follow::is_fatal(&err) => {
                    tracing::warn!(%err, "run wait: the driver check failed; retrying");
                }
                Ok(Err(err)) => return Err(err),
                Err(_elapsed) => return Ok(WaitEnd::TimedOut(Box::new(state))),
            }
        }
        let tick = tokio::time::Instant::now() + LIVENESS_CHECK;
        let until = deadline.map_or(tick, |at| at.min(tick));
        match tokio::time::timeout_at(until, events.next()).await {
            Ok(Some(event)) => {
                state.apply(&event?);
                check_driver = false;
            }
            Ok(None) => return Err(HostError::Journal(agent_journal::JournalError::Closed)),
            Err(_elapsed) if deadline.is_some_and(|at| at <= until) => {
                return Ok(WaitEnd::TimedOut(Box::new(state)));
            }
            Err(_elapsed) => check_driver = true,
        }
    }
}

/// Longest pause between two tries of a wait's first read.
const FIRST_LOAD_RETRY: Duration = Duration::from_secs(1);

/// Run `id` as the journal has it, read again while reads fail for a moment (the database
/// restarting: [`is_fatal`](crate::follow::is_fatal) says which failures are not), until
/// `deadline`; then `Err` with why the last read failed.
async fn first_load(
    journal: &Journal,
    id: &str,
    deadline: Option<tokio::time::Instant>,
) -> Result<Result<RunState, String>, HostError> {
    let mut delay = Duration::from_millis(100);
    loop {
        let loaded = match deadline {
            Some(at) => match tokio::time::timeout_at(at, run::load(journal, id)).await {
                Ok(loaded) => loaded,
                Err(_elapsed) => return Ok(Err("no answer from the database".into())),
            },
            None => run::load(journal, id).await,
        };
        let err = match loaded {
            Ok(state) => return Ok(Ok(state)),
            Err(HostError::Journal(err)) if !crate::follow::is_fatal(&err) => err,
            Err(err) => return Err(err),
        };
        let now = tokio::time::Instant::now();
        if deadline.is_some_and(|at| at <= now) {
            return Ok(Err(err.to_string()));
        }
        tracing::warn!(%err, "run wait: cannot read the run; retrying");
        let wake = now + delay;
        tokio::time::sleep_until(deadline.map_or(wake, |at| at.min(wake))).await;
        delay = (delay * 2).min(FIRST_LOAD_RETRY);
    }
}

/// Longest a deadline made by [`instant_after`] lies ahead: 30 years, as tokio's own
/// `sleep` takes `Duration::MAX`. Nothing waits that long, and tokio's timer panics on
/// an instant within a millisecond of the end of its range.
const FAR_AWAY: Duration = Duration::from_secs(86_400 * 365 * 30);

/// The instant `after` from now, at most [`FAR_AWAY`] ahead, so that any duration a user
/// gives (`--grace 1e19`) makes an instant a timer can wait for. Should the clock itself
/// end within that bound, the answer is now: a deadline passed rather than a panic.
pub(crate) fn instant_after(after: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(after.min(FAR_AWAY)).unwrap_or(now)
}

/// Whether `state`, recorded as running, has no driver left to move it: the one status
/// model says `interrupted`. A submitted run always has one to come: when its worker dies,
/// another takes it over once the lease expires (which the status model shows as
/// `interrupted` meanwhile).
async fn driver_gone(journal: &Journal, state: &RunState) -> Result<bool, HostError> {
    let submitted = state.spec().is_some_and(|spec| spec.submitted);
    if state.status != Some(RunStatus::Running) || submitted {
        return Ok(false);
    }
    let shown = run::table::status_with_lease(journal, state).await?;
    Ok(shown == RunStatus::Interrupted)
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::run::NewRun;
    use crate::tools::ToolConfig;

    /// Past the end of the monotonic clock's range from now: `now + HUGE` overflowed.
    pub(crate) fn huge() -> [Duration; 3] {
        [
            Duration::from_secs_f64(1e19),
            Duration::from_secs(u64::MAX / 2 + 1),
            Duration::MAX,
        ]
    }

    /// `runs wait RUN --timeout 1e19` panicked ("overflow when adding duration to
    /// instant"); such a timeout is no deadline: the wait goes on.
    #[tokio::test]
    async fn a_timeout_past_the_end_of_the_clock_waits_without_a_deadline() {
        let journal = Journal::open("memory:").await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let id = crate::run::submit(
            &journal,
            &ToolConfig::default(),
            NewRun::new("p", dir.path().to_path_buf()),
        )
        .await
        .unwrap();
        for timeout in huge() {
            let waited = tokio::time::timeout(
                Duration::from_millis(50),
                wait_until_stopped(&journal, &id, Some(timeout)),
            )
            .await;
            assert!(waited.is_err(), "{timeout:?}: {waited:?}");
        }
        // A run that does not exist is still refused, not a panic.
        let missing = wait_until_stopped(&journal, "nope", Some(Duration::MAX)).await;
        assert!(missing.is_err());
    }

    #[tokio::test]
    async fn an_instant_after_any_duration_can_be_slept_until() {
        for after in huge() {
            let at = instant_after(after);
            assert!(
                at >= tokio::time::Instant::now() + FAR_AWAY / 2,
                "{after:?}"
            );
            let slept =
                tokio::time::timeout(Duration::from_millis(5), tokio::time::sleep_until(at)).await;
            assert!(slept.is_err(), "{after:?}");
        }
        let soon = instant_after(Duration::from_millis(1));
        assert!(soon <= tokio::time::Instant::now() + Duration::from_millis(1));
    }
}
