//! Tool calls of a step: what may run, what asks a human, what waits.
//!
//! Invariant ([`Driver::next_for`]): a call with an outcome never runs again; a call cut
//! off after it started runs again only if its tool is retry-safe or an `indeterminate`
//! approval says so; a call the policy asks about runs only after an approval of its
//! latest round.

use agent_runtime::{Deadlines, RuntimeError};
use futures::StreamExt as _;
use serde_json::Value;

use super::Driver;
use crate::error::HostError;
use crate::run::RunEnd;
use crate::run::digest::sha256_hex;
use crate::run::events::{
    ApprovalDecided, ApprovalReason, ApprovalRequested, DecisionScope, PauseReason, ToolRefused,
};
use crate::run::kinds as k;
use crate::run::records::ApprovalRecord;
use crate::run::state::{CallProgress, CallRecord, Decision};
use agent_journal::holds_nul;

use crate::tools::{ApprovalMode, Policy};

/// What to do with one call now.
pub(super) enum Next {
    Launch,
    Await,
    Ask { reason: ApprovalReason, round: u32 },
    Wait,
    Refuse(String),
    Done,
    Stuck(String),
}

/// A new call that needs a human (for `reason`): asked once, then as its decision says.
fn asked(reason: ApprovalReason, last: Option<&ApprovalRecord>) -> Next {
    match last {
        None => Next::Ask { reason, round: 0 },
        Some(a) => match &a.decision {
            None => Next::Wait,
            Some(d) if d.approve => Next::Launch,
            Some(_) => Next::Done,
        },
    }
}

/// What the model is told of arguments that hold a NUL character.
const NUL_REFUSAL: &str = "the arguments contain a NUL character (\\u0000), which no tool \
    takes and a run cannot record; send the call again without it";

/// Largest arguments (JSON text) a call may have. The call's `tool.scheduled` holds them
/// twice (as sent and in the call's signature, escaped), so at this size it stays well
/// under the journal's 4 MiB event limit; past it the event could never be written and the
/// run would fail on every resume. `write_file` takes at most 1 MiB of content as well.
const MAX_ARGUMENT_BYTES: usize = 1 << 20;

/// Why arguments (JSON text) can never be recorded as a call: more than
/// [`MAX_ARGUMENT_BYTES`], or a NUL character in a string or a key, which the journal
/// refuses (PostgreSQL cannot store it), so the call's `tool.scheduled` would fail the run
/// on every resume.
fn unrecordable(arguments: &str) -> Option<String> {
    if arguments.len() > MAX_ARGUMENT_BYTES {
        return Some(format!(
            "the arguments are {} bytes, over the {MAX_ARGUMENT_BYTES} a call may have (the run \
             records every call); send smaller arguments, split the work into several calls",
            arguments.len()
        ));
    }
    // NUL can only be in JSON text as the escape `\u0000`.
    if !arguments.contains("u0000") {
        return None;
    }
    let args: Value = serde_json::from_str(arguments).ok()?;
    holds_nul(&args).then(|| NUL_REFUSAL.into())
}

impl Driver {
    fn next_for(&self, call: &CallRecord) -> Next {
        let spec = self.spec.tool(&call.name);
        let retry_safe = spec.is_some_and(|s| s.retry_safe);
        let round = call.approvals.len() as u32;
        let last = call.approvals.last();
        match &call.progress {
            CallProgress::Done(_) => Next::Done,
            CallProgress::Scheduled { turn, .. } if *turn == self.turn => Next::Await,
            // Adoption marks every call of an earlier turn interrupted, so this is a
            // journal written by something else than a host.
            CallProgress::Scheduled { turn, .. } => Next::Stuck(turn.clone()),
            CallProgress::Interrupted { started, approval } => {
                if !started || retry_safe {
                    return Next::Launch;
                }
                let decision = approval
                    .and_then(|r| call.approvals.iter().find(|a| a.round == r))
                    .map(|a| a.decision.as_ref().map(|d| d.approve));
                match decision {
                    None => Next::Ask {
                        reason: ApprovalReason::Indeterminate,
                        round,
                    },
                    Some(None) => Next::Wait,
                    Some(Some(true)) => Next::Launch,
                    Some(Some(false)) => Next::Done,
                }
            }
            CallProgress::New => {
                let Some(spec) = spec else {
                    return Next::Refuse(format!(
                        "unknown tool `{}`; the tools are: {}",
                        call.name,
                        self.spec
                            .tools
                            .iter()
                            .map(|t| t.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                };
                // Refused before anyone is asked: the call could never be recorded, or a
                // person could approve something else than what would run.
                if let Some(why) = unrecordable(&call.arguments)
                    .or_else(|| super::ambiguous::ambiguity(&call.call_id, &call.arguments))
                {
                    return Next::Refuse(why);
                }
                // Leaving the sandbox always asks a human (never "approve --always", never
                // `--approval auto`), and `--approval deny` refuses it, as a tool's own
                // `deny` refuses every call of it, before anyone is asked.
                let escalates = self.spec.sandbox.mode.is_sandboxed()
                    && crate::tools::asks_escalation(&call.name, &call.arguments);
                if escalates && self.spec.approval == ApprovalMode::Deny {
                    return Next::Refuse(
                        "Refused: the run's policy (--approval deny) does not allow commands \
                         outside the sandbox; run it sandboxed or not at all."
                            .into(),
                    );
                }
                if spec.policy == Policy::Deny {
                    return Next::Refuse(format!(
                        "Refused: the run's policy does not allow `{}` calls.",
                        call.name
                    ));
                }
                if escalates {
                    return asked(ApprovalReason::Escalation, last);
                }
                if self.state.approved_tools.contains(&call.name) {
                    return Next::Launch;
                }
                match spec.policy {
                    Policy::Auto => Next::Launch,
                    Policy::Deny => Next::Refuse(format!(
                        "Refused: the run's policy does not allow `{}` calls.",
                        call.name
                    )),
                    Policy::Ask => asked(ApprovalReason::Policy, last),
                }
            }
        }
    }

    /// Moves the open calls of the last step on: launches what may run, asks what needs a
    /// human, waits for results. Returns an end when the run pauses or is interrupted.
    pub(super) async fn calls(
        &mut self,
        open: Vec<CallRecord>,
    ) -> Result<Option<RunEnd>, HostError> {
        let mut launched = Vec::new();
        let mut waiting = Vec::new();
        for call_id in open.iter().map(|call| &call.call_id) {
            // As the run is now, not as the step began: each launch, ask or refusal below
            // folds what others appended meanwhile (a decision on a later call included).
            let Some(call) = self.state.call(call_id).cloned() else {
                continue;
            };
            let call = &call;
            match self.next_for(call) {
                Next::Done => {}
                Next::Stuck(turn) => {
                    return Err(HostError::Internal(format!(
                        "call {} is scheduled under turn {turn}, which no host drives",
                        call.call_id
                    )));
                }
                Next::Await => launched.push(call.call_id.clone()),
                Next::Launch => {
                    // Runs under "approve always" for its tool: its own open round is
                    // decided by that, so no later decision can rewrite what it did.
                    if let Some(open) = call.pending_approval().cloned() {
                        let decision = Decision {
                            approve: true,
                            reason: Some("the tool was approved for the rest of the run".into()),
                            by: Some("approve --always".into()),
                            scope: Some(DecisionScope::Run),
                        };
                        self.decide(call, open.round, &open.args_sha256, decision)
                            .await?;
                        // The first decision of the round wins: a person's `deny` taken
                        // before ours (ours then deduplicated) means the call never runs.
                        let approved = self.state.call(call_id).is_some_and(|now| {
                            now.approvals
                                .iter()
                                .find(|a| a.round == open.round)
                                .and_then(|a| a.decision.as_ref())
                                .is_some_and(|d| d.approve)
                        });
                        if !approved {
                            continue;
                        }
                    }
                    if let Some(refusal) = self.launch(call).await? {
                        self.refuse(call, refusal).await?;
                    } else {
                        launched.push(call.call_id.clone());
                    }
                }
                Next::Refuse(message) => self.refuse(call, message).await?,
                Next::Ask { reason, round } => {
                    self.record(&ApprovalRequested {
                        call_id: call.call_id.clone(),
                        tool: call.name.clone(),
                        arguments: call.arguments.clone(),
                        args_sha256: sha256_hex(call.arguments.as_bytes()),
                        reason,
                        round,
                    })
                    .await?;
                    waiting.push(call.call_id.clone());
                }
                Next::Wait => waiting.push(call.call_id.clone()),
            }
        }
        // The calls' `tool.scheduled` is durable once launched: an observer that shows
        // progress sees each call start now, not when it ends.
        if !launched.is_empty() && self.opts.observer.shows_progress() {
            self.sync().await?;
        }
        if !launched.is_empty() {
            let runtime = self.runtime.clone();
            let (thread, turn) = (self.thread.clone(), self.turn.clone());
            // Each wait is a task of its own: a wait suspended mid-query while this loop
            // folds the journal would hold its pooled connection, and enough of them left
            // the fold none (PostgreSQL's read pool: a 10 s stall, then an error).
            let mut results = tokio::task::JoinSet::new();
            for call_id in &launched {
                let key = agent_runtime::JobKey {
                    thread: thread.clone(),
                    turn: turn.clone(),
                    call_id: call_id.clone(),
                };
                let runtime = runtime.clone();
                let (thread, turn) = (thread.clone(), turn.clone());
                results.spawn(async move { runtime.result(&thread, &turn, &key).await });
            }
            let cancel = self.opts.cancel.clone();
            loop {
                let next = tokio::select! {
                    next = results.join_next() => next,
                    () = cancel.cancelled() => return self.interrupt().await.map(Some),
                };
                let Some(joined) = next else { break };
                let result = joined.map_err(|err| {
                    HostError::Internal(format!("a tool call's wait ended: {err}"))
                })?;
                match result {
                    Ok(_)
                    | Err(RuntimeError::UnknownCall { .. })
                    | Err(RuntimeError::Unresolved { .. }) => {}
                    Err(err) => return Err(err.into()),
                }
                // Each call's end is shown as it is journaled, not when the slowest call
                // of the step ends (a process killed meanwhile would never show it).
                if !results.is_empty() && self.opts.observer.shows_progress() {
                    self.sync().await?;
                }
            }
            self.sync().await?;
        }
        if waiting.is_empty() {
            return Ok(None);
        }
        self.sync().await?;
        // Decided meanwhile (another process): go round again.
        let still: Vec<CallRecord> = waiting
            .iter()
            .filter_map(|id| self.state.call(id))
            .filter(|c| c.pending_approval().is_some())
            .cloned()
            .collect();
        if still.is_empty() {
            return Ok(None);
        }
        if let Some(decider) = self.opts.decider.clone() {
            for call in &still {
                let Some(pending) = call.pending_approval().cloned() else {
                    continue;
                };
                let cancel = self.opts.cancel.clone();
                let decision = tokio::select! {
                    d = decider.decide(&self.state.id, call, pending.reason) => Some(d),
                    () = cancel.cancelled() => None,
                };
                let Some(decision) = decision else {
                    return self.interrupt().await.map(Some);
                };
                match decision {
                    Some(decision) => {
                        self.decide(call, pending.round, &pending.args_sha256, decision)
                            .await?;
                    }
                    // No answer (stdin closed, or an answer that is not one): pause rather
                    // than ask again in a loop.
                    None => {
                        let detail = format!("{} ({})", call.call_id, call.name);
                        return self.pause(PauseReason::Approval, detail).await.map(Some);
                    }
                }
            }
            return Ok(None);
        }
        if self.opts.wait {
            return self.wait_for_decision().await;
        }
        let detail = still
            .iter()
            .map(|c| format!("{} ({})", c.call_id, c.name))
            .collect::<Vec<_>>()
            .join(", ");
        self.pause(PauseReason::Approval, detail).await.map(Some)
    }

    async fn decide(
        &mut self,
        call: &CallRecord,
        round: u32,
        sha: &str,
        decision: Decision,
    ) -> Result<(), HostError> {
        self.record(&ApprovalDecided::new(&call.call_id, round, sha, decision))
            .await
    }

    /// Waits until another process decides (or interrupts). Every call of the step that
    /// could run has ended by now: this is a step boundary, where a drive asked to stop
    /// (a worker's shutdown) gives the run back at once instead of waiting for a human.
    /// A read that fails for a while (the database restarting) is retried: the decision
    /// may be a long way off, and nothing was lost meanwhile.
    async fn wait_for_decision(&mut self) -> Result<Option<RunEnd>, HostError> {
        let tail = crate::follow::follow_thread(&self.journal, &self.thread, self.state.last_seq);
        let mut tail = std::pin::pin!(tail);
        loop {
            let cancel = self.opts.cancel.clone();
            let stop = self.opts.stop.clone();
            let next = tokio::select! {
                next = tail.next() => Some(next),
                () = cancel.cancelled() => None,
                () = stop.cancelled() => return Ok(Some(RunEnd::Released)),
            };
            let Some(next) = next else {
                return self.interrupt().await.map(Some);
            };
            match next {
                Some(Ok(event))
                    if matches!(&*event.kind, k::APPROVAL_DECIDED | k::INTERRUPT_REQUESTED) =>
                {
                    self.sync().await?;
                    return Ok(None);
                }
                Some(Ok(_)) => {}
                Some(Err(err)) => return Err(err.into()),
                None => return Ok(None),
            }
        }
    }

    async fn refuse(&mut self, call: &CallRecord, message: String) -> Result<(), HostError> {
        self.record(&ToolRefused {
            call_id: call.call_id.clone(),
            tool: call.name.clone(),
            message,
        })
        .await
    }

    /// Launches `call` in this process's turn; `Some(message)` when the runtime refuses it
    /// (unknown tool, invalid arguments): the model is told, nothing ran.
    async fn launch(&mut self, call: &CallRecord) -> Result<Option<String>, HostError> {
        let args: Value = match serde_json::from_str(&call.arguments) {
            Ok(args) => args,
            Err(err) => return Ok(Some(format!("the arguments are not valid JSON: {err}"))),
        };
        if holds_nul(&args) {
            return Ok(Some(NUL_REFUSAL.into()));
        }
        let launched = self
            .runtime
            .launch_with(
                &self.thread,
                &self.turn,
                &call.call_id,
                &call.name,
                args,
                Deadlines::none(),
            )
            .await;
        match launched {
            Ok(_) => Ok(None),
            Err(RuntimeError::ToolNotAllowed(name)) => Ok(Some(format!("unknown tool `{name}`"))),
            Err(RuntimeError::InvalidArgs { tool, reason }) => {
                Ok(Some(format!("invalid arguments for {tool}: {reason}")))
            }
            Err(err) => Err(err.into()),
        }
    }
}
