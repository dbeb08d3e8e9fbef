//! `agentctl serve`: the HTTP API and web console (agent-serve) over `--db`, optionally with
//! a worker in this process.

mod files;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use agent_host::run::{Budgets, NewRun};
use agent_host::tools::ApprovalMode;
use agent_runtime::CancellationToken;
use agent_serve::{ApiError, Limits, ServeOptions, SubmitRequest, Submitter, Token};
use anyhow::Context as _;
use clap::Args;
use futures::future::BoxFuture;

use super::run::EndpointArgs;
use crate::global::GlobalArgs;
use crate::output::{self, UsageError};

/// `agentctl serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on. Loopback by default; any other address needs --token-file
    /// (a random token printed to a terminal is not a credential to share).
    #[arg(long, default_value = "127.0.0.1:7878", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// Read the access token from this file's first line (at least 32 characters) instead of
    /// making a random one at start.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Accept this `Host` header too (a name this server is reached by; repeatable). Other
    /// hosts are refused (DNS rebinding).
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// The most live event streams (SSE) open at once.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub max_watchers: u64,
    /// Also drive submitted runs here: a worker with this many runs at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub worker: Option<u64>,
    /// Open the console in a browser (xdg-open) once listening, through a link that signs
    /// in once within 2 minutes (the token stays out of the opener's and the browser's
    /// command lines, which every local user can read).
    #[arg(long)]
    pub open: bool,
    /// The model endpoint runs submitted here record (and the in-process worker uses when a
    /// run recorded none).
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

pub async fn serve(global: &GlobalArgs, args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Every run submitted here records this endpoint: one no client can use is refused now,
    // not recorded in each run for a worker to refuse.
    args.endpoint.checked()?;
    let token = match &args.token_file {
        Some(path) => Token::from_file(path).map_err(|err| UsageError(err.to_string()))?,
        None if !args.listen.ip().is_loopback() => {
            return Err(UsageError(format!(
                "--listen {} is not a loopback address: give --token-file too, so the token is one you chose and share on purpose",
                args.listen
            ))
            .into());
        }
        None => Token::random(),
    };
    let url = global.database_url()?;
    let journal = crate::db::open_journal(global).await?;
    let context = crate::db::open_context(global).await?;
    let submitter = Arc::new(CliSubmitter {
        endpoint: args.endpoint.clone(),
        db_url: url.clone(),
    });
    let mut max_watchers = usize::try_from(args.max_watchers).unwrap_or(1024);
    let caps = files::fit(max_watchers, files::raise_open_files());
    if let Some(caps) = caps {
        output::note(&format!(
            "warning: the open-file limit (ulimit -n) leaves room for {} connections: serving at most {} at once, {} of them event streams (--max-watchers {})",
            caps.connections, caps.connections, caps.watchers, args.max_watchers
        ));
        max_watchers = caps.watchers;
    }
    let options = ServeOptions {
        token,
        allowed_hosts: args.allowed_hosts.clone(),
        max_watchers,
        submitter: Some(submitter),
        context: Some(context.clone()),
        who: format!("serve@{}", agent_host::run::Owner::this_host()),
        reopen: Some(reopen_journal(url.clone())),
    };
    let bound = agent_serve::bind(journal.clone(), args.listen, options)
        .await
        .map_err(|err| {
            let in_use = err.kind() == std::io::ErrorKind::AddrInUse;
            let what = format!("cannot listen on {}", args.listen);
            output::listen_error(err, in_use, what, args.listen, "--listen")
        })?;
    let bound = match caps {
        Some(caps) => bound.with_limits(Limits {
            max_connections: caps.connections,
            ..Limits::default()
        }),
        None => bound,
    };
    let stop = CancellationToken::new();
    // The first SIGINT or SIGTERM stops the server and lets the worker give its runs back;
    // a second one exits at once.
    let second_signal = agent_host::signals::stop_on_signals(stop.clone())?;
    let signals = tokio::spawn(async move {
        second_signal.await;
        std::process::exit(i32::from(crate::exit::Exit::Interrupted.code()));
    });
    let worker = args.worker.map(|n| {
        super::run::worker::in_process(
            url.clone(),
            args.endpoint.clone(),
            usize::try_from(n).unwrap_or(1),
            stop.clone(),
        )
    });
    if global.json {
        output::json_line(&serde_json::json!({
            "type": "serve.listening", "addr": bound.local_addr().to_string(),
            "url": bound.console_link(), "worker": args.worker,
        }))?;
    } else {
        output::line(&format!("console: {}", bound.console_link()))?;
        output::note(&format!(
            "agentctl serve on {}{}; the link signs a browser in until this server stops (keep it private). Ctrl-C (SIGINT) or SIGTERM stops it.",
            bound.local_addr(),
            args.worker
                .map(|n| format!(", driving up to {n} run(s) here"))
                .unwrap_or_default()
        ));
    }
    if args.open {
        // A one-time link: xdg-open's and the browser's arguments are readable by every
        // local user, and the token must not be among them.
        let _ = std::process::Command::new("xdg-open")
            .arg(bound.one_time_link())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
    let shutdown = {
        let stop = stop.clone();
        async move { stop.cancelled().await }
    };
    let served = bound.run(shutdown).await;
    stop.cancel();
    if let Some(worker) = worker {
        match worker.await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => output::note(&format!("warning: the in-process worker failed: {err}")),
            Err(err) => output::note(&format!("warning: the in-process worker panicked: {err}")),
        }
    }
    signals.abort();
    context.close().await;
    journal.close().await;
    served.context("the server failed")?;
    Ok(ExitCode::SUCCESS)
}

/// `POST /runs`: what `agentctl submit` does, with this server's endpoint.
struct CliSubmitter {
    endpoint: EndpointArgs,
    /// The database the runs are journaled in, hidden from their commands.
    db_url: String,
}

impl Submitter for CliSubmitter {
    fn submit<'a>(
        &'a self,
        journal: &'a agent_journal::Journal,
        request: SubmitRequest,
    ) -> BoxFuture<'a, Result<String, ApiError>> {
        Box::pin(async move {
            let new = self.new_run(request)?;
            Ok(agent_host::run::submit(journal, &new.1, new.0).await?)
        })
    }
}

impl CliSubmitter {
    fn new_run(
        &self,
        r: SubmitRequest,
    ) -> Result<(NewRun, agent_host::tools::ToolConfig), ApiError> {
        let approval = match r.approval.as_deref() {
            None | Some("default") => ApprovalMode::Default,
            Some("ask") => ApprovalMode::Ask,
            Some("auto") => ApprovalMode::Auto,
            Some("deny") => ApprovalMode::Deny,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "approval: `{other}` is not one of default, ask, auto, deny"
                )));
            }
        };
        let sandbox = match r.sandbox.as_deref() {
            None => None,
            Some(word) => Some(
                super::run::parse_sandbox_mode(word)
                    .map_err(|err| ApiError::bad_request(format!("sandbox: {err}")))?,
            ),
        };
        if r.max_steps == Some(0) || r.max_tokens == Some(0) {
            return Err(ApiError::bad_request(
                "max_steps, max_tokens: must be at least 1",
            ));
        }
        let workspace = PathBuf::from(&r.workspace);
        if !workspace.is_dir() {
            return Err(ApiError::invalid(
                "workspace: does not exist or is not a directory",
            ));
        }
        let tools = super::run::load_tool_config(&workspace, &[])
            .map_err(|err| ApiError::bad_request(format!("workspace configuration: {err}")))?;
        let new = NewRun::new(r.prompt, workspace)
            .model(r.model.unwrap_or_else(|| NewRun::DEFAULT_MODEL.to_string()))
            .instructions(r.instructions)
            .budgets(Budgets {
                max_steps: r.max_steps.unwrap_or(NewRun::DEFAULT_MAX_STEPS),
                max_tokens: r.max_tokens,
            })
            .approval(approval)
            .endpoint(self.endpoint.given());
        let new =
            super::run::with_sandbox(new, sandbox, &tools, &self.db_url, false).map_err(|err| {
                ApiError::bad_request(format!("sandbox: {}", crate::output::error_line(&err)))
            })?;
        Ok((new, tools))
    }
}

/// How the server opens its journal again after the writer failed: as it opened it first.
fn reopen_journal(url: String) -> agent_serve::Reopen {
    Arc::new(move || {
        let url = url.clone();
        Box::pin(async move { agent_journal::Journal::open(&url).await })
    })
}
