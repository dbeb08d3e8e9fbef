//! Runs: start, resume, decide, list.
//!
//! A run is the journal thread `run:<id>` (the id is a UUIDv7: time-sortable). See
//! [`kinds`] for its events and [`state::RunState`] for the fold that every reader uses.

mod driver;
pub mod exec_json;
pub mod kinds;
mod model;
mod owner;
pub mod state;

use std::path::PathBuf;
use std::sync::Arc;

use agent_journal::{Event, Journal, NewEvent};
use agent_responses::Client;
use agent_runtime::{CancellationToken, Deadlines, Runtime, RuntimeOptions};
use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::json;

pub use owner::Owner;
pub use state::{Budgets, CallRecord, Decision, RunSpec, RunState, RunStatus, Usage};

use crate::error::HostError;
use crate::tools::{self, ApprovalMode, Workspace};
use driver::Driver;

/// Sees a run as it is driven: every event of its thread, in order, and the model's text as
/// it streams.
pub trait Observer: Send + Sync {
    /// An event was folded into `state`.
    fn event(&self, state: &RunState, event: &Event);
    /// A piece of the model's text arrived.
    fn text_delta(&self, _delta: &str) {}
}

/// An observer that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Observer for Silent {
    fn event(&self, _: &RunState, _: &Event) {}
}

/// Decides approvals inline (a person at a terminal). `None`: no decision now (the run
/// pauses for one).
pub trait Decider: Send + Sync {
    /// Decide on `call` of run `run_id`; `reason` is `policy` or `indeterminate`.
    fn decide<'a>(
        &'a self,
        run_id: &'a str,
        call: &'a CallRecord,
        reason: &'a str,
    ) -> BoxFuture<'a, Option<Decision>>;
}

/// How a run is driven by this process.
#[derive(Clone)]
pub struct DriveOptions {
    pub observer: Arc<dyn Observer>,
    /// Asks approvals inline when set.
    pub decider: Option<Arc<dyn Decider>>,
    /// Without a decider: wait for a decision from another process instead of pausing.
    pub wait: bool,
    /// Fired to interrupt the run (Ctrl-C).
    pub cancel: CancellationToken,
    /// Test hook: the process kills itself (SIGKILL) once it has seen this many new events
    /// of the run's thread.
    pub crash_after_events: Option<usize>,
}

impl Default for DriveOptions {
    fn default() -> Self {
        DriveOptions {
            observer: Arc::new(Silent),
            decider: None,
            wait: false,
            cancel: CancellationToken::new(),
            crash_after_events: None,
        }
    }
}

impl std::fmt::Debug for DriveOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriveOptions")
            .field("wait", &self.wait)
            .field("decider", &self.decider.is_some())
            .finish_non_exhaustive()
    }
}

/// A run to start.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub prompt: String,
    pub model: String,
    pub instructions: Option<String>,
    pub workspace: PathBuf,
    pub budgets: Budgets,
    pub approval: ApprovalMode,
    /// Recorded in `run.created` (see [`RunSpec::endpoint`]); never a key.
    pub endpoint: Option<String>,
}

/// How a drive ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RunEnd {
    Completed { text: String },
    Paused { reason: String, detail: String },
    Interrupted,
}

/// The end of one drive, with the run as folded then.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub run_id: String,
    pub end: RunEnd,
    pub state: RunState,
}

/// Budget changes given to `resume`.
#[derive(Debug, Clone, Copy, Default)]
pub struct BudgetChange {
    pub max_steps: Option<u64>,
    pub max_tokens: Option<u64>,
}

/// The agent host over one journal and one model endpoint.
#[derive(Debug, Clone)]
pub struct Host {
    journal: Journal,
    client: Client,
}

impl Host {
    pub fn new(journal: Journal, client: Client) -> Host {
        Host { journal, client }
    }

    /// Starts a run and drives it.
    ///
    /// # Cancel safety
    /// Dropping the future stops driving where it stands; everything acknowledged is in the
    /// journal and `resume` continues from there (fire `opts.cancel` for a clean interrupt).
    pub async fn start(&self, new: NewRun, opts: DriveOptions) -> Result<RunReport, HostError> {
        let workspace = Workspace::new(&new.workspace).map_err(|err| HostError::Workspace {
            path: new.workspace.display().to_string(),
            reason: err.to_string(),
        })?;
        let (specs, registry) = tools::builtin(&workspace, new.approval);
        let id = uuid::Uuid::now_v7().to_string();
        let thread = kinds::thread_of(&id);
        let spec = RunSpec {
            prompt: new.prompt,
            model: new.model,
            instructions: new.instructions,
            workspace: workspace.root().display().to_string(),
            tools: specs,
            approval: new.approval,
            budgets: new.budgets,
            transport: "http".into(),
            endpoint: new.endpoint,
        };
        let me = Owner::current();
        let mut payload =
            serde_json::to_value(&spec).map_err(|e| HostError::Invalid(e.to_string()))?;
        if let Some(obj) = payload.as_object_mut() {
            obj.insert("run_id".into(), json!(id));
            obj.insert("owner".into(), json!(me));
        }
        let runtime = Runtime::open(self.journal.clone(), runtime_options(registry));
        arm_crash_hook(&self.journal, &thread, 0, opts.crash_after_events);
        self.journal
            .append_expecting(
                &thread,
                None,
                vec![NewEvent::new(thread.clone(), kinds::RUN_CREATED, payload)],
            )
            .await?;
        let turn = runtime.start(&thread).await?;
        let mut driver = Driver {
            journal: self.journal.clone(),
            client: self.client.clone(),
            runtime,
            thread,
            turn,
            state: RunState::new(&id),
            spec,
            me,
            opts,
        };
        driver.sync().await?;
        let watch = watch_interrupts(
            &self.journal,
            &driver.thread,
            driver.state.last_seq,
            driver.opts.cancel.clone(),
        );
        let report = driver.drive().await;
        watch.abort();
        report
    }

    /// Continues a run from its journal (see the resume rules in the crate docs).
    ///
    /// # Cancel safety
    /// As [`start`](Self::start).
    pub async fn resume(
        &self,
        run_id: &str,
        change: BudgetChange,
        opts: DriveOptions,
    ) -> Result<RunReport, HostError> {
        let thread = kinds::thread_of(run_id);
        let state = load(&self.journal, run_id).await?;
        let spec = state
            .spec
            .clone()
            .ok_or_else(|| HostError::NotFound(run_id.into()))?;
        if let Some(status) = state.status.filter(|s| s.is_final()) {
            return Err(HostError::Ended {
                run: run_id.into(),
                status: status.as_str(),
            });
        }
        let me = Owner::current();
        if let Some(owner) = state.driver.as_ref().filter(|o| **o != me && o.is_alive()) {
            return Err(HostError::DrivenElsewhere {
                run: run_id.into(),
                owner: owner.to_string(),
            });
        }
        let workspace = Workspace::new(std::path::Path::new(&spec.workspace)).map_err(|err| {
            HostError::Workspace {
                path: spec.workspace.clone(),
                reason: err.to_string(),
            }
        })?;
        let (_, registry) = tools::builtin(&workspace, spec.approval);
        let runtime = Runtime::open(self.journal.clone(), runtime_options(registry));
        let mut budgets = state.budgets().unwrap_or(spec.budgets);
        if let Some(n) = change.max_steps {
            budgets.max_steps = n;
        }
        if let Some(n) = change.max_tokens {
            budgets.max_tokens = Some(n);
        }
        let resumed_at = state.last_seq;
        // Claim first (expected version: nobody else wrote since we looked), then adopt.
        let claimed = self
            .journal
            .append_expecting(
                &thread,
                Some(resumed_at),
                vec![NewEvent::new(
                    thread.clone(),
                    kinds::RUN_RESUMED,
                    json!({"owner": me, "budgets": budgets, "after_seq": resumed_at}),
                )],
            )
            .await;
        match claimed {
            Ok(_) => {}
            Err(agent_journal::JournalError::Conflict { .. }) => {
                let now = load(&self.journal, run_id).await?;
                let owner = now
                    .driver
                    .map(|o| o.to_string())
                    .unwrap_or_else(|| "another process".into());
                return Err(HostError::DrivenElsewhere {
                    run: run_id.into(),
                    owner,
                });
            }
            Err(err) => return Err(err.into()),
        }
        arm_crash_hook(&self.journal, &thread, resumed_at, opts.crash_after_events);
        runtime.adopt(&thread).await?;
        let turn = runtime.start(&thread).await?;
        let mut driver = Driver {
            journal: self.journal.clone(),
            client: self.client.clone(),
            runtime,
            thread,
            turn,
            state,
            spec,
            me,
            opts,
        };
        driver.sync().await?;
        let watch = watch_interrupts(
            &self.journal,
            &driver.thread,
            driver.state.last_seq,
            driver.opts.cancel.clone(),
        );
        let report = driver.drive().await;
        watch.abort();
        report
    }
}

fn runtime_options(registry: agent_runtime::ToolRegistry) -> RuntimeOptions {
    RuntimeOptions::default()
        .tools(registry)
        .concurrency(8)
        .deadlines(Deadlines::none())
        .cancel_grace(std::time::Duration::from_secs(2))
}

/// The test hook of [`DriveOptions::crash_after_events`]: a task that follows the thread and
/// SIGKILLs this process right after the `n`-th event past `after` is committed.
fn arm_crash_hook(journal: &Journal, thread: &str, after: i64, n: Option<usize>) {
    let Some(n) = n else { return };
    let mut tail = journal.tail(thread, after);
    tokio::spawn(async move {
        use futures::StreamExt as _;
        let mut seen = 0;
        while let Some(Ok(_)) = tail.next().await {
            seen += 1;
            if seen >= n {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &std::process::id().to_string()])
                    .status();
            }
        }
    });
}

/// Fires `cancel` when another process appends `interrupt.requested` to the thread, so a
/// running tool or a streaming response is stopped at once, not at the next boundary.
fn watch_interrupts(
    journal: &Journal,
    thread: &str,
    after: i64,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let mut tail = journal.tail(thread, after);
    tokio::spawn(async move {
        use futures::StreamExt as _;
        while let Some(Ok(event)) = tail.next().await {
            if &*event.kind == kinds::INTERRUPT_REQUESTED {
                cancel.cancel();
                return;
            }
        }
    })
}

/// The run `run_id` as folded from its journal.
pub async fn load(journal: &Journal, run_id: &str) -> Result<RunState, HostError> {
    let events = journal.replay(&kinds::thread_of(run_id), 0).await?;
    if events.is_empty() {
        return Err(HostError::NotFound(run_id.into()));
    }
    Ok(RunState::from_events(run_id, &events))
}

/// Every run of the journal, newest first.
pub async fn list(journal: &Journal) -> Result<Vec<RunState>, HostError> {
    let mut runs = Vec::new();
    for thread in journal.threads().await? {
        let Some(id) = thread.strip_prefix("run:") else {
            continue;
        };
        let state = load(journal, id).await?;
        if state.spec.is_some() {
            runs.push(state);
        }
    }
    runs.sort_by(|a, b| b.id.cmp(&a.id));
    Ok(runs)
}

/// The status a reader should show: a run recorded as running whose driver is gone (a
/// crash) shows as interrupted.
pub fn shown_status(state: &RunState) -> RunStatus {
    match state.status {
        Some(RunStatus::Running) if state.driver.as_ref().is_none_or(|d| !d.is_alive()) => {
            RunStatus::Interrupted
        }
        Some(status) => status,
        None => RunStatus::Failed,
    }
}

/// A decision from any process on a pending approval.
#[derive(Debug, Clone)]
pub struct DecisionRequest {
    pub call_id: String,
    pub decision: Decision,
    /// When given, must be the pending call's args hash.
    pub args_sha256: Option<String>,
}

/// Records a decision on the pending approval of `call_id`. The first decision of a round
/// wins; a second one is [`HostError::AlreadyDecided`].
pub async fn decide(
    journal: &Journal,
    run_id: &str,
    request: DecisionRequest,
) -> Result<(), HostError> {
    let state = load(journal, run_id).await?;
    let call = state.call(&request.call_id).ok_or_else(|| {
        HostError::NoPendingApproval(format!("run {run_id} has no call {}", request.call_id))
    })?;
    let Some(pending) = call.pending_approval() else {
        return Err(
            match call.approvals.last().and_then(|a| a.decision.as_ref()) {
                Some(d) => already(&request.call_id, d),
                None => HostError::NoPendingApproval(format!(
                    "call {} of run {run_id} is not waiting for approval",
                    request.call_id
                )),
            },
        );
    };
    if let Some(given) = &request.args_sha256
        && *given != pending.args_sha256
    {
        return Err(HostError::ArgsMismatch {
            call_id: request.call_id.clone(),
            pending: pending.args_sha256.clone(),
            given: given.clone(),
        });
    }
    let thread = kinds::thread_of(run_id);
    let mut payload =
        serde_json::to_value(&request.decision).map_err(|e| HostError::Invalid(e.to_string()))?;
    if let Some(obj) = payload.as_object_mut() {
        obj.insert("call_id".into(), json!(request.call_id));
        obj.insert("round".into(), json!(pending.round));
        obj.insert("args_sha256".into(), json!(pending.args_sha256));
        obj.insert(
            "decision".into(),
            json!(if request.decision.approve {
                "approve"
            } else {
                "deny"
            }),
        );
    }
    let key = kinds::approval_key(&request.call_id, pending.round);
    let appended = journal
        .append(
            NewEvent::new(thread.clone(), kinds::APPROVAL_DECIDED, payload)
                .with_dedup_key(key.clone()),
        )
        .await?;
    if appended.deduplicated {
        let first = journal.find_by_dedup_key(&thread, &key).await?;
        let decision = first
            .and_then(|e| serde_json::from_value::<Decision>(e.payload).ok())
            .unwrap_or(request.decision);
        return Err(already(&request.call_id, &decision));
    }
    Ok(())
}

fn already(call_id: &str, d: &Decision) -> HostError {
    HostError::AlreadyDecided {
        call_id: call_id.to_string(),
        decision: if d.approve { "approved" } else { "denied" },
        by: d.by.clone().unwrap_or_else(|| "someone".into()),
    }
}

/// Requests a steer: user input the driving host gives the model at its next step
/// boundary (or the next `resume` does, when no host runs). `id` makes a retried request one
/// steer. A run that has ended gets `steer.dropped` at once. Returns the steer's id.
pub async fn request_steer(
    journal: &Journal,
    run_id: &str,
    text: &str,
    id: Option<String>,
) -> Result<String, HostError> {
    if text.trim().is_empty() {
        return Err(HostError::Invalid("the steer text is empty".into()));
    }
    load(journal, run_id).await?;
    let id = id.unwrap_or_else(|| format!("steer_{}", uuid::Uuid::now_v7().simple()));
    let thread = kinds::thread_of(run_id);
    journal
        .append(
            NewEvent::new(
                thread.clone(),
                kinds::STEER_REQUESTED,
                json!({"id": id, "text": text}),
            )
            .with_dedup_key(kinds::steer_key(&id)),
        )
        .await?;
    // Appended after the run ended (or as it ended): nobody will apply it.
    let state = load(journal, run_id).await?;
    if let Some(status) = state.status.filter(|s| s.is_final())
        && state
            .steers
            .iter()
            .any(|s| s.id == id && s.status == state::SteerStatus::Pending)
    {
        journal
            .append(
                NewEvent::new(
                    thread,
                    kinds::STEER_DROPPED,
                    json!({"id": id, "reason": format!("the run had already {}", status.as_str())}),
                )
                .with_dedup_key(kinds::steer_end_key(&id)),
            )
            .await?;
    }
    Ok(id)
}

/// How a steer ended: `Ok(step)` applied before that step, `Err(reason)` dropped. Waits
/// for the outcome when `wait`; `None` when it is still pending and `wait` is false.
pub async fn steer_outcome(
    journal: &Journal,
    run_id: &str,
    id: &str,
    wait: bool,
) -> Result<Option<Result<u64, String>>, HostError> {
    use futures::StreamExt as _;
    let thread = kinds::thread_of(run_id);
    let mut events = journal.tail(&thread, 0);
    let mut state = RunState::new(run_id);
    loop {
        if let Some(steer) = state.steers.iter().find(|s| s.id == id) {
            match &steer.status {
                state::SteerStatus::Applied { step } => return Ok(Some(Ok(*step))),
                state::SteerStatus::Dropped { reason } => return Ok(Some(Err(reason.clone()))),
                state::SteerStatus::Pending => {}
            }
        }
        let caught_up = journal.last_seq(&thread).await?.unwrap_or(0) <= state.last_seq;
        if caught_up && !wait {
            return Ok(None);
        }
        match events.next().await {
            Some(event) => state.apply(&event?),
            None => return Ok(None),
        }
    }
}

/// Asks the driving host (wherever it runs) to interrupt the run.
pub async fn request_interrupt(
    journal: &Journal,
    run_id: &str,
    by: &str,
) -> Result<i64, HostError> {
    load(journal, run_id).await?;
    let appended = journal
        .append(NewEvent::new(
            kinds::thread_of(run_id),
            kinds::INTERRUPT_REQUESTED,
            json!({"by": by}),
        ))
        .await?;
    Ok(appended.seq)
}
