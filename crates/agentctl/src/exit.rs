//! The exit statuses of `agentctl`, in one place: what each command's end means to a
//! script (documented in the README).

use std::process::ExitCode;

use agent_host::run::{PauseReason, RunEnd, RunStatus};

/// How a command ended, as its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done (a run completed).
    Ok,
    /// 1: failed.
    Failed,
    /// 2: a usage error (bad flags, input, or a state the command cannot act on).
    Usage,
    /// 3: a run paused or waits for a human decision.
    Paused,
    /// 124: gave up waiting (`--timeout`).
    TimedOut,
    /// 130: interrupted (Ctrl-C, SIGTERM, `agentctl interrupt`).
    Interrupted,
}

impl Exit {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Paused => 3,
            Exit::TimedOut => 124,
            Exit::Interrupted => 130,
        }
    }

    /// The exit status of a run that stopped with `status`; a run still queued or running
    /// (a wait that gave up) exits as failed.
    pub fn of_status(status: RunStatus) -> Exit {
        match status {
            RunStatus::Completed => Exit::Ok,
            RunStatus::Paused | RunStatus::Waiting => Exit::Paused,
            RunStatus::Interrupted => Exit::Interrupted,
            RunStatus::Failed | RunStatus::Queued | RunStatus::Running => Exit::Failed,
        }
    }

    /// The exit status of a run that stopped with `status`, `detail` being its recorded
    /// status detail: as [`of_status`](Self::of_status), except that a run paused because
    /// the API refused its request (`model_rejected`) exits 1, as the `run` that stopped
    /// there did ([`of_end`](Self::of_end)).
    pub fn of_stopped(status: RunStatus, detail: Option<&str>) -> Exit {
        match (status, detail) {
            (RunStatus::Paused, Some(reason)) if reason == PauseReason::ModelRejected.as_str() => {
                Exit::Failed
            }
            _ => Exit::of_status(status),
        }
    }

    /// The exit status of a drive that ended with `end`.
    pub fn of_end(end: &RunEnd) -> Exit {
        match end {
            RunEnd::Completed { .. } => Exit::Ok,
            // The API refused the request itself: the step failed, though `resume` may ask
            // again once something changed.
            RunEnd::Paused {
                reason: PauseReason::ModelRejected,
                ..
            } => Exit::Failed,
            RunEnd::Paused { .. } => Exit::Paused,
            RunEnd::Interrupted | RunEnd::Released => Exit::Interrupted,
            RunEnd::Failed { .. } => Exit::Failed,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}
