//! The `spawn_agents` tool: creates the call's children (once), drives them concurrently
//! in this process, and returns what each one ended with.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use agent_journal::JournalError;
use agent_runtime::{ToolContext, ToolFailure};
use futures::StreamExt as _;
use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;

use super::{
    ChildHold, ChildRequest, ParentLink, SpawnRequest, SubagentLimits, TOOL_NAME, WaitingChild,
    child_run_id, share,
};
use crate::error::HostError;
use crate::run::events::{ChildEnd, HostEvent as _, RunCreated, SubagentEnded, SubagentSpawned};
use crate::run::{
    self, ApprovalReason, Budgets, CallRecord, Decider, Decision, DriveOptions, Host, Owner,
    PauseReason, ResumeChange, RunEnd, RunSpec, RunState, RunStatus, Silent, kinds,
};

/// The `spawn_agents` tool of one run (see the [module docs](super)).
#[derive(Clone)]
pub struct SpawnAgents {
    host: Host,
    limits: SubagentLimits,
    /// The names of the run's tools: what a child may be given.
    offered: Vec<String>,
    /// The parent's inline decider, which children driven here ask one at a time.
    decider: Option<Arc<OneAtATime>>,
    /// Whether children driven here wait for decisions from other processes (the parent
    /// does) rather than pause.
    wait: bool,
    /// Where a call holds for a child that paused on an approval (the parent's drive).
    hold: Option<Arc<ChildHold>>,
}

/// A decider that children driven at once share: one question at a time (a terminal asks
/// one thing at once), each naming the child's run.
struct OneAtATime {
    inner: Arc<dyn Decider>,
    turn: tokio::sync::Mutex<()>,
}

impl Decider for OneAtATime {
    fn decide<'a>(
        &'a self,
        run_id: &'a str,
        call: &'a CallRecord,
        reason: ApprovalReason,
    ) -> BoxFuture<'a, Option<Decision>> {
        Box::pin(async move {
            let _turn = self.turn.lock().await;
            self.inner.decide(run_id, call, reason).await
        })
    }
}

impl std::fmt::Debug for SpawnAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnAgents")
            .field("limits", &self.limits)
            .field("offered", &self.offered)
            .finish_non_exhaustive()
    }
}

impl SpawnAgents {
    /// The tool of a run with `spec`, driving its children through `host`; `None` when the
    /// run cannot spawn.
    pub(crate) fn for_run(host: &Host, spec: &RunSpec) -> Option<SpawnAgents> {
        let limits = spec.subagents.filter(SubagentLimits::can_spawn)?;
        spec.tools
            .iter()
            .any(|t| t.name == TOOL_NAME)
            .then(|| SpawnAgents {
                host: host.clone(),
                limits,
                offered: spec.tools.iter().map(|t| t.name.clone()).collect(),
                decider: None,
                wait: true,
                hold: None,
            })
    }

    /// Children driven in this process ask `decider` (the parent's, when it asks inline)
    /// for their approvals, one question at a time; without one they wait for a decision
    /// by their own run id from any process when `wait` (the parent waits too), or else
    /// pause, and the call holds in `hold` for the parent's drive to pause.
    pub(crate) fn asking(
        mut self,
        decider: Option<Arc<dyn Decider>>,
        wait: bool,
        hold: Arc<ChildHold>,
    ) -> SpawnAgents {
        self.decider = decider.map(|inner| {
            Arc::new(OneAtATime {
                inner,
                turn: tokio::sync::Mutex::new(()),
            })
        });
        self.wait = wait;
        self.hold = Some(hold);
        self
    }
}

/// What the model is told of one child.
#[derive(Debug, Clone, Serialize)]
pub(super) struct ChildResult {
    pub(super) run_id: String,
    pub(super) status: ChildEnd,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) answer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<String>,
}

/// What the model is told of the call: each child, in the order asked.
#[derive(Debug, Clone, Serialize)]
struct SpawnResult {
    agents: Vec<ChildResult>,
}

impl agent_runtime::Tool for SpawnAgents {
    fn name(&self) -> &str {
        TOOL_NAME
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        SpawnRequest::read(args, &self.limits, &self.offered).map(drop)
    }

    fn retry_safe(&self) -> bool {
        true
    }

    fn call(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        let tool = self.clone();
        Box::pin(async move {
            let request =
                SpawnRequest::read(&args, &tool.limits, &tool.offered).map_err(ToolFailure)?;
            let thread = ctx.thread();
            let parent_id = thread.strip_prefix("run:").unwrap_or(thread).to_string();
            let call_id = ctx.key.call_id.clone();
            let parent = run::load(tool.host.journal(), &parent_id)
                .await
                .map_err(|err| ToolFailure(format!("cannot read the parent run: {err}")))?;
            let spec = parent
                .spec
                .clone()
                .ok_or_else(|| ToolFailure("the parent run has no spec".into()))?;
            // The budgets in force (a resume may have raised them), the tokens shared.
            let in_force = parent.budgets().unwrap_or(spec.budgets);
            let share = in_force.max_tokens.map(|max| {
                share::child_share(
                    &parent,
                    &call_id,
                    request.agents.len(),
                    max,
                    &tool.limits,
                    &tool.offered,
                )
            });
            // A call whose children exist already (a re-run after a hold, an interrupt or
            // a crash) continues them, whatever is left: their budgets were given.
            let started = parent.children.iter().any(|c| c.call_id == call_id);
            if let (Some(0), Some(max), false) = (share, in_force.max_tokens, started) {
                return Err(ToolFailure(format!(
                    "no sub-agent was started: this run has used {} of its {max} tokens \
                     (--max-tokens), so there is nothing left to give them; the run pauses \
                     before its next step, and a resume with a higher --max-tokens lets you \
                     call spawn_agents again",
                    parent.usage.total_tokens
                )));
            }
            let budgets = Budgets {
                max_steps: in_force.max_steps,
                max_tokens: share,
            };
            // Run again: the children interrupted on their own (`interrupt CHILD`) stay
            // as the call got them; only those its parent's interrupt stopped go on.
            let alone = if started {
                interrupted_alone(tool.host.journal(), thread, &call_id)
                    .await
                    .map_err(|err| ToolFailure(format!("cannot read the parent run: {err}")))?
            } else {
                HashSet::new()
            };
            let children = request.agents.iter().enumerate().map(|(i, child)| {
                let index = u32::try_from(i).unwrap_or(u32::MAX);
                let link = ParentLink {
                    run_id: parent_id.clone(),
                    call_id: call_id.clone(),
                    index,
                };
                let stays = alone.contains(&index);
                tool.child(&spec, link, child, budgets, ctx.cancel.clone(), stays)
            });
            let (agents, waiting): (Vec<ChildResult>, Vec<Vec<WaitingChild>>) =
                futures::future::join_all(children)
                    .await
                    .into_iter()
                    .unzip();
            // The parent is being interrupted: the children stopped where they were. An
            // error while cancelled ends the call cancelled, which leaves it open for the
            // parent's resume (it is retry-safe) rather than answering with children that
            // ended `interrupted`.
            if ctx.cancel.is_cancelled() {
                return Err(ToolFailure("cancelled: the run was interrupted".into()));
            }
            let waiting: Vec<WaitingChild> = waiting.into_iter().flatten().collect();
            if let Some(hold) = tool.hold.as_ref().filter(|_| !waiting.is_empty()) {
                // Neither an answer nor a failure: the parent pauses with the call open,
                // and runs it again on resume. Cancelled, it ends as a cancelled call does.
                hold.hold(&call_id, waiting);
                ctx.cancel.cancelled().await;
                return Err(ToolFailure("cancelled while a sub-agent waits".into()));
            }
            let agents = capped(agents);
            serde_json::to_value(SpawnResult { agents })
                .map_err(|err| ToolFailure(format!("the result is not JSON: {err}")))
        })
    }
}

impl SpawnAgents {
    /// Creates (once) and drives one child to its end; what it ended with is recorded in
    /// the parent and returned, with the calls it paused on for approval, if it did. Never
    /// fails the call: a child that cannot be created or driven is a failed child
    /// (partial results). `call_cancel` is the call's own token (the parent's interrupt);
    /// a child that `stays` (interrupted on its own before this run of the call) is
    /// reported as it is, not continued.
    async fn child(
        &self,
        parent: &RunSpec,
        link: ParentLink,
        request: &ChildRequest,
        budgets: Budgets,
        call_cancel: agent_runtime::CancellationToken,
        stays: bool,
    ) -> (ChildResult, Vec<WaitingChild>) {
        let child_id = child_run_id(&link.run_id, &link.call_id, link.index);
        let parent_thread = kinds::thread_of(&link.run_id);
        let (call_id, index) = (link.call_id.clone(), link.index);
        let cancel = call_cancel.child_token();
        let driven = match self.as_it_stopped(stays, &call_id, index, &child_id).await {
            Some(ended) => ended,
            None => {
                self.spawn_and_drive(parent, link, request, budgets, &child_id, cancel)
                    .await
            }
        };
        let (mut ended, waiting) = match driven {
            Ok(ended) => ended,
            Err(err) => (
                SubagentEnded {
                    call_id,
                    index,
                    child_run_id: child_id.clone(),
                    status: ChildEnd::Failed,
                    answer: None,
                    error: Some(err.to_string()),
                    usage: Default::default(),
                    child_seq: 0,
                    with_parent: None,
                },
                Vec::new(),
            ),
        };
        if ended.status == ChildEnd::Interrupted {
            ended.with_parent = Some(call_cancel.is_cancelled());
        }
        let journal = self.host.journal();
        match ended.to_event(&parent_thread) {
            Ok(event) => {
                if let Err(err) = journal.append(event).await {
                    tracing::warn!(child = %child_id, %err, "the child's end was not recorded in its parent");
                }
            }
            Err(err) => {
                tracing::warn!(child = %child_id, %err, "the child's end cannot be encoded")
            }
        }
        let result = ChildResult {
            run_id: child_id,
            status: ended.status,
            answer: ended.answer,
            error: ended.error,
        };
        (result, waiting)
    }

    /// A child that `stays` (interrupted on its own before this run of the call) and is
    /// still as it was stopped (nobody resumed it since), reported so: neither requeued
    /// nor driven again. `None`: the child goes on as usual.
    async fn as_it_stopped(
        &self,
        stays: bool,
        call_id: &str,
        index: u32,
        child_id: &str,
    ) -> Option<Result<(SubagentEnded, Vec<WaitingChild>), HostError>> {
        if !stays {
            return None;
        }
        match run::load(self.host.journal(), child_id).await {
            Ok(state) if state.status == Some(RunStatus::Interrupted) => Some(Ok((
                ended_of(call_id.to_string(), index, child_id, &state),
                Vec::new(),
            ))),
            Ok(_) => None,
            Err(err) => Some(Err(err)),
        }
    }

    async fn spawn_and_drive(
        &self,
        parent: &RunSpec,
        link: ParentLink,
        request: &ChildRequest,
        budgets: Budgets,
        child_id: &str,
        cancel: agent_runtime::CancellationToken,
    ) -> Result<(SubagentEnded, Vec<WaitingChild>), HostError> {
        let journal = self.host.journal();
        let spawned = SubagentSpawned {
            call_id: link.call_id.clone(),
            index: link.index,
            child_run_id: child_id.to_string(),
            prompt: request.prompt.clone(),
        };
        journal
            .append(
                spawned
                    .to_event(&kinds::thread_of(&link.run_id))
                    .map_err(HostError::Encode)?,
            )
            .await?;
        let (call_id, index) = (link.call_id.clone(), link.index);
        // Driven by a worker (its journal fenced by the parent's lease): the children are
        // submitted for any worker to claim, and waited for.
        let by_workers = journal.fence_epoch().is_some();
        let mut spec = child_spec(parent, link, request, budgets, self.limits.child());
        spec.submitted = by_workers;
        let created = RunCreated {
            spec,
            run_id: child_id.to_string(),
            owner: (!by_workers).then(Owner::current),
        };
        let thread = kinds::thread_of(child_id);
        // Only on an empty thread: a child the call created before is not created again.
        match journal
            .append_expecting(
                &thread,
                None,
                vec![created.to_event(&thread).map_err(HostError::Encode)?],
            )
            .await
        {
            Ok(_) | Err(JournalError::Conflict { .. }) => {}
            Err(err) => return Err(err.into()),
        }
        if by_workers {
            let ended = self
                .offered(call_id, index, child_id, budgets, cancel)
                .await?;
            return Ok((ended, Vec::new()));
        }
        let mut waiting = Vec::new();
        let state = run::load(journal, child_id).await?;
        let state = if state.status.is_some_and(RunStatus::is_final) {
            state
        } else {
            let opts = DriveOptions {
                observer: Arc::new(Silent),
                // Asked inline as the parent's are, or else decided by the child's own
                // run id from any process.
                decider: self.decider.clone().map(|d| d as Arc<dyn Decider>),
                wait: self.wait,
                cancel: cancel.clone(),
                ..DriveOptions::default()
            }
            .with_env_child_test_hooks();
            match self
                .host
                .resume(child_id, raised(&state, budgets), opts)
                .await
            {
                Ok(report) => {
                    let mut state = report.state;
                    if let RunEnd::Paused { reason, detail } = &report.end {
                        state.status_detail = Some(format!("paused ({reason}): {detail}"));
                        // Its own calls, and those of the runs below it that it paused
                        // for: at any depth, a call waits on the run that asks.
                        if *reason == PauseReason::Approval {
                            waiting = state
                                .pending_approvals()
                                .map(|call| WaitingChild {
                                    run_id: child_id.to_string(),
                                    call: call.clone(),
                                })
                                .chain(report.waiting_children)
                                .collect();
                        }
                    }
                    state
                }
                // Ended meanwhile (another process drove it to its end).
                Err(HostError::Ended { .. }) => run::load(journal, child_id).await?,
                // Paused on a budget its share does not raise: it stays paused, and is
                // reported so (not as failed).
                Err(HostError::BudgetUsedUp {
                    what, used, budget, ..
                }) => used_up(state, what, used, budget),
                // Another live process drives it (`agentctl resume CHILD`, a worker): its
                // end is waited for, not taken as the child's failure.
                Err(HostError::DrivenElsewhere { .. }) => {
                    let ended = self.followed(call_id, index, child_id, cancel).await?;
                    return Ok((ended, Vec::new()));
                }
                Err(err) => return Err(err),
            }
        };
        Ok((ended_of(call_id, index, child_id, &state), waiting))
    }
}

impl SpawnAgents {
    /// A child submitted for workers: offered (again: offering is idempotent, and a crash
    /// may have come between its creation and its offer), then followed until it stops.
    ///
    /// A child that stopped short of its end (interrupted, paused: the parent's call runs
    /// again after an interrupt or a crash) goes on as one driven in this process would
    /// (`Host::resume`): it is requeued for the workers ([`run::requeue`]: `run.requeued`,
    /// with its share of the parent's budgets where that is more, then its lease opens),
    /// and followed. One whose budget is used up stays paused and is reported so; one that
    /// ended is reported as it ended, never driven again.
    async fn offered(
        &self,
        call_id: String,
        index: u32,
        child_id: &str,
        budgets: Budgets,
        cancel: agent_runtime::CancellationToken,
    ) -> Result<SubagentEnded, HostError> {
        let journal = self.host.journal();
        let thread = kinds::thread_of(child_id);
        loop {
            let state = run::load(journal, child_id).await?;
            match state.status {
                Some(status) if status.is_final() => {}
                Some(RunStatus::Paused | RunStatus::Interrupted) => {
                    // Its worker (or an interrupt taking it out of the queue) still holds
                    // its lease, about to close it: requeued once that is done, or the
                    // closing would take the offer back.
                    if lease_held(journal, &thread).await? {
                        tokio::select! {
                            () = tokio::time::sleep(HELD_POLL) => continue,
                            () = cancel.cancelled() => {
                                return Ok(ended_of(call_id, index, child_id, &state));
                            }
                        }
                    }
                    let change = raised(&state, budgets);
                    let parent = state
                        .spec
                        .as_ref()
                        .and_then(|spec| spec.parent.as_ref())
                        .map_or("its parent", |link| link.run_id.as_str());
                    let requeue = run::Requeue {
                        max_steps: change.max_steps,
                        max_tokens: change.max_tokens,
                        by: format!("{TOOL_NAME} {call_id} of run {parent}"),
                    };
                    match run::requeue(journal, child_id, requeue).await {
                        Ok(()) => {}
                        // Paused on a budget its share does not raise: it stays paused,
                        // and is reported so (not as failed).
                        Err(HostError::BudgetUsedUp {
                            what, used, budget, ..
                        }) => {
                            let state = used_up(state, what, used, budget);
                            return Ok(ended_of(call_id, index, child_id, &state));
                        }
                        // It moved meanwhile (requeued, resumed or ended by another
                        // process): followed as it is now.
                        Err(HostError::NotPaused { .. } | HostError::Ended { .. }) => {}
                        Err(err) => return Err(err),
                    }
                }
                _ => {
                    journal
                        .offer_lease(&thread, &run::table::summary(&state))
                        .await?;
                }
            }
            return self.followed(call_id, index, child_id, cancel).await;
        }
    }

    /// A child another process drives, followed until it stops.
    async fn followed(
        &self,
        call_id: String,
        index: u32,
        child_id: &str,
        cancel: agent_runtime::CancellationToken,
    ) -> Result<SubagentEnded, HostError> {
        let journal = self.host.journal();
        let stopped = tokio::select! {
            stopped = run::wait::wait_until_stopped(journal, child_id, None) => stopped?,
            // The parent is interrupted: its children were asked too (`request_interrupt`).
            () = cancel.cancelled() => {
                return Ok(ended_of(call_id, index, child_id, &run::load(journal, child_id).await?));
            }
        };
        let state = match stopped {
            run::wait::WaitEnd::Stopped(state) | run::wait::WaitEnd::TimedOut(state) => state,
            // Not without a timeout: the first read is retried until it answers.
            run::wait::WaitEnd::Unreachable(why) => return Err(HostError::Internal(why)),
        };
        // Interrupted with its parent: `request_interrupt` asks the parent first, and the
        // child's own driver may stop it before the parent's has cancelled this call. The
        // call then ends cancelled (open for the parent's resume, which continues the
        // child), never answering with a child that ended `interrupted`, as a call whose
        // children are driven in process does. Bounded: a parent's driver that never
        // cancels (its watch of the journal failed) gets the answer as before.
        if state.status == Some(RunStatus::Interrupted)
            && parent_interrupted(journal, &state).await?
        {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = tokio::time::sleep(PARENT_INTERRUPT_GRACE) => {}
            }
        }
        Ok(ended_of(call_id, index, child_id, &state))
    }
}

/// How long a call whose child was interrupted with its parent waits for the parent's
/// driver to cancel it.
const PARENT_INTERRUPT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether the parent of `child` has an interrupt requested that its driver has not acted
/// on yet.
async fn parent_interrupted(
    journal: &agent_journal::Journal,
    child: &RunState,
) -> Result<bool, HostError> {
    let Some(link) = child.spec.as_ref().and_then(|spec| spec.parent.as_ref()) else {
        return Ok(false);
    };
    let parent = run::load(journal, &link.run_id).await?;
    Ok(parent.interrupt_requested().is_some() && !parent.status.is_some_and(RunStatus::is_final))
}

/// The children's answers and errors cut to a part each of
/// [`RESULT_CAP`](crate::tools::result_cap::RESULT_CAP), so the call's outcome stays within
/// what the journal takes, however much they said; each cut says where all of it is (the
/// child's own journal).
pub(super) fn capped(mut agents: Vec<ChildResult>) -> Vec<ChildResult> {
    use crate::tools::result_cap::{RESULT_CAP, truncate};
    let each = RESULT_CAP / agents.len().max(1);
    for agent in &mut agents {
        let run_id = agent.run_id.clone();
        for text in [agent.answer.as_mut(), agent.error.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Some(dropped) = truncate(text, each) {
                text.push_str(&format!(
                    "\n[... {dropped} bytes cut here; `agentctl runs show {run_id}` shows all of it ...]"
                ));
            }
        }
    }
    agents
}

/// How a child that goes on is resumed: with its share of the parent's budgets where that
/// is more than the child has and than it used (a resume raised the parent's), otherwise
/// as it was.
fn raised(child: &RunState, share: Budgets) -> ResumeChange {
    let Some(now) = child.budgets() else {
        return ResumeChange::default();
    };
    let more = |new: Option<u64>, old: Option<u64>, used: u64| match (new, old) {
        (Some(new), Some(old)) if new > old && new > used => Some(new),
        _ => None,
    };
    ResumeChange {
        max_steps: more(
            Some(share.max_steps),
            Some(now.max_steps),
            child.step_count(),
        ),
        max_tokens: more(share.max_tokens, now.max_tokens, child.usage.total_tokens),
        ..ResumeChange::default()
    }
}

/// How often a child whose lease is still held is looked at again before it is requeued.
const HELD_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether lease `thread` has a holder whose claim has not expired.
async fn lease_held(journal: &agent_journal::Journal, thread: &str) -> Result<bool, HostError> {
    let now = run::view::now_ms();
    Ok(journal
        .leases(thread)
        .await?
        .iter()
        .any(|row| row.name == thread && run::table::lease_view(row, now).held))
}

/// A child paused on a budget its share does not raise: `state` with why it stays paused.
fn used_up(mut state: RunState, what: &str, used: u64, budget: u64) -> RunState {
    state.status_detail = Some(format!(
        "paused (max_{what}): it has used {used} of its {budget} {what}; \
         a resume of the parent with a higher --max-{what} gives it more"
    ));
    state
}

/// The parent's record of a child as its fold `state` stands.
fn ended_of(call_id: String, index: u32, child_id: &str, state: &RunState) -> SubagentEnded {
    let status = match state.status {
        Some(RunStatus::Completed) => ChildEnd::Completed,
        Some(RunStatus::Paused | RunStatus::Waiting) => ChildEnd::Paused,
        Some(RunStatus::Interrupted | RunStatus::Running | RunStatus::Queued) => {
            ChildEnd::Interrupted
        }
        Some(RunStatus::Failed) | None => ChildEnd::Failed,
    };
    let (answer, error) = match status {
        ChildEnd::Completed => (state.final_text.clone(), None),
        _ => (
            None,
            Some(
                state
                    .status_detail
                    .clone()
                    .unwrap_or_else(|| status.as_str().to_string()),
            ),
        ),
    };
    SubagentEnded {
        call_id,
        index,
        child_run_id: child_id.to_string(),
        status,
        answer,
        error,
        usage: state.usage,
        child_seq: state.last_seq,
        with_parent: None,
    }
}

/// The children of call `call_id` whose latest end recorded in their parent's thread
/// `parent` is an interrupt of their own (`interrupt CHILD`), by index.
async fn interrupted_alone(
    journal: &agent_journal::Journal,
    parent: &str,
    call_id: &str,
) -> Result<HashSet<u32>, HostError> {
    let mut latest: HashMap<u32, bool> = HashMap::new();
    let mut events = journal.replay_stream(parent, 0);
    while let Some(event) = events.next().await {
        let event = event?;
        if &*event.kind != kinds::SUBAGENT_ENDED {
            continue;
        }
        let Ok(ended) = serde_json::from_value::<SubagentEnded>(event.payload) else {
            continue;
        };
        if ended.call_id == call_id {
            let alone = ended.status == ChildEnd::Interrupted && ended.with_parent == Some(false);
            latest.insert(ended.index, alone);
        }
    }
    Ok(latest
        .into_iter()
        .filter_map(|(index, alone)| alone.then_some(index))
        .collect())
}

/// A child's spec: the parent's, with its own prompt and instructions, the tools it asked
/// for (the parent's, or a subset), a share of the budget, and its place in the tree.
fn child_spec(
    parent: &RunSpec,
    link: ParentLink,
    request: &ChildRequest,
    budgets: Budgets,
    limits: SubagentLimits,
) -> RunSpec {
    let tools = parent
        .tools
        .iter()
        .filter(|t| t.name != TOOL_NAME || limits.can_spawn())
        .filter(|t| {
            request
                .tools
                .as_ref()
                .is_none_or(|names| names.contains(&t.name))
        })
        .cloned()
        .collect::<Vec<_>>();
    let mcp_servers = parent
        .mcp_servers
        .iter()
        .filter(|s| {
            tools
                .iter()
                .any(|t| t.mcp.as_ref().is_some_and(|m| m.server == s.name))
        })
        .cloned()
        .collect();
    RunSpec {
        prompt: request.prompt.clone(),
        model: parent.model.clone(),
        instructions: request.instructions.clone(),
        workspace: parent.workspace.clone(),
        tools,
        mcp_servers,
        approval: parent.approval,
        sandbox: parent.sandbox.clone(),
        budgets,
        transport: parent.transport,
        endpoint: parent.endpoint.clone(),
        compact_at: parent.compact_at,
        submitted: false,
        output: None,
        parent: Some(link),
        subagents: Some(limits),
    }
}
