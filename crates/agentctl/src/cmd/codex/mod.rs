//! `agentctl codex run`: one whole Codex turn through `codex app-server`.
//!
//! The agent's text streams to stdout; approval requests are answered by `--approve`;
//! every notification and every answered server request is journaled (thread = the Codex
//! thread id, kind = `codex:<method>` or `codex-request:<method>`); the exit status comes
//! from the turn's status. With `--mock`, the Responses emulator runs in-process and a
//! temporary `CODEX_HOME` makes it Codex's model provider, so the turn runs offline.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agent_appserver::{
    AppServerClient, AppServerError, ApprovalDecision, ApprovalPolicy, ClientInfo, ClientOptions,
    ConnectionLost, Events, ServerCommand, ServerEvent, StderrTarget, TurnStatus,
};
use agent_host::codex::{DriveError, MockProvider, TurnEvent, TurnRequest, drive_turn, reply_json};
use agent_journal::Journal;
use agent_responses_mock::Script;
use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::global::GlobalArgs;
use crate::output::{json_line, with_hint};

/// How to install the pinned Codex CLI.
pub const INSTALL_HINT: &str = "install the Codex CLI with `npm install -g @openai/codex@0.171.0` \
     (or `cargo xtask interop codex` for a local copy under interop/codex), \
     then pass --codex-bin PATH or set CODEX_BIN";

/// Exit status of a turn that ended as `interrupted`.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Drive the Codex CLI through its app-server protocol.
#[derive(Debug, Subcommand)]
pub enum CodexCmd {
    /// Run one whole turn: start `codex app-server`, start a thread, send PROMPT, stream
    /// the agent's text to stdout, answer approval requests with --approve (decline by
    /// default), journal every notification under the Codex thread id, and exit with the
    /// turn's status: 0 completed, 1 failed, 130 interrupted.
    Run(RunArgs),
}

/// Options of `agentctl codex run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// What to ask Codex.
    pub prompt: String,

    /// The Codex CLI binary to run (`codex` on PATH by default).
    #[arg(long, env = "CODEX_BIN", value_name = "PATH", default_value = "codex")]
    pub codex_bin: PathBuf,

    /// Use the built-in Responses emulator as Codex's model provider (offline, no key):
    /// it runs in-process and a temporary CODEX_HOME points Codex at it.
    #[arg(long)]
    pub mock: bool,

    /// With --mock: the emulator script (a fixture file) to answer with.
    #[arg(long, value_name = "FILE", requires = "mock")]
    pub mock_script: Option<PathBuf>,

    /// Steer the running turn with TEXT as soon as the agent starts answering.
    #[arg(long, value_name = "TEXT")]
    pub steer: Option<String>,

    /// Interrupt the turn after N agent-message deltas (0: as soon as Codex reports the
    /// turn started).
    #[arg(long, value_name = "N")]
    pub interrupt_after: Option<u64>,

    /// How to answer Codex's approval requests (commands and file changes):
    /// decline, accept, accept-for-session or cancel.
    #[arg(long, value_name = "POLICY", default_value = "decline")]
    pub approve: ApprovalDecision,

    /// When Codex asks for approval: untrusted (before running anything not known safe),
    /// on-request (when the model asks) or never.
    #[arg(long, value_name = "WHEN", default_value = "untrusted",
          value_parser = ["untrusted", "on-request", "never"])]
    pub ask: String,

    /// Working directory of the thread (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    /// Do not journal the turn's notifications.
    #[arg(long)]
    pub no_journal: bool,
}

pub async fn run(global: &GlobalArgs, cmd: CodexCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        CodexCmd::Run(args) => run_turn(global, &args).await,
    }
}

/// Our `clientInfo`; `name` becomes Codex's `originator`.
pub fn client_info() -> ClientInfo {
    ClientInfo {
        name: "agentctl".into(),
        title: Some("agentctl".into()),
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

/// Starts `<codex_bin> app-server --listen stdio://` with extra environment variables.
/// The server's stderr is shown only when `RUST_LOG` is set (Codex logs noisily there).
pub fn spawn_codex(
    codex_bin: &Path,
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
    policy: ApprovalPolicy,
) -> anyhow::Result<(AppServerClient, Events)> {
    let mut command = ServerCommand::codex(codex_bin);
    for (key, value) in env {
        command = command.env(key, value);
    }
    if let Some(cwd) = cwd {
        command = command.current_dir(cwd);
    }
    let stderr = if std::env::var_os("RUST_LOG").is_some() {
        StderrTarget::Inherit
    } else {
        StderrTarget::Null
    };
    let command = command.stderr(stderr);
    AppServerClient::spawn(&command, ClientOptions::default(), policy).map_err(explain)
}

/// Adds the right hint to an app-server error.
pub fn explain(err: AppServerError) -> anyhow::Error {
    let hint = match &err {
        err if err.is_not_found() => INSTALL_HINT.to_owned(),
        AppServerError::Spawn { .. } => {
            format!("check that the binary is executable; {INSTALL_HINT}")
        }
        AppServerError::ConnectionLost(ConnectionLost::EndOfStream) => {
            "codex app-server exited; run with RUST_LOG=debug to see its stderr".into()
        }
        AppServerError::Timeout { .. } => {
            "codex app-server did not answer; run with RUST_LOG=debug to see its stderr".into()
        }
        _ => "run with RUST_LOG=debug to see the server's stderr".into(),
    };
    with_hint(err, hint)
}

async fn run_turn(global: &GlobalArgs, args: &RunArgs) -> anyhow::Result<ExitCode> {
    let cwd = match &args.cwd {
        // Checked here: a bad working directory would otherwise surface as a failure to
        // start the Codex binary.
        Some(dir) if !dir.is_dir() => {
            anyhow::bail!("--cwd `{}` is not a directory", dir.display())
        }
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let mock = if args.mock {
        let script = match args.mock_script.as_deref() {
            Some(path) => Script::load(path)
                .map_err(|err| with_hint(err, "see fixtures/codex/ for example scripts"))?,
            None => Script::default(),
        };
        Some(MockProvider::start(script).await?)
    } else {
        None
    };
    let env = mock.as_ref().map(MockProvider::env).unwrap_or_default();
    let journal = if args.no_journal {
        None
    } else {
        let url = global.database_url()?;
        Some(
            Journal::open(&url)
                .await
                .map_err(|err| with_hint(err, "check --db / AGENTCTL_DB, or pass --no-journal"))?,
        )
    };
    let policy = ApprovalPolicy::uniform(args.approve);
    let (client, mut events) = spawn_codex(&args.codex_bin, &env, Some(&cwd), policy)?;
    let request = TurnRequest {
        steer: args.steer.clone(),
        interrupt_after: args.interrupt_after,
        approval_policy: args.ask.clone(),
        ..TurnRequest::new(client_info(), &args.prompt, cwd)
    };
    let mut printer = Printer {
        json: global.json,
        mid_line: false,
    };
    let ctrl_c = || async {
        // An error installing the handler reads as a signal, as before: the turn is interrupted.
        let _ = tokio::signal::ctrl_c().await;
    };
    let outcome = drive_turn(
        &client,
        &mut events,
        &request,
        journal.clone(),
        ctrl_c,
        |event| printer.show(event),
    )
    .await;
    client.close().await;
    if let Some(journal) = journal {
        journal.close().await;
    }
    drop(mock);
    let report = outcome.map_err(|err| match err {
        DriveError::Setup(err) => explain(err),
        DriveError::Stopped(err) => {
            explain(err).context("codex app-server stopped before the turn completed")
        }
        DriveError::Journal(err) => anyhow::Error::new(err),
        DriveError::Observer(err) => err,
    })?;
    let turn = &report.turn;
    if global.json {
        json_line(
            &json!({"type": "turn", "threadId": report.thread_id, "turnId": turn.id, "status": turn.status.as_str(), "error": turn.error}),
        )?;
    }
    match turn.status {
        TurnStatus::Completed => Ok(ExitCode::SUCCESS),
        TurnStatus::Interrupted => {
            if !global.json {
                eprintln!("agentctl: the turn was interrupted");
            }
            Ok(ExitCode::from(EXIT_INTERRUPTED))
        }
        TurnStatus::Failed | TurnStatus::InProgress | TurnStatus::Unknown => {
            let message = turn
                .error
                .as_ref()
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("no error message")
                .to_owned();
            Err(with_hint(
                anyhow::anyhow!(
                    "the Codex turn ended as {}: {message}",
                    turn.status.as_str()
                ),
                "the events are in the journal: agentctl journal replay THREAD",
            ))
        }
    }
}

/// Shows the turn: the agent's text on stdout, the rest on stderr (or JSON lines).
struct Printer {
    json: bool,
    /// The agent's text so far does not end with a newline.
    mid_line: bool,
}

impl Printer {
    fn show(&mut self, event: TurnEvent<'_>) -> anyhow::Result<()> {
        match event {
            TurnEvent::ThreadStarted {
                thread_id,
                model,
                model_provider,
            } => {
                if self.json {
                    json_line(
                        &json!({"type": "thread", "threadId": thread_id, "model": model, "modelProvider": model_provider}),
                    )?;
                } else {
                    eprintln!("agentctl: codex thread {thread_id}");
                }
            }
            TurnEvent::Server(event) => self.server_event(event)?,
            TurnEvent::AgentText(delta) if !self.json => {
                self.text(delta)?;
                self.mid_line = !delta.ends_with('\n');
            }
            TurnEvent::AgentMessageBoundary | TurnEvent::TurnCompleted(_)
                if self.mid_line && !self.json =>
            {
                self.text("\n")?;
                self.mid_line = false;
            }
            // The turn may have finished first; the turn's own end decides the outcome.
            TurnEvent::SteerFailed(err) => eprintln!("agentctl: steer failed: {err}"),
            TurnEvent::InterruptFailed(err) => eprintln!("agentctl: interrupt failed: {err}"),
            TurnEvent::InterruptSignalled => {
                eprintln!("agentctl: interrupting the turn (Ctrl-C)");
            }
            // Nothing from Codex for a while (it retries an unreachable model by itself).
            TurnEvent::Quiet(after) => eprintln!(
                "agentctl: no event from Codex for {} s; still waiting (Ctrl-C interrupts the turn)",
                after.as_secs()
            ),
            TurnEvent::AgentText(_)
            | TurnEvent::AgentMessageBoundary
            | TurnEvent::TurnCompleted(_)
            | TurnEvent::SteerAccepted { .. }
            | TurnEvent::InterruptAccepted => {}
        }
        Ok(())
    }

    fn text(&mut self, text: &str) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
        Ok(())
    }

    fn server_event(&mut self, event: &ServerEvent) -> anyhow::Result<()> {
        match event {
            ServerEvent::Notification(note) if self.json => json_line(&json!({
                "type": "notification", "method": note.method, "params": note.params,
            })),
            ServerEvent::Request { request, reply } => {
                let reply = reply_json(reply);
                if self.json {
                    json_line(
                        &json!({"type": "serverRequest", "method": request.method, "params": request.params, "reply": reply}),
                    )
                } else {
                    let what = request
                        .params
                        .get("command")
                        .and_then(Value::as_str)
                        .unwrap_or(&request.method);
                    eprintln!(
                        "agentctl: {} asked: {what} -> answered {reply}",
                        request.method
                    );
                    Ok(())
                }
            }
            ServerEvent::Notification(_) => Ok(()),
        }
    }
}
