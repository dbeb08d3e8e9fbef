//! Errors of the host.

use agent_journal::JournalError;
use agent_runtime::RuntimeError;

/// Why a host operation could not be done. Tool failures and model errors are not here:
/// they are part of a run (the model is told; the run pauses).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// No run has this id.
    #[error("no run {0} (see `agentctl runs list`)")]
    NotFound(String),
    /// A steer asked not to be taken by a run that has ended ([`request_live_steer`]):
    /// it would only be dropped.
    ///
    /// [`request_live_steer`]: crate::run::request_live_steer
    #[error("run {run} is {status}; a steer would be dropped")]
    SteerAfterEnd {
        /// The run id.
        run: String,
        /// `completed` or `failed`.
        status: crate::run::RunStatus,
    },
    /// A completed or failed run is not driven again.
    #[error("run {run} is {status}; it cannot be resumed")]
    Ended {
        /// The run id.
        run: String,
        /// `completed` or `failed`.
        status: crate::run::RunStatus,
    },
    /// Another live process drives the run.
    #[error("run {run} is being driven by {owner}; only one process may drive a run")]
    DrivenElsewhere {
        /// The run id.
        run: String,
        /// Who drives it (pid and host).
        owner: String,
    },
    /// Another host took the run over while this one drove it; this one stopped writing.
    #[error("run {0} was taken over by another process; this one stopped driving it")]
    Superseded(String),
    /// The run has no call with this id (a decision naming a call the model never made).
    #[error("run {run} has no call {call_id}{}", pending_calls(.pending))]
    NoSuchCall {
        /// The run id.
        run: String,
        /// The call id given.
        call_id: String,
        /// The calls of the run waiting for a decision now.
        pending: Vec<String>,
    },
    /// The call has no approval waiting for a decision.
    #[error("{0}")]
    NoPendingApproval(String),
    /// The call's approval was decided already (the first decision wins).
    #[error("call {call_id} was already {decision} by {by}")]
    AlreadyDecided {
        /// The call.
        call_id: String,
        /// `approved` or `denied`.
        decision: &'static str,
        /// Who made the first decision.
        by: String,
        /// Why, as the first decision said (none given: `None`).
        reason: Option<String>,
        /// Whether the first decision approved the tool for the rest of the run too.
        always: bool,
    },
    /// The decision named other arguments than the pending call has.
    #[error("the arguments of call {call_id} have sha256 {pending}, not {given}: refused")]
    ArgsMismatch {
        /// The call.
        call_id: String,
        /// The sha256 of the pending call's arguments.
        pending: String,
        /// The sha256 the decision named.
        given: String,
    },
    /// The workspace cannot be used.
    #[error("workspace {path}: {reason}")]
    Workspace {
        /// The directory given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The tool configuration (`agentctl.toml`, `--mcp`) cannot be used.
    #[error(transparent)]
    Config(#[from] crate::tools::ConfigError),
    /// A workspace's `agentctl.toml` asks for what needs trust and is not trusted, or the
    /// trust store cannot be used.
    #[error(transparent)]
    Trust(#[from] crate::tools::TrustError),
    /// An MCP server of a new run could not be started or did not list its tools.
    #[error("MCP server `{server}` (declared in {declared_in}): {reason}")]
    McpStart {
        /// Its name.
        server: String,
        /// Where it was declared.
        declared_in: String,
        /// What went wrong.
        reason: String,
    },
    /// An MCP server of a new run names a program that cannot be run (none of that name,
    /// a directory, not executable).
    #[error("MCP server `{server}` (declared in {declared_in}): cannot start it: {reason}")]
    McpProgramMissing {
        /// Its name.
        server: String,
        /// Where it was declared.
        declared_in: String,
        /// What is wrong with its program.
        reason: String,
    },
    /// A resumed run needs an MCP server the configuration does not declare.
    #[error(
        "run {run} used MCP server `{server}` (`{command}`), which is not configured now; \
         declare it in agentctl.toml of the workspace or ~/.config/agentctl/config.toml \
         ([mcp_servers.{server}] command = ..., args = [...]) or with --mcp {server}='COMMAND ARGS'"
    )]
    McpServerMissing {
        /// The run id.
        run: String,
        /// The server's name.
        server: String,
        /// How the run started it (command and args).
        command: String,
    },
    /// The run's first event, which records its spec whole (prompt, instructions, output
    /// schema, the tools' schemas), is more than the journal takes.
    #[error(
        "the run cannot be recorded: its first event (prompt, instructions, output schema and the tools' schemas) {reason}"
    )]
    SpecNotRecordable {
        /// What the journal said of it.
        reason: String,
    },
    /// A tool written in Rust cannot be offered under its name.
    #[error("tool {tool}: {reason}")]
    ToolName {
        /// The tool's name.
        tool: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A resumed run offered a tool written in Rust that this host does not have.
    #[error(
        "run {run} offers the tool {tool}, written in Rust, which this host does not have; \
         register it (Host::tool) before resuming the run"
    )]
    RustToolMissing {
        /// The run id.
        run: String,
        /// The tool's name.
        tool: String,
    },
    /// The run's model endpoint cannot be set up (no key, a bad URL, the emulator did not
    /// start).
    #[error("cannot reach the model: {0}")]
    Connect(String),
    /// A resumed run recorded a base URL with a password (journaled masked), and none was
    /// given again.
    #[error(
        "the run was started with a base URL that carried a password (journaled masked); give it again with --base-url"
    )]
    EndpointMasked,
    /// `resume` with a budget below what the run already used.
    #[error(
        "run {run} has used {used} {what}; a budget of {given} leaves no room (give more than {used})"
    )]
    BudgetBelowUsed {
        /// The run id.
        run: String,
        /// `steps` or `tokens`.
        what: &'static str,
        /// What it used.
        used: u64,
        /// The budget given.
        given: u64,
    },
    /// `resume` of a run paused by a budget it has used up, with no higher one given.
    #[error(
        "run {run} paused having used {used} of its {budget} {what}; resuming it without a higher budget would pause it again at once (give --max-{what} above {used})"
    )]
    BudgetUsedUp {
        /// The run id.
        run: String,
        /// `steps` or `tokens`.
        what: &'static str,
        /// What it used.
        used: u64,
        /// Its budget.
        budget: u64,
    },
    /// A steer with no text.
    #[error("the steer text is empty")]
    EmptySteer,
    /// A steer id that is empty, too long or holds a control character
    /// ([`steer_id_is_valid`](crate::run::steer_id_is_valid)).
    #[error(
        "id: must be 1 to {} characters, none of them control characters",
        crate::run::MAX_STEER_ID_CHARS
    )]
    InvalidSteerId,
    /// A steer id given again with other text: the first text stands.
    #[error(
        "steer {id} of run {run} was already requested with other text; give the new text another --id, or none"
    )]
    SteerIdTaken {
        /// The run id.
        run: String,
        /// The steer id.
        id: String,
    },
    /// A resume for workers of a run that is not paused or interrupted.
    #[error(
        "run {run} is {status}: only a paused or interrupted run can be offered to workers again"
    )]
    NotPaused {
        /// The run id.
        run: String,
        /// The status it shows.
        status: crate::run::RunStatus,
    },
    /// An interrupt for a run no host drives.
    #[error("run {run} is {status}: no host is driving it, so there is nothing to interrupt")]
    NotDriven {
        /// The run id.
        run: String,
        /// The status it shows.
        status: crate::run::RunStatus,
    },
    /// The run's next model request cannot be built from its journal (an output item or a
    /// tool schema that cannot be encoded).
    #[error("the run's next request cannot be built: {0}")]
    Request(String),
    /// An event could not be encoded for the journal.
    #[error("an event cannot be encoded: {0}")]
    Encode(#[source] serde_json::Error),
    /// The journal already holds an event the driver was about to write (its dedup key is
    /// taken), but the fold could not read it: going on would ask the model the same
    /// step again and again.
    #[error(
        "run {run}: the journal already holds {event}, which this host cannot read (a journal edited by hand, or written by another version); the run cannot go on from it"
    )]
    Unreadable {
        /// The run id.
        run: String,
        /// The event, as `kind` and what it is of.
        event: String,
    },
    /// The journal holds something a host never writes, or the host broke one of its own
    /// invariants: a bug, reported rather than acted on.
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    /// The journal failed (the run's state is as far as it was acknowledged).
    Journal(#[from] JournalError),
    #[error(transparent)]
    /// The runtime refused or failed an operation.
    Runtime(#[from] RuntimeError),
}

impl HostError {
    /// Whether the caller asked for something this run cannot do as asked (a usage
    /// error: `agentctl` exits 2), rather than something failing on the way.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            HostError::Ended { .. }
                | HostError::SteerAfterEnd { .. }
                | HostError::BudgetBelowUsed { .. }
                | HostError::BudgetUsedUp { .. }
                | HostError::NotFound(_)
                | HostError::NoSuchCall { .. }
                | HostError::EmptySteer
                | HostError::InvalidSteerId
                | HostError::SteerIdTaken { .. }
                | HostError::NotDriven { .. }
                | HostError::NotPaused { .. }
                | HostError::Workspace { .. }
                | HostError::Config(_)
                | HostError::Trust(crate::tools::TrustError::Untrusted { .. })
                | HostError::McpServerMissing { .. }
                | HostError::McpProgramMissing { .. }
                | HostError::ToolName { .. }
                | HostError::SpecNotRecordable { .. }
                | HostError::RustToolMissing { .. }
                | HostError::EndpointMasked
                | HostError::ArgsMismatch { .. }
        )
    }
}

/// How [`HostError::NoSuchCall`] names the calls that do wait for a decision.
fn pending_calls(pending: &[String]) -> String {
    if pending.is_empty() {
        "; none of its calls waits for a decision".to_string()
    } else {
        format!("; waiting for a decision: {}", pending.join(", "))
    }
}
