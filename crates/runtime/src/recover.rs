//! Rebuilding a runtime from its journal after a restart or a crash.
//!
//! Policy (at-most-once unless the tool says otherwise):
//! - A turn that was running when the process died is ended with `turn.interrupted`, so a
//!   new turn can start on its thread.
//! - A scheduled call without a terminal event gets `tool.interrupted` (with `started`
//!   telling whether it had begun), unless its tool is retry-safe: then it runs again and
//!   journals its terminal event as usual.

use std::collections::HashMap;
use std::sync::Arc;

use agent_journal::{Event, Journal, NewEvent};
use serde_json::{Value, json};

use crate::error::RuntimeError;
use crate::events;
use crate::options::RuntimeOptions;
use crate::outcome::Outcome;
use crate::runtime::{Job, JobEntry, JobKey, Runtime, TurnState, TurnStatus};
use crate::settlement::Settlement;

/// What recovery found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    pub threads: usize,
    pub events: usize,
    pub turns_interrupted: usize,
    pub calls_interrupted: usize,
    pub calls_retried: usize,
}

#[derive(Debug)]
struct CallRecord {
    turn: String,
    call_id: String,
    name: String,
    args: Value,
    revision: u64,
    signature: String,
    started: bool,
    terminal: bool,
}

#[derive(Debug)]
struct TurnRecord {
    id: String,
    revision: u64,
    ended: Option<TurnStatus>,
}

/// A thread's journal folded into turns and calls.
#[derive(Debug, Default)]
struct ThreadFold {
    last_turn: Option<TurnRecord>,
    /// Open turns other than the last (only possible in a journal written by a buggy or
    /// concurrent writer); they are interrupted too.
    older_open: Vec<TurnRecord>,
    calls: Vec<CallRecord>,
    index: HashMap<(String, String), usize>,
}

fn str_field<'a>(event: &'a Event, field: &str) -> Result<&'a str, RuntimeError> {
    event
        .payload
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| RuntimeError::CorruptEvent {
            seq: event.seq,
            kind: event.kind.to_string(),
            reason: format!("missing string field `{field}`"),
        })
}

impl ThreadFold {
    fn apply(&mut self, event: &Event) -> Result<(), RuntimeError> {
        let kind: &str = &event.kind;
        match kind {
            events::TURN_STARTED => {
                let id = str_field(event, "turn_id")?.to_string();
                if let Some(prev) = self.last_turn.take()
                    && prev.ended.is_none()
                {
                    self.older_open.push(prev);
                }
                self.last_turn = Some(TurnRecord {
                    id,
                    revision: 0,
                    ended: None,
                });
            }
            events::STEER_ACCEPTED => {
                let turn = str_field(event, "turn_id")?;
                let revision = event.payload.get("revision").and_then(Value::as_u64);
                if let (Some(t), Some(revision)) = (self.last_turn.as_mut(), revision)
                    && t.id == turn
                {
                    t.revision = revision;
                }
            }
            events::TURN_COMPLETED | events::TURN_CANCELLED | events::TURN_INTERRUPTED => {
                let turn = str_field(event, "turn_id")?;
                let status = match kind {
                    events::TURN_COMPLETED => TurnStatus::Completed,
                    events::TURN_CANCELLED => TurnStatus::Cancelled,
                    _ => TurnStatus::Interrupted,
                };
                if let Some(t) = self.last_turn.as_mut()
                    && t.id == turn
                {
                    t.ended = Some(status);
                }
                self.older_open.retain(|t| t.id != turn);
            }
            events::TOOL_SCHEDULED => {
                let turn = str_field(event, "turn_id")?.to_string();
                let call_id = str_field(event, "call_id")?.to_string();
                let name = str_field(event, "name")?.to_string();
                let args = event.payload.get("args").cloned().unwrap_or(Value::Null);
                let revision = event
                    .payload
                    .get("revision")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                self.index
                    .insert((turn.clone(), call_id.clone()), self.calls.len());
                self.calls.push(CallRecord {
                    turn,
                    call_id,
                    name,
                    args,
                    revision,
                    signature: event
                        .payload
                        .get("signature")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    started: false,
                    terminal: false,
                });
            }
            events::TOOL_STARTED => {
                if let Some(i) = self.lookup(event) {
                    self.calls[i].started = true;
                }
            }
            _ if events::TOOL_TERMINALS.contains(&kind) => {
                if let Some(i) = self.lookup(event) {
                    self.calls[i].terminal = true;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn lookup(&self, event: &Event) -> Option<usize> {
        let turn = event.payload.get("turn_id")?.as_str()?;
        let call = event.payload.get("call_id")?.as_str()?;
        self.index
            .get(&(turn.to_string(), call.to_string()))
            .copied()
    }
}

impl Runtime {
    /// Opens a runtime over `journal`, rebuilding its state: the latest turn of every
    /// thread (with its revision), interrupted turns and calls per the module policy, and
    /// retry-safe calls running again. Use it for a fresh journal too (it is then cheap).
    ///
    /// One runtime at a time may own a journal's threads.
    pub async fn recover(
        journal: Journal,
        options: RuntimeOptions,
    ) -> Result<Runtime, RuntimeError> {
        let runtime = Runtime::empty(journal, options);
        let report = runtime.recover_all().await?;
        if report.turns_interrupted + report.calls_interrupted + report.calls_retried > 0 {
            tracing::info!(?report, "recovered runtime state from the journal");
        }
        *runtime
            .inner
            .last_recovery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = report;
        Ok(runtime)
    }

    /// What the recovery that built this runtime found and did.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.inner
            .last_recovery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    async fn recover_all(&self) -> Result<RecoveryReport, RuntimeError> {
        let journal = self.inner.journal.clone();
        let mut report = RecoveryReport::default();
        for thread in journal.threads().await? {
            report.threads += 1;
            let mut fold = ThreadFold::default();
            let events = journal.replay(&thread, 0).await?;
            report.events += events.len();
            for event in &events {
                fold.apply(event)?;
            }
            drop(events);
            self.recover_thread(&thread, fold, &mut report).await?;
        }
        Ok(report)
    }

    async fn recover_thread(
        &self,
        thread: &str,
        fold: ThreadFold,
        report: &mut RecoveryReport,
    ) -> Result<(), RuntimeError> {
        let journal = &self.inner.journal;
        let mut retry = Vec::new();
        let mut terminals = Vec::new();
        for call in fold.calls.into_iter().filter(|c| !c.terminal) {
            let tool = self.inner.options.tools.get(&call.name).cloned();
            match tool {
                Some(tool) if tool.retry_safe() => retry.push((call, tool)),
                _ => {
                    let outcome = Outcome::interrupted(call.revision, call.started);
                    terminals.push(outcome.terminal_event(thread, &call.turn, &call.call_id)?);
                    report.calls_interrupted += 1;
                }
            }
        }
        let mut open: Vec<&TurnRecord> = fold.older_open.iter().collect();
        if let Some(last) = fold.last_turn.as_ref().filter(|t| t.ended.is_none()) {
            open.push(last);
        }
        for turn in open {
            terminals.push(
                NewEvent::new(
                    thread,
                    events::TURN_INTERRUPTED,
                    json!({ "turn_id": turn.id, "revision": turn.revision }),
                )
                .with_dedup_key(events::end_key(&turn.id)),
            );
            report.turns_interrupted += 1;
        }
        journal.append_batch(terminals).await?;
        if let Some(last) = fold.last_turn {
            self.inner.state().turns.insert(
                thread.to_string(),
                TurnState {
                    id: last.id,
                    revision: last.revision,
                    status: last.ended.unwrap_or(TurnStatus::Interrupted),
                    cancel: self.inner.root.child_token(),
                },
            );
        }
        for (call, tool) in retry {
            let signature = call.signature;
            let key = JobKey {
                thread: thread.to_string(),
                turn: call.turn,
                call_id: call.call_id,
            };
            let (settlement, settler) = Settlement::new();
            let key = Arc::new(key);
            let cancel = self.inner.root.child_token();
            let job = Job {
                inner: self.inner.clone(),
                key: Arc::clone(&key),
                tool,
                args: call.args,
                revision: call.revision,
                deadlines: self.inner.options.deadlines,
                cancel,
                done: settler,
            };
            let mut st = self.inner.state();
            let abort = job.spawn();
            st.jobs.insert(
                key,
                JobEntry {
                    signature,
                    done: settlement,
                    abort: Some(abort),
                },
            );
            report.calls_retried += 1;
        }
        Ok(())
    }
}
