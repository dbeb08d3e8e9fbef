//! Rebuilding a runtime from its journal after a restart or a crash: the whole journal
//! ([`Runtime::recover`]), or one thread taken over from a process that stopped driving it
//! ([`Runtime::adopt`]). Both fold each thread's events the same way ([`ThreadFold`]) and
//! settle what they find with the same code; they differ only in whether retry-safe calls
//! run again here.
//!
//! Policy (at-most-once unless the tool says otherwise):
//! - A turn that was running when the process died is ended with `turn.interrupted`, so a
//!   new turn can start on its thread.
//! - A scheduled call without a terminal event gets `tool.interrupted` (with `started`
//!   telling whether it had begun), unless its tool is retry-safe and still takes its
//!   arguments: then it runs again and journals its terminal event as usual. [`Runtime::adopt`] re-runs nothing: every
//!   unfinished call is interrupted and listed, and the caller decides.
//! - The terminal events of one thread are appended in one batch, expecting the last seq
//!   the fold read: a write by anyone else in between (another process steering, or still
//!   driving the thread) makes the fold start over instead of settling a stale picture.

use std::collections::HashMap;
use std::sync::Arc;

use agent_journal::{Event, Journal, JournalError, NewEvent};
use serde_json::{Value, json};

use crate::checkpoint::ThreadCheckpoint;
use crate::error::RuntimeError;
use crate::events;
use crate::options::RuntimeOptions;
use crate::outcome::Outcome;
use crate::runtime::{Job, JobEntry, JobKey, Runtime, RuntimeTurnStatus, TurnState};
use crate::settlement::Settlement;
use crate::tool::{Tool, check_args};

/// What recovery (or adoption) found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    /// Threads whose events were read.
    pub threads: usize,
    /// Journal events read.
    pub events: usize,
    /// Turns found running and ended with `turn.interrupted`.
    pub turns_interrupted: usize,
    /// Equals `interrupted.len()`.
    pub calls_interrupted: usize,
    /// Retry-safe calls started again instead of being interrupted.
    pub calls_retried: usize,
    /// The calls that got `tool.interrupted` here, in the order they were scheduled.
    pub interrupted: Vec<InterruptedCall>,
}

/// A scheduled call without a terminal event that recovery or adoption ended with
/// `tool.interrupted`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InterruptedCall {
    /// The turn of the call.
    pub turn: String,
    /// The call's id within its turn.
    pub call_id: String,
    /// The tool's name, as scheduled.
    pub name: String,
    /// Whether the call had left the queue (`tool.started`): its effect may have happened.
    pub started: bool,
}

/// Whether recovery runs retry-safe calls again or leaves every unfinished call to the
/// caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RetrySafe {
    Rerun,
    Interrupt,
}

/// How often a thread is folded again when its terminal events conflict with a write
/// made in between, before the conflict is returned.
const FOLD_ATTEMPTS: usize = 8;

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
    ended: Option<RuntimeTurnStatus>,
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
    /// Every turn started in the fold: a turn starts once, so a second `turn.started` of
    /// one (a journal whose events were copied twice) changes nothing.
    turns: std::collections::HashSet<String>,
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

/// Where a thread's fold starts: its first event, or a checkpoint taken at `seq`.
#[derive(Debug, Default)]
struct Start {
    checkpoint: Option<ThreadCheckpoint>,
    seq: i64,
}

impl ThreadFold {
    /// An empty fold, or the fold `checkpoint` stands for (no calls: none was unfinished).
    fn starting_at(checkpoint: Option<&ThreadCheckpoint>) -> ThreadFold {
        let last_turn = checkpoint
            .and_then(|c| c.turn.as_ref())
            .map(|t| TurnRecord {
                id: t.id.clone(),
                revision: t.revision,
                // A checkpoint says how a turn ended; "running" or "ending" (a hand-made or
                // corrupted one) is no end: the turn is open and gets interrupted.
                ended: t.ended.filter(|s| {
                    !matches!(s, RuntimeTurnStatus::Running | RuntimeTurnStatus::Ending)
                }),
            });
        ThreadFold {
            turns: last_turn.iter().map(|t| t.id.clone()).collect(),
            last_turn,
            ..ThreadFold::default()
        }
    }

    fn apply(&mut self, event: &Event) -> Result<(), RuntimeError> {
        let kind: &str = &event.kind;
        match kind {
            events::TURN_STARTED => {
                let id = str_field(event, "turn_id")?.to_string();
                if !self.turns.insert(id.clone()) {
                    return Ok(());
                }
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
                if let Some(t) = self.last_turn.as_mut()
                    && t.id == turn
                {
                    t.ended = events::end_status(kind);
                }
                self.older_open.retain(|t| t.id != turn);
            }
            events::TOOL_SCHEDULED => {
                let turn = str_field(event, "turn_id")?.to_string();
                let call_id = str_field(event, "call_id")?.to_string();
                let name = str_field(event, "name")?.to_string();
                if self.index.contains_key(&(turn.clone(), call_id.clone())) {
                    // Scheduled once (its `sched:` key): a second copy of the event is no
                    // second call, and must not hide the first one's terminal event.
                    return Ok(());
                }
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
    /// One runtime at a time may own a journal's threads. A process that drives only some
    /// threads of a shared journal uses [`open`](Self::open) and [`adopt`](Self::adopt).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the runtime being built; what was journaled so far stays
    /// (terminal events of the threads already recovered) and retry-safe calls already
    /// running again go on in their tasks, unowned. Recovering again is harmless: every
    /// terminal event is written at most once.
    pub async fn recover(
        journal: Journal,
        options: RuntimeOptions,
    ) -> Result<Runtime, RuntimeError> {
        let runtime = Runtime::open(journal, options);
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

    /// Takes over `thread` after whoever drove it before stopped: every scheduled call of the
    /// thread without a terminal event gets `tool.interrupted` (its `started` flag kept;
    /// retry-safe calls are NOT re-run here: the caller decides, from
    /// [`RecoveryReport::interrupted`]), every open turn gets `turn.interrupted`, and the
    /// thread's latest turn (id, revision, status) is loaded so [`start`](Self::start) works.
    /// Touches no other thread.
    ///
    /// Idempotent: adopting a settled thread writes nothing and reloads its latest turn.
    /// Refused with [`RuntimeError::TurnActive`] while this runtime itself drives a turn of
    /// `thread` (one whose end it could not journal included) or runs one of its calls.
    /// The terminal events are appended expecting the last seq read, so a concurrent write
    /// to the thread makes adoption read it again rather than interrupt a turn that
    /// another process just started.
    ///
    /// # Cancel safety
    ///
    /// Runs to completion in a task of its own: dropping the future does not stop it (the
    /// thread is then adopted, or failed to be, as if the caller had waited); the report is
    /// lost. Adopting again is harmless.
    pub async fn adopt(&self, thread: &str) -> Result<RecoveryReport, RuntimeError> {
        self.adopt_from(thread, Vec::new()).await
    }

    /// [`adopt`](Self::adopt), given the events of `thread` the caller already read:
    /// `prefix` must be the thread's events from its first one on, in seq order (what
    /// `journal.replay(thread, 0)` returned at some point); only the events after its last
    /// one are read. A caller that just folded the thread itself (a host resuming a long
    /// run) so reads it once instead of twice. If the thread moved meanwhile and the
    /// terminal append conflicts, the retry reads the whole thread again.
    ///
    /// # Cancel safety
    ///
    /// As [`adopt`](Self::adopt).
    pub async fn adopt_from(
        &self,
        thread: &str,
        prefix: Vec<Event>,
    ) -> Result<RecoveryReport, RuntimeError> {
        self.adopt_starting(thread, Start::default(), prefix).await
    }

    /// [`adopt`](Self::adopt), starting from `checkpoint`, which the caller took (with
    /// [`checkpoint`](Self::checkpoint)) when the thread's last event was `seq`: only the
    /// events after `seq` are folded. `after` are the first of those, as the caller read
    /// them (the rest are read here). A long thread is so adopted in the time its events
    /// since the checkpoint take, not its whole history; the outcome is the same as
    /// [`adopt`](Self::adopt)'s whenever the checkpoint's invariant held.
    ///
    /// # Cancel safety
    ///
    /// As [`adopt`](Self::adopt).
    pub async fn adopt_after(
        &self,
        thread: &str,
        checkpoint: ThreadCheckpoint,
        seq: i64,
        after: Vec<Event>,
    ) -> Result<RecoveryReport, RuntimeError> {
        let start = Start {
            checkpoint: Some(checkpoint),
            seq,
        };
        self.adopt_starting(thread, start, after).await
    }

    /// Adopts `thread` from `start`, in a task of its own, serialized with its turns.
    async fn adopt_starting(
        &self,
        thread: &str,
        start: Start,
        known: Vec<Event>,
    ) -> Result<RecoveryReport, RuntimeError> {
        let this = self.clone();
        let thread = thread.to_string();
        self.detached(async move {
            let _serial = this.inner.serial(&thread).await;
            this.refuse_adopting_a_busy_thread(&thread)?;
            let mut report = RecoveryReport::default();
            this.recover_thread(&thread, RetrySafe::Interrupt, start, known, &mut report)
                .await?;
            Ok(report)
        })
        .await
    }

    /// Adoption is refused while this runtime drives a turn of `thread` or runs one of
    /// its calls (re-run by `recover`): that is not unfinished work of a stopped driver.
    fn refuse_adopting_a_busy_thread(&self, thread: &str) -> Result<(), RuntimeError> {
        let st = self.inner.state();
        st.refuse_an_active_turn(thread)?;
        if let Some(key) = st.jobs.keys().find(|k| k.thread == thread) {
            return Err(RuntimeError::TurnActive {
                thread: thread.to_string(),
                turn: key.turn.clone(),
            });
        }
        Ok(())
    }

    async fn recover_all(&self) -> Result<RecoveryReport, RuntimeError> {
        let mut report = RecoveryReport::default();
        for thread in self.inner.journal.threads().await? {
            self.recover_thread(
                &thread,
                RetrySafe::Rerun,
                Start::default(),
                Vec::new(),
                &mut report,
            )
            .await?;
        }
        Ok(report)
    }

    /// Folds `thread`, journals the terminal events its unfinished work needs (expecting
    /// the last seq folded; folding again on a conflict), loads its latest turn and, with
    /// [`RetrySafe::Rerun`], runs retry-safe calls again.
    /// `known` are the first events after `start`, as the caller read them.
    async fn recover_thread(
        &self,
        thread: &str,
        retry_safe: RetrySafe,
        start: Start,
        known: Vec<Event>,
        report: &mut RecoveryReport,
    ) -> Result<(), RuntimeError> {
        let journal = &self.inner.journal;
        report.threads += 1;
        let mut attempt = 0;
        let mut known = Some(known).filter(|p| !p.is_empty());
        let (fold, retry, found) = loop {
            attempt += 1;
            let mut fold = ThreadFold::starting_at(start.checkpoint.as_ref());
            // The caller's events are used on the first attempt only: after a conflict the
            // thread is read again from the start.
            let events = match known.take() {
                Some(mut events) => {
                    let after = events.last().map_or(start.seq, |e| e.seq);
                    events.extend(journal.replay(thread, after).await?);
                    events
                }
                None => journal.replay(thread, start.seq).await?,
            };
            // Nothing after a checkpoint: the thread's last event is the checkpoint's.
            let last = events
                .last()
                .map(|e| e.seq)
                .or((start.seq > 0).then_some(start.seq));
            let mut found = RecoveryReport {
                events: events.len(),
                ..RecoveryReport::default()
            };
            for event in &events {
                fold.apply(event)?;
            }
            drop(events);
            let (terminals, retry) = self.settle_fold(thread, &mut fold, retry_safe, &mut found)?;
            if terminals.is_empty() {
                break (fold, retry, found);
            }
            match journal.append_expecting(thread, last, terminals).await {
                Ok(_) => break (fold, retry, found),
                Err(JournalError::Conflict { .. }) if attempt < FOLD_ATTEMPTS => continue,
                Err(err) => return Err(err.into()),
            }
        };
        report.events += found.events;
        report.turns_interrupted += found.turns_interrupted;
        report.calls_interrupted += found.calls_interrupted;
        report.interrupted.extend(found.interrupted);
        if let Some(last) = fold.last_turn {
            self.inner.state().turns.insert(
                thread.to_string(),
                TurnState {
                    id: last.id,
                    revision: last.revision,
                    status: last.ended.unwrap_or(RuntimeTurnStatus::Interrupted),
                    cancel: self.inner.root.child_token(),
                },
            );
        }
        for (call, tool) in retry {
            self.rerun(thread, call, tool);
            report.calls_retried += 1;
        }
        Ok(())
    }

    /// The terminal events a folded thread needs, recorded in `found`, and the retry-safe
    /// calls to run again (none with [`RetrySafe::Interrupt`]). Takes the calls out of
    /// `fold`.
    #[allow(clippy::type_complexity)]
    fn settle_fold(
        &self,
        thread: &str,
        fold: &mut ThreadFold,
        retry_safe: RetrySafe,
        found: &mut RecoveryReport,
    ) -> Result<(Vec<NewEvent>, Vec<(CallRecord, Arc<dyn Tool>)>), RuntimeError> {
        let mut retry = Vec::new();
        let mut terminals = Vec::new();
        for call in std::mem::take(&mut fold.calls)
            .into_iter()
            .filter(|c| !c.terminal)
        {
            let tool = self.inner.options.tools.get(&call.name).cloned();
            match tool {
                // Only with arguments the tool still takes: a call journaled before the tool
                // changed its check (or by a buggy writer) is interrupted, not run unchecked.
                Some(tool)
                    if retry_safe == RetrySafe::Rerun
                        && tool.retry_safe()
                        && check_args(&*tool, &call.args).is_ok() =>
                {
                    retry.push((call, tool));
                }
                _ => {
                    let outcome = Outcome::interrupted(call.revision, call.started);
                    terminals.push(outcome.terminal_event(thread, &call.turn, &call.call_id)?);
                    found.calls_interrupted += 1;
                    found.interrupted.push(InterruptedCall {
                        turn: call.turn,
                        call_id: call.call_id,
                        name: call.name,
                        started: call.started,
                    });
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
            found.turns_interrupted += 1;
        }
        Ok((terminals, retry))
    }

    /// Runs a retry-safe call found unfinished again, as a job of this runtime.
    fn rerun(&self, thread: &str, call: CallRecord, tool: Arc<dyn Tool>) {
        let key = Arc::new(JobKey {
            thread: thread.to_string(),
            turn: call.turn,
            call_id: call.call_id,
        });
        let (settlement, settler) = Settlement::new();
        let job = Job {
            inner: self.inner.clone(),
            key: Arc::clone(&key),
            tool,
            args: call.args,
            revision: call.revision,
            deadlines: self.inner.options.deadlines,
            cancel: self.inner.root.child_token(),
            done: settler,
        };
        let mut st = self.inner.state();
        let abort = job.spawn();
        st.jobs.insert(
            key,
            JobEntry {
                signature: call.signature,
                done: settlement,
                abort: Some(abort),
                scheduling: None,
            },
        );
    }
}
