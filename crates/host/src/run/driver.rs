//! The step loop of one run, driven by one process.
//!
//! Invariants:
//! - The journal is the only source of truth: the driver acts on [`RunState`] folded from
//!   the thread. It re-reads the thread (`sync`) after the runtime's writes and whenever its
//!   own append conflicts (someone wrote first), so decisions and requests from other
//!   processes are folded before the host writes anything after them.
//! - The host's own events are appended with the journal's expected-version append: a
//!   conflict means someone else wrote; the driver folds what they wrote and retries, unless
//!   another host took the run over (then it stops writing: [`HostError::Superseded`]).
//!   A success proves nothing came between, so the driver folds its own events from the
//!   acknowledgement, as a read would return them, without reading them back; a
//!   deduplicated one (already written, maybe otherwise) is read back instead.
//! - A step with `model.completed` is never requested again; a call with a terminal event
//!   never runs again; a call cut off after it started runs again only if its tool is
//!   retry-safe or a human approves (reason `indeterminate`).

use std::sync::Arc;

use agent_journal::{Appended, Event, Journal, JournalError, NewEvent};
use agent_responses::Client;
use agent_responses::retry::{Retry, RetryPolicy};
use agent_runtime::{Runtime, RuntimeError};
use serde_json::Value;

use super::checkpoint;
use super::events::{
    ContextCompacted, FunctionCall, HostEvent, ModelCompleted, ModelFailed, ModelRequested,
    OutputRejected, PauseReason, RunCompleted, RunFailed, RunInterrupted, RunPaused, SteerApplied,
    SteerDropped, SteerVia,
};
use super::model::{self, Streamed};
use super::model_ws;
use super::owner::Owner;
use super::refusal;
use super::state::{CallProgress, CallRecord, RunSpec, RunState, RunStatus, Transport};
use super::step_request;
use super::{DriveOptions, RunEnd, RunReport};
use crate::error::HostError;
use crate::subagents::{ChildHold, WaitingChild};
use crate::tools::mask_key;

/// `model.failed.code` of a response too large for the journal.
const TOO_LARGE_CODE: &str = "response_too_large_to_journal";

/// Attempts of one step's model call when the stream breaks (the client retries HTTP errors
/// itself before a stream starts).
const MAX_ATTEMPTS: u32 = 3;

mod ambiguous;
mod calls;
pub(crate) mod dropped;
mod held;
mod unanswerable;

use unanswerable::unanswerable;

/// A final answer checked against the run's output schema.
enum Checked {
    /// Accepted: whether it answers an output schema (false for a run without one).
    Accepted(bool),
    /// Rejected and journaled: the model answers again.
    Retry,
    /// Rejected with no retry left: the run failed.
    Failed(RunEnd),
}

/// A step's request as its transport sends it.
enum Outgoing {
    /// HTTP: the encoded body (with `stream: true`).
    Http(bytes::Bytes),
    /// WebSocket: the request, which the session sends as a `response.create`.
    Ws(Box<agent_responses::types::CreateResponse>),
}

pub(crate) struct Driver {
    pub(crate) journal: Journal,
    pub(crate) client: Client,
    pub(crate) runtime: Runtime,
    pub(crate) thread: String,
    /// This process's runtime turn (empty until it is started, before the first step).
    pub(crate) turn: String,
    pub(crate) state: RunState,
    /// The fold's own spec (`state.spec`), shared.
    pub(crate) spec: Arc<RunSpec>,
    pub(crate) me: Owner,
    pub(crate) opts: DriveOptions,
    /// Events folded since this drive began (what the crash test hook counts).
    pub(crate) folded: usize,
    /// Where this run's `spawn_agents` calls hold for children waiting on approvals.
    pub(crate) hold: Arc<ChildHold>,
    /// The children this drive paused for (see [`held`]).
    pub(crate) held_children: Vec<WaitingChild>,
}

impl Driver {
    /// Folds every event after the last one seen; tells the observer.
    pub(crate) async fn sync(&mut self) -> Result<(), HostError> {
        let events = self
            .journal
            .replay(&self.thread, self.state.last_seq)
            .await?;
        self.fold(&events);
        if self.state.status == Some(RunStatus::Running)
            && self.state.driver.as_ref().is_some_and(|d| *d != self.me)
        {
            return Err(HostError::Superseded(self.state.id.clone()));
        }
        Ok(())
    }

    /// Folds events that follow `state.last_seq`; tells the observer.
    fn fold(&mut self, events: &[Event]) {
        for event in events {
            self.state.apply(event);
            self.opts.observer.event(&self.state, event);
        }
        self.folded += events.len();
    }

    /// Appends the host's own events, only on top of what this driver has seen.
    pub(crate) async fn append(&mut self, events: Vec<NewEvent>) -> Result<(), HostError> {
        self.opts.crash_hook().before_append(self.folded);
        loop {
            let expected = (self.state.last_seq > 0).then_some(self.state.last_seq);
            match self
                .journal
                .append_expecting(&self.thread, expected, events.clone())
                .await
            {
                Ok(acks) => match self.written(&events, &acks) {
                    Some(written) => {
                        self.fold(&written);
                        return Ok(());
                    }
                    None => return self.sync().await,
                },
                Err(JournalError::Conflict { .. }) => self.sync().await?,
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// `events` as the journal now holds them, when every one was written by this append
    /// (none deduplicated): exactly what a read after `state.last_seq` would return.
    fn written(&self, events: &[NewEvent], acks: &[Appended]) -> Option<Vec<Event>> {
        if acks.len() != events.len() || acks.iter().any(|a| a.deduplicated) {
            return None;
        }
        let thread: Arc<str> = Arc::from(self.thread.as_str());
        let epoch = self.journal.fence_epoch();
        events
            .iter()
            .zip(acks)
            .map(|(event, ack)| {
                Some(Event {
                    seq: ack.seq,
                    thread: Arc::clone(&thread),
                    kind: Arc::from(event.kind.as_str()),
                    payload: event.payload.to_value()?,
                    at: ack.at,
                    dedup_key: event.dedup_key.clone(),
                    epoch,
                })
            })
            .collect()
    }

    /// The error for an event the driver wrote that the journal already held, unread.
    fn unreadable(&self, event: String) -> HostError {
        HostError::Unreadable {
            run: self.state.id.clone(),
            event,
        }
    }

    /// Appends one of the host's own events.
    async fn record(&mut self, event: &impl HostEvent) -> Result<(), HostError> {
        let event = event.to_event(&self.thread).map_err(HostError::Encode)?;
        self.append(vec![event]).await
    }

    /// Drives the run until it completes, pauses, fails or is interrupted.
    pub(crate) async fn drive(mut self: Box<Self>) -> Result<RunReport, HostError> {
        let end = self.steps().await;
        let end = match end {
            Ok(end) => end,
            Err(err) => {
                self.runtime.close().await;
                return Err(err);
            }
        };
        match &end {
            RunEnd::Interrupted => {
                let _ = self.runtime.cancel(&self.thread, &self.turn).await;
            }
            // Paused for waiting children: the runtime was abandoned with their calls open.
            _ if !self.held_children.is_empty() => {}
            _ => {
                let _ = self.runtime.finish(&self.thread, &self.turn).await;
            }
        }
        self.runtime.close().await;
        Ok(RunReport {
            run_id: self.state.id.clone(),
            end,
            state: self.state,
            waiting_children: self.held_children,
        })
    }

    async fn steps(&mut self) -> Result<RunEnd, HostError> {
        if let Some(problem) = self.unusable_recorded_step() {
            return self.fail(problem).await;
        }
        loop {
            if let Some(end) = self.check_interrupt().await? {
                return Ok(end);
            }
            // A step boundary: every call of the last step has ended or not yet started.
            if self.opts.stop.is_cancelled() {
                return Ok(RunEnd::Released);
            }
            let open_calls: Vec<CallRecord> = self.open_calls().cloned().collect();
            if !open_calls.is_empty() {
                let before = self.state.last_seq;
                if let Some(end) = self.calls(open_calls).await? {
                    return Ok(end);
                }
                // A pass over open calls that journaled nothing would be repeated forever.
                // Where the journal's writer has failed (a full disk, a lost connection),
                // a call's end could not be written: the run stays as the journal has it,
                // for a resume once the journal works again. Otherwise it is a defect.
                if self.state.last_seq == before {
                    if self.journal.writer_failed() {
                        return Err(HostError::Journal(JournalError::WriterFailed(
                            "a call's end could not be journaled; resume the run once the database accepts writes again".into(),
                        )));
                    }
                    // Nothing was journaled, so the fold still holds them open.
                    let ids: Vec<String> = self.open_calls().map(|c| c.call_id.clone()).collect();
                    return self
                        .fail(format!(
                            "the calls {} made no progress (nothing could be journaled for them)",
                            ids.join(", ")
                        ))
                        .await;
                }
                continue;
            }
            // Steers are applied at step boundaries, before the next model call; one that
            // arrives with the final answer continues the run.
            if self.apply_steers().await? {
                if let Some(end) = self.before_step().await? {
                    return Ok(end);
                }
                if let Some(end) = self.model_step().await? {
                    return Ok(end);
                }
                continue;
            }
            let next_step = self.state.next_step();
            let steer_unsent = self
                .state
                .steers
                .iter()
                .any(|st| st.status == super::state::SteerStatus::Applied { step: next_step });
            if let Some(step) = self.state.steps.last()
                && !steer_unsent
                && !self.state.rejected(step.step)
                && !step
                    .output
                    .iter()
                    .any(|i| i.item_type().as_deref() == Some("function_call"))
            {
                let step_no = step.step;
                // An item too deeply nested to read back holds no message text.
                let items: Vec<Value> = step
                    .output
                    .iter()
                    .filter_map(|i| i.to_value().ok())
                    .collect();
                let text = model::output_text(&items);
                let refusal = refusal::refusal_text(&items);
                // An answer the model was cut off in (`max_output_tokens`, a content
                // filter) is not a completed run: it fails, saying why, its text kept in
                // the journal's step.
                if let Some(reason) = step.incomplete.clone() {
                    return self
                        .fail(format!(
                            "the model's final answer is incomplete ({reason}); raise the model's output limit or steer it to a shorter answer"
                        ))
                        .await;
                }
                // A refusal is the answer; under an output schema it fails the run (no
                // retry: the model declined, it did not misformat).
                if let Some(refused) = &refusal
                    && self.spec.output.is_some()
                {
                    return self.fail(refusal::failure(refused)).await;
                }
                let text = refusal::answer_text(text, refusal.as_deref());
                let structured = match self.checked_output(step_no, &text).await? {
                    Checked::Accepted(structured) => structured,
                    Checked::Retry => continue,
                    Checked::Failed(end) => return Ok(end),
                };
                let usage = self.state.usage;
                self.record(&RunCompleted {
                    text: text.clone(),
                    usage,
                    steps: self.state.step_count(),
                    structured,
                    output: None,
                })
                .await?;
                self.drop_pending_steers("the run completed before the steer could be applied")
                    .await?;
                return Ok(RunEnd::Completed { text });
            }
            if let Some(end) = self.before_step().await? {
                return Ok(end);
            }
            if let Some(end) = self.model_step().await? {
                return Ok(end);
            }
        }
    }

    /// What comes before a model step: the budgets, then compaction, whose tokens count
    /// too, so the budgets again: no step is asked for past them.
    async fn before_step(&mut self) -> Result<Option<RunEnd>, HostError> {
        if let Some(end) = self.budget_pause().await? {
            return Ok(Some(end));
        }
        if let Some(end) = self.maybe_compact().await? {
            return Ok(Some(end));
        }
        self.budget_pause().await
    }

    /// The final answer `text` of `step` against the run's output schema, if it has one:
    /// accepted (parsed), or rejected with `output.rejected` while retries are left (the
    /// next request tells the model why), or the run fails.
    async fn checked_output(&mut self, step: u64, text: &str) -> Result<Checked, HostError> {
        let Some(schema) = self.spec.output.as_ref() else {
            return Ok(Checked::Accepted(false));
        };
        let retries = schema.retries;
        let errors = match schema.check(text) {
            Ok(_) => return Ok(Checked::Accepted(true)),
            Err(rejection) => rejection.errors,
        };
        let used = self.state.output_retries_used();
        if used < u64::from(retries) {
            self.record(&OutputRejected {
                step,
                retry: u32::try_from(used + 1).unwrap_or(u32::MAX),
                errors,
            })
            .await?;
            return Ok(Checked::Retry);
        }
        let end = self
            .fail(format!(
                "the final answer does not match the output schema after {retries} {}: {}",
                if retries == 1 { "retry" } else { "retries" },
                errors.join("; ")
            ))
            .await?;
        Ok(Checked::Failed(end))
    }

    /// Compacts the history before the next step when the last request was over the run's
    /// `compact_at` input tokens: the compact endpoint gets exactly the input the next
    /// request would have had (every call answered: a step boundary), and its output,
    /// journaled whole as `context.compacted`, replaces that history from then on. A failed
    /// compaction is logged and the step goes on uncompacted.
    async fn maybe_compact(&mut self) -> Result<Option<RunEnd>, HostError> {
        let Some(limit) = self.spec.compact_at else {
            return Ok(None);
        };
        let next = self.state.next_step();
        let last_input = self.state.steps.last().map_or(0, |s| s.usage.input_tokens);
        let done_here = self
            .state
            .compaction
            .as_ref()
            .is_some_and(|c| c.before_step == next);
        if last_input < limit || done_here {
            return Ok(None);
        }
        let input =
            step_request::compaction_input(&self.state, &self.spec).map_err(HostError::Request)?;
        let replaced = input.len();
        let compact = agent_responses::types::CompactRequest {
            model: self.spec.model.clone(),
            input: Some(agent_responses::types::Input::Items(input)),
            instructions: self.spec.instructions.clone().map(Some),
            ..Default::default()
        };
        // Bounded like a silent model stream, and stopped by an interrupt as a step is.
        let bound = self.client.config().stream_idle_timeout;
        let cancel = self.opts.cancel.clone();
        let answered = tokio::select! {
            answered = tokio::time::timeout(bound, self.client.compact(&compact)) => answered,
            () = cancel.cancelled() => return self.interrupt().await.map(Some),
        };
        let skip = |why: String| {
            tracing::warn!(
                step = next,
                "compaction failed ({}); the step goes on uncompacted",
                crate::tools::mask_key(why)
            );
            Ok(None)
        };
        let compacted = match answered {
            Ok(Ok(compacted)) => compacted,
            Ok(Err(err)) => return skip(err.to_string()),
            Err(_) => return skip(format!("no answer within {bound:?}")),
        };
        let output: Vec<Value> = compacted
            .output
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()
            .map_err(HostError::Encode)?;
        // What the endpoint returns is the user's messages and one compaction item; anything
        // else (a function call with no output, a stray output) would be journaled as the
        // history of every later request, which the API would then refuse for good.
        if let Some(odd) = output.iter().find_map(|item| {
            let kind = item
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("message");
            (kind != "message" && kind != "compaction").then(|| kind.to_string())
        }) {
            return skip(format!("its output holds a `{odd}` item"));
        }
        let covered: Vec<String> = self
            .state
            .steers
            .iter()
            .filter(|s| matches!(s.status, super::state::SteerStatus::Applied { .. }))
            .map(|s| s.id.clone())
            .collect();
        let mut compacted = ContextCompacted {
            step: next,
            items_replaced: replaced as u64,
            response_id: compacted.id,
            output,
            covered_steers: covered,
            usage: compacted
                .usage
                .flatten()
                .map(|u| serde_json::to_value(u).map_err(HostError::Encode))
                .transpose()?,
            checkpoint: None,
            carries_checkpoint: false,
        };
        // The checkpoint is the fold this event is appended on: rebuilt after a conflict.
        loop {
            let runtime = self.runtime.checkpoint(&self.thread);
            compacted.checkpoint = checkpoint::take(&self.state, next, runtime);
            let event = compacted
                .to_event(&self.thread)
                .map_err(HostError::Encode)?;
            // Too large to journal (the output, with the checkpoint): as if it had failed,
            // rather than a journal error on every resume.
            if event
                .payload
                .as_text()
                .is_some_and(|t| t.len() > agent_journal::MAX_PAYLOAD_BYTES)
            {
                return skip(format!(
                    "its output is over the journal's {} bytes",
                    agent_journal::MAX_PAYLOAD_BYTES
                ));
            }
            let expected = (self.state.last_seq > 0).then_some(self.state.last_seq);
            match self
                .journal
                .append_expecting(&self.thread, expected, vec![event])
                .await
            {
                Ok(_) => return self.sync().await.map(|()| None),
                Err(JournalError::Conflict { .. }) => self.sync().await?,
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// Streams one attempt of a step over the run's transport; over WebSocket, steers
    /// requested meanwhile are sent at once (see [`model_ws`]).
    async fn stream(
        &self,
        request: Outgoing,
        on_text: &(dyn Fn(&str) + Send + Sync),
    ) -> (Streamed, Option<model_ws::Steered>) {
        match request {
            Outgoing::Ws(request) => {
                let source = model_ws::SteerSource {
                    journal: &self.journal,
                    thread: &self.thread,
                    state: &self.state,
                };
                // Boxed: the session and its steering state would otherwise sit inline in
                // every step's future.
                Box::pin(model_ws::stream(&self.client, &request, source, on_text)).await
            }
            Outgoing::Http(body) => (model::stream(&self.client, body, on_text).await, None),
        }
    }

    /// `steer.applied` for each steer a successor response carries (applied at `step`, the
    /// step whose output is the successor's), after moving the runtime's revision on as a
    /// boundary steer does.
    async fn steered_events(
        &mut self,
        step: u64,
        steered: &model_ws::Steered,
    ) -> Result<Vec<NewEvent>, HostError> {
        let mut events = Vec::new();
        for (id, text) in &steered.steers {
            let revision = self.runtime.steer(&self.thread, &self.turn, text).await?;
            let applied = SteerApplied {
                id: id.clone(),
                step,
                revision,
                via: Some(SteerVia::ResponseSteer),
                response_id: Some(steered.parent_response_id.clone()),
            };
            events.push(applied.to_event(&self.thread).map_err(HostError::Encode)?);
        }
        Ok(events)
    }

    /// Applies every pending steer before the next step: the runtime's revision moves on
    /// (results launched before it would come back stale) and `steer.applied` records the
    /// step whose request carries the steer. Returns whether any was applied.
    async fn apply_steers(&mut self) -> Result<bool, HostError> {
        let pending: Vec<(String, String)> = self
            .state
            .pending_steers()
            .map(|s| (s.id.clone(), s.text.clone()))
            .collect();
        let step = self.state.next_step();
        for (id, text) in &pending {
            let revision = self.runtime.steer(&self.thread, &self.turn, text).await?;
            self.record(&SteerApplied {
                id: id.clone(),
                step,
                revision,
                via: None,
                response_id: None,
            })
            .await?;
        }
        Ok(!pending.is_empty())
    }

    /// Ends every steer still pending with `steer.dropped` (the run is over).
    async fn drop_pending_steers(&mut self, reason: &str) -> Result<(), HostError> {
        let pending: Vec<String> = self.state.pending_steers().map(|s| s.id.clone()).collect();
        for id in pending {
            self.record(&SteerDropped {
                id,
                reason: reason.to_string(),
            })
            .await?;
        }
        Ok(())
    }

    /// Why the calls of a response cannot be answered, if they cannot: every call must be a
    /// `function_call` (the only tools the host offers), with a `call_id` of its own,
    /// unique in the run, for its output to be matched, and short enough for the journal's
    /// dedup keys that carry it ([`max_call_id_bytes`]). Checked before the response is
    /// journaled: a recorded step is never asked again, so one that cannot be answered
    /// would fail every resume the same way.
    fn unusable_calls(&self, output: &[Value]) -> Option<String> {
        let mut seen = std::collections::HashSet::new();
        for item in output {
            if let Some(problem) = unanswerable(item, &self.turn) {
                return Some(problem);
            }
            let Some(call) = FunctionCall::of(item) else {
                continue;
            };
            if !seen.insert(call.call_id) || self.state.call(call.call_id).is_some() {
                return Some(format!("the model reused the call_id {}", call.call_id));
            }
        }
        None
    }

    /// Why the run's last recorded step cannot go on, if it cannot: a journal written
    /// before [`unusable_calls`](Self::unusable_calls) refused such a response may hold a
    /// step with a call of another kind than `function_call`, or an unfinished call whose
    /// `call_id` no dedup key can carry. Asked again on every resume, it would fail the
    /// same way each time (a request the API refuses, a journal error); the run fails
    /// instead, saying why.
    fn unusable_recorded_step(&self) -> Option<String> {
        let step = self.state.steps.last()?;
        let open: std::collections::HashSet<&str> =
            self.open_calls().map(|c| c.call_id.as_str()).collect();
        step.output
            .iter()
            .filter_map(|raw| raw.to_value().ok())
            .find_map(|item| {
                let open_call = FunctionCall::of(&item).is_some_and(|c| open.contains(c.call_id));
                let foreign = FunctionCall::unanswerable_type(&item).is_some();
                (open_call || foreign)
                    .then(|| unanswerable(&item, &self.turn))
                    .flatten()
            })
            .map(|problem| {
                format!(
                    "{problem} (in step {}, recorded before such a response was refused)",
                    step.step
                )
            })
    }

    /// The calls of the last step that have not ended.
    fn open_calls(&self) -> impl Iterator<Item = &CallRecord> {
        let last = self.state.steps.last().map(|s| s.step);
        self.state
            .calls
            .iter()
            .filter(move |c| Some(c.step) == last && !matches!(c.progress, CallProgress::Done(_)))
    }

    /// [`unusable_calls`](Self::unusable_calls) for the call ids this fold no longer holds:
    /// those of the steps before its latest checkpoint. A call id reused from there would
    /// meet its old call's events by their dedup keys (its scheduling in this drive, its
    /// refusal, its first approval round), which then stand for the new call: nothing new
    /// would be journaled and the call would never end. Only a run with such steps pays
    /// for the probes, one indexed read per key.
    async fn reused_before_checkpoint(
        &self,
        output: &[Value],
    ) -> Result<Option<String>, HostError> {
        if self.state.elided().calls == 0 {
            return Ok(None);
        }
        for call in output.iter().filter_map(FunctionCall::of) {
            let call_id = call.call_id;
            let keys = [
                agent_runtime::events::scheduled_key(&self.turn, call_id),
                crate::run::kinds::refused_key(call_id),
                crate::run::kinds::approval_request_key(call_id, 0),
            ];
            for key in keys {
                if self
                    .journal
                    .find_by_dedup_key(&self.thread, &key)
                    .await?
                    .is_some()
                {
                    return Ok(Some(format!(
                        "the model reused the call_id {call_id} (of a call before the history was compacted)"
                    )));
                }
            }
        }
        Ok(None)
    }

    /// Ends the run as failed (`run.failed`): nothing more can be done for it.
    async fn fail(&mut self, error: String) -> Result<RunEnd, HostError> {
        // The end as reported matches the end as journaled (see `events::clean`).
        let error = mask_key(error);
        self.record(&RunFailed {
            error: error.clone(),
            usage: self.state.usage,
        })
        .await?;
        self.drop_pending_steers("the run failed").await?;
        Ok(RunEnd::Failed { error })
    }

    async fn pause(&mut self, reason: PauseReason, detail: String) -> Result<RunEnd, HostError> {
        let detail = mask_key(detail);
        let paused = RunPaused { reason, detail };
        self.record(&paused).await?;
        Ok(RunEnd::Paused {
            reason: paused.reason,
            detail: paused.detail,
        })
    }

    async fn budget_pause(&mut self) -> Result<Option<RunEnd>, HostError> {
        let Some(budgets) = self.state.budgets() else {
            return Ok(None);
        };
        let steps = self.state.step_count();
        if steps >= budgets.max_steps {
            let detail = format!(
                "{steps} of {} steps used; resume with a higher --max-steps",
                budgets.max_steps
            );
            return self.pause(PauseReason::MaxSteps, detail).await.map(Some);
        }
        if let Some(max) = budgets.max_tokens
            && self.state.usage.total_tokens >= max
        {
            let detail = format!(
                "{} of {max} tokens used; resume with a higher --max-tokens",
                self.state.usage.total_tokens
            );
            return self.pause(PauseReason::MaxTokens, detail).await.map(Some);
        }
        Ok(None)
    }

    async fn check_interrupt(&mut self) -> Result<Option<RunEnd>, HostError> {
        if self.opts.cancel.is_cancelled() || self.state.interrupt_requested.is_some() {
            return self.interrupt().await.map(Some);
        }
        Ok(None)
    }

    /// Cancels running tools (their terminal events are journaled by the runtime), then
    /// records `run.interrupted`.
    async fn interrupt(&mut self) -> Result<RunEnd, HostError> {
        self.sync().await?;
        if let Some(paused) = self.pause_for_children().await? {
            return Ok(paused);
        }
        let running: Vec<String> = self
            .state
            .calls
            .iter()
            .filter(|c| matches!(&c.progress, CallProgress::Scheduled { turn, .. } if *turn == self.turn))
            .map(|c| c.call_id.clone())
            .collect();
        match self.runtime.cancel(&self.thread, &self.turn).await {
            Ok(()) | Err(RuntimeError::TurnNotActive { .. }) => {}
            Err(err) => return Err(err.into()),
        }
        self.sync().await?;
        self.record(&RunInterrupted { cancelled: running }).await?;
        Ok(RunEnd::Interrupted)
    }

    /// Records the next `model.requested` attempt of `step`; returns its number.
    async fn request_attempt(
        &mut self,
        step: u64,
        digest: &step_request::BodyDigest,
    ) -> Result<u32, HostError> {
        // Saturating: the journal's count is read as written.
        let attempt = self
            .state
            .attempts
            .get(&step)
            .copied()
            .unwrap_or(0)
            .saturating_add(1);
        self.record(&ModelRequested {
            step,
            attempt,
            model: self.spec.model.clone(),
            request_sha256: digest.sha256.clone(),
        })
        .await?;
        // Not folded: the journal held this attempt already (deduplicated) in an event the
        // fold could not read. Asking anyway would do so for ever.
        if self.state.attempts.get(&step).is_none_or(|&n| n < attempt) {
            return Err(
                self.unreadable(format!("model.requested of step {step}, attempt {attempt}"))
            );
        }
        Ok(attempt)
    }

    /// The bytes of the request whose `digest` was recorded. The request is a function of
    /// what only this driver writes (steps, call results, applied steers, compactions), so
    /// what it folded since cannot change it; the check keeps the recorded hash honest.
    fn outgoing(&self, digest: &step_request::BodyDigest) -> Result<Outgoing, HostError> {
        let body = step_request::encode_sized(&self.state, &self.spec, true, digest.len)
            .map_err(HostError::Request)?;
        if body.len() != digest.len || super::digest::sha256_hex(&body) != digest.sha256 {
            return Err(HostError::Internal(
                "the run's request changed while it was being recorded".into(),
            ));
        }
        match self.spec.transport {
            Transport::Ws => {
                let request = serde_json::from_slice(&body)
                    .map_err(|e| HostError::Request(format!("unreadable request: {e}")))?;
                Ok(Outgoing::Ws(Box::new(request)))
            }
            Transport::Http => Ok(Outgoing::Http(bytes::Bytes::from(body))),
        }
    }

    /// One model call: `model.requested`, the stream, then `model.completed` or, once the
    /// attempts are used up, `model.failed` and a pause.
    async fn model_step(&mut self) -> Result<Option<RunEnd>, HostError> {
        let step = self.state.next_step();
        // The hash is taken in a pass that keeps nothing; each attempt encodes the bytes
        // once it is recorded and lets go of them once they are sent. A run waiting on the
        // journal or on the model holds no copy of its history.
        let digest = step_request::request_digest(&self.state, &self.spec, true)
            .map_err(HostError::Request)?;
        let mut attempt = self.request_attempt(step, &digest).await?;
        loop {
            let request = self.outgoing(&digest)?;
            let observer = Arc::clone(&self.opts.observer);
            let on_text = move |delta: &str| observer.text_delta(delta);
            let cancel = self.opts.cancel.clone();
            let streamed = tokio::select! {
                streamed = self.stream(request, &on_text) => Some(streamed),
                () = cancel.cancelled() => None,
            };
            let Some((streamed, steered)) = streamed else {
                return self.interrupt().await.map(Some);
            };
            match streamed {
                Streamed::Response(response) if response.status.as_deref() != Some("failed") => {
                    let incomplete_reason = response.incomplete_reason();
                    let model::Final {
                        id,
                        status,
                        output,
                        usage,
                        ..
                    } = *response;
                    let usage = usage.unwrap_or(Value::Null);
                    if let Some(problem) = self.unusable_calls(&output) {
                        return self.fail(problem).await.map(Some);
                    }
                    if let Some(problem) = self.reused_before_checkpoint(&output).await? {
                        return self.fail(problem).await.map(Some);
                    }
                    let mut events = Vec::new();
                    if let Some(steered) = &steered {
                        events = self.steered_events(step, steered).await?;
                    }
                    let completed = ModelCompleted {
                        step,
                        attempt,
                        response_id: id.into(),
                        status: status.map(Into::into),
                        usage: &usage,
                        output: &output,
                        steered: steered.as_ref().map(model_ws::steered_payload),
                        incomplete_reason: incomplete_reason.map(Into::into),
                    };
                    // Relaxed: no call's effect and no request follows it before the next
                    // durable event (a call's start, the next request, the run's end), whose
                    // commit makes it durable too. A steer applied with it keeps the append
                    // durable.
                    events.push(
                        completed
                            .to_event(&self.thread)
                            .map_err(HostError::Encode)?
                            .relaxed(),
                    );
                    // One append: a steer applied mid-response and the step that carries it
                    // are journaled together or not at all.
                    let recorded = self.append(events).await;
                    match recorded {
                        // As for the request: a step the journal held already, unread.
                        Ok(()) if !self.state.steps.iter().any(|s| s.step == step) => {
                            return Err(self.unreadable(format!("model.completed of step {step}")));
                        }
                        Ok(()) => return Ok(None),
                        // Over the journal's payload limit: it can never be recorded, so
                        // asking again would pay for it again and again.
                        // What the step cost is journaled all the same (`model.failed` with
                        // its usage), so the tokens paid for are counted.
                        Err(HostError::Journal(JournalError::InvalidInput { reason, .. })) => {
                            let message = format!(
                                "the model's response cannot be journaled: {reason}; the text shown above was not recorded"
                            );
                            self.record(&ModelFailed {
                                step,
                                attempt,
                                status: None,
                                error_type: None,
                                code: Some(TOO_LARGE_CODE.into()),
                                message: message.clone(),
                                error: None,
                                retryable: false,
                                usage: Some(usage),
                            })
                            .await?;
                            return self.fail(message).await.map(Some);
                        }
                        Err(err) => return Err(err),
                    }
                }
                Streamed::Response(response) => {
                    let error = response.error().cloned();
                    let message = match &error {
                        Some(e) => e.get("message").and_then(Value::as_str).unwrap_or_default(),
                        None => "the response failed",
                    }
                    .to_string();
                    self.record(&ModelFailed {
                        step,
                        attempt,
                        status: None,
                        error_type: None,
                        code: None,
                        message: message.clone(),
                        error,
                        retryable: false,
                        usage: response.usage.clone(),
                    })
                    .await?;
                    return self.pause(PauseReason::ModelError, message).await.map(Some);
                }
                Streamed::Failed(err) => {
                    let failed = model::failure(step, attempt, &err);
                    // Every retry waits the client's backoff, whatever failed (a status, a
                    // broken connection, a cut stream); an error no retry can fix is not
                    // retried at all.
                    let policy = RetryPolicy {
                        max_retries: MAX_ATTEMPTS - 1,
                        ..self.client.config().retry
                    };
                    // What the HTTP client re-sent already (a status it retries, a
                    // connection it could not make) it has given up on: sending it again
                    // here would only multiply its attempts. A stream cut after its answer
                    // began is the client's to report and the host's to retry, and so is
                    // every failure over WebSocket, where the client retries nothing.
                    let client_retried = self.spec.transport == Transport::Http
                        && err.retries_taken().is_none_or(|n| n > 0);
                    if let Some(wait) = policy
                        .backoff(&err, attempt - 1)
                        .filter(|_| !client_retried)
                    {
                        tracing::warn!(step, attempt, error = %crate::tools::mask_key(err.to_string()), ?wait, "model call failed; trying again");
                        let cancel = self.opts.cancel.clone();
                        tokio::select! {
                            () = tokio::time::sleep(wait) => {}
                            () = cancel.cancelled() => return self.interrupt().await.map(Some),
                        }
                        attempt = self.request_attempt(step, &digest).await?;
                        continue;
                    }
                    self.record(&failed).await?;
                    // The API answered with a status that refuses the request itself: the
                    // step failed (an answer it could not decode pauses as before). A status
                    // that asks to come back later (408, 409, 429, 5xx) is not a refusal,
                    // also when it asks for longer than the client waits.
                    let refused = err.api().filter(|api| {
                        api.status.is_some_and(|status| {
                            (400..500).contains(&status) && !matches!(status, 408 | 409 | 429)
                        }) && api.retry() == Retry::Never
                    });
                    if let Some(api) = refused {
                        let message = api.message.clone();
                        return self
                            .pause(PauseReason::ModelRejected, message)
                            .await
                            .map(Some);
                    }
                    return self
                        .pause(PauseReason::ModelError, err.to_string())
                        .await
                        .map(Some);
                }
            }
        }
    }
}
