//! Runtime options and per-call deadlines.

use std::time::Duration;

use crate::tool::ToolRegistry;

/// Deadlines of one call. The queue deadline bounds the wait for a run slot
/// (schedule-to-start); the run deadline bounds the tool itself (start-to-close). They
/// are separate so that waiting under load never eats the tool's own time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deadlines {
    pub queue: Option<Duration>,
    pub run: Option<Duration>,
}

impl Deadlines {
    /// No deadline at all.
    pub fn none() -> Self {
        Deadlines::default()
    }

    /// Only a run deadline (the seed's `timeout`, minus the queue time it wrongly included).
    pub fn run(run: Duration) -> Self {
        Deadlines {
            queue: None,
            run: Some(run),
        }
    }

    pub fn with_queue(mut self, queue: Duration) -> Self {
        self.queue = Some(queue);
        self
    }

    pub fn with_run(mut self, run: Duration) -> Self {
        self.run = Some(run);
        self
    }
}

/// Default run deadline (the seed's `timeout=1`).
pub const DEFAULT_RUN_DEADLINE: Duration = Duration::from_secs(1);

/// How a [`Runtime`](crate::Runtime) behaves.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// The allowlist.
    pub tools: ToolRegistry,
    /// Tools running at once (the seed's `concurrency`).
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
            tools: ToolRegistry::demo(),
            concurrency: 2,
            max_in_flight: 65_536,
            cancel_grace: Duration::from_millis(200),
            deadlines: Deadlines::run(DEFAULT_RUN_DEADLINE),
        }
    }
}

impl RuntimeOptions {
    pub fn tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
        self
    }

    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    pub fn max_in_flight(mut self, max_in_flight: usize) -> Self {
        self.max_in_flight = max_in_flight;
        self
    }

    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    pub fn deadlines(mut self, deadlines: Deadlines) -> Self {
        self.deadlines = deadlines;
        self
    }
}
