//! `agentctl worker`: drive submitted runs from the runs table until stopped.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agent_host::HostError;
use agent_host::run::RunSpec;
use agent_host::worker::{
    Connected, Connector, WorkerConfig, WorkerEvent, WorkerObserver, run_worker,
};
use agent_journal::{Journal, JournalOptions};
use agent_runtime::CancellationToken;
use clap::Args;
use futures::future::BoxFuture;

use super::EndpointArgs;
use crate::global::GlobalArgs;
use crate::output;

/// `agentctl worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Runs driven at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub concurrency: u64,
    /// The name this worker claims runs under (default: host name and pid); unique per
    /// worker; 1 to 256 bytes.
    #[arg(long, value_parser = worker_name)]
    pub name: Option<String>,
    /// Seconds a claim lasts without renewal: how long a dead worker's runs wait before
    /// another worker takes them over. Renewed every third of it; at least 0.05.
    #[arg(long, default_value_t = 15.0, value_name = "SECONDS")]
    pub lease_ttl: f64,
    /// Seconds between looks for claimable runs while there is room; at least 0.01.
    #[arg(long, default_value_t = 0.5, value_name = "SECONDS")]
    pub poll: f64,
    /// On SIGINT/SIGTERM: seconds to let running steps reach a boundary before the rest
    /// are dropped; either way every run is released for another worker at once.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub grace: f64,
    /// The model endpoint for every run (default: the one each run was submitted with).
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    /// An MCP server over stdio, on top of those in each run's workspace agentctl.toml and
    /// ~/.config/agentctl/config.toml: NAME='COMMAND ARGS'. A run that used a server this
    /// worker cannot find ends with an error instead of being driven.
    #[arg(long = "mcp", value_name = "NAME='COMMAND ARGS'")]
    pub mcp: Vec<String>,
    /// The least confinement this worker drives a run under (read-only, workspace-write,
    /// off): a run submitted with a weaker mode is tightened to it, journaled as
    /// `run.sandbox_changed`. Default: each run's own mode. A run whose mode this system
    /// cannot give runs unsandboxed with every command asking.
    #[arg(long, value_name = "MODE", value_parser = super::parse_sandbox_mode)]
    pub sandbox: Option<agent_host::sandbox::Mode>,
}

/// A `--name` the journal takes as a lease holder: one it refuses made the worker warn
/// twice a second for good instead of claiming anything.
fn worker_name(s: &str) -> Result<String, String> {
    let max = agent_journal::MAX_THREAD_BYTES;
    if s.is_empty() {
        return Err("a worker's name must not be empty".into());
    }
    if s.len() > max {
        return Err(format!("{} bytes, at most {max} are taken", s.len()));
    }
    Ok(s.to_string())
}

pub(crate) struct CliConnector {
    url: String,
    endpoint: EndpointArgs,
    /// What drives a run that recorded an endpoint, when that one wins over `endpoint`
    /// (`serve --worker`, whose endpoint is for runs submitted there and runs that recorded
    /// none); `None` when `endpoint` overrides every run's (`agentctl worker`'s flags).
    recorded_wins: Option<EndpointArgs>,
    mcp: Vec<String>,
    /// `--sandbox`: the least confinement of every run.
    sandbox_floor: Option<agent_host::sandbox::Mode>,
    /// Read connections (PostgreSQL: a tail's LISTEN has a connection of its own beside
    /// them, one per journal).
    read_connections: u32,
    /// One API client per base URL, shared by the runs this worker drives.
    clients: super::connect::ApiClients,
}

impl Connector for CliConnector {
    fn journal(&self) -> BoxFuture<'_, Result<Journal, HostError>> {
        Box::pin(async move {
            let options = JournalOptions {
                read_connections: self.read_connections,
                ..JournalOptions::default()
            };
            Ok(Journal::open_with(&self.url, options).await?)
        })
    }

    fn client<'a>(&'a self, spec: &'a RunSpec) -> BoxFuture<'a, Result<Connected, HostError>> {
        Box::pin(async move {
            let endpoint = match (&self.recorded_wins, &spec.endpoint) {
                (Some(recorded_wins), Some(_)) => recorded_wins,
                _ => &self.endpoint,
            };
            let (client, server) = endpoint
                .connect_shared(spec.endpoint.as_ref(), &self.clients)
                .await
                .map_err(|err| HostError::Connect(crate::output::error_line(&err)))?;
            let tools = super::load_tool_config(std::path::Path::new(&spec.workspace), &self.mcp)?;
            // The paths this worker's user hides add to the run's, as they would to a run
            // of theirs (its user's `config.toml`, and the workspace's file as it reads now).
            let hidden = tools.sandbox.deny_read.clone().unwrap_or_default();
            let sandbox = super::resumed_sandbox(spec, None, self.sandbox_floor, hidden, &self.url)
                .map_err(|err| HostError::Connect(crate::output::error_line(&err)))?;
            Ok(Connected {
                client,
                tools,
                // The CLI has no tools written in Rust; a program embedding the worker does.
                rust_tools: Vec::new(),
                sandbox,
                guard: server.map(|s| Box::new(s) as Box<dyn Send + Sync>),
            })
        })
    }
}

struct Lines {
    json: bool,
}

impl WorkerObserver for Lines {
    fn event(&self, event: &WorkerEvent) {
        let shown = if self.json {
            serde_json::to_value(event).map(|v| output::json_line(&v))
        } else {
            Ok(output::line(&describe(event)))
        };
        if let Ok(Err(err)) | Err(err) = shown.map_err(anyhow::Error::from) {
            tracing::warn!(%err, "cannot print a worker event");
        }
    }
}

fn describe(event: &WorkerEvent) -> String {
    match event {
        WorkerEvent::Claimed { run_id, epoch } => format!("claimed   {run_id} (epoch {epoch})"),
        WorkerEvent::Ended {
            run_id,
            status,
            detail,
        } => match detail {
            Some(d) => format!("{status:<9} {run_id}: {d}"),
            None => format!("{status:<9} {run_id}"),
        },
        WorkerEvent::Lost { run_id, reason } => format!("lost      {run_id}: {reason}"),
        WorkerEvent::JournalDown { attempt, error } => {
            format!("journal   down (reopen attempt {attempt}): {error}")
        }
        WorkerEvent::JournalBack { runs } => format!("journal   back; taking back {runs} run(s)"),
        WorkerEvent::Stopping { running } => {
            format!("stopping  giving back {running} run(s) at their next step boundary")
        }
    }
}

/// A `--sandbox` this system cannot give is a usage error before any run is claimed.
fn probe_floor(floor: agent_host::sandbox::Mode) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let dir = tempfile::tempdir().context("cannot create a temp dir to probe the sandbox")?;
    let spec = agent_host::sandbox::SandboxSpec::of(floor);
    agent_host::sandbox::probe(&spec, dir.path()).map_err(|err| {
        output::UsageError(format!(
            "sandbox mode {floor}: {err}; without --sandbox each run keeps its own mode"
        ))
        .into()
    })
}

/// Shortest `--lease-ttl`: a worker renews at a third of it, and each renewal is a database
/// round trip; below this (leases are kept in whole milliseconds, so 0.0004 s was 0) every
/// lease expired before its holder could use it and runs never progressed.
const MIN_LEASE_TTL: Duration = Duration::from_millis(50);

/// Below this, a worker with room queries the database in a busy loop (`--poll 1e-9` was
/// taken) for runs that a faster look would not find any sooner in practice.
const MIN_POLL: Duration = Duration::from_millis(10);

/// `value` seconds as a duration of at least `at_least` (`ZERO`: any non-negative one;
/// a nanosecond: any positive one).
fn seconds(flag: &str, value: f64, at_least: Duration) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| *d >= at_least)
        .ok_or_else(|| {
            let what = if at_least >= Duration::from_millis(1) {
                format!("{flag} must be at least {} seconds", at_least.as_secs_f64())
            } else if at_least.is_zero() {
                format!("{flag} must be a number of seconds, 0 or more")
            } else {
                format!("{flag} must be a positive number of seconds")
            };
            output::UsageError(what).into()
        })
}

pub async fn worker(global: &GlobalArgs, args: WorkerArgs) -> anyhow::Result<ExitCode> {
    // An endpoint no client can use would pause every run this worker claims.
    args.endpoint.checked()?;
    let config = WorkerConfig {
        name: args.name.clone().unwrap_or_else(|| {
            let me = agent_host::run::Owner::current();
            format!("{}:{}", me.host, me.pid)
        }),
        concurrency: usize::try_from(args.concurrency).unwrap_or(1),
        lease_ttl: seconds("--lease-ttl", args.lease_ttl, MIN_LEASE_TTL)?,
        poll: seconds("--poll", args.poll, MIN_POLL)?,
        grace: seconds("--grace", args.grace, Duration::ZERO)?,
    };
    let url = global.database_url()?;
    // No `submit` could ever reach a database private to this process.
    if super::lives_in_this_process(&url) {
        return Err(output::UsageError(format!(
            "a worker cannot drive runs from --db {url}: it lives only in this process, so no `submit` could ever queue a run in it; \
             give the database the submitters use (sqlite://PATH or postgres://...)"
        ))
        .into());
    }
    // Opened once here for a clear error on a wrong URL; the worker reopens it as needed.
    crate::db::open_journal(global).await?.close().await;
    if let Some(floor) = args.sandbox {
        probe_floor(floor)?;
    }
    let connector = Arc::new(CliConnector {
        url,
        endpoint: args.endpoint,
        recorded_wins: None,
        mcp: args.mcp,
        sandbox_floor: args.sandbox,
        read_connections: WorkerConfig::read_connections(config.concurrency),
        clients: Default::default(),
    });
    let stop = CancellationToken::new();
    let second_signal = agent_host::signals::stop_on_signals(stop.clone())?;
    // The first signal stops the worker gracefully; a second one exits at once.
    let signals = tokio::spawn(async move {
        second_signal.await;
        std::process::exit(i32::from(crate::exit::Exit::Interrupted.code()));
    });
    output::note(&format!(
        "worker {} driving up to {} run(s); SIGINT/SIGTERM stops it",
        config.name, config.concurrency
    ));
    let observer = Arc::new(Lines { json: global.json });
    let summary = run_worker(connector, config, observer, stop).await;
    signals.abort();
    let summary = summary?;
    output::note(&format!(
        "worker stopped: {} claimed, {} completed, {} ended otherwise, {} released, {} lost, {} journal reopen(s)",
        summary.claimed,
        summary.completed,
        summary.ended_otherwise,
        summary.released,
        summary.lost,
        summary.reopened
    ));
    Ok(ExitCode::SUCCESS)
}

/// A worker inside another command (`agentctl serve --worker N`): drives up to
/// `concurrency` runs of the journal at `url` until `stop` fires; its events go to the log.
pub(crate) fn in_process(
    url: String,
    endpoint: EndpointArgs,
    concurrency: usize,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Result<agent_host::worker::WorkerSummary, HostError>> {
    struct Logged;
    impl WorkerObserver for Logged {
        fn event(&self, event: &WorkerEvent) {
            tracing::info!(target: "agentctl::serve", "worker: {}", describe(event));
        }
    }
    let me = agent_host::run::Owner::current();
    let config = WorkerConfig {
        name: format!("{}:{}:serve", me.host, me.pid),
        concurrency,
        lease_ttl: Duration::from_secs(15),
        poll: Duration::from_millis(250),
        grace: Duration::from_secs(5),
    };
    // A run's recorded endpoint is where its history goes: this server's own (a `--mock`
    // console over a shared database, say) drives only the runs that recorded none.
    let recorded_wins = EndpointArgs {
        base_url: None,
        mock: false,
        mock_script: None,
        ..endpoint.clone()
    };
    let connector = Arc::new(CliConnector {
        url,
        endpoint,
        recorded_wins: Some(recorded_wins),
        mcp: Vec::new(),
        sandbox_floor: None,
        read_connections: WorkerConfig::read_connections(concurrency),
        clients: Default::default(),
    });
    tokio::spawn(run_worker(connector, config, Arc::new(Logged), stop))
}
