//! `agentctl run` and `agentctl resume`: drive a run of the agent host (`agent-host`).

mod connect;
mod render;
pub mod worker;

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use agent_host::run::{Budgets, DriveOptions, Host, NewRun, ResumeChange, RunReport};
use agent_host::sandbox::{Mode as SandboxMode, SandboxSpec, Unavailable};
use agent_host::tools::{ApprovalMode, ToolConfig};
use anyhow::Context as _;
use clap::{Args, ValueEnum};

use crate::exit::Exit;
use crate::global::GlobalArgs;
use crate::output::UsageError;

pub use connect::EndpointArgs;

/// `agentctl run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub run: RunOptions,
    #[command(flatten)]
    pub drive: DriveArgs,
}

/// `agentctl submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub run: RunOptions,
    /// An MCP server over stdio, as for `run` (the worker that drives the run needs it
    /// too: in the workspace's agentctl.toml, its user config, or its own --mcp).
    #[arg(long = "mcp", value_name = "NAME='COMMAND ARGS'")]
    pub mcp: Vec<String>,
}

/// What a new run is: its task, model, workspace, endpoint, budgets and policies.
#[derive(Debug, Args)]
pub struct RunOptions {
    /// What the agent should do (read from stdin when absent and stdin is not a terminal).
    pub prompt: Option<String>,
    /// The model.
    #[arg(long, default_value = NewRun::DEFAULT_MODEL,
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub model: String,
    /// System instructions for the model.
    #[arg(long, conflicts_with = "instructions_file")]
    pub instructions: Option<String>,
    /// Read the instructions from this file.
    #[arg(long, value_name = "FILE")]
    pub instructions_file: Option<PathBuf>,
    /// The directory the tools may touch (default: the current directory; with --mock and
    /// no script, a fresh demo workspace under the data directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    /// Model steps before the run pauses.
    #[arg(long, default_value_t = NewRun::DEFAULT_MAX_STEPS, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_steps: u64,
    /// Total tokens (input + output, all steps) before the run pauses.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tokens: Option<u64>,
    /// Override every tool's policy: ask (every call), auto (run everything), deny
    /// (refuse side-effecting tools). Default: each tool's own policy: reads run; shell and
    /// write_file run sandboxed (read-only refuses write_file) and ask under --sandbox off;
    /// with --mock and no --mock-script, auto.
    #[arg(long, value_enum)]
    pub approval: Option<ApprovalArg>,
    /// Compact the history (the API's compact endpoint) before a step whose previous
    /// request used at least this many input tokens; the compacted output is journaled and
    /// replaces the history from then on.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..))]
    pub compact_at: Option<u64>,
    /// How model calls travel: http (HTTP + SSE) or ws (the Responses WebSocket mode; a
    /// steer that arrives while a response streams is sent to it at once). Recorded in the
    /// run; `resume` uses the run's.
    #[arg(long, value_enum, default_value_t = TransportArg::Http)]
    pub transport: TransportArg,
    /// The OS sandbox of the model's shell commands: workspace-write (default: writes only
    /// in the workspace, but .git and agentctl.toml; no network; credential stores hidden),
    /// read-only, or off (every command asks first). Sandboxed, commands run without asking;
    /// a command that asks to leave the sandbox always asks. Also `[sandbox] mode` in
    /// agentctl.toml. Recorded in the run; `resume` keeps it.
    #[arg(long, value_name = "MODE", value_parser = parse_sandbox_mode)]
    pub sandbox: Option<SandboxMode>,
    /// A JSON Schema (a file) the final answer must match: sent to the model as
    /// `text.format`, checked by the host; `run` prints the parsed answer as JSON on stdout.
    /// Recorded in the run; `resume` keeps it.
    #[arg(long, value_name = "FILE")]
    pub output_schema: Option<PathBuf>,
    /// How many times an answer that does not match --output-schema is sent back to the
    /// model with its errors before the run fails.
    #[arg(long, value_name = "N", default_value_t = agent_host::run::OutputSchema::DEFAULT_RETRIES,
          requires = "output_schema")]
    pub output_retries: u32,
    /// Offer the built-in `spawn_agents` tool: the model may run up to N sub-agents per
    /// call, each a run of its own (same workspace, sandbox, approval mode and endpoint; a
    /// subset of this run's tools; its tokens count against --max-tokens). Recorded in
    /// the run.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_children: Option<u32>,
    /// How deep the tree of sub-agents may grow (1: sub-agents cannot spawn their own).
    #[arg(long, value_name = "N", default_value_t = agent_host::subagents::SubagentLimits::DEFAULT_MAX_DEPTH,
          value_parser = clap::value_parser!(u32).range(1..), requires = "max_children")]
    pub max_depth: u32,
}

pub(crate) fn parse_sandbox_mode(s: &str) -> Result<SandboxMode, String> {
    s.parse()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    Http,
    Ws,
}

/// Options of `run` and `resume` about how this process drives.
#[derive(Debug, Args)]
pub struct DriveArgs {
    /// An MCP server over stdio, on top of those in agentctl.toml (workspace) and
    /// ~/.config/agentctl/config.toml: NAME='COMMAND ARGS' (quotes group words). Its tools
    /// are offered as NAME__TOOL. Repeatable; replaces a configured server of the same name.
    #[arg(long = "mcp", value_name = "NAME='COMMAND ARGS'")]
    pub mcp: Vec<String>,
    /// Off a terminal, wait for approvals decided from another process (`agentctl approve`)
    /// instead of pausing with exit status 3.
    #[arg(long)]
    pub wait: bool,
}

/// `agentctl resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run id (`agentctl runs list`).
    pub run: String,
    /// Raise (or set) the step budget.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_steps: Option<u64>,
    /// Raise (or set) the token budget.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tokens: Option<u64>,
    /// Change the run's sandbox from here on (read-only, workspace-write, off); journaled as
    /// `run.sandbox_changed`. Without it the run keeps the mode it was recorded with.
    #[arg(long, value_name = "MODE", value_parser = parse_sandbox_mode)]
    pub sandbox: Option<SandboxMode>,
    /// Take the run over from a driver recorded on another machine, which cannot be checked
    /// from here: only when you know that process is gone (a removed container, a renamed
    /// machine). A driver on this machine that still lives is never taken over.
    #[arg(long)]
    pub take_over: bool,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    #[command(flatten)]
    pub drive: DriveArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ApprovalArg {
    Ask,
    Auto,
    Deny,
}

pub async fn run(global: &GlobalArgs, args: RunArgs) -> anyhow::Result<ExitCode> {
    let sandbox = args.run.sandbox;
    let demo = builtin_story(&args.run.endpoint);
    let (new, endpoint) = new_run(args.run)?;
    let tools = tool_config(new.workspace_dir(), &args.drive.mcp)?;
    let new = with_sandbox(new, sandbox, &tools, &global.database_url()?, demo)?;
    let structured = new.has_output_schema();
    let journal = crate::db::open_journal(global).await?;
    let (client, _mock) = endpoint.connect(None).await?;
    let host = Host::new(journal.clone(), client).with_tools(tools);
    let (mut opts, ctrl_c) = drive_options(global, &args.drive, structured);
    // The run's id is printed once it is created; a hint after a failure names it too.
    let (observer, id) = render::IdKept::wrap(opts.observer);
    opts.observer = observer;
    let report = host.start(new, opts).await;
    ctrl_c.abort();
    journal.close().await;
    finish(
        global,
        report.map_err(|err| drive_hint(global, id.get().map(String::as_str), err))?,
    )
}

/// `agentctl submit`: creates the run for a worker to drive and prints its id.
pub async fn submit(global: &GlobalArgs, args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let db_url = global.database_url()?;
    check_shared_db(&db_url)?;
    // A run records its endpoint but not this timeout: the worker's own applies. Given on
    // the command line (not from the environment, which may be set for every command), it
    // would be ignored without a word.
    if args.run.endpoint.stream_idle_timeout.is_some()
        && std::env::var_os("AGENTCTL_STREAM_IDLE_TIMEOUT").is_none()
    {
        return Err(UsageError(
            "submit records no --stream-idle-timeout: the worker that drives the run uses its own (`agentctl worker --stream-idle-timeout SECS`)".into(),
        )
        .into());
    }
    let sandbox = args.run.sandbox;
    let demo = builtin_story(&args.run.endpoint);
    let (new, _) = new_run(args.run)?;
    let tools = tool_config(new.workspace_dir(), &args.mcp)?;
    let new = with_sandbox(new, sandbox, &tools, &db_url, demo)?;
    let journal = crate::db::open_journal(global).await?;
    let id = agent_host::run::submit(&journal, &tools, new).await;
    journal.close().await;
    let id = id?;
    if global.json {
        crate::output::json_line(&serde_json::json!({"type": "run.submitted", "run_id": id}))?;
    } else {
        crate::output::line(&id)?;
        crate::output::note(&format!(
            "queued: a worker (`agentctl worker`) will drive it; `{}` waits for it",
            global.suggest(&["runs", "wait", &id])
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// A queued run is driven by a worker, another process: a database that lives only in
/// this one (`memory:`, `sqlite::memory:`) would be gone, with the run, once `submit` exits.
fn check_shared_db(url: &str) -> Result<(), UsageError> {
    if lives_in_this_process(url) {
        return Err(UsageError(format!(
            "submit cannot queue a run in --db {url}: it lives only in this process, so no worker could ever see the run; \
             a queued run needs a database shared with the workers (sqlite://PATH or postgres://...)"
        )));
    }
    Ok(())
}

/// Whether the database at `url` lives only in the process that opens it.
pub(crate) fn lives_in_this_process(url: &str) -> bool {
    url == agent_journal::MEMORY_URL || url.starts_with("sqlite::memory:")
}

/// `new` with its sandbox: `--sandbox`, else `[sandbox] mode`, else `workspace-write`,
/// hiding the files of the database at `db_url` besides the configured paths; probed here.
/// Configured `[sandbox]` settings the mode cannot apply here are a usage error, as is a
/// mode asked for that this system cannot give (nothing runs). The default mode, where the
/// system cannot give it, falls back to `off` with every other setting kept, where `shell`
/// and `write_file` ask whatever `--approval` says; for the built-in `--mock` story
/// (`demo`), which runs only its own scripted commands and never asks, an explicit `off`.
pub(crate) fn with_sandbox(
    new: NewRun,
    flag: Option<SandboxMode>,
    tools: &ToolConfig,
    db_url: &str,
    demo: bool,
) -> anyhow::Result<NewRun> {
    let explicit = flag.or(tools.sandbox.mode);
    let mode = explicit.unwrap_or(SandboxMode::WorkspaceWrite);
    let own = own_hidden(db_url);
    let mut spec = SandboxSpec::of(mode);
    spec.home = dirs::home_dir();
    spec.network = tools.sandbox.network.unwrap_or(false);
    spec.writable_roots = tools.sandbox.writable_roots.clone().unwrap_or_default();
    spec.deny_read = tools.sandbox.deny_read.clone().unwrap_or_default();
    for path in &own {
        if !spec.deny_read.contains(path) {
            spec.deny_read.push(path.clone());
        }
    }
    // A missing workspace is the host's error to report, not the sandbox's.
    if !new.workspace_dir().is_dir() {
        return Ok(new.sandbox(spec));
    }
    match agent_host::sandbox::probe_blaming(&spec, &own, new.workspace_dir()) {
        Ok(()) => Ok(new.sandbox(spec)),
        Err(Unavailable::Settings(err)) => Err(UsageError(format!(
            "sandbox mode {mode}: the configured [sandbox] settings (deny_read, writable_roots, network in {}) cannot be applied: {}; \
             fix or remove the setting at fault (this system can sandbox commands without it)",
            config_files(new.workspace_dir()),
            probe_said(&err)
        ))
        .into()),
        Err(probing @ Unavailable::Probing(_)) => Err(probing_failed(probing)),
        Err(Unavailable::System(err)) if explicit.is_some() => Err(UsageError(format!(
            "sandbox mode {mode}: {err}; use `--sandbox off` to run commands unsandboxed, each asking first"
        ))
        .into()),
        Err(Unavailable::System(err)) if demo => {
            crate::output::note(&format!(
                "warning: {err}; the built-in story runs its own scripted commands unsandboxed (`off`), without asking"
            ));
            Ok(new.sandbox(SandboxSpec {
                mode: SandboxMode::Off,
                ..spec
            }))
        }
        Err(Unavailable::System(err)) => {
            crate::output::note(&format!(
                "warning: {err}; commands and file writes run unsandboxed, each asking first whatever --approval says \
                 (`--sandbox off` chooses unsandboxed explicitly)"
            ));
            Ok(new.sandbox(SandboxSpec {
                mode: SandboxMode::Off,
                fallback: Some(err.to_string()),
                ..spec
            }))
        }
    }
}

/// A probe that could not run (a full temp dir, too few descriptors or processes): the run
/// neither starts nor falls back; once the shortage passes, it can.
fn probing_failed(err: Unavailable) -> anyhow::Error {
    anyhow::anyhow!(
        "{err}; nothing ran, and the run keeps its sandbox: try again once that is fixed"
    )
}

/// What a failed probe said, without "commands cannot be sandboxed here" where the mode
/// itself could be.
fn probe_said(err: &agent_host::sandbox::SandboxError) -> String {
    match err {
        agent_host::sandbox::SandboxError::Probe(said) => said.clone(),
        other => other.to_string(),
    }
}

/// What agentctl itself hides from every command of a run whose database is at `db_url`:
/// the database's files and a moved configuration directory. The bare probe keeps them.
fn own_hidden(db_url: &str) -> Vec<std::path::PathBuf> {
    let mut own = crate::global::database_files(db_url);
    own.extend(agent_host::sandbox::moved_config_dir());
    own
}

/// The files a run's `[sandbox]` settings come from, for messages.
fn config_files(workspace: &std::path::Path) -> String {
    let user = crate::cmd::trust::config_dir().map(|dir| dir.join(agent_host::tools::USER_FILE));
    let local = workspace.join(agent_host::tools::WORKSPACE_FILE);
    match user {
        Some(user) => format!("{} and {}", user.display(), local.display()),
        None => local.display().to_string(),
    }
}

/// The sandbox a resumed run is driven under when it changes: `asked` (`--sandbox`), a
/// worker's `floor` and the hidden paths of its user (`deny_read`), or `off` where this
/// system cannot give the recorded mode (said on stderr). An asked mode this system cannot
/// give, or recorded settings the mode cannot apply here, are a usage error.
pub(crate) fn resumed_sandbox(
    spec: &agent_host::run::RunSpec,
    asked: Option<SandboxMode>,
    floor: Option<SandboxMode>,
    deny_read: Vec<std::path::PathBuf>,
    db_url: &str,
) -> anyhow::Result<Option<agent_host::sandbox::SandboxChange>> {
    let workspace = std::path::Path::new(&spec.workspace);
    let driver = agent_host::sandbox::Driver {
        asked,
        floor,
        deny_read,
        own: own_hidden(db_url),
    };
    let mode = asked.unwrap_or(spec.sandbox.mode);
    let change = agent_host::sandbox::for_resume(&spec.sandbox, &driver, workspace).map_err(
        |err| -> anyhow::Error {
            match err {
                Unavailable::Settings(err) => UsageError(format!(
                    "sandbox mode {mode}: the run's [sandbox] settings (deny_read, writable_roots, network, as recorded, and this user's deny_read) cannot be applied here: {}; \
                     resume it where they can, or with `--sandbox off` (each command asking first)",
                    probe_said(&err)
                ))
                .into(),
                Unavailable::System(err) => UsageError(format!(
                    "sandbox mode {mode}: {err}; use `--sandbox off` to run commands unsandboxed, each asking first"
                ))
                .into(),
                probing @ Unavailable::Probing(_) => probing_failed(probing),
            }
        },
    )?;
    if let Some(change) = &change
        && let Some(why) = &change.sandbox.fallback
        && change.cause == agent_host::sandbox::SandboxCause::Unsupported
    {
        crate::output::note(&format!(
            "warning: the run's sandbox ({}) cannot be had here: {why}; its commands and file writes run unsandboxed, each asking first",
            spec.sandbox.mode
        ));
    }
    Ok(change)
}

/// The tool configuration: ~/.config/agentctl/config.toml, then agentctl.toml of the
/// workspace, then `--mcp`; a bad one is a usage error naming the file and key.
pub(crate) fn tool_config(
    workspace: &std::path::Path,
    mcp: &[String],
) -> anyhow::Result<ToolConfig> {
    load_tool_config(workspace, mcp).map_err(|err| UsageError(err.to_string()).into())
}

/// The tool configuration of `workspace` (the user's `config.toml`, then the workspace's
/// `agentctl.toml` where it needs no trust or is trusted) and `--mcp`.
pub(crate) fn load_tool_config(
    workspace: &std::path::Path,
    mcp: &[String],
) -> Result<ToolConfig, agent_host::HostError> {
    // A workspace replaced by a file since the run began: said so, not as a failed read
    // of `FILE/agentctl.toml`.
    if workspace.exists() && !workspace.is_dir() {
        return Err(agent_host::HostError::Workspace {
            path: workspace.display().to_string(),
            reason: "it is not a directory".into(),
        });
    }
    let mut config = ToolConfig::load(workspace, crate::cmd::trust::config_dir().as_deref())?;
    for spec in mcp {
        config.add_cli_server(spec)?;
    }
    Ok(config)
}

/// Whether `endpoint` plays the built-in `--mock` story (no `--mock-script`), whose calls
/// run without asking.
fn builtin_story(endpoint: &EndpointArgs) -> bool {
    endpoint.mock && endpoint.mock_script.is_none()
}

/// The run `args` describe, and where its model calls go.
fn new_run(args: RunOptions) -> anyhow::Result<(NewRun, EndpointArgs)> {
    let prompt = read_prompt(args.prompt)?;
    let instructions = match &args.instructions_file {
        Some(path) => Some(crate::capped::read_file(
            path,
            RECORDED_TEXT_LIMIT,
            &format!("--instructions-file {}", path.display()),
        )?),
        None => args.instructions,
    };
    let builtin_story = builtin_story(&args.endpoint);
    let workspace = match args.workspace {
        Some(dir) => dir,
        None if builtin_story => connect::demo_workspace()?,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    if workspace.to_str().is_none() {
        return Err(UsageError(format!(
            "the workspace {} is not a UTF-8 path, which a run cannot record (nor resume); use a directory whose path is",
            workspace.display()
        ))
        .into());
    }
    if workspace.exists() && !workspace.is_dir() {
        return Err(UsageError(format!(
            "the workspace {} is not a directory",
            workspace.display()
        ))
        .into());
    }
    let approval = match args.approval {
        Some(ApprovalArg::Ask) => ApprovalMode::Ask,
        Some(ApprovalArg::Auto) => ApprovalMode::Auto,
        Some(ApprovalArg::Deny) => ApprovalMode::Deny,
        None if builtin_story => ApprovalMode::Auto,
        None => ApprovalMode::Default,
    };
    let output = match &args.output_schema {
        Some(path) => Some(output_schema(path, args.output_retries)?),
        None => None,
    };
    check_sizes(
        &prompt,
        instructions.as_deref(),
        output.as_ref().map(|o| &o.schema),
    )?;
    let subagents = args
        .max_children
        .map(|n| agent_host::subagents::SubagentLimits::new(n).max_depth(args.max_depth));
    let new = NewRun::new(prompt, workspace)
        .output_schema(output)
        .subagents(subagents)
        .model(args.model)
        .instructions(instructions)
        .budgets(Budgets {
            max_steps: args.max_steps,
            max_tokens: args.max_tokens,
        })
        .approval(approval)
        .endpoint(args.endpoint.checked()?)
        .compact_at(args.compact_at)
        .transport(match args.transport {
            TransportArg::Http => agent_host::run::Transport::Http,
            TransportArg::Ws => agent_host::run::Transport::Ws,
        });
    Ok((new, args.endpoint))
}

/// The output schema in the file at `path`, named after the file when its name is one the
/// API takes; a file that is not a JSON Schema with an object at its root is a usage error.
fn output_schema(
    path: &std::path::Path,
    retries: u32,
) -> anyhow::Result<agent_host::run::OutputSchema> {
    // Recorded as compact JSON, which a pretty-printed file may be several times larger than.
    let text = crate::capped::read_file(
        path,
        4 * RECORDED_TEXT_LIMIT,
        &format!("--output-schema {}", path.display()),
    )?;
    let schema = agent_host::run::OutputSchema::from_json(&text)
        .map_err(|err| UsageError(format!("--output-schema {}: {err}", path.display())))?
        .retries(retries);
    if agent_journal::holds_nul(&schema.schema) {
        return Err(UsageError(format!(
            "--output-schema {}: contains a NUL character (\\u0000), which a run cannot record",
            path.display()
        ))
        .into());
    }
    let named = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|stem| schema.clone().name(stem).ok());
    Ok(named.unwrap_or(schema))
}

pub async fn resume(global: &GlobalArgs, args: ResumeArgs) -> anyhow::Result<ExitCode> {
    let journal = crate::db::open_journal(global).await?;
    // Read once: the spec picks the endpoint and tools, the same fold is then resumed.
    let loaded = agent_host::run::load_for_resume(&journal, &args.run).await?;
    let spec = loaded.state.spec();
    let recorded = spec.as_ref().and_then(|s| s.endpoint.clone());
    let tools = match &spec {
        Some(spec) => tool_config(std::path::Path::new(&spec.workspace), &args.drive.mcp)?,
        None => ToolConfig::default(),
    };
    let sandbox = match &spec {
        Some(spec) => resumed_sandbox(
            spec,
            args.sandbox,
            None,
            Vec::new(),
            &global.database_url()?,
        )?,
        None => None,
    };
    let (client, _mock) = args.endpoint.connect(recorded.as_ref()).await?;
    let host = Host::new(journal.clone(), client).with_tools(tools);
    let change = ResumeChange {
        max_steps: args.max_steps,
        max_tokens: args.max_tokens,
        sandbox,
        take_over: args.take_over,
    };
    let structured = spec.as_ref().is_some_and(|s| s.output.is_some());
    let (opts, ctrl_c) = drive_options(global, &args.drive, structured);
    let report = host.resume_loaded(&args.run, loaded, change, opts).await;
    ctrl_c.abort();
    journal.close().await;
    finish(
        global,
        report.map_err(|err| drive_hint(global, Some(&args.run), err))?,
    )
}

/// A hint for what stopped a drive, where there is a way on: a run driven by a process on
/// another machine (as recorded), which cannot be seen to be gone from here, can be taken
/// over; a run whose journal stopped taking writes is left as journaled, for a resume.
fn drive_hint(global: &GlobalArgs, run: Option<&str>, err: agent_host::HostError) -> anyhow::Error {
    use agent_host::HostError;
    let resume = |extra: &[&str]| {
        let mut words = vec!["resume"];
        words.extend_from_slice(extra);
        words.push(run.unwrap_or("RUN"));
        global.suggest(&words)
    };
    let hint = match &err {
        HostError::DrivenElsewhere { owner, .. }
            if owner
                .rsplit_once(" on ")
                .is_some_and(|(_, host)| host != agent_host::run::Owner::this_host()) =>
        {
            format!(
                "that machine's process cannot be checked from here; if it is gone (a removed container, a renamed machine), `{}` takes the run over",
                resume(&["--take-over"])
            )
        }
        // A failed read stops a drive as a failed write does (a reader connection opened
        // late: too few file descriptors, a dropped server).
        HostError::Journal(
            agent_journal::JournalError::WriterFailed(_) | agent_journal::JournalError::Database(_),
        ) => format!(
            "the run is left as the journal has it: once the database accepts writes again, `{}` continues it{}",
            resume(&[]),
            if run.is_none() {
                " (`agentctl runs list` shows RUN; a run it does not list was never recorded: run the command again)"
            } else {
                ""
            }
        ),
        _ => return err.into(),
    };
    crate::output::with_hint(err, hint)
}

fn read_prompt(prompt: Option<String>) -> anyhow::Result<String> {
    let prompt = match prompt {
        Some(p) => p,
        None if !std::io::stdin().is_terminal() => {
            crate::capped::read_text(std::io::stdin(), RECORDED_TEXT_LIMIT, "the prompt on stdin")?
        }
        None => {
            return Err(
                UsageError("give the prompt as an argument, or pipe it on stdin".into()).into(),
            );
        }
    };
    check_prompt(&prompt)?;
    Ok(prompt)
}

/// Room left in `run.created` for the spec's other fields (the tools' schemas).
const SPEC_ROOM: usize = 256 * 1024;

/// The most bytes of a prompt or instructions read: `run.created` records each whole as a
/// JSON string, which takes no fewer bytes than the text, so anything longer is refused by
/// [`check_sizes`] anyway; reading stops past it.
const RECORDED_TEXT_LIMIT: usize = agent_journal::MAX_PAYLOAD_BYTES - SPEC_ROOM;

/// A prompt a run can record: some text and no NUL.
fn check_prompt(prompt: &str) -> Result<(), UsageError> {
    if prompt.trim().is_empty() {
        return Err(UsageError("the prompt is empty".into()));
    }
    if prompt.contains('\0') {
        return Err(UsageError("the prompt contains a NUL character".into()));
    }
    Ok(())
}

/// A prompt, instructions and an output schema small enough for the run's `run.created`
/// event, which records them whole, to fit the journal's event limit beside the tools'
/// schemas. The size measured is each one's as that event stores it: a JSON string, where
/// `"`, `\` and control characters take more bytes than in the text, and the schema as
/// compact JSON.
fn check_sizes(
    prompt: &str,
    instructions: Option<&str>,
    schema: Option<&serde_json::Value>,
) -> Result<(), UsageError> {
    let limit = agent_journal::MAX_PAYLOAD_BYTES - SPEC_ROOM;
    if instructions.is_some_and(|text| text.contains('\0')) {
        return Err(UsageError(
            "the instructions contain a NUL character".into(),
        ));
    }
    let text = |name: &'static str, text: &str| {
        let stored = json_string_len(text);
        let note = if stored == text.len() + 2 {
            String::new()
        } else {
            format!(" ({} bytes of text, escaped)", text.len())
        };
        (name, stored, note)
    };
    let mut parts = vec![text("the prompt", prompt)];
    parts.extend(instructions.map(|i| text("the instructions", i)));
    parts.extend(schema.map(|schema| {
        let stored = serde_json::to_string(schema).map_or(0, |json| json.len());
        ("the output schema", stored, String::new())
    }));
    let total: usize = parts.iter().map(|(_, stored, _)| stored).sum();
    if total <= limit {
        return Ok(());
    }
    let what = match parts.as_slice() {
        [(name, stored, note)] => format!("{name} is {stored} bytes as stored{note}"),
        _ => {
            let names: Vec<&str> = parts.iter().map(|(name, _, _)| *name).collect();
            let each: Vec<String> = parts
                .iter()
                .map(|(name, stored, note)| {
                    format!("{} {stored}{note}", name.trim_start_matches("the "))
                })
                .collect();
            format!(
                "{} and {} are {total} bytes as stored ({})",
                names[..names.len() - 1].join(", "),
                names[names.len() - 1],
                each.join(", ")
            )
        }
    };
    Err(UsageError(format!(
        "{what}; together they may take at most {limit} bytes ({}), since a run's first event records them whole as JSON",
        mib(limit)
    )))
}

/// The length of `text` as a JSON string (quotes included), as `serde_json` writes it.
fn json_string_len(text: &str) -> usize {
    let escapes: usize = text
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
            0x00..=0x1f => 5,
            _ => 0,
        })
        .sum();
    text.len() + escapes + 2
}

/// `bytes` in MiB, with up to two decimals (`3.75 MiB`, `4 MiB`).
fn mib(bytes: usize) -> String {
    let hundredths = bytes.saturating_mul(100) / (1024 * 1024);
    let (whole, frac) = (hundredths / 100, hundredths % 100);
    match frac {
        0 => format!("{whole} MiB"),
        f if f % 10 == 0 => format!("{whole}.{} MiB", f / 10),
        f => format!("{whole}.{f:02} MiB"),
    }
}

/// Options for driving from this process: the renderer, inline approvals on a terminal,
/// Ctrl-C or SIGTERM as interrupt (a second one exits at once), and the test crash hook.
fn drive_options(
    global: &GlobalArgs,
    drive: &DriveArgs,
    structured: bool,
) -> (DriveOptions, tokio::task::JoinHandle<()>) {
    let cancel = agent_runtime::CancellationToken::new();
    let token = cancel.clone();
    // Ctrl-C, a supervisor's SIGTERM and a closed terminal's SIGHUP (an ssh session that
    // dropped) alike: the first interrupts the run (running calls are cancelled and
    // journaled, so a resume does not have to ask about them), a second exits at once.
    let ctrl_c = tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut hangup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            return;
        };
        for _ in 0..2 {
            tokio::select! {
                signal = tokio::signal::ctrl_c() => {
                    if signal.is_err() {
                        return;
                    }
                }
                _ = term.recv() => {}
                _ = hangup.recv() => {}
            }
            if token.is_cancelled() {
                std::process::exit(i32::from(Exit::Interrupted.code()));
            }
            token.cancel();
        }
    });
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let opts = DriveOptions {
        observer: render::observer(global.json, structured),
        decider: interactive.then(|| Arc::new(render::TerminalDecider) as _),
        wait: drive.wait,
        cancel,
        stop: agent_runtime::CancellationToken::new(),
        ..DriveOptions::default()
    }
    .with_env_test_hooks();
    (opts, ctrl_c)
}

/// Prints how the run ended and maps it to the exit status.
fn finish(global: &GlobalArgs, report: RunReport) -> anyhow::Result<ExitCode> {
    render::finish(global, &report)?;
    Ok(Exit::of_end(&report.end).into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A drive stopped by a failed read of the journal (a reader connection opened late,
    /// with too few file descriptors) names the resume that continues it, as a failed
    /// write does.
    #[test]
    fn a_drive_stopped_by_the_database_names_its_resume() {
        let global = GlobalArgs::default();
        for err in [
            agent_journal::JournalError::from(rusqlite::Error::InvalidQuery),
            agent_journal::JournalError::WriterFailed("disk full".into()),
        ] {
            let shown = crate::output::error_line(&drive_hint(
                &global,
                Some("r1"),
                agent_host::HostError::Journal(err),
            ));
            assert!(
                shown.contains("`agentctl resume r1` continues it"),
                "{shown}"
            );
        }
    }

    #[test]
    fn the_prompt_is_measured_as_the_json_it_is_stored_as() {
        for text in [
            "plain",
            "\"quoted\" \\ back",
            "tab\tnl\nbell\u{7}nul-free é ✓",
        ] {
            assert_eq!(
                json_string_len(text),
                serde_json::to_string(text).unwrap().len(),
                "{text:?}"
            );
        }
        // Under the limit as text, over it as JSON: refused up front, naming the prompt.
        let quotes = "\"".repeat(3_932_160);
        let err = check_sizes(&quotes, None, None).unwrap_err().0;
        assert!(
            err.starts_with("the prompt is 7864322 bytes as stored"),
            "{err}"
        );
        assert!(err.contains("(3.75 MiB)"), "{err}");
    }

    #[test]
    fn the_instructions_and_the_schema_share_the_prompts_room() {
        let half = "a".repeat(2 * 1024 * 1024);
        assert!(check_sizes(&half, None, None).is_ok());
        assert!(check_sizes("p", Some(&half), None).is_ok());
        // Each fits alone; together they do not, and the message names each.
        let err = check_sizes(&half, Some(&half), None).unwrap_err().0;
        assert!(
            err.starts_with("the prompt and the instructions are 4194308 bytes as stored (prompt 2097154, instructions 2097154)"),
            "{err}"
        );
        let schema = serde_json::json!({"type": "object", "description": half});
        let err = check_sizes(&half, Some("i"), Some(&schema)).unwrap_err().0;
        assert!(
            err.starts_with("the prompt, the instructions and the output schema are "),
            "{err}"
        );
        let err = check_sizes("p", Some("a\0b"), None).unwrap_err().0;
        assert_eq!(err, "the instructions contain a NUL character");
    }

    #[test]
    fn sizes_read_in_mib() {
        assert_eq!(mib(4 * 1024 * 1024), "4 MiB");
        assert_eq!(mib(3_932_160), "3.75 MiB");
        assert_eq!(mib(3_670_016), "3.5 MiB");
    }
}
