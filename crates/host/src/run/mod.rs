//! Runs: start, resume, decide, list.
//!
//! A run is the journal thread `run:<id>` (the id is a UUIDv7: time-sortable). See
//! [`kinds`] for its events and [`state::RunState`] for the fold that every reader uses.

pub(crate) mod checkpoint;
pub mod digest;
mod driver;
pub mod endpoint;
pub mod events;
pub mod exec_json;
pub mod history;
mod id_index;
pub mod kinds;
mod model;
mod model_ws;
mod output;
mod owner;
mod query;
mod records;
mod refusal;
mod requests;
mod spec;
pub mod state;
mod status;
pub(crate) mod step_request;
pub mod table;
#[cfg(test)]
mod test_events;
pub mod test_hooks;
pub mod view;
pub mod wait;

use std::path::PathBuf;
use std::sync::Arc;

use agent_journal::{Event, Journal, LeaseStatus};
use agent_responses::Client;
use agent_runtime::{CancellationToken, Deadlines, Runtime, RuntimeOptions};
use futures::future::BoxFuture;
use serde::Serialize;

pub use endpoint::Endpoint;
pub use events::{ApprovalReason, PauseReason};
pub use output::{OutputSchema, OutputSchemaError, Rejection};
pub use owner::Owner;
pub(crate) use query::unreadable_run;
pub use query::{LoadedRun, ids, list, load, load_for_resume};
pub use requests::{
    DecisionRequest, MAX_STEER_ID_CHARS, Requeue, decide, request_interrupt, request_live_steer,
    request_steer, requeue, steer_id_is_valid, steer_outcome,
};
pub use state::{
    Budgets, CallRecord, Decision, RunSpec, RunState, RunStatus, SteerRecord, SteerStatus,
    TokenUsage, Transport,
};

use crate::error::HostError;
use crate::subagents::ChildHold;
use crate::tools::{self, ApprovalMode, ToolConfig, Workspace, mcp};
use driver::Driver;
use events::{HostEvent as _, RunCreated, RunResumed, RunSandboxChanged};

/// Sees a run as it is driven: every event of its thread, in order, and the model's text as
/// it streams.
pub trait Observer: Send + Sync {
    /// An event was folded into `state`.
    fn event(&self, state: &RunState, event: &Event);
    /// A piece of the model's text arrived.
    fn text_delta(&self, _delta: &str) {}
    /// Whether it shows progress as it happens: then the driver reads the journal when a
    /// call starts, so the observer sees its `tool.scheduled` before the call ends (an
    /// observer that only collects events need not pay for that read).
    fn shows_progress(&self) -> bool {
        true
    }
}

/// An observer that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Observer for Silent {
    fn event(&self, _: &RunState, _: &Event) {}
    fn shows_progress(&self) -> bool {
        false
    }
}

/// Decides approvals inline (a person at a terminal). `None`: no decision now (the run
/// pauses for one).
pub trait Decider: Send + Sync {
    /// Decide on `call` of run `run_id`, which asks for `reason`.
    fn decide<'a>(
        &'a self,
        run_id: &'a str,
        call: &'a CallRecord,
        reason: ApprovalReason,
    ) -> BoxFuture<'a, Option<Decision>>;
}

/// How a run is driven by this process.
#[derive(Clone)]
pub struct DriveOptions {
    /// Sees every event and the streamed text.
    pub observer: Arc<dyn Observer>,
    /// Asks approvals inline when set.
    pub decider: Option<Arc<dyn Decider>>,
    /// Without a decider: wait for a decision from another process instead of pausing.
    pub wait: bool,
    /// Fired to interrupt the run (Ctrl-C).
    pub cancel: CancellationToken,
    /// Fired to give the run back: the drive stops at the next step boundary (no call
    /// running) with [`RunEnd::Released`], leaving the run for another process to resume.
    pub stop: CancellationToken,
    /// Test hook (the `test-hooks` feature): the process kills itself (SIGKILL) once it
    /// has seen this many new events of the run's thread.
    #[cfg(feature = "test-hooks")]
    pub crash_after_events: Option<usize>,
}

impl DriveOptions {
    /// These options with the test hooks a test asked for in the environment (with the
    /// `test-hooks` feature; without it, unchanged: a released binary reads no test
    /// variable).
    pub fn with_env_test_hooks(self) -> DriveOptions {
        #[cfg(feature = "test-hooks")]
        {
            let mut opts = self;
            opts.crash_after_events = test_hooks::CrashHook::from_env();
            opts
        }
        #[cfg(not(feature = "test-hooks"))]
        self
    }

    /// As [`with_env_test_hooks`](Self::with_env_test_hooks), for the drive of a child run
    /// (a sub-agent), whose hook has a variable of its own.
    pub(crate) fn with_env_child_test_hooks(self) -> DriveOptions {
        #[cfg(feature = "test-hooks")]
        {
            let mut opts = self;
            opts.crash_after_events = test_hooks::CrashHook::child_from_env();
            opts
        }
        #[cfg(not(feature = "test-hooks"))]
        self
    }

    pub(crate) fn crash_hook(&self) -> test_hooks::CrashHook {
        #[cfg(feature = "test-hooks")]
        {
            test_hooks::CrashHook(self.crash_after_events)
        }
        #[cfg(not(feature = "test-hooks"))]
        test_hooks::CrashHook::default()
    }
}

impl Default for DriveOptions {
    fn default() -> Self {
        DriveOptions {
            observer: Arc::new(Silent),
            decider: None,
            wait: false,
            cancel: CancellationToken::new(),
            stop: CancellationToken::new(),
            #[cfg(feature = "test-hooks")]
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

/// A run to start: a prompt and a workspace, and the rest as the builder sets it.
///
/// ```
/// use agent_host::run::{Budgets, NewRun, Transport};
/// let run = NewRun::new("fix the failing test", "/tmp")
///     .model("gpt-5.1")
///     .budgets(Budgets { max_steps: 10, max_tokens: None })
///     .transport(Transport::Ws);
/// assert_eq!(run.prompt_text(), "fix the failing test");
/// ```
#[derive(Debug, Clone)]
pub struct NewRun {
    prompt: String,
    model: String,
    instructions: Option<String>,
    workspace: PathBuf,
    budgets: Budgets,
    approval: ApprovalMode,
    endpoint: Option<Endpoint>,
    compact_at: Option<u64>,
    transport: Transport,
    sandbox: crate::sandbox::SandboxSpec,
    output: Option<OutputSchema>,
    subagents: Option<crate::subagents::SubagentLimits>,
}

impl NewRun {
    /// The model a run asks when none is set.
    pub const DEFAULT_MODEL: &str = "gpt-5.1";
    /// The step budget of a run when none is set.
    pub const DEFAULT_MAX_STEPS: u64 = 50;

    /// A run of `prompt` in `workspace` (the directory its built-in tools may touch), on
    /// [`DEFAULT_MODEL`](Self::DEFAULT_MODEL) with [`DEFAULT_MAX_STEPS`](Self::DEFAULT_MAX_STEPS)
    /// steps, the default policies, over HTTP to the default endpoint.
    ///
    /// A relative `workspace` is made absolute here, against the current directory, so that
    /// [`workspace_dir`](Self::workspace_dir) names the same directory from anywhere (the
    /// sandbox's probe runs inside it); the run records its canonical form.
    pub fn new(prompt: impl Into<String>, workspace: impl Into<PathBuf>) -> NewRun {
        let workspace = workspace.into();
        NewRun {
            prompt: prompt.into(),
            model: Self::DEFAULT_MODEL.into(),
            instructions: None,
            // Fails only for an empty path or an unreadable current directory: kept as
            // given, the run's creation then refuses it.
            workspace: std::path::absolute(&workspace).unwrap_or(workspace),
            budgets: Budgets {
                max_steps: Self::DEFAULT_MAX_STEPS,
                max_tokens: None,
            },
            approval: ApprovalMode::Default,
            endpoint: None,
            compact_at: None,
            transport: Transport::Http,
            sandbox: crate::sandbox::SandboxSpec::default(),
            output: None,
            subagents: None,
        }
    }

    /// Offers the built-in `spawn_agents` tool under `limits` (see [`crate::subagents`]);
    /// `None` (the default) or a limit of zero children: not offered.
    pub fn subagents(mut self, limits: Option<crate::subagents::SubagentLimits>) -> NewRun {
        self.subagents = limits;
        self
    }

    /// The JSON Schema the final answer must match (see [`OutputSchema`]): sent to the
    /// model as `text.format`, checked by the host, an answer that does not match sent
    /// back with its errors up to the schema's retries, then the run fails. The parsed
    /// answer is [`RunReport::output`].
    pub fn output_schema(mut self, schema: Option<OutputSchema>) -> NewRun {
        self.output = schema;
        self
    }

    /// The sandbox of the run's commands (default: `off`, every command asking; the CLI
    /// defaults to `workspace-write`).
    pub fn sandbox(mut self, sandbox: crate::sandbox::SandboxSpec) -> NewRun {
        self.sandbox = sandbox;
        self
    }

    /// The Responses API model.
    pub fn model(mut self, model: impl Into<String>) -> NewRun {
        self.model = model.into();
        self
    }

    /// System instructions.
    pub fn instructions(mut self, instructions: Option<String>) -> NewRun {
        self.instructions = instructions;
        self
    }

    /// Limits that pause the run.
    pub fn budgets(mut self, budgets: Budgets) -> NewRun {
        self.budgets = budgets;
        self
    }

    /// The run-wide override of tool policies.
    pub fn approval(mut self, approval: ApprovalMode) -> NewRun {
        self.approval = approval;
        self
    }

    /// Where the model is reached, recorded in `run.created` (see [`Endpoint::recorded`])
    /// for `resume`; the host's client must already point there.
    pub fn endpoint(mut self, endpoint: Option<Endpoint>) -> NewRun {
        self.endpoint = endpoint.map(|e| e.recorded());
        self
    }

    /// Compact the history before a step once a request used this many input tokens.
    pub fn compact_at(mut self, tokens: Option<u64>) -> NewRun {
        self.compact_at = tokens;
        self
    }

    /// How model calls travel.
    pub fn transport(mut self, transport: Transport) -> NewRun {
        self.transport = transport;
        self
    }

    /// Whether the final answer must match an output schema.
    pub fn has_output_schema(&self) -> bool {
        self.output.is_some()
    }

    /// The prompt.
    pub fn prompt_text(&self) -> &str {
        &self.prompt
    }

    /// The workspace directory (absolute unless the current directory could not be read).
    pub fn workspace_dir(&self) -> &std::path::Path {
        &self.workspace
    }
}

/// How a drive ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RunEnd {
    /// The model answered without calling a tool.
    Completed {
        /// The final answer.
        text: String,
    },
    /// The run waits: for a decision, a higher budget, or a retry after a model error.
    Paused {
        /// Why.
        reason: PauseReason,
        /// What exactly, for a person.
        detail: String,
    },
    /// Ctrl-C or `agentctl interrupt`: running calls were cancelled.
    Interrupted,
    /// This process stopped driving at a step boundary ([`DriveOptions::stop`]); the run
    /// goes on when another process resumes it.
    Released,
    /// The run cannot go on (`run.failed`).
    Failed {
        /// Why.
        error: String,
    },
}

/// The end of one drive, with the run as folded then.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The run id.
    pub run_id: String,
    /// How this drive ended.
    pub end: RunEnd,
    /// The run as folded when the drive ended.
    pub state: RunState,
    /// When it paused because sub-agents wait on approvals: each child and its call
    /// (decided by the child's run id).
    pub waiting_children: Vec<crate::subagents::WaitingChild>,
}

impl RunReport {
    /// The final answer of a completed run with an output schema, as JSON text
    /// ([`RunState::final_output`]).
    pub fn output(&self) -> Option<&crate::RawJson> {
        self.state.final_output.as_ref()
    }
}

/// Why a run folded from `events` has no spec: none was recorded (no such run), or its
/// `run.created` is one this host cannot read (a newer version's mode or field, a journal
/// edited by hand), which is not the same as no run at all.
fn without_spec(run_id: &str, events: &[Event]) -> HostError {
    match events.first() {
        Some(first) if &*first.kind == kinds::RUN_CREATED => HostError::Unreadable {
            run: run_id.into(),
            event: format!("its run.created (seq {})", first.seq),
        },
        _ => HostError::NotFound(run_id.into()),
    }
}

/// What `resume` changes: budgets, and the sandbox (journaled as `run.sandbox_changed`).
#[derive(Debug, Clone, Default)]
pub struct ResumeChange {
    /// New step budget, if any.
    pub max_steps: Option<u64>,
    /// New token budget, if any.
    pub max_tokens: Option<u64>,
    /// A new sandbox, if any (see [`crate::sandbox::for_resume`]).
    pub sandbox: Option<crate::sandbox::SandboxChange>,
    /// Resume although the run's recorded driver is a process on another machine, which
    /// cannot be checked from here: the caller knows it is gone (a removed container, a
    /// renamed machine). A driver on this machine that still lives is never taken over.
    pub take_over: bool,
}

/// The agent host over one journal and one model endpoint.
#[derive(Debug, Clone)]
pub struct Host {
    journal: Journal,
    client: Client,
    tools: ToolConfig,
    rust_tools: Vec<tools::RustTool>,
}

impl Host {
    /// A host writing to `journal` and calling the model through `client`.
    pub fn new(journal: Journal, client: Client) -> Host {
        Host {
            journal,
            client,
            tools: ToolConfig::default(),
            rust_tools: Vec::new(),
        }
    }

    /// The journal its runs are written to.
    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Offers `tool`, written in Rust, to the runs this host starts, and runs its calls
    /// through the runtime like every other tool's (journaled, never run twice). A run
    /// resumed by this host needs each Rust tool it recorded to be registered here; a name
    /// that clashes with another tool of the run is refused when the run starts.
    pub fn tool(mut self, tool: tools::RustTool) -> Host {
        self.rust_tools.retain(|t| t.name() != tool.name());
        self.rust_tools.push(tool);
        self
    }

    /// The MCP servers and tool policies its runs use: a new run offers every server's
    /// tools; a resumed run needs each server it recorded to be declared here.
    pub fn with_tools(mut self, tools: ToolConfig) -> Host {
        self.tools = tools;
        self
    }

    /// Starts a run and drives it.
    ///
    /// # Cancel safety
    /// Dropping the future stops driving where it stands, as a crash would: its running
    /// calls are stopped unjournaled (a shell command's process group killed) and read as
    /// cut off; everything acknowledged is in the journal and `resume` continues from there
    /// (fire `opts.cancel` for a clean interrupt).
    pub fn start(
        &self,
        new: NewRun,
        opts: DriveOptions,
    ) -> impl Future<Output = Result<RunReport, HostError>> + '_ {
        // Boxed, and before the run's future: listing MCP servers' tools is a large future,
        // and an argument of an `async fn` is kept in its future for as long as the run.
        // Raced against an interrupt: a server hanging in `initialize` must not hold a
        // Ctrl-C off (the servers started so far are killed; no run exists yet).
        let creating = Box::pin(create(
            &self.journal,
            &self.tools,
            &self.rust_tools,
            new,
            false,
            opts.cancel.clone(),
        ));
        async move {
            let (id, spec, mut registry, servers) = creating.await?;
            let hold = ChildHold::new(&opts.cancel);
            if let Some(spawn) = crate::subagents::SpawnAgents::for_run(self, &spec) {
                let spawn = spawn.asking(opts.decider.clone(), opts.wait, Arc::clone(&hold));
                registry = registry.with(spawn);
            }
            let thread = kinds::thread_of(&id);
            opts.crash_hook().arm(&self.journal, &thread, 0);
            let runtime = Runtime::open(self.journal.clone(), runtime_options(registry));
            let created = Claimed::created(&id, thread, Arc::new(spec), runtime);
            let report = self.drive(created, opts, hold).await;
            servers.shutdown().await;
            report
        }
    }

    /// Creates a run without driving it and offers it to workers (`agentctl worker`):
    /// its lease `run:<id>` is open, so the first free worker claims and drives it.
    /// Returns the run id.
    ///
    /// # Cancel safety
    /// Dropped before `run.created` is taken, nothing is submitted (MCP servers started to
    /// list tools are killed as their handles drop). Dropped after it but before the lease
    /// is offered, the run exists unoffered; the next [`table::runs_table`] refresh offers
    /// it, as after a crash.
    pub async fn submit(&self, new: NewRun) -> Result<String, HostError> {
        submit_with(&self.journal, &self.tools, &self.rust_tools, new).await
    }

    /// Continues a run from its journal (see the resume rules in the crate docs).
    ///
    /// # Cancel safety
    /// As [`start`](Self::start).
    pub async fn resume(
        &self,
        run_id: &str,
        change: ResumeChange,
        opts: DriveOptions,
    ) -> Result<RunReport, HostError> {
        let loaded = load_for_resume(&self.journal, run_id).await?;
        self.resume_loaded(run_id, loaded, change, opts).await
    }

    /// [`resume`](Self::resume) from a fold the caller already made with
    /// [`load_for_resume`] on this host's journal (to read the run's spec first, say): the
    /// run's thread is not read again unless another process wrote to it meanwhile.
    ///
    /// # Cancel safety
    /// As [`start`](Self::start).
    pub fn resume_loaded<'a>(
        &'a self,
        run_id: &'a str,
        loaded: LoadedRun,
        change: ResumeChange,
        opts: DriveOptions,
    ) -> impl Future<Output = Result<RunReport, HostError>> + 'a {
        // The fold moves into the claim's future, boxed here: an argument of an `async fn`
        // (and a local it was moved out of) is kept in its future for as long as the run.
        let hold = ChildHold::new(&opts.cancel);
        let claim = self
            .resume_tools(
                run_id,
                &loaded,
                change.sandbox.as_ref(),
                (opts.decider.clone(), opts.wait, Arc::clone(&hold)),
            )
            .map(|(registry, servers)| {
                let claim = self.claim(run_id, loaded, registry, change, opts.crash_hook());
                (Box::pin(claim), servers)
            });
        async move {
            let (claim, servers) = claim?;
            let report = match claim.await {
                Ok(claimed) => self.drive(claimed, opts, hold).await,
                Err(err) => Err(err),
            };
            servers.shutdown().await;
            report
        }
    }

    /// The tools a resumed run had: the built-in ones of its workspace (under `sandbox`
    /// when it changes) and its MCP servers' (started again). A server the run used that is
    /// not declared refuses the resume before it writes.
    fn resume_tools(
        &self,
        run_id: &str,
        loaded: &LoadedRun,
        sandbox: Option<&crate::sandbox::SandboxChange>,
        (decider, wait, hold): (Option<Arc<dyn Decider>>, bool, Arc<ChildHold>),
    ) -> Result<(agent_runtime::ToolRegistry, mcp::McpServers), HostError> {
        let spec = loaded
            .state
            .spec
            .as_deref()
            .ok_or_else(|| without_spec(run_id, &loaded.events))?;
        let workspace = Workspace::new(std::path::Path::new(&spec.workspace)).map_err(|err| {
            HostError::Workspace {
                path: spec.workspace.clone(),
                reason: err.to_string(),
            }
        })?;
        // The sandbox the run is driven under from this claim on.
        let sandbox = sandbox.map_or(&spec.sandbox, |c| &c.sandbox);
        let (_, mut registry) =
            tools::builtin_with(&workspace, spec.approval, &ToolConfig::default(), sandbox);
        let (mcp_tools, servers) = mcp::reattach(
            run_id,
            &spec.mcp_servers,
            &spec.tools,
            &self.tools,
            workspace.root(),
            sandbox,
        )?;
        for tool in mcp_tools {
            registry = registry.with_arc(tool);
        }
        // Its sub-agents' tool, which drives children through this host.
        let offers_spawn = crate::subagents::SpawnAgents::for_run(self, spec);
        let spawns = offers_spawn.is_some();
        if let Some(spawn) = offers_spawn {
            registry = registry.with(spawn.asking(decider, wait, hold));
        }
        // The Rust tools it recorded: any tool neither built in nor an MCP server's.
        let builtin = registry.names();
        for recorded in spec.tools.iter().filter(|t| {
            t.mcp.is_none()
                && !builtin.contains(&t.name)
                && !(spawns && t.name == crate::subagents::TOOL_NAME)
        }) {
            match self.rust_tools.iter().find(|t| t.name() == recorded.name) {
                Some(tool) => registry = registry.with(tool.clone()),
                None => {
                    return Err(HostError::RustToolMissing {
                        run: run_id.into(),
                        tool: recorded.name.clone(),
                    });
                }
            }
        }
        Ok((registry, servers))
    }

    /// The `run.sandbox_changed` of `change` on a run with `spec`: a built-in tool whose
    /// recorded policy is the one its old sandbox gave it gets the one the new sandbox
    /// gives; one a policy of the run's configuration set keeps it (under the new
    /// sandbox's floors). The resuming process's own configuration does not enter: it may
    /// not be the one the run was started with.
    fn sandbox_changed(
        &self,
        spec: &RunSpec,
        change: &crate::sandbox::SandboxChange,
    ) -> Result<RunSandboxChanged, HostError> {
        let workspace = Workspace::new(std::path::Path::new(&spec.workspace)).map_err(|err| {
            HostError::Workspace {
                path: spec.workspace.clone(),
                reason: err.to_string(),
            }
        })?;
        let unconfigured = tools::ToolConfig::default();
        let (by_mode, _) =
            tools::builtin_with(&workspace, spec.approval, &unconfigured, &spec.sandbox);
        let configured = tools::ToolConfig {
            policies: spec
                .tools
                .iter()
                .filter(|t| t.mcp.is_none())
                .filter(|t| {
                    by_mode
                        .iter()
                        .any(|m| m.name == t.name && m.policy != t.policy)
                })
                .map(|t| (t.name.clone(), t.policy))
                .collect(),
            ..tools::ToolConfig::default()
        };
        let (specs, _) =
            tools::builtin_with(&workspace, spec.approval, &configured, &change.sandbox);
        let policies = specs
            .into_iter()
            .filter(|t| {
                spec.tools
                    .iter()
                    .any(|s| s.name == t.name && s.mcp.is_none())
            })
            .map(|t| (t.name, t.policy))
            .collect();
        Ok(RunSandboxChanged {
            from: spec.sandbox.mode,
            sandbox: change.sandbox.clone(),
            cause: change.cause,
            policies,
        })
    }

    /// A submitted run still in the workers' queue (its lease open) is taken out of it
    /// before this process drives it: the lease is claimed, then closed, so no worker
    /// claims it while it runs here (a worker that did claim it meanwhile is fenced by the
    /// claim's new epoch). One a live worker holds is refused as driven elsewhere.
    async fn take_from_workers(&self, run_id: &str, me: &Owner) -> Result<(), HostError> {
        match table::take_queued(&self.journal, run_id, &format!("resume {me}")).await? {
            table::Queued::No => Ok(()),
            table::Queued::Taken(row, lease) => {
                self.journal
                    .release_lease(&lease, LeaseStatus::Closed, &row.info)
                    .await?;
                Ok(())
            }
            table::Queued::Held(row) => Err(HostError::DrivenElsewhere {
                run: run_id.into(),
                owner: row.holder.unwrap_or_else(|| "a worker".into()),
            }),
        }
    }

    /// Claims the run (`run.resumed`) and adopts its open calls into a runtime.
    async fn claim(
        &self,
        run_id: &str,
        loaded: LoadedRun,
        registry: agent_runtime::ToolRegistry,
        change: ResumeChange,
        crash: test_hooks::CrashHook,
    ) -> Result<Claimed, HostError> {
        let thread = kinds::thread_of(run_id);
        let me = Owner::current();
        // A handle fenced by a lease (a worker's) holds the run by that lease: the driver
        // recorded last is not asked. Appends by others between our read and our claim
        // (steers, decisions) are folded and the claim retried, leased or not.
        let leased = self.journal.fence_epoch().is_some();
        if !leased {
            self.take_from_workers(run_id, &me).await?;
        }
        let mut attempts = 0;
        // The fold `resume` made first and the events it was made from (handed on to the
        // runtime's adoption); refolded only when a claim found the thread moved.
        let LoadedRun {
            state: first,
            mut events,
            mut start,
        } = loaded;
        let mut loaded = Some(first);
        let (state, spec, resumed_at) = loop {
            attempts += 1;
            let state = match loaded.take() {
                Some(state) => state,
                None => {
                    let again = load_for_resume(&self.journal, run_id).await?;
                    events = again.events;
                    start = again.start;
                    again.state
                }
            };
            let spec = state
                .spec
                .clone()
                .ok_or_else(|| without_spec(run_id, &events))?;
            if let Some(status) = state.status.filter(|s| s.is_final()) {
                return Err(HostError::Ended {
                    run: run_id.into(),
                    status,
                });
            }
            let taken_over = |o: &owner::Owner| change.take_over && o.host != me.host;
            if !leased
                && let Some(owner) = state
                    .driver
                    .as_ref()
                    .filter(|o| **o != me && o.is_alive() && !taken_over(o))
            {
                return Err(HostError::DrivenElsewhere {
                    run: run_id.into(),
                    owner: owner.to_string(),
                });
            }
            let mut budgets = state.budgets().unwrap_or(spec.budgets);
            if let Some(n) = change.max_steps {
                check_budget(run_id, "steps", state.step_count(), n)?;
                budgets.max_steps = n;
            }
            if let Some(n) = change.max_tokens {
                check_budget(run_id, "tokens", state.usage.total_tokens, n)?;
                budgets.max_tokens = Some(n);
            }
            check_budget_room(run_id, &state, budgets)?;
            let resumed_at = state.last_seq;
            // Claim first (expected version: nobody else wrote since we looked), then adopt.
            let resumed = RunResumed {
                owner: Some(me.clone()),
                budgets: Some(budgets),
                after_seq: resumed_at,
                epoch: self.journal.fence_epoch(),
            };
            let mut claim = vec![resumed.to_event(&thread).map_err(HostError::Encode)?];
            let sandboxed = match &change.sandbox {
                Some(change) => Some(self.sandbox_changed(&spec, change)?),
                None => None,
            };
            if let Some(changed) = &sandboxed {
                claim.push(changed.to_event(&thread).map_err(HostError::Encode)?);
            }
            let claimed = self
                .journal
                .append_expecting(&thread, Some(resumed_at), claim)
                .await;
            match claimed {
                Ok(_) => {
                    // The driver acts on the new sandbox from its first call; folding the
                    // event again later changes nothing.
                    let mut state = state;
                    let mut spec = spec;
                    if let Some(changed) = &sandboxed {
                        state.apply_sandbox(changed);
                        if let Some(now) = &state.spec {
                            spec = Arc::clone(now);
                        }
                    }
                    break (state, spec, resumed_at);
                }
                // Someone appended since we looked: a steer, a decision, an interrupt (folded
                // and the claim retried) or another driver's claim (refused above, once
                // refolded, while that driver lives).
                Err(agent_journal::JournalError::Conflict { .. }) if attempts < 10 => {
                    continue;
                }
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
        };
        let runtime = Runtime::open(self.journal.clone(), runtime_options(registry));
        crash.arm(&self.journal, &thread, resumed_at);
        // Adoption reads only what was appended after `events` (our claim, at least), and
        // nothing before the checkpoint the fold started from.
        match start {
            Some((checkpoint, seq)) => {
                runtime
                    .adopt_after(&thread, checkpoint, seq, events)
                    .await?;
            }
            None => {
                runtime.adopt_from(&thread, events).await?;
            }
        }
        Ok(Claimed {
            runtime,
            thread,
            state,
            spec,
            me,
        })
    }

    /// Starts this process's runtime turn on the run and drives it to its end.
    ///
    /// Not an `async fn`, and the driver is boxed: a future keeps its arguments for its
    /// whole life, beside what they move into, and a run's future lives as long as the run
    /// (with many runs at once, each copy of the state is a copy per run).
    fn drive(
        &self,
        claimed: Claimed,
        mut opts: DriveOptions,
        hold: Arc<ChildHold>,
    ) -> impl Future<Output = Result<RunReport, HostError>> + use<> {
        // The drive stops waiting for its calls when the user cancels or a call holds for
        // a child waiting on an approval (see `subagents::hold`).
        opts.cancel = hold.token();
        let Claimed {
            runtime,
            thread,
            state,
            spec,
            me,
        } = claimed;
        let driver = Box::new(Driver {
            journal: self.journal.clone(),
            client: self.client.clone(),
            runtime,
            thread,
            turn: String::new(),
            state,
            spec,
            me,
            opts,
            folded: 0,
            hold,
            held_children: Vec::new(),
        });
        drive_boxed(driver)
    }
}

/// [`Host::submit`] without a host: submitting needs the journal and the tool
/// configuration (to record the tools the run offers), not a model client, since a worker's
/// client makes every model call.
///
/// # Cancel safety
/// As [`Host::submit`].
pub async fn submit(
    journal: &Journal,
    tool_config: &ToolConfig,
    new: NewRun,
) -> Result<String, HostError> {
    submit_with(journal, tool_config, &[], new).await
}

/// [`submit`] of a run that also offers `rust_tools`.
async fn submit_with(
    journal: &Journal,
    tool_config: &ToolConfig,
    rust_tools: &[tools::RustTool],
    new: NewRun,
) -> Result<String, HostError> {
    let never = CancellationToken::new();
    let (id, _, _, servers) = create(journal, tool_config, rust_tools, new, true, never).await?;
    // Started only to list their tools; the driving worker starts its own.
    servers.shutdown().await;
    // After `run.created`: a crash in between leaves a run the runs table's refresh offers
    // (see [`table::runs_table`]).
    journal
        .offer_lease(&kinds::thread_of(&id), &table::RowInfo::queued())
        .await?;
    Ok(id)
}

/// Appends `run.created` for `new`, with the built-in tools and every configured MCP
/// server's (started to list them); returns the id, the spec, the tools and the servers.
/// `cancel` firing while the servers start ends the start (they are killed) before any
/// run exists: an error names the server it waited for.
async fn create(
    journal: &Journal,
    tool_config: &ToolConfig,
    rust_tools: &[tools::RustTool],
    new: NewRun,
    submitted: bool,
    cancel: CancellationToken,
) -> Result<
    (
        String,
        RunSpec,
        agent_runtime::ToolRegistry,
        mcp::McpServers,
    ),
    HostError,
> {
    let workspace = Workspace::new(&new.workspace).map_err(|err| HostError::Workspace {
        path: new.workspace.display().to_string(),
        reason: err.to_string(),
    })?;
    // The spec records the workspace as text: a path that is not UTF-8 would be recorded
    // lossily, naming a directory that `resume` cannot find.
    let Some(root) = workspace.root().to_str() else {
        return Err(HostError::Workspace {
            path: workspace.root().display().to_string(),
            reason: "the path is not valid UTF-8, which a run cannot record; use a directory \
                     whose path is"
                .into(),
        });
    };
    let root = root.to_string();
    let (mut specs, mut registry) =
        tools::builtin_with(&workspace, new.approval, tool_config, &new.sandbox);
    let found = mcp::discover(
        tool_config,
        workspace.root(),
        new.approval,
        &new.sandbox,
        &cancel,
    )
    .await?;
    specs.extend(found.specs);
    for tool in found.tools {
        registry = registry.with_arc(tool);
    }
    let servers = found.servers;
    for tool in rust_tools {
        let taken: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        if let Some(reason) = tool.name_problem(&taken) {
            servers.shutdown().await;
            return Err(HostError::ToolName {
                tool: tool.name().into(),
                reason,
            });
        }
        specs.push(tool.spec(new.approval, tool_config));
        registry = registry.with(tool.clone());
    }
    // `spawn_agents`, whose runtime tool the driving host adds (it drives the children).
    if let Some(limits) = new
        .subagents
        .filter(crate::subagents::SubagentLimits::can_spawn)
    {
        if specs.iter().any(|s| s.name == crate::subagents::TOOL_NAME) {
            servers.shutdown().await;
            return Err(HostError::ToolName {
                tool: crate::subagents::TOOL_NAME.into(),
                reason: "kept for the built-in sub-agents tool (--max-children)".into(),
            });
        }
        specs.push(crate::subagents::tool_spec(&limits, new.approval));
    }
    let id = uuid::Uuid::now_v7().to_string();
    let thread = kinds::thread_of(&id);
    let spec = RunSpec {
        prompt: new.prompt,
        model: new.model,
        instructions: new.instructions,
        workspace: root,
        tools: specs,
        mcp_servers: found.records,
        approval: new.approval,
        sandbox: new.sandbox,
        budgets: new.budgets,
        transport: new.transport,
        endpoint: new.endpoint,
        compact_at: new.compact_at,
        submitted,
        output: new.output,
        parent: None,
        subagents: new.subagents,
    };
    let created = RunCreated {
        spec,
        run_id: id.clone(),
        owner: (!submitted).then(Owner::current),
    };
    let created = match created.to_event(&thread) {
        Ok(event) => {
            let appended = journal.append_expecting(&thread, None, vec![event]).await;
            appended.map(|_| created.spec).map_err(|err| match err {
                agent_journal::JournalError::InvalidInput {
                    field: "payload",
                    reason,
                } => HostError::SpecNotRecordable { reason },
                err => HostError::from(err),
            })
        }
        Err(err) => Err(HostError::Encode(err)),
    };
    let spec = match created {
        Ok(spec) => spec,
        Err(err) => {
            servers.shutdown().await;
            return Err(err);
        }
    };
    Ok((id, spec, registry, servers))
}

/// A run claimed by this process, its open calls adopted: what driving it starts from.
struct Claimed {
    runtime: Runtime,
    thread: String,
    state: RunState,
    spec: Arc<RunSpec>,
    me: Owner,
}

impl Claimed {
    /// A run this process has just created with `spec`. Its fold starts out holding
    /// `spec`, which it is about to read back from `run.created`, so it keeps this one
    /// (equal) and shares it with the driver.
    fn created(id: &str, thread: String, spec: Arc<RunSpec>, runtime: Runtime) -> Claimed {
        let mut state = RunState::for_driving(id);
        state.spec = Some(Arc::clone(&spec));
        Claimed {
            runtime,
            thread,
            state,
            spec,
            me: Owner::current(),
        }
    }
}

/// [`Host::drive`] from the runtime turn's start.
async fn drive_boxed(mut driver: Box<Driver>) -> Result<RunReport, HostError> {
    // Dropped before the drive ends, it stops the drive's calls and its watcher.
    let mut stop_on_drop = driver::dropped::StopOnDrop::new(driver.runtime.clone());
    driver.turn = driver.runtime.start(&driver.thread).await?;
    driver.sync().await?;
    let watch = watch_interrupts(
        &driver.journal,
        &driver.thread,
        driver.state.last_seq,
        driver.opts.cancel.clone(),
    );
    stop_on_drop.watcher(watch.abort_handle());
    let report = driver.drive().await;
    stop_on_drop.disarm();
    // Awaited, not only aborted: the watcher's tail may hold a read connection, which must
    // be back in the journal's pool before the caller closes the journal.
    watch.abort();
    let _ = watch.await;
    report
}

fn runtime_options(registry: agent_runtime::ToolRegistry) -> RuntimeOptions {
    RuntimeOptions::default()
        .tools(registry)
        .concurrency(8)
        .deadlines(Deadlines::none())
        .cancel_grace(std::time::Duration::from_secs(2))
}

/// A budget given to `resume` must leave room: one at or below what the run used would
/// pause it again at once.
pub(crate) fn check_budget(
    run: &str,
    what: &'static str,
    used: u64,
    given: u64,
) -> Result<(), HostError> {
    if given <= used {
        return Err(HostError::BudgetBelowUsed {
            run: run.to_string(),
            what,
            used,
            given,
        });
    }
    Ok(())
}

/// A run paused by a budget must be resumed with room in that budget: with the budget it
/// used up, it would say "resumed" and pause again at once.
fn check_budget_room(run: &str, state: &RunState, budgets: Budgets) -> Result<(), HostError> {
    if state.status != Some(RunStatus::Paused) {
        return Ok(());
    }
    let (what, used, budget) = match state.status_detail() {
        Some(reason) if reason == PauseReason::MaxSteps.as_str() => {
            ("steps", state.step_count(), budgets.max_steps)
        }
        Some(reason) if reason == PauseReason::MaxTokens.as_str() => match budgets.max_tokens {
            Some(max) => ("tokens", state.usage.total_tokens, max),
            None => return Ok(()),
        },
        _ => return Ok(()),
    };
    if used >= budget {
        return Err(HostError::BudgetUsedUp {
            run: run.to_string(),
            what,
            used,
            budget,
        });
    }
    Ok(())
}

/// Fires `cancel` when another process appends `interrupt.requested` to the thread, so a
/// running tool or a streaming response is stopped at once, not at the next boundary.
fn watch_interrupts(
    journal: &Journal,
    thread: &str,
    after: i64,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    // Of one kind: the host's own appends (five a step) do not wake it.
    let mut tail = journal.tail_kind(thread, kinds::INTERRUPT_REQUESTED, after);
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
