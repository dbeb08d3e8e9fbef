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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use agent_journal::Event;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::{
    ApprovalDecided, ApprovalReason, ContextCompacted, DecisionScope, ModelCompleted, RunCreated,
    RunEvent, RunSandboxChanged, ToolEnded, ToolOutcome,
};
use super::id_index::IdIndex;
use super::owner::Owner;
pub use super::records::{
    ApprovalRecord, CallOutput, CallProgress, CallRecord, Decision, StepRecord,
};
pub use super::spec::{Budgets, RunSpec, RunStatus, TokenUsage, Transport};
use crate::RawJson;

/// The most characters of a prompt's first line a run's title keeps.
pub const TITLE_CHARS: usize = 120;

/// The most tokens a figure of one response's `usage` (or a compaction's) counts for:
/// `u32::MAX`, thousands of times the largest context window, so no real response reaches
/// it. A larger figure is a server's error; counted as sent, a `u64::MAX` would make the
/// run's usage `u64::MAX`, above every `--max-tokens`, and since a resume needs a budget
/// above what the run used, the paused run could never be resumed. Capped, it still pauses
/// a run on any budget below it, and `resume --max-tokens` with a higher one goes on.
pub const MAX_RESPONSE_TOKENS: u64 = u32::MAX as u64;

/// The most a figure of a run's usage counts for: 2^53 - 1, the largest integer every JSON
/// reader holds exactly, and far below `u64::MAX`, so a budget above what a run used always
/// exists (a sub-agent's usage, or a journal written before [`MAX_RESPONSE_TOKENS`], could
/// otherwise bring a run to `u64::MAX`).
pub const MAX_RUN_TOKENS: u64 = (1 << 53) - 1;

/// The whole run, as folded from its events (since its latest checkpoint, for a driving
/// host's fold).
///
/// A call id is known to [`call`](Self::call) from its step on, since the latest
/// checkpoint when the fold is a driving host's: a model that reuses a call id from before
/// a compaction is not caught.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunState {
    /// The run id (or the steer id).
    pub(crate) id: String,
    /// What `run.created` recorded. Shared: a driving host's driver holds the same one,
    /// and folding `run.created` into a state that already holds an equal spec keeps it
    /// (one copy of the tools' schemas a run, not two).
    pub(crate) spec: Option<Arc<RunSpec>>,
    /// The recorded status (see [`RunState::status`] for the one readers show).
    pub(crate) status: Option<RunStatus>,
    /// Why it paused, failed or was interrupted, as last recorded.
    pub(crate) status_detail: Option<String>,
    /// Completed model steps, in order.
    pub(crate) steps: Vec<StepRecord>,
    /// `model.requested` attempts per step not yet completed. A step's entry goes when
    /// its `model.completed` is folded: only the step being asked reads it, and a run
    /// would otherwise keep one per step it ever took.
    pub(crate) attempts: HashMap<u64, u32>,
    /// Calls in the order the model made them.
    pub(crate) calls: Vec<CallRecord>,
    index: IdIndex,
    /// Tokens of all steps.
    pub(crate) usage: TokenUsage,
    /// Tools approved for the rest of the run ("approve always").
    pub(crate) approved_tools: Vec<String>,
    /// The final answer of a completed run.
    pub(crate) final_text: Option<String>,
    /// The final answer parsed, for a completed run with an output schema.
    pub(crate) final_output: Option<RawJson>,
    /// Final answers rejected by the output schema (since the latest checkpoint, for a
    /// driving host's fold), in step order.
    pub(crate) rejections: Vec<RejectionRecord>,
    /// The steps of `rejections`.
    rejected_steps: HashSet<u64>,
    /// The host driving the run, from its last `run.created`/`run.resumed` until it stopped.
    pub(crate) driver: Option<Owner>,
    /// Budgets raised by `resume`.
    pub(crate) budgets: Option<Budgets>,
    /// When the first event was appended (Unix ms).
    pub(crate) created_at: i64,
    /// When the last event was appended (Unix ms).
    pub(crate) updated_at: i64,
    /// The seq of the last event folded in.
    pub(crate) last_seq: i64,
    /// The seq of an interrupt request since the last resume.
    pub(crate) interrupt_requested: Option<i64>,
    /// Steers in the order they were requested.
    pub(crate) steers: Vec<SteerRecord>,
    /// Where each steer is in `steers`, by its id.
    pub(crate) steer_index: IdIndex,
    /// The latest compaction of the history, if any.
    pub(crate) compaction: Option<CompactionRecord>,
    /// What the fold dropped at checkpoints (all zero unless it is a driving host's).
    pub(crate) elided: Elided,
    /// Child runs its `spawn_agents` calls created (`subagent.spawned`), in order.
    pub(crate) children: Vec<ChildRecord>,
    /// Where each child is in `children`, by its run id.
    pub(crate) child_index: IdIndex,
    /// Whether checkpoints trim this fold (a driving host's).
    window: bool,
}

/// A child run of this one, as the parent's journal records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildRecord {
    /// The child run.
    pub run_id: String,
    /// The parent's `spawn_agents` call.
    pub call_id: String,
    /// Its place in the call's `agents`.
    pub index: u32,
    /// Its prompt.
    pub prompt: String,
    /// How it ended as the parent got it (`None` while it runs).
    pub ended: Option<super::events::ChildEnd>,
    /// The tokens of it the parent has counted.
    pub usage: TokenUsage,
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
    /// Final answers rejected by the output schema.
    #[serde(default)]
    pub rejections: u64,
}

/// A final answer the output schema rejected (`output.rejected`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectionRecord {
    /// The step of the answer.
    pub step: u64,
    /// What is wrong with it.
    pub errors: Vec<String>,
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

/// Read access: a state is built and changed only by folding events ([`RunState::apply`]).
impl RunState {
    /// The run id (or the steer id).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What `run.created` recorded.
    pub fn spec(&self) -> Option<&Arc<RunSpec>> {
        self.spec.as_ref()
    }

    /// The status as last recorded (see [`status`](Self::status) for the one readers show).
    pub fn recorded_status(&self) -> Option<RunStatus> {
        self.status
    }

    /// Why it paused, failed or was interrupted, as last recorded.
    pub fn status_detail(&self) -> Option<&str> {
        self.status_detail.as_deref()
    }

    /// Completed model steps held by this fold, in order.
    pub fn steps(&self) -> &[StepRecord] {
        &self.steps
    }

    /// Calls held by this fold, in the order the model made them.
    pub fn calls(&self) -> &[CallRecord] {
        &self.calls
    }

    /// Tokens of all steps.
    pub fn usage(&self) -> &TokenUsage {
        &self.usage
    }

    /// Tools approved for the rest of the run ("approve always").
    pub fn approved_tools(&self) -> &[String] {
        &self.approved_tools
    }

    /// The final answer of a completed run.
    pub fn final_text(&self) -> Option<&str> {
        self.final_text.as_deref()
    }

    /// The final answer of a completed run with an output schema, as JSON text: the
    /// model's tokens as it wrote them (numbers keep every digit), without the space
    /// between them.
    pub fn final_output(&self) -> Option<&RawJson> {
        self.final_output.as_ref()
    }

    /// Final answers the output schema rejected, in step order.
    pub fn rejections(&self) -> &[RejectionRecord] {
        &self.rejections
    }

    /// The host driving the run, while one does.
    pub fn driver(&self) -> Option<&Owner> {
        self.driver.as_ref()
    }

    /// When the first event was appended (Unix ms).
    pub fn created_at(&self) -> i64 {
        self.created_at
    }

    /// When the last event was appended (Unix ms).
    pub fn updated_at(&self) -> i64 {
        self.updated_at
    }

    /// The seq of the last event folded in.
    pub fn last_seq(&self) -> i64 {
        self.last_seq
    }

    /// The seq of an interrupt request since the last resume.
    pub fn interrupt_requested(&self) -> Option<i64> {
        self.interrupt_requested
    }

    /// Steers in the order they were requested.
    pub fn steers(&self) -> &[SteerRecord] {
        &self.steers
    }

    /// The latest compaction of the history, if any.
    pub fn compaction(&self) -> Option<&CompactionRecord> {
        self.compaction.as_ref()
    }

    /// What the fold dropped at checkpoints (all zero unless it is a driving host's).
    pub fn elided(&self) -> &Elided {
        &self.elided
    }

    /// Child runs its `spawn_agents` calls created, in order.
    pub fn children(&self) -> &[ChildRecord] {
        &self.children
    }
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

    /// The run's status from its journal alone, in the one status model (see `status`):
    /// `waiting` while a call waits for a human decision, `interrupted` for a run recorded
    /// running whose driver is gone.
    pub fn status(&self) -> RunStatus {
        super::status::shown(
            self.status,
            self.pending_approvals().count(),
            || self.driver.as_ref().is_some_and(Owner::is_alive),
            None,
        )
    }

    /// The number of model steps the run has completed (held or elided). The counts come
    /// from the journal (a checkpoint's may have been edited), so the sum saturates.
    pub fn step_count(&self) -> u64 {
        self.elided.steps.saturating_add(self.steps.len() as u64)
    }

    /// The step the run takes next.
    pub(crate) fn next_step(&self) -> u64 {
        self.step_count().saturating_add(1)
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

    /// How many final answers the output schema has rejected.
    pub fn output_retries_used(&self) -> u64 {
        self.elided
            .rejections
            .saturating_add(self.rejections.len() as u64)
    }

    /// Whether the answer of `step` was rejected by the output schema.
    pub fn rejected(&self, step: u64) -> bool {
        self.rejected_steps.contains(&step)
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

    /// The applied steers by the step they were applied before, each step's in the order
    /// they were requested: one pass, for callers that walk every step (a scan of all
    /// steers per step made long steered runs quadratic).
    pub(crate) fn applied_steers(&self) -> HashMap<u64, Vec<&SteerRecord>> {
        let mut applied: HashMap<u64, Vec<&SteerRecord>> = HashMap::new();
        for steer in &self.steers {
            if let SteerStatus::Applied { step } = steer.status {
                applied.entry(step).or_default().push(steer);
            }
        }
        applied
    }

    /// The first line of the prompt, at most [`TITLE_CHARS`] characters (longer ones end
    /// in `...`): what a list shows; the whole prompt is in the spec.
    pub fn title(&self) -> String {
        let line = self
            .spec
            .as_ref()
            .and_then(|s| s.prompt.lines().next())
            .unwrap_or("");
        match line.char_indices().nth(TITLE_CHARS) {
            Some((cut, _)) => format!("{}...", &line[..cut]),
            None => line.to_string(),
        }
    }

    /// Folds one event in. Events of kinds it does not know are ignored; a known kind
    /// with a malformed payload is skipped with a warning.
    pub fn apply(&mut self, event: &Event) {
        self.last_seq = self.last_seq.max(event.seq);
        if self.created_at == 0 {
            self.created_at = event.at;
        }
        self.updated_at = event.at;
        match RunEvent::parse(&event.kind, &event.payload) {
            Ok(Some(parsed)) => self.fold(event.seq, parsed),
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(seq = event.seq, kind = %event.kind, %err, "unreadable run event skipped");
            }
        }
    }

    /// A changed sandbox replaces the spec's, and the built-in tools' policies with it; a
    /// weaker one forgets the tools approved for the rest of the run. Folding it again (a
    /// claim folds its own write first) changes nothing.
    pub(crate) fn apply_sandbox(&mut self, changed: &RunSandboxChanged) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        let builtin = |t: &crate::tools::ToolSpec| t.mcp.is_none();
        let unchanged = spec.sandbox == changed.sandbox
            && spec
                .tools
                .iter()
                .filter(|t| builtin(t))
                .all(|t| changed.policies.get(&t.name).is_none_or(|p| *p == t.policy));
        if unchanged {
            return;
        }
        // A tool approved for the rest of the run was approved under the sandbox then in
        // force: a weaker one asks again.
        if spec.sandbox.mode.is_stricter_than(changed.sandbox.mode) {
            self.approved_tools.clear();
        }
        let spec = Arc::make_mut(spec);
        spec.sandbox = changed.sandbox.clone();
        for tool in spec.tools.iter_mut().filter(|t| t.mcp.is_none()) {
            if let Some(policy) = changed.policies.get(&tool.name) {
                tool.policy = *policy;
            }
        }
    }

    fn fold(&mut self, seq: i64, event: RunEvent<'_>) {
        match event {
            RunEvent::Created(created) => {
                let RunCreated { spec, owner, .. } = *created;
                let spec = spec.with_strict_rules_kept();
                self.status = Some(if spec.submitted {
                    RunStatus::Queued
                } else {
                    RunStatus::Running
                });
                if self.spec.as_deref() != Some(&spec) {
                    self.spec = Some(Arc::new(spec));
                }
                self.driver = owner;
            }
            RunEvent::Resumed(resumed) => {
                // A worker's claim (a resume with a lease epoch) inherits an interrupt nobody
                // acted on: one asked of a holder that died mid-drive (still recorded
                // running), or of a run still queued whose lease the claiming worker already
                // held, so that the interrupt could not withdraw it from the queue. Any
                // other resume is someone's decision to go on, and clears it.
                let claim = resumed.epoch.is_some()
                    && matches!(self.status, Some(RunStatus::Running | RunStatus::Queued));
                if !claim {
                    self.interrupt_requested = None;
                }
                self.status = Some(RunStatus::Running);
                self.status_detail = None;
                self.driver = resumed.owner;
                if let Some(budgets) = resumed.budgets {
                    self.budgets = Some(budgets);
                }
            }
            RunEvent::SandboxChanged(changed) => self.apply_sandbox(&changed),
            RunEvent::Requeued(requeued) => {
                self.status = Some(RunStatus::Queued);
                self.status_detail = None;
                self.driver = None;
                self.budgets = Some(requeued.budgets);
                self.interrupt_requested = None;
            }
            RunEvent::ModelRequested(requested) => {
                let attempts = self.attempts.entry(requested.step).or_default();
                *attempts = (*attempts).max(requested.attempt);
            }
            RunEvent::ModelCompleted(completed) => self.apply_completed(&completed),
            RunEvent::ToolRefused(refused) => {
                if let Some(call) = self.call_mut(&refused.call_id) {
                    call.progress = CallProgress::Done(CallOutput {
                        ok: false,
                        text: refused.message,
                    });
                }
            }
            RunEvent::ApprovalRequested(requested) => {
                let round = requested.round;
                let reason = requested.reason;
                if let Some(call) = self.call_mut(&requested.call_id)
                    && !call.approvals.iter().any(|a| a.round == round)
                {
                    if let CallProgress::Interrupted { approval, .. } = &mut call.progress
                        && reason == ApprovalReason::Indeterminate
                    {
                        *approval = Some(round);
                    }
                    call.approvals.push(ApprovalRecord {
                        round,
                        reason,
                        args_sha256: requested.args_sha256,
                        decision: None,
                    });
                }
            }
            RunEvent::ApprovalDecided(decided) => self.apply_decided(decided),
            RunEvent::Paused(paused) => {
                // The reason word; a run no worker can drive also says why, since nothing
                // else in its journal does.
                let detail = match paused.reason {
                    crate::run::PauseReason::CannotDrive => {
                        format!("{}: {}", paused.reason, paused.detail)
                    }
                    reason => reason.as_str().to_string(),
                };
                self.stop(RunStatus::Paused, Some(detail));
            }
            RunEvent::Interrupted(_) => self.stop(RunStatus::Interrupted, None),
            RunEvent::Failed(failed) => self.stop(RunStatus::Failed, Some(failed.error)),
            RunEvent::Completed(completed) => {
                self.final_output = completed.answer();
                self.final_text = Some(completed.text);
                self.stop(RunStatus::Completed, None);
            }
            RunEvent::InterruptRequested(_) => self.interrupt_requested = Some(seq),
            RunEvent::ContextCompacted(compacted) => {
                let ContextCompacted {
                    step,
                    output,
                    covered_steers,
                    carries_checkpoint,
                    usage,
                    ..
                } = *compacted;
                if let Some(usage) = &usage {
                    count(&mut self.usage, &response_usage(usage));
                }
                self.compaction = Some(CompactionRecord {
                    before_step: step,
                    output,
                    covered_steers,
                });
                if self.window && carries_checkpoint {
                    self.trim(step);
                }
            }
            RunEvent::OutputRejected(rejected) => {
                if self.rejected_steps.insert(rejected.step) {
                    push_lean(
                        &mut self.rejections,
                        RejectionRecord {
                            step: rejected.step,
                            errors: rejected.errors,
                        },
                    );
                }
            }
            RunEvent::SteerRequested(requested) => {
                if !requested.id.is_empty()
                    && self.steer_index.find(&self.steers, &requested.id).is_none()
                {
                    self.steer_index.insert(&requested.id, self.steers.len());
                    self.steers.push(SteerRecord {
                        id: requested.id,
                        text: requested.text,
                        status: SteerStatus::Pending,
                    });
                }
            }
            RunEvent::SteerApplied(applied) => {
                self.end_steer(&applied.id, SteerStatus::Applied { step: applied.step });
            }
            RunEvent::SteerDropped(dropped) => {
                self.end_steer(
                    &dropped.id,
                    SteerStatus::Dropped {
                        reason: dropped.reason,
                    },
                );
            }
            RunEvent::ToolScheduled(scheduled) => {
                if let Some(call) = self.call_mut(&scheduled.call_id) {
                    call.progress = CallProgress::Scheduled {
                        turn: scheduled.turn_id,
                        started: false,
                    };
                }
            }
            RunEvent::ToolStarted(started) => {
                if let Some(call) = self.call_mut(&started.call_id)
                    && let CallProgress::Scheduled { started, .. } = &mut call.progress
                {
                    *started = true;
                }
            }
            RunEvent::ToolEnded(ended) => self.apply_terminal(ended),
            RunEvent::SubagentSpawned(spawned) => {
                if self
                    .child_index
                    .find(&self.children, &spawned.child_run_id)
                    .is_none()
                {
                    self.child_index
                        .insert(&spawned.child_run_id, self.children.len());
                    self.children.push(ChildRecord {
                        run_id: spawned.child_run_id,
                        call_id: spawned.call_id,
                        index: spawned.index,
                        prompt: spawned.prompt,
                        ended: None,
                        usage: TokenUsage::default(),
                    });
                }
            }
            // The child's tokens are the parent's too: what it used since its last end.
            RunEvent::SubagentEnded(ended) => {
                let child = self
                    .child_index
                    .find(&self.children, &ended.child_run_id)
                    .and_then(|i| self.children.get_mut(i));
                match child {
                    Some(child) => {
                        count(&mut self.usage, &ended.usage.since(&child.usage));
                        // An end that knows less (a child that could not be read) does
                        // not lower what was counted.
                        if ended.usage.total_tokens >= child.usage.total_tokens {
                            child.usage = ended.usage;
                        }
                        child.ended = Some(ended.status);
                    }
                    None => count(&mut self.usage, &ended.usage),
                }
            }
            // A response that was paid for but not kept (too large to journal) still counts.
            RunEvent::ModelFailed(failed) => {
                if let Some(usage) = &failed.usage {
                    count(&mut self.usage, &response_usage(usage));
                }
            }
        }
    }

    /// Ends the pending steer `id` (ids are unique in the fold: a repeated request of one
    /// is not folded).
    fn end_steer(&mut self, id: &str, status: SteerStatus) {
        if let Some(steer) = self
            .steer_index
            .find(&self.steers, id)
            .and_then(|i| self.steers.get_mut(i))
            .filter(|s| s.status == SteerStatus::Pending)
        {
            steer.status = status;
        }
    }

    fn apply_completed(&mut self, completed: &ModelCompleted<'_>) {
        let step = completed.step;
        if self.steps.iter().any(|s| s.step == step) {
            return;
        }
        self.attempts.remove(&step);
        let output: Vec<RawJson> = completed.output.iter().map(RawJson::from_value).collect();
        let usage = response_usage(completed.usage);
        for call in completed.function_calls() {
            if call.call_id.is_empty() || self.index.find(&self.calls, call.call_id).is_some() {
                continue;
            }
            self.index.insert(call.call_id, self.calls.len());
            push_lean(
                &mut self.calls,
                CallRecord {
                    call_id: call.call_id.to_string(),
                    name: call.name.to_string(),
                    arguments: call.arguments.to_string(),
                    step,
                    progress: CallProgress::New,
                    approvals: Vec::new(),
                },
            );
        }
        count(&mut self.usage, &usage);
        // A response steered while it streamed (`--transport ws`) was paid for as well as
        // its successor, whose usage is the step's.
        if let Some(parent) = completed
            .steered
            .as_ref()
            .and_then(|s| s.parent_usage.as_ref())
        {
            count(&mut self.usage, &response_usage(parent));
        }
        push_lean(
            &mut self.steps,
            StepRecord {
                step,
                response_id: completed.response_id.to_string(),
                output,
                usage,
                incomplete: completed.incomplete_reason.as_deref().map(str::to_string),
            },
        );
    }

    fn apply_decided(&mut self, decided: ApprovalDecided) {
        let ApprovalDecided {
            decision,
            call_id,
            round,
            ..
        } = decided;
        let mut approved_tool = None;
        if let Some(call) = self.call_mut(&call_id)
            && let Some(approval) = call.approvals.iter_mut().find(|a| a.round == round)
            && approval.decision.is_none()
        {
            if decision.approve && decision.scope == Some(DecisionScope::Run) {
                approved_tool = Some(call.name.clone());
            }
            let undecided = matches!(
                call.progress,
                CallProgress::New | CallProgress::Interrupted { .. }
            );
            if !decision.approve && undecided {
                let why = decision.reason.as_deref().unwrap_or("no reason given");
                let by = decision.by.as_deref().unwrap_or("a user");
                call.progress = CallProgress::Done(CallOutput {
                    ok: false,
                    text: match approval.reason {
                        ApprovalReason::Indeterminate => format!(
                            "The call was interrupted by a crash with unknown effect (it may or may not have run); {by} chose not to run it again: {why}"
                        ),
                        ApprovalReason::Policy => format!("Denied by {by}: {why}"),
                        ApprovalReason::Escalation => format!(
                            "Denied by {by}: {why}. The command did not run; without `sandbox_permissions` it runs inside the sandbox."
                        ),
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

    /// A call's end. A retry-safe call cancelled by the run's interrupt stays open, as one a
    /// crash cut off: `resume` runs it again (sub-agents then reuse a finished child's
    /// answer and continue the others) instead of telling the model it was cancelled.
    fn apply_terminal(&mut self, ended: ToolEnded) {
        let Some(i) = self.index.find(&self.calls, &ended.call_id) else {
            return;
        };
        let reopen = ended.outcome == ToolOutcome::Cancelled
            && self.calls.get(i).is_some_and(|call| {
                self.spec
                    .as_ref()
                    .and_then(|spec| spec.tool(&call.name))
                    .is_some_and(|tool| tool.retry_safe)
            });
        let Some(call) = self.calls.get_mut(i) else {
            return;
        };
        call.progress = match ended.outcome {
            ToolOutcome::Interrupted => CallProgress::Interrupted {
                started: ended.started,
                approval: None,
            },
            ToolOutcome::Cancelled if reopen => CallProgress::Interrupted {
                started: ended.started,
                approval: None,
            },
            ToolOutcome::Completed => CallProgress::Done(CallOutput {
                ok: true,
                text: ended.into_model_text(),
            }),
            ToolOutcome::Failed | ToolOutcome::Timeout | ToolOutcome::Cancelled => {
                CallProgress::Done(CallOutput {
                    ok: false,
                    text: ended.into_model_text(),
                })
            }
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
        let elided = &mut self.elided;
        elided.steps = elided
            .steps
            .saturating_add((steps - self.steps.len()) as u64);
        elided.calls = elided
            .calls
            .saturating_add((calls - self.calls.len()) as u64);
        elided.messages = elided.messages.saturating_add(messages);
        let rejections = self.rejections.len();
        self.rejections.retain(|r| r.step >= before_step);
        self.rejected_steps.retain(|&step| step >= before_step);
        elided.rejections = elided
            .rejections
            .saturating_add((rejections - self.rejections.len()) as u64);
        self.index = IdIndex::of(&self.calls);
        self.attempts.retain(|&step, _| step >= before_step);
    }

    fn stop(&mut self, status: RunStatus, detail: Option<String>) {
        self.status = Some(status);
        self.status_detail = detail;
        self.driver = None;
    }

    fn call_mut(&mut self, call_id: &str) -> Option<&mut CallRecord> {
        let i = self.index.find(&self.calls, call_id)?;
        self.calls.get_mut(i)
    }
}

/// Pushes `item`, growing a full `v` by about a quarter rather than doubling it: a fold
/// holds its lists for the run's life, and a doubled one can be half unused.
fn push_lean<T>(v: &mut Vec<T>, item: T) {
    if v.len() == v.capacity() {
        v.reserve_exact(v.len() / 4 + 4);
    }
    v.push(item);
}

/// A response's (or a compaction's) `usage` as the run counts it: each figure at most
/// [`MAX_RESPONSE_TOKENS`].
fn response_usage(usage: &Value) -> TokenUsage {
    capped(&TokenUsage::from_api(usage), MAX_RESPONSE_TOKENS)
}

/// Adds `usage` to a run's `total`, each figure at most [`MAX_RUN_TOKENS`].
fn count(total: &mut TokenUsage, usage: &TokenUsage) {
    total.add(usage);
    *total = capped(total, MAX_RUN_TOKENS);
}

/// `usage` with each figure at most `max`.
fn capped(usage: &TokenUsage, max: u64) -> TokenUsage {
    TokenUsage {
        input_tokens: usage.input_tokens.min(max),
        cached_tokens: usage.cached_tokens.min(max),
        output_tokens: usage.output_tokens.min(max),
        reasoning_tokens: usage.reasoning_tokens.min(max),
        total_tokens: usage.total_tokens.min(max),
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;

#[cfg(test)]
mod usage_tests {
    use serde_json::json;

    use super::*;
    use crate::run::kinds as k;
    use crate::run::test_events::ev;

    fn created() -> Value {
        json!({"prompt": "p", "model": "m", "workspace": "/w", "tools": [],
               "approval": "default", "budgets": {"max_steps": 5, "max_tokens": 1000},
               "owner": {"host": "h", "pid": 1}})
    }

    /// A server's absurd usage (`u64::MAX`) counts for [`MAX_RESPONSE_TOKENS`]: the run
    /// pauses on its budget, and the resume the host suggests (what it used plus the
    /// budget) leaves room, where a usage of `u64::MAX` left none.
    #[test]
    fn an_absurd_usage_is_capped_so_a_higher_budget_exists() {
        let huge = json!({"input_tokens": u64::MAX, "output_tokens": u64::MAX,
                          "total_tokens": u64::MAX,
                          "input_tokens_details": {"cached_tokens": u64::MAX}});
        let events = vec![
            ev(1, k::RUN_CREATED, created()),
            ev(
                2,
                k::MODEL_COMPLETED,
                json!({"step": 1, "response_id": "r1", "output": [], "usage": huge}),
            ),
        ];
        let s = RunState::from_events("r", &events);
        assert_eq!(s.usage.total_tokens, MAX_RESPONSE_TOKENS);
        assert_eq!(s.usage.input_tokens, MAX_RESPONSE_TOKENS);
        assert_eq!(s.usage.cached_tokens, MAX_RESPONSE_TOKENS);
        let used = s.usage.total_tokens;
        let suggested = used.saturating_add(1000);
        assert!(crate::run::check_budget("r", "tokens", used, suggested).is_ok());
    }

    /// However many absurd figures a run folds (steps, failures, compactions, a child's end
    /// from an old journal), its usage stays below `u64::MAX`.
    #[test]
    fn a_run_total_stays_below_what_a_budget_can_exceed() {
        let huge = json!({"input_tokens": u64::MAX, "total_tokens": u64::MAX});
        let mut events = vec![ev(1, k::RUN_CREATED, created())];
        for step in 1..=3_i64 {
            events.push(ev(
                step + 1,
                k::MODEL_FAILED,
                json!({"step": step, "message": "m", "usage": huge}),
            ));
        }
        events.push(ev(
            10,
            k::SUBAGENT_ENDED,
            json!({"call_id": "c", "index": 0, "child_run_id": "kid", "status": "completed",
                   "usage": {"input_tokens": u64::MAX, "cached_tokens": 0, "output_tokens": 0,
                             "reasoning_tokens": 0, "total_tokens": u64::MAX}}),
        ));
        let s = RunState::from_events("r", &events);
        assert_eq!(s.usage.total_tokens, MAX_RUN_TOKENS);
        assert!(crate::run::check_budget("r", "tokens", MAX_RUN_TOKENS, u64::MAX).is_ok());
    }

    /// A step steered while it streamed counts its steered response's usage too; a journal
    /// written before `parent_usage` was recorded counts the successor's alone.
    #[test]
    fn a_steered_step_counts_both_responses() {
        let step = |seq: i64, n: u64, parent_usage: Option<Value>| {
            let mut steered = json!({"parent_response_id": format!("p{n}"), "steer_ids": ["s"]});
            if let Some(usage) = parent_usage {
                steered["parent_usage"] = usage;
            }
            ev(
                seq,
                k::MODEL_COMPLETED,
                json!({"step": n, "response_id": format!("r{n}"), "output": [],
                       "usage": {"input_tokens": 30, "output_tokens": 10, "total_tokens": 40},
                       "steered": steered}),
            )
        };
        let events = vec![
            ev(1, k::RUN_CREATED, created()),
            step(
                2,
                1,
                Some(json!({"input_tokens": 50, "output_tokens": 10, "total_tokens": 60})),
            ),
            step(3, 2, None),
        ];
        let s = RunState::from_events("r", &events);
        assert_eq!(s.usage.total_tokens, 40 + 60 + 40);
        assert_eq!(s.usage.input_tokens, 30 + 50 + 30);
        // The step's own usage is the successor's (what the next request's size follows).
        assert_eq!(s.steps[0].usage.total_tokens, 40);
    }
}
