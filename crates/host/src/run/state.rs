//! A run in memory: a fold over its journal thread.
//!
//! Invariant: [`RunState::apply`] is the only way a run's state is built, live and on
//! resume alike, so the two cannot drift. It never fails on an event it does not know (other
//! hosts or newer versions may write more kinds); a known kind with a malformed payload is
//! skipped with a warning rather than making the run unreadable.
//!
//! A driving host's fold ([`RunState::for_driving`]) holds the run since its latest
//! checkpoint (a `context.compacted` event that carries one, see `checkpoint`): at each one
//! it drops the steps and calls before it, keeping their counts in [`Elided`]. A resume
//! starts from that checkpoint and reaches the same fold, so a live driver and a resumed
//! one act on the same state without the resume reading the run's whole history. A reader
//! that shows the history folds with [`RunState::new`] and keeps everything.

use std::collections::HashMap;
use std::sync::Arc;

use agent_journal::Event;
use agent_runtime::events as rt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::call_index::CallIndex;
use super::kinds as k;
use super::owner::Owner;
pub use super::records::{
    ApprovalRecord, CallOutput, CallProgress, CallRecord, Decision, StepRecord,
};
pub use super::spec::{Budgets, RunSpec, RunStatus, Usage};
use crate::RawJson;

/// The whole run, as folded from its events (since its latest checkpoint, for a driving
/// host's fold).
///
/// A call id is known to [`call`](Self::call) from its step on, since the latest
/// checkpoint when the fold is a driving host's: a model that reuses a call id from before
/// a compaction is not caught.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunState {
    /// The run id (or the steer id).
    pub id: String,
    /// What `run.created` recorded. Shared: a driving host's driver holds the same one,
    /// and folding `run.created` into a state that already holds an equal spec keeps it
    /// (one copy of the tools' schemas a run, not two).
    pub spec: Option<Arc<RunSpec>>,
    /// The recorded status (see `shown_status` for a crashed driver).
    pub status: Option<RunStatus>,
    /// Why it paused, failed or was interrupted, as last recorded.
    pub status_detail: Option<String>,
    /// Completed model steps, in order.
    pub steps: Vec<StepRecord>,
    /// `model.requested` attempts per step not yet completed. A step's entry goes when
    /// its `model.completed` is folded: only the step being asked reads it, and a run
    /// would otherwise keep one per step it ever took.
    pub attempts: HashMap<u64, u32>,
    /// Calls in the order the model made them.
    pub calls: Vec<CallRecord>,
    index: CallIndex,
    /// Tokens of all steps.
    pub usage: Usage,
    /// Tools approved for the rest of the run ("approve always").
    pub approved_tools: Vec<String>,
    /// The final answer of a completed run.
    pub final_text: Option<String>,
    /// The host driving the run, from its last `run.created`/`run.resumed` until it stopped.
    pub driver: Option<Owner>,
    /// Budgets raised by `resume`.
    pub budgets: Option<Budgets>,
    /// When the first event was appended (Unix ms).
    pub created_at: i64,
    /// When the last event was appended (Unix ms).
    pub updated_at: i64,
    /// The seq of the last event folded in.
    pub last_seq: i64,
    /// The seq of an interrupt request since the last resume.
    pub interrupt_requested: Option<i64>,
    /// Steers in the order they were requested.
    pub steers: Vec<SteerRecord>,
    /// The latest compaction of the history, if any.
    pub compaction: Option<CompactionRecord>,
    /// What the fold dropped at checkpoints (all zero unless it is a driving host's).
    pub elided: Elided,
    /// Whether checkpoints trim this fold (a driving host's).
    window: bool,
}

/// Steps and calls a driving host's fold no longer holds: all of them before its latest
/// checkpoint, every call answered. Kept as counts, which is all the next request needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Elided {
    /// Model steps.
    pub steps: u64,
    /// Function calls.
    pub calls: u64,
    /// `message` and `reasoning` output items (the `codex exec --json` item count).
    pub messages: u64,
}

/// The history before `before_step`, replaced by the compact endpoint's output.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionRecord {
    /// The first step whose request starts from `output`.
    pub before_step: u64,
    /// The compact endpoint's output items, verbatim.
    pub output: Vec<Value>,
    /// Steers already inside `output`.
    pub covered_steers: Vec<String>,
}

/// A steer: user input for a run, from any process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteerRecord {
    /// The run id (or the steer id).
    pub id: String,
    /// What the user said.
    pub text: String,
    /// Where the steer is.
    pub status: SteerStatus,
}

/// Where a steer is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SteerStatus {
    /// Not yet seen by a host.
    Pending,
    /// Given to the model before step `step`.
    Applied {
        /// The step whose request first carried it.
        step: u64,
    },
    /// Never given to the model, and why.
    Dropped {
        /// Why.
        reason: String,
    },
}

impl RunState {
    /// An empty state for run `id` (fold its events in with [`apply`](Self::apply)).
    pub fn new(id: &str) -> RunState {
        RunState {
            id: id.to_string(),
            ..RunState::default()
        }
    }

    /// An empty fold for the host that drives run `id`: each checkpoint trims it (see the
    /// module docs).
    pub fn for_driving(id: &str) -> RunState {
        RunState {
            window: true,
            ..RunState::new(id)
        }
    }

    /// The number of model steps the run has completed (held or elided).
    pub fn step_count(&self) -> u64 {
        self.elided.steps + self.steps.len() as u64
    }

    /// Folds all of `events` in.
    pub fn from_events(id: &str, events: &[Event]) -> RunState {
        let mut state = RunState::new(id);
        for event in events {
            state.apply(event);
        }
        state
    }

    /// The budgets in force.
    pub fn budgets(&self) -> Option<Budgets> {
        self.budgets
            .or_else(|| self.spec.as_ref().map(|s| s.budgets))
    }

    /// The call with `call_id`.
    pub fn call(&self, call_id: &str) -> Option<&CallRecord> {
        self.index
            .find(&self.calls, call_id)
            .and_then(|i| self.calls.get(i))
    }

    /// Calls whose approval awaits a decision.
    pub fn pending_approvals(&self) -> impl Iterator<Item = &CallRecord> {
        self.calls.iter().filter(|c| c.pending_approval().is_some())
    }

    /// Steers no host has applied or dropped yet.
    pub fn pending_steers(&self) -> impl Iterator<Item = &SteerRecord> {
        self.steers
            .iter()
            .filter(|s| s.status == SteerStatus::Pending)
    }

    /// The first line of the prompt.
    pub fn title(&self) -> String {
        self.spec
            .as_ref()
            .and_then(|s| s.prompt.lines().next())
            .unwrap_or("")
            .to_string()
    }

    /// Folds one event in. Events of kinds it does not know are ignored.
    pub fn apply(&mut self, event: &Event) {
        self.last_seq = self.last_seq.max(event.seq);
        if self.created_at == 0 {
            self.created_at = event.at;
        }
        self.updated_at = event.at;
        let p = &event.payload;
        match &*event.kind {
            k::RUN_CREATED => match serde_json::from_value::<RunSpec>(p.clone()) {
                Ok(spec) => {
                    self.status = Some(if spec.submitted {
                        RunStatus::Queued
                    } else {
                        RunStatus::Running
                    });
                    if self.spec.as_deref() != Some(&spec) {
                        self.spec = Some(Arc::new(spec));
                    }
                    self.driver = owner(p);
                }
                Err(err) => tracing::warn!(seq = event.seq, %err, "unreadable run.created"),
            },
            k::RUN_RESUMED => {
                self.status = Some(RunStatus::Running);
                self.status_detail = None;
                self.driver = owner(p);
                if let Some(b) = p.get("budgets").cloned()
                    && let Ok(b) = serde_json::from_value(b)
                {
                    self.budgets = Some(b);
                }
                self.interrupt_requested = None;
            }
            k::MODEL_REQUESTED => {
                if let Some(step) = p.get("step").and_then(Value::as_u64) {
                    let attempts = self.attempts.entry(step).or_default();
                    *attempts = (*attempts).max(u32_of(p, "attempt"));
                }
            }
            k::MODEL_COMPLETED => self.apply_completed(p),
            k::TOOL_REFUSED => {
                if let Some(call) = self.call_mut(p) {
                    call.progress = CallProgress::Done(CallOutput {
                        ok: false,
                        text: str_of(p, "message"),
                    });
                }
            }
            k::APPROVAL_REQUESTED => {
                let round = u32_of(p, "round");
                let reason = str_of(p, "reason");
                if let Some(call) = self.call_mut(p)
                    && !call.approvals.iter().any(|a| a.round == round)
                {
                    if let CallProgress::Interrupted { approval, .. } = &mut call.progress
                        && reason == "indeterminate"
                    {
                        *approval = Some(round);
                    }
                    call.approvals.push(ApprovalRecord {
                        round,
                        reason,
                        args_sha256: str_of(p, "args_sha256"),
                        decision: None,
                    });
                }
            }
            k::APPROVAL_DECIDED => self.apply_decided(p),
            k::RUN_PAUSED => self.stop(RunStatus::Paused, p),
            k::RUN_INTERRUPTED => self.stop(RunStatus::Interrupted, p),
            k::RUN_FAILED => self.stop(RunStatus::Failed, p),
            k::RUN_COMPLETED => {
                self.final_text = p.get("text").and_then(Value::as_str).map(str::to_string);
                self.stop(RunStatus::Completed, p);
            }
            k::INTERRUPT_REQUESTED => self.interrupt_requested = Some(event.seq),
            k::CONTEXT_COMPACTED => {
                let strings = |name: &str| -> Vec<String> {
                    p.get(name)
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default()
                };
                if let (Some(step), Some(output)) = (
                    p.get("step").and_then(Value::as_u64),
                    p.get("output").and_then(Value::as_array),
                ) {
                    self.compaction = Some(CompactionRecord {
                        before_step: step,
                        output: output.clone(),
                        covered_steers: strings("covered_steers"),
                    });
                    if self.window && p.get("checkpoint").is_some_and(Value::is_object) {
                        self.trim(step);
                    }
                }
            }
            k::STEER_REQUESTED => {
                let id = str_of(p, "id");
                if !id.is_empty() && !self.steers.iter().any(|s| s.id == id) {
                    self.steers.push(SteerRecord {
                        id,
                        text: str_of(p, "text"),
                        status: SteerStatus::Pending,
                    });
                }
            }
            k::STEER_APPLIED | k::STEER_DROPPED => {
                let id = str_of(p, "id");
                if let Some(steer) = self
                    .steers
                    .iter_mut()
                    .find(|s| s.id == id && s.status == SteerStatus::Pending)
                {
                    steer.status = if &*event.kind == k::STEER_APPLIED {
                        SteerStatus::Applied {
                            step: p.get("step").and_then(Value::as_u64).unwrap_or(0),
                        }
                    } else {
                        SteerStatus::Dropped {
                            reason: str_of(p, "reason"),
                        }
                    };
                }
            }
            rt::TOOL_SCHEDULED => {
                let turn = str_of(p, "turn_id");
                if let Some(call) = self.call_mut(p) {
                    call.progress = CallProgress::Scheduled {
                        turn,
                        started: false,
                    };
                }
            }
            rt::TOOL_STARTED => {
                if let Some(call) = self.call_mut(p)
                    && let CallProgress::Scheduled { started, .. } = &mut call.progress
                {
                    *started = true;
                }
            }
            kind if rt::TOOL_TERMINALS.contains(&kind) => self.apply_terminal(kind, p),
            _ => {}
        }
    }

    fn apply_completed(&mut self, p: &Value) {
        let Some(step) = p.get("step").and_then(Value::as_u64) else {
            return;
        };
        if self.steps.iter().any(|s| s.step == step) {
            return;
        }
        self.attempts.remove(&step);
        let items = p
            .get("output")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let output: Vec<RawJson> = items.iter().map(RawJson::from_value).collect();
        let usage = p.get("usage").map(Usage::from_api).unwrap_or_default();
        for item in items {
            if item.get("type").and_then(Value::as_str) != Some("function_call") {
                continue;
            }
            let call_id = str_of(item, "call_id");
            if call_id.is_empty() || self.index.find(&self.calls, &call_id).is_some() {
                continue;
            }
            self.index.insert(&call_id, self.calls.len());
            push_lean(
                &mut self.calls,
                CallRecord {
                    call_id,
                    name: str_of(item, "name"),
                    arguments: str_of(item, "arguments"),
                    step,
                    progress: CallProgress::New,
                    approvals: Vec::new(),
                },
            );
        }
        self.usage.add(&usage);
        push_lean(
            &mut self.steps,
            StepRecord {
                step,
                response_id: str_of(p, "response_id"),
                output,
                usage,
            },
        );
    }

    fn apply_decided(&mut self, p: &Value) {
        let round = u32_of(p, "round");
        let Ok(decision) = serde_json::from_value::<Decision>(p.clone()) else {
            return;
        };
        let mut approved_tool = None;
        if let Some(call) = self.call_mut(p)
            && let Some(approval) = call.approvals.iter_mut().find(|a| a.round == round)
            && approval.decision.is_none()
        {
            if decision.approve && decision.scope.as_deref() == Some("run") {
                approved_tool = Some(call.name.clone());
            }
            let undecided = matches!(
                call.progress,
                CallProgress::New | CallProgress::Interrupted { .. }
            );
            if !decision.approve && undecided {
                let why = decision
                    .reason
                    .clone()
                    .unwrap_or_else(|| "no reason given".into());
                let by = decision.by.clone().unwrap_or_else(|| "a user".into());
                call.progress = CallProgress::Done(CallOutput {
                    ok: false,
                    text: if approval.reason == "indeterminate" {
                        format!(
                            "The call was interrupted by a crash with unknown effect (it may or may not have run); {by} chose not to run it again: {why}"
                        )
                    } else {
                        format!("Denied by {by}: {why}")
                    },
                });
            }
            approval.decision = Some(decision);
        }
        if let Some(tool) = approved_tool
            && !self.approved_tools.contains(&tool)
        {
            self.approved_tools.push(tool);
        }
    }

    fn apply_terminal(&mut self, kind: &str, p: &Value) {
        let Some(call) = self.call_mut(p) else { return };
        let started = p.get("started").and_then(Value::as_bool).unwrap_or(false);
        let error = || {
            p.get("error")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        call.progress = match kind {
            rt::TOOL_COMPLETED => CallProgress::Done(CallOutput {
                ok: true,
                text: match p.get("value") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                },
            }),
            rt::TOOL_FAILED => CallProgress::Done(CallOutput {
                ok: false,
                text: error(),
            }),
            rt::TOOL_TIMEOUT => CallProgress::Done(CallOutput {
                ok: false,
                text: "The call timed out.".into(),
            }),
            rt::TOOL_CANCELLED => CallProgress::Done(CallOutput {
                ok: false,
                text: "The call was cancelled: the run was interrupted.".into(),
            }),
            _ => CallProgress::Interrupted {
                started,
                approval: None,
            },
        };
    }

    /// Drops every step and call before `before_step` (a checkpoint is written only when
    /// all of them are answered), counting them in `elided`.
    fn trim(&mut self, before_step: u64) {
        let messages: u64 = self
            .steps
            .iter()
            .filter(|s| s.step < before_step)
            .map(StepRecord::message_items)
            .sum();
        let steps = self.steps.len();
        self.steps.retain(|s| s.step >= before_step);
        let calls = self.calls.len();
        self.calls.retain(|c| c.step >= before_step);
        self.elided.steps += (steps - self.steps.len()) as u64;
        self.elided.calls += (calls - self.calls.len()) as u64;
        self.elided.messages += messages;
        self.index = CallIndex::of(&self.calls);
        self.attempts.retain(|&step, _| step >= before_step);
    }

    fn stop(&mut self, status: RunStatus, p: &Value) {
        self.status = Some(status);
        self.status_detail = p
            .get("reason")
            .or_else(|| p.get("error"))
            .and_then(Value::as_str)
            .map(str::to_string);
        self.driver = None;
    }

    fn call_mut(&mut self, p: &Value) -> Option<&mut CallRecord> {
        let call_id = p.get("call_id")?.as_str()?;
        let i = self.index.find(&self.calls, call_id)?;
        self.calls.get_mut(i)
    }
}

fn owner(p: &Value) -> Option<Owner> {
    p.get("owner")
        .cloned()
        .and_then(|o| serde_json::from_value(o).ok())
}

/// Pushes `item`, growing a full `v` by about a quarter rather than doubling it: a fold
/// holds its lists for the run's life, and a doubled one can be half unused.
fn push_lean<T>(v: &mut Vec<T>, item: T) {
    if v.len() == v.capacity() {
        v.reserve_exact(v.len() / 4 + 4);
    }
    v.push(item);
}

fn str_of(v: &Value, name: &str) -> String {
    v.get(name)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn u32_of(v: &Value, name: &str) -> u32 {
    v.get(name)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
