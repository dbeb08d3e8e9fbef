//! `agentctl mock serve`: run the Responses API emulator as a server.

use std::path::PathBuf;

use agent_responses_mock::{Latency, MockConfig, MockServer, Script};
use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::global::GlobalArgs;
use crate::output::{line, typed_line};

/// The local Responses API emulator.
#[derive(Debug, Subcommand)]
pub enum MockCmd {
    /// Serve POST /v1/responses (JSON and SSE), POST /v1/responses/compact,
    /// GET /v1/responses/{id} and the WebSocket mode (GET /v1/responses) on loopback. Prints
    /// the base URL (`http://ADDR/v1`; with --json a `mock.listening` line) as the first
    /// stdout line, then runs until SIGINT or SIGTERM (exit 0). Without a script, HTTP
    /// echoes the last user input, so any client can hold a conversation with it, and the
    /// WebSocket mode plays the steering story (a call of the first tool, then text). Keeps
    /// the 1000 most recent HTTP requests (GET /__mock/requests, at most 32 MiB) and
    /// stored responses (at most 64 MiB); bodies are limited to 2 MiB.
    Serve(ServeArgs),
}

/// Emulator options.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on, on loopback only (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: String,
    /// A script file (see fixtures/responses/README.md). Default: HTTP echoes every
    /// conversation; the WebSocket mode calls the first function tool offered with a
    /// `query` and then answers with text (the steering story, see the README).
    #[arg(long, value_name = "FILE", conflicts_with = "fixture")]
    pub script: Option<PathBuf>,
    /// A built-in fixture instead of a file: direct, ptc, async, compact (the `api`
    /// stories) or run (the story `agentctl run` plays offline).
    #[arg(long, value_name = "MODE")]
    pub fixture: Option<String>,
    /// Require this bearer key (default: any non-empty key; a missing key is still 401).
    #[arg(
        long,
        env = "AGENTCTL_MOCK_KEY",
        value_name = "KEY",
        hide_env_values = true,
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    pub require_key: Option<String>,
    /// Without a script: how long a fresh WebSocket response of the steering story waits
    /// for a `response.steer` before it completes (0: it does not wait). A script's
    /// rules hold a reply with `hold_for_steer_ms` instead.
    #[arg(long, value_name = "MS", default_value_t = 5000,
          conflicts_with_all = ["script", "fixture"])]
    pub steer_window_ms: u64,
    /// Model latency: milliseconds before a reply's first output (streamed or not), for
    /// replies whose script sets no `latency` of its own.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub first_token_ms: u64,
    /// Model latency: output tokens per second after the first (4 characters a token);
    /// default: no limit.
    #[arg(long, value_name = "RATE", value_parser = positive_rate)]
    pub tokens_per_second: Option<f64>,
}

fn positive_rate(s: &str) -> Result<f64, String> {
    let min = agent_responses_mock::MIN_TOKENS_PER_SECOND;
    match s.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate >= min => Ok(rate),
        Ok(rate) if rate.is_finite() && rate > 0.0 => Err(format!(
            "`{s}` tokens per second is slower than the slowest the emulator takes ({min})"
        )),
        _ => Err(format!(
            "`{s}` is not a positive number of tokens per second"
        )),
    }
}

/// `addr` (`HOST:PORT`) when every address it names is a loopback one: the emulator takes
/// any key by default, shows every recorded request at `/__mock/requests` and keeps idle
/// connections open, which is for this machine only.
fn loopback_addr(addr: &str) -> anyhow::Result<String> {
    use std::net::ToSocketAddrs as _;
    let usage = |why: String| crate::output::UsageError(format!("--addr `{addr}`: {why}"));
    let resolved: Vec<std::net::SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|err| {
            usage(format!(
                "not an address to listen on ({err}); give HOST:PORT, such as 127.0.0.1:0"
            ))
        })?
        .collect();
    if resolved.is_empty() || resolved.iter().any(|a| !a.ip().is_loopback()) {
        return Err(usage(
            "the emulator serves on loopback only (127.0.0.1, ::1 or localhost): it takes any key by default and shows every request it recorded".into(),
        )
        .into());
    }
    Ok(addr.to_string())
}

pub async fn run(global: &GlobalArgs, cmd: MockCmd) -> anyhow::Result<std::process::ExitCode> {
    let MockCmd::Serve(args) = cmd;
    let addr = loopback_addr(&args.addr)?;
    let mut config = match (&args.script, &args.fixture) {
        (Some(path), _) => MockConfig::new(Script::load(path).map_err(|err| {
            // Bad input, named by its file (a read error names it already).
            let text = match err {
                agent_responses_mock::ScriptError::Read { .. }
                | agent_responses_mock::ScriptError::TooLarge { .. } => err.to_string(),
                other => format!("{}: {other}", path.display()),
            };
            crate::output::UsageError(text)
        })?),
        (None, Some(mode)) => {
            MockConfig::for_mode(mode).map_err(|err| crate::output::UsageError(err.to_string()))?
        }
        (None, None) => {
            let mut config = MockConfig::new(Script::default());
            config.ws.steer_window = (args.steer_window_ms > 0)
                .then(|| std::time::Duration::from_millis(args.steer_window_ms));
            config
        }
    };
    config.api_key = args.require_key.clone();
    config.latency = Latency {
        first_token_ms: args.first_token_ms,
        tokens_per_second: args.tokens_per_second,
    };
    let server = MockServer::bind(&addr, config).await.map_err(|err| {
        let in_use = matches!(&err, agent_responses_mock::MockError::Bind { source, .. }
            if source.kind() == std::io::ErrorKind::AddrInUse);
        let what = "cannot start the emulator".to_string();
        crate::output::listen_error(err, in_use, what, &addr, "--addr")
    })?;
    // SIGINT or SIGTERM stops the server (exit 0): serving leaves nothing half-done. The
    // handlers are installed before the base URL is printed, so a client that signals as
    // soon as it reads it is not killed by SIGTERM's default action.
    let stop = agent_runtime::CancellationToken::new();
    let signals = agent_host::signals::stop_on_signals(stop.clone())
        .context("cannot wait for SIGINT or SIGTERM")?;
    let signals = tokio::spawn(signals);
    if global.json {
        typed_line(
            "mock.listening",
            json!({"base_url": server.base_url(), "addr": server.addr().to_string()}),
        )?;
    } else {
        line(&server.base_url())?;
    }
    tracing::info!(addr = %server.addr(), "emulator listening");
    tokio::select! {
        () = server.wait() => {}
        () = stop.cancelled() => {}
    }
    signals.abort();
    Ok(std::process::ExitCode::SUCCESS)
}
