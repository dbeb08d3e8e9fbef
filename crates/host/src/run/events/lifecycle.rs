//! Events of a run's life: created, resumed (a process claims it), interrupted, paused,
//! completed, failed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::reasons::PauseReason;
use super::{HostEvent, RUN_END_KEY};
use crate::run::kinds as k;
use crate::run::owner::Owner;
use crate::run::spec::{Budgets, RunSpec, TokenUsage};
use crate::sandbox::{Mode, SandboxCause, SandboxSpec};
use crate::tools::Policy;

/// `run.created`: the run's spec, its id, and the process that drives it (none for a
/// submitted run, which a worker claims).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunCreated {
    /// What the run was given.
    #[serde(flatten)]
    pub spec: RunSpec,
    /// The run id.
    pub run_id: String,
    /// The process that drives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
}

/// The fields `run.created` has beside the spec's.
#[derive(Deserialize)]
struct CreatedMeta {
    #[serde(default)]
    run_id: String,
    #[serde(default)]
    owner: Option<Owner>,
}

impl RunCreated {
    /// Reads a `run.created` payload. Not through `flatten`, which buffers the payload and
    /// cannot hand the tools' schemas to [`RawJson`](crate::RawJson).
    pub fn read(payload: &serde_json::Value) -> Result<RunCreated, serde_json::Error> {
        let spec = RunSpec::deserialize(payload)?;
        let meta = CreatedMeta::deserialize(payload)?;
        Ok(RunCreated {
            spec,
            run_id: meta.run_id,
            owner: meta.owner,
        })
    }
}

impl HostEvent for RunCreated {
    const KIND: &'static str = k::RUN_CREATED;
}

/// `run.resumed`: a process took the run over, with the budgets in force from now on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunResumed {
    /// The process that drives it now.
    #[serde(default)]
    pub owner: Option<Owner>,
    /// The budgets in force.
    #[serde(default)]
    pub budgets: Option<Budgets>,
    /// The seq the claim was made on top of.
    #[serde(default)]
    pub after_seq: i64,
    /// The fencing epoch of the worker's lease, for a worker's claim.
    #[serde(default)]
    pub epoch: Option<i64>,
}

impl HostEvent for RunResumed {
    const KIND: &'static str = k::RUN_RESUMED;
}

/// `run.sandbox_changed`: from here on the run's commands run under another sandbox (a
/// resume's `--sandbox`, a worker's stricter `--sandbox`, or `off` where the system cannot
/// sandbox). Appended in the same write as the `run.resumed` of the process that changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSandboxChanged {
    /// The mode before.
    pub from: Mode,
    /// The sandbox from now on.
    pub sandbox: SandboxSpec,
    /// Why it changed.
    pub cause: SandboxCause,
    /// The policies of the built-in tools the mode decides (`shell`, `write_file`), from
    /// now on: a weaker mode makes them ask again, a stricter one lets them run.
    #[serde(default)]
    pub policies: BTreeMap<String, Policy>,
}

impl HostEvent for RunSandboxChanged {
    const KIND: &'static str = k::RUN_SANDBOX_CHANGED;
}

/// `run.requeued`: a paused or interrupted run was offered to workers again (`POST
/// /runs/{id}/resume`), with the budgets the claiming worker drives it with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRequeued {
    /// The budgets in force from now on.
    pub budgets: Budgets,
    /// Who asked (`user@host`).
    #[serde(default)]
    pub by: String,
}

impl HostEvent for RunRequeued {
    const KIND: &'static str = k::RUN_REQUEUED;
}

/// `interrupt.requested`: another process asked the driving host to stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptRequested {
    /// Who asked (`user@host`).
    #[serde(default)]
    pub by: String,
}

impl HostEvent for InterruptRequested {
    const KIND: &'static str = k::INTERRUPT_REQUESTED;
}

/// `run.interrupted`: the run stopped on an interrupt; these calls were cancelled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInterrupted {
    /// The call ids that were running.
    #[serde(default)]
    pub cancelled: Vec<String>,
}

impl HostEvent for RunInterrupted {
    const KIND: &'static str = k::RUN_INTERRUPTED;
}

/// `run.paused`: the run waits for a decision, a higher budget, or a retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPaused {
    /// Why.
    pub reason: PauseReason,
    /// What exactly, for a person.
    #[serde(default)]
    pub detail: String,
}

impl HostEvent for RunPaused {
    const KIND: &'static str = k::RUN_PAUSED;
}

/// `run.completed`: the final answer and the run's usage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCompleted {
    /// The final answer.
    #[serde(default)]
    pub text: String,
    /// Tokens of all steps.
    #[serde(default)]
    pub usage: TokenUsage,
    /// Model steps taken.
    #[serde(default)]
    pub steps: u64,
    /// `text` is the answer to the run's output schema (it matched). The parsed answer is
    /// `text` itself ([`RunState::final_output`](crate::run::RunState::final_output)): kept
    /// once, and as a string, so a number keeps every digit through the journal (whose
    /// reads decode payloads into `f64`-backed values) and a long answer is not journaled
    /// twice.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub structured: bool,
    /// The parsed answer as journals before `structured` recorded it; read, never written.
    #[serde(
        default,
        skip_serializing,
        deserialize_with = "agent_schema::json::option"
    )]
    pub output: Option<serde_json::Value>,
}

impl RunCompleted {
    /// The answer to the run's output schema, as JSON text (`None` for a run without one):
    /// `text` without the space between its tokens, or what an older journal recorded.
    pub fn answer(&self) -> Option<crate::RawJson> {
        match &self.output {
            _ if self.structured => crate::RawJson::compacted(&self.text),
            Some(legacy) => Some(crate::RawJson::from_value(legacy)),
            None => None,
        }
    }
}

impl HostEvent for RunCompleted {
    const KIND: &'static str = k::RUN_COMPLETED;
    fn dedup_key(&self) -> Option<String> {
        Some(RUN_END_KEY.into())
    }
}

/// `run.failed`: the run cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFailed {
    /// Why.
    #[serde(default)]
    pub error: String,
    /// Tokens of all steps.
    #[serde(default)]
    pub usage: TokenUsage,
}

impl HostEvent for RunFailed {
    const KIND: &'static str = k::RUN_FAILED;
    fn dedup_key(&self) -> Option<String> {
        Some(RUN_END_KEY.into())
    }
}
