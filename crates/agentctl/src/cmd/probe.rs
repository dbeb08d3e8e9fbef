//! `agentctl probe codex`: the app-server probe. Starts `codex app-server`, does the handshake
//! (`initialize`, then `initialized`), prints the keys of the result and stops the server.
//! It creates no thread and sends no model request.

use std::path::PathBuf;
use std::process::ExitCode;

use agent_appserver::ApprovalPolicy;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::cmd::codex::{ServerStderr, client_info, explain, launch};
use crate::global::GlobalArgs;
use crate::output::{line, typed_line};

/// Check that an external agent server starts and speaks our protocol.
#[derive(Debug, Subcommand)]
pub enum ProbeCmd {
    /// Start `codex app-server --listen stdio://`, do the handshake (initialize +
    /// initialized), print the keys of the initialize result, then stop it. Creates no
    /// thread and calls no model, so it needs neither network nor key.
    Codex(CodexProbeArgs),
}

/// Options of `agentctl probe codex`.
#[derive(Debug, Args)]
pub struct CodexProbeArgs {
    /// The Codex CLI binary to run (`codex` on PATH by default).
    #[arg(long, env = "CODEX_BIN", value_name = "PATH", default_value = "codex")]
    pub codex_bin: PathBuf,
}

pub async fn run(global: &GlobalArgs, cmd: ProbeCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        ProbeCmd::Codex(args) => probe_codex(global, &args).await,
    }
}

async fn probe_codex(global: &GlobalArgs, args: &CodexProbeArgs) -> anyhow::Result<ExitCode> {
    let server_stderr = ServerStderr::new();
    let (client, _events) = launch(&args.codex_bin, &server_stderr)
        .spawn(Vec::new(), ApprovalPolicy::default())
        .map_err(|err| explain(err, &server_stderr))?;
    // SIGINT or SIGTERM stops the probe, and the server with it: the default action of
    // either would end this process and leave the server running.
    let stop = agent_runtime::CancellationToken::new();
    let signals = tokio::spawn(agent_host::signals::stop_on_signals(stop.clone())?);
    let result = tokio::select! {
        result = client.initialize(client_info()) => Some(result),
        () = stop.cancelled() => None,
    };
    client.close().await;
    signals.abort();
    let Some(result) = result else {
        return Ok(crate::exit::Exit::Interrupted.into());
    };
    let init = result.map_err(|err| explain(err, &server_stderr))?;
    if global.json {
        typed_line(
            "probe.codex",
            json!({
                "ok": true,
                "keys": init.keys,
                "user_agent": init.user_agent,
                "codex_home": init.codex_home,
                "platform_family": init.platform_family,
                "platform_os": init.platform_os,
            }),
        )?;
    } else {
        line(&format!(
            "initialize succeeded; returned keys: {}",
            init.keys.join(", ")
        ))?;
        if let Some(agent) = &init.user_agent {
            line(&format!("user agent: {agent}"))?;
        }
        line("No thread or model request was created.")?;
    }
    Ok(ExitCode::SUCCESS)
}
