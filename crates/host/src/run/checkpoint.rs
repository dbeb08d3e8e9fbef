//! Checkpoints: a driving host's fold, written into the `context.compacted` event of each
//! compaction, so a resume folds the events after the latest one instead of the run's
//! whole history (and the runtime adopts from there too).
//!
//! Invariants:
//! - A checkpoint is written only at a step boundary where every call of the run has its
//!   result and none runs ([`Runtime::checkpoint`](agent_runtime::Runtime::checkpoint)
//!   agrees): the steps and calls before it are history, of which the next requests need
//!   only the counts ([`Elided`]).
//! - It is the fold of every event before it; [`RunState::from_checkpoint`] plus the
//!   compaction event itself gives exactly the state a driving host holds right after that
//!   event (it trims its own fold there), so live and resumed drivers cannot drift. A
//!   checkpoint that cannot be read is ignored: the resume folds the whole thread.

use std::collections::HashMap;

use agent_journal::Event;
use agent_runtime::ThreadCheckpoint;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::owner::Owner;
use super::spec::{Budgets, RunSpec, RunStatus, TokenUsage};
use super::state::{CallProgress, ChildRecord, Elided, RunState, SteerRecord};

/// The checkpoint format; another version is ignored (the resume folds everything).
const VERSION: u32 = 1;

/// The fold before a `context.compacted` event, minus what that event trims.
#[derive(Debug, Serialize, Deserialize)]
struct Checkpoint {
    version: u32,
    spec: RunSpec,
    status: Option<RunStatus>,
    status_detail: Option<String>,
    driver: Option<Owner>,
    budgets: Option<Budgets>,
    usage: TokenUsage,
    approved_tools: Vec<String>,
    created_at: i64,
    interrupt_requested: Option<i64>,
    steers: Vec<SteerRecord>,
    /// `model.requested` attempts of the steps the checkpoint keeps (from its step on).
    attempts: Vec<(u64, u32)>,
    /// Everything before the checkpoint's step, counted.
    elided: Elided,
    runtime: ThreadCheckpoint,
    /// The sub-agents spawned so far (absent in checkpoints written before them), kept so
    /// a later end of one counts only its new tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    children: Vec<ChildRecord>,
}

/// The checkpoint to write into the compaction before step `before_step`, or `None` when
/// one cannot be taken now (a call unanswered, or running in `runtime`).
pub(crate) fn take(
    state: &RunState,
    before_step: u64,
    runtime: Option<ThreadCheckpoint>,
) -> Option<Value> {
    let runtime = runtime?;
    let spec = RunSpec::clone(state.spec.as_deref()?);
    if state
        .calls
        .iter()
        .any(|c| !matches!(c.progress, CallProgress::Done(_)))
    {
        return None;
    }
    let before = state.steps.iter().filter(|s| s.step < before_step);
    // Saturating: the counts folded so far may come from a checkpoint edited by hand.
    let elided = Elided {
        steps: state
            .elided
            .steps
            .saturating_add(before.clone().count() as u64),
        calls: state
            .elided
            .calls
            .saturating_add(state.calls.iter().filter(|c| c.step < before_step).count() as u64),
        messages: state
            .elided
            .messages
            .saturating_add(before.map(|s| s.message_items()).sum::<u64>()),
        rejections: state.elided.rejections.saturating_add(
            state
                .rejections
                .iter()
                .filter(|r| r.step < before_step)
                .count() as u64,
        ),
    };
    let mut attempts: Vec<(u64, u32)> = state
        .attempts
        .iter()
        .filter(|&(&step, _)| step >= before_step)
        .map(|(&step, &n)| (step, n))
        .collect();
    attempts.sort_unstable();
    let checkpoint = Checkpoint {
        version: VERSION,
        spec,
        status: state.status,
        status_detail: state.status_detail.clone(),
        driver: state.driver.clone(),
        budgets: state.budgets,
        usage: state.usage,
        approved_tools: state.approved_tools.clone(),
        created_at: state.created_at,
        interrupt_requested: state.interrupt_requested,
        steers: state.steers.clone(),
        attempts,
        elided,
        runtime,
        children: state.children.clone(),
    };
    serde_json::to_value(checkpoint).ok()
}

impl RunState {
    /// The driving host's fold right after `event`, a `context.compacted` event of run
    /// `id` that carries a checkpoint, and the runtime's checkpoint beside it; `None` when
    /// it carries none or one this version cannot read.
    pub(crate) fn from_checkpoint(id: &str, event: &Event) -> Option<(RunState, ThreadCheckpoint)> {
        let raw = event.payload.get("checkpoint")?;
        let checkpoint = match Checkpoint::deserialize(raw) {
            Ok(c) if c.version == VERSION => c,
            Ok(c) => {
                tracing::warn!(
                    seq = event.seq,
                    version = c.version,
                    "checkpoint of another version ignored"
                );
                return None;
            }
            Err(err) => {
                tracing::warn!(seq = event.seq, %err, "unreadable checkpoint ignored");
                return None;
            }
        };
        let mut state = RunState::for_driving(id);
        state.spec = Some(std::sync::Arc::new(checkpoint.spec));
        state.status = checkpoint.status;
        state.status_detail = checkpoint.status_detail;
        state.driver = checkpoint.driver;
        state.budgets = checkpoint.budgets;
        state.usage = checkpoint.usage;
        state.approved_tools = checkpoint.approved_tools;
        state.created_at = checkpoint.created_at;
        state.interrupt_requested = checkpoint.interrupt_requested;
        state.steers = checkpoint.steers;
        state.steer_index = super::id_index::IdIndex::of(&state.steers);
        state.attempts = checkpoint.attempts.into_iter().collect::<HashMap<_, _>>();
        state.elided = checkpoint.elided;
        state.children = checkpoint.children;
        state.child_index = super::id_index::IdIndex::of(&state.children);
        state.apply(event);
        Some((state, checkpoint.runtime))
    }
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
