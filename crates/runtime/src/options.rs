//! Runtime options and per-call deadlines.

use std::time::Duration;

use crate::tool::ToolRegistry;

/// Deadlines of one call. The queue deadline bounds the wait for a run slot
/// (schedule-to-start); the run deadline bounds the tool itself (start-to-close). They
/// are separate so that waiting under load never eats the tool's own time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deadlines {
    /// Longest wait for a run slot; past it the call times out without starting.
    pub queue: Option<Duration>,
    /// Longest run once started; past it the tool is cancelled and the call times out.
    pub run: Option<Duration>,
}

impl Deadlines {
    /// No deadline at all.
    pub fn none() -> Self {
        Deadlines::default()
    }

    /// Only a run deadline: time spent waiting in the queue does not count against it.
    pub fn run(run: Duration) -> Self {
        Deadlines {
            queue: None,
            run: Some(run),
        }
    }

    /// Adds a queue deadline.
    pub fn with_queue(mut self, queue: Duration) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Adds (or replaces) the run deadline.
    pub fn with_run(mut self, run: Duration) -> Self {
        self.run = Some(run);
        self
    }
}

/// Default run deadline: one second of running per tool call.
pub const DEFAULT_RUN_DEADLINE: Duration = Duration::from_secs(1);

/// How a [`Runtime`](crate::Runtime) behaves.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// The allowlist (default: empty, so no call is accepted until tools are added).
    pub tools: ToolRegistry,
    /// Tools running at once; further calls wait in the queue. 0 reads as 1, and
    /// `usize::MAX` (anything beyond what a semaphore holds) as no limit.
    pub concurrency: usize,
    /// Admission control: calls queued plus running, runtime-wide. `launch` beyond it
    /// fails with [`RuntimeError::Overloaded`](crate::RuntimeError::Overloaded).
    pub max_in_flight: usize,
    /// How long a cancelled tool may take to stop on its own before it is dropped.
    pub cancel_grace: Duration,
    /// Deadlines for `launch` (and for calls re-run by recovery).
    pub deadlines: Deadlines,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            tools: ToolRegistry::new(),
            concurrency: 2,
            max_in_flight: 65_536,
            cancel_grace: Duration::from_millis(200),
            deadlines: Deadlines::run(DEFAULT_RUN_DEADLINE),
        }
    }
}

impl RuntimeOptions {
    /// Sets the allowlist.
    pub fn tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
        self
    }

    /// Sets how many tools run at once.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Sets the admission bound (calls queued plus running).
    pub fn max_in_flight(mut self, max_in_flight: usize) -> Self {
        self.max_in_flight = max_in_flight;
        self
    }

    /// Sets how long a cancelled tool may take to stop on its own.
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Sets the default deadlines of `launch`.
    pub fn deadlines(mut self, deadlines: Deadlines) -> Self {
        self.deadlines = deadlines;
        self
    }
}
