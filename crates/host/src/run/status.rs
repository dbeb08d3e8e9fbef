//! The one status model: the word every reader shows for a run (`runs list`, `runs show`,
//! `--json`, the runs table, a worker's lease), derived in one place from what the journal
//! recorded, the approvals it holds open, and (where a reader has it) the run's lease.
//!
//! Invariants:
//! - A run that ended shows how it ended, and one a user interrupted shows `interrupted`,
//!   whatever else holds.
//! - A run with a call waiting for a human decision shows `waiting`, whoever drives it (a
//!   host waiting with it, a worker, or nobody since it paused): one word a script can act
//!   on.
//! - A run recorded as running whose driver is gone shows `interrupted`, or `queued` when
//!   its lease is open again for a worker to take; a run whose lease a worker holds shows
//!   `running`.

use super::spec::RunStatus;

/// What the runs table knows of a run's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseView {
    /// A worker holds it and its lease has not expired.
    pub(crate) held: bool,
    /// Workers may claim it.
    pub(crate) open: bool,
}

/// The status to show. `driver_alive` is asked only when it decides.
pub(crate) fn shown(
    recorded: Option<RunStatus>,
    pending_approvals: usize,
    driver_alive: impl FnOnce() -> bool,
    lease: Option<LeaseView>,
) -> RunStatus {
    let Some(recorded) = recorded else {
        return RunStatus::Failed;
    };
    // Ended, or stopped by a user: nothing acts on a decision until `resume`.
    if recorded.is_final() || recorded == RunStatus::Interrupted {
        return recorded;
    }
    if pending_approvals > 0 {
        return RunStatus::Waiting;
    }
    if lease.is_some_and(|l| l.held) {
        return RunStatus::Running;
    }
    match recorded {
        RunStatus::Running if !driver_alive() => match lease {
            // Its worker died; the next free worker takes it over.
            Some(LeaseView { open: true, .. }) => RunStatus::Queued,
            _ => RunStatus::Interrupted,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELD: Option<LeaseView> = Some(LeaseView {
        held: true,
        open: false,
    });
    const OPEN: Option<LeaseView> = Some(LeaseView {
        held: false,
        open: true,
    });

    #[test]
    fn one_word_for_each_moment_of_a_run() {
        use RunStatus::*;
        let dead = || false;
        let alive = || true;
        assert_eq!(shown(Some(Completed), 2, dead, HELD), Completed);
        assert_eq!(shown(Some(Failed), 0, alive, None), Failed);
        // Waiting for a human: driven by a live host, a worker, or paused.
        assert_eq!(shown(Some(Running), 1, alive, None), Waiting);
        assert_eq!(shown(Some(Running), 1, dead, HELD), Waiting);
        assert_eq!(shown(Some(Paused), 2, dead, None), Waiting);
        assert_eq!(shown(Some(Interrupted), 1, dead, None), Interrupted);
        // Its driver died: interrupted, or queued again for a worker.
        assert_eq!(shown(Some(Running), 0, dead, None), Interrupted);
        assert_eq!(shown(Some(Running), 0, dead, OPEN), Queued);
        assert_eq!(shown(Some(Running), 0, dead, HELD), Running);
        assert_eq!(shown(Some(Running), 0, alive, None), Running);
        assert_eq!(shown(Some(Paused), 0, dead, None), Paused);
        assert_eq!(shown(Some(Queued), 0, dead, OPEN), Queued);
        assert_eq!(shown(None, 0, alive, None), Failed);
    }
}
