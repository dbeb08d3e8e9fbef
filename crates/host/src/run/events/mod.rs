//! A run's events, typed: the one model the driver writes, the fold reads, and the
//! `--json` renderer and other readers read, the way the event kinds in [`kinds`] are
//! their names.
//!
//! Invariants:
//! - Every event the host writes is one of the payload types here, written through
//!   [`HostEvent`]: its kind and its dedup key come with its type, so no writer spells
//!   either.
//! - The payloads are the ones journaled before this model existed, field for field and in
//!   the same order: a journal written by an earlier version reads the same (the fixture
//!   test in `tests` replays and resumes one).
//! - Reading is lenient where a field was added later (it defaults) and strict where a
//!   reader depends on it (a call id, a step): [`RunEvent::parse`] fails on a known kind
//!   with a malformed payload and returns `None` for a kind it does not know (other hosts
//!   and newer versions may write more).
//!
//! [`kinds`]: super::kinds

mod calls;
mod clean;
mod lifecycle;
mod model;
mod output;
pub mod reasons;
mod steers;
mod subagents;

use agent_journal::{NewEvent, Payload};
use agent_runtime::events as rt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use calls::text_of;
pub use calls::{
    ApprovalDecided, ApprovalRequested, Decision, ToolEnded, ToolOutcome, ToolRefused,
    ToolScheduled, ToolStarted,
};
pub use lifecycle::{
    InterruptRequested, RunCompleted, RunCreated, RunFailed, RunInterrupted, RunPaused,
    RunRequeued, RunResumed, RunSandboxChanged,
};
pub use model::{FunctionCall, ModelCompleted, ModelFailed, ModelRequested, Steered};
pub use output::OutputRejected;
pub use reasons::{ApprovalReason, DecisionScope, PauseReason, SteerVia, Verdict};
pub use steers::{ContextCompacted, SteerApplied, SteerDropped, SteerRequested};
pub use subagents::{ChildEnd, SubagentEnded, SubagentSpawned};

use super::kinds as k;

/// The dedup key of a run's end (`run.completed` or `run.failed`): a run ends once.
pub const RUN_END_KEY: &str = "run-end";

/// An event the host writes: its payload type names its kind and its dedup key.
pub trait HostEvent: Serialize {
    /// The event kind (see [`kinds`](super::kinds)).
    const KIND: &'static str;

    /// The dedup key that makes a repeated append of this event a no-op, if any.
    fn dedup_key(&self) -> Option<String> {
        None
    }

    /// The journal append of this event to `thread`.
    fn to_event(&self, thread: &str) -> Result<NewEvent, serde_json::Error> {
        let event = NewEvent::new(thread, Self::KIND, clean::clean(Payload::encode(self)?));
        Ok(match self.dedup_key() {
            Some(key) => event.with_dedup_key(key),
            None => event,
        })
    }
}

/// One event of a run's thread, read. Borrows from the payload where a copy would cost
/// (a step's output).
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent<'a> {
    /// `run.created`.
    Created(Box<RunCreated>),
    /// `run.resumed`.
    Resumed(RunResumed),
    /// `run.sandbox_changed`.
    SandboxChanged(Box<RunSandboxChanged>),
    /// `run.requeued`.
    Requeued(RunRequeued),
    /// `model.requested`.
    ModelRequested(ModelRequested),
    /// `model.completed`.
    ModelCompleted(Box<ModelCompleted<'a>>),
    /// `model.failed`.
    ModelFailed(Box<ModelFailed>),
    /// `tool.scheduled` (the runtime's).
    ToolScheduled(ToolScheduled),
    /// `tool.started` (the runtime's).
    ToolStarted(ToolStarted),
    /// A terminal event of a call (the runtime's).
    ToolEnded(ToolEnded),
    /// `tool.refused`.
    ToolRefused(ToolRefused),
    /// `approval.requested`.
    ApprovalRequested(ApprovalRequested),
    /// `approval.decided`.
    ApprovalDecided(ApprovalDecided),
    /// `interrupt.requested`.
    InterruptRequested(InterruptRequested),
    /// `steer.requested`.
    SteerRequested(SteerRequested),
    /// `steer.applied`.
    SteerApplied(SteerApplied),
    /// `steer.dropped`.
    SteerDropped(SteerDropped),
    /// `context.compacted`.
    ContextCompacted(Box<ContextCompacted>),
    /// `output.rejected`.
    OutputRejected(OutputRejected),
    /// `run.interrupted`.
    Interrupted(RunInterrupted),
    /// `run.paused`.
    Paused(RunPaused),
    /// `run.completed`.
    Completed(RunCompleted),
    /// `run.failed`.
    Failed(RunFailed),
    /// `subagent.spawned`.
    SubagentSpawned(SubagentSpawned),
    /// `subagent.ended`.
    SubagentEnded(SubagentEnded),
}

impl<'a> RunEvent<'a> {
    /// Reads an event of kind `kind`: `Ok(None)` for a kind the host does not read, an
    /// error for a known kind whose payload is malformed.
    pub fn parse(
        kind: &str,
        payload: &'a Value,
    ) -> Result<Option<RunEvent<'a>>, serde_json::Error> {
        fn de<'a, T: Deserialize<'a>>(payload: &'a Value) -> Result<T, serde_json::Error> {
            T::deserialize(payload)
        }
        Ok(Some(match kind {
            k::RUN_CREATED => RunEvent::Created(Box::new(RunCreated::read(payload)?)),
            k::RUN_RESUMED => RunEvent::Resumed(de(payload)?),
            k::RUN_REQUEUED => RunEvent::Requeued(de(payload)?),
            k::RUN_SANDBOX_CHANGED => RunEvent::SandboxChanged(Box::new(de(payload)?)),
            k::MODEL_REQUESTED => RunEvent::ModelRequested(de(payload)?),
            k::MODEL_COMPLETED => {
                RunEvent::ModelCompleted(Box::new(ModelCompleted::read(payload)?))
            }
            k::MODEL_FAILED => RunEvent::ModelFailed(Box::new(de(payload)?)),
            rt::TOOL_SCHEDULED => RunEvent::ToolScheduled(de(payload)?),
            rt::TOOL_STARTED => RunEvent::ToolStarted(de(payload)?),
            k::TOOL_REFUSED => RunEvent::ToolRefused(de(payload)?),
            k::APPROVAL_REQUESTED => RunEvent::ApprovalRequested(de(payload)?),
            k::APPROVAL_DECIDED => RunEvent::ApprovalDecided(de(payload)?),
            k::INTERRUPT_REQUESTED => RunEvent::InterruptRequested(de(payload)?),
            k::STEER_REQUESTED => RunEvent::SteerRequested(de(payload)?),
            k::STEER_APPLIED => RunEvent::SteerApplied(de(payload)?),
            k::STEER_DROPPED => RunEvent::SteerDropped(de(payload)?),
            k::CONTEXT_COMPACTED => RunEvent::ContextCompacted(Box::new(de(payload)?)),
            k::OUTPUT_REJECTED => RunEvent::OutputRejected(de(payload)?),
            k::RUN_INTERRUPTED => RunEvent::Interrupted(de(payload)?),
            k::RUN_PAUSED => RunEvent::Paused(de(payload)?),
            k::RUN_COMPLETED => RunEvent::Completed(de(payload)?),
            k::RUN_FAILED => RunEvent::Failed(de(payload)?),
            k::SUBAGENT_SPAWNED => RunEvent::SubagentSpawned(de(payload)?),
            k::SUBAGENT_ENDED => RunEvent::SubagentEnded(de(payload)?),
            other => match ToolOutcome::of_kind(other) {
                Some(outcome) => RunEvent::ToolEnded(ToolEnded::read(outcome, payload)?),
                None => return Ok(None),
            },
        }))
    }

    /// The call this event is about, for the events of one call.
    pub fn call_id(&self) -> Option<&str> {
        match self {
            RunEvent::ToolScheduled(e) => Some(&e.call_id),
            RunEvent::ToolStarted(e) => Some(&e.call_id),
            RunEvent::ToolEnded(e) => Some(&e.call_id),
            RunEvent::ToolRefused(e) => Some(&e.call_id),
            RunEvent::ApprovalRequested(e) => Some(&e.call_id),
            RunEvent::ApprovalDecided(e) => Some(&e.call_id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
