//! `agentctl codex run`: one whole Codex turn through `codex app-server`.
//!
//! The agent's text streams to stdout; approval requests are answered by `--approve`;
//! every notification and every answered server request is journaled (thread = the Codex
//! thread id, kind = `codex:<method>` or `codex-request:<method>`); the exit status comes
//! from the turn's status. What is printed and journaled has the API key masked and NUL
//! as U+FFFD; a working directory that is not UTF-8 is refused (exit 2). With `--mock`, the Responses emulator runs in-process and a
//! temporary `CODEX_HOME` makes it Codex's model provider, so the turn runs offline.

mod render;
mod stderr;

pub use stderr::ServerStderr;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agent_appserver::{
    AppServerError, ApprovalDecision, ApprovalPolicy, ClientInfo, ConnectionLost, TurnStatus,
};
use agent_host::codex::{
    AppServerLaunch, CodexTurn, CodexTurnError, DriveError, TurnEvent, TurnRequest, run_codex_turn,
};
use agent_responses_mock::Script;
use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::Value;

use crate::global::GlobalArgs;
use crate::output::{UsageError, with_hint};

/// How to install the pinned Codex CLI.
pub const INSTALL_HINT: &str = "install the Codex CLI with `npm install -g @openai/codex@0.171.0` \
     (or `cargo xtask interop codex` for a local copy under interop/codex), \
     then pass --codex-bin PATH or set CODEX_BIN";

/// Drive the Codex CLI through its app-server protocol.
#[derive(Debug, Subcommand)]
pub enum CodexCmd {
    /// Run one whole turn: start `codex app-server`, start a thread, send PROMPT, stream
    /// the agent's text to stdout, answer approval requests with --approve (decline by
    /// default), journal every notification under the Codex thread id, and exit with the
    /// turn's status: 0 completed, 1 failed, 130 interrupted. Ctrl-C or SIGTERM interrupts
    /// the turn; a second one gives up on it and stops the app-server.
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

    /// Steer the running turn with TEXT as soon as the agent starts answering (a warning
    /// says so when the turn ended before).
    #[arg(long, value_name = "TEXT")]
    pub steer: Option<String>,

    /// Interrupt the turn after N pieces of the agent's text (deltas, or a message sent
    /// whole; 0: as soon as Codex reports the turn started).
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

/// How to start `codex app-server` from `codex_bin`, its stderr going to `stderr`.
pub fn launch(codex_bin: &Path, stderr: &ServerStderr) -> AppServerLaunch {
    AppServerLaunch {
        stderr: stderr.target(),
        ..AppServerLaunch::new(codex_bin)
    }
}

/// Adds the right hint to an app-server error; a server that exited is quoted from
/// `stderr`, when it wrote anything there.
pub fn explain(err: AppServerError, stderr: &ServerStderr) -> anyhow::Error {
    let exited = matches!(
        &err,
        AppServerError::ConnectionLost(
            ConnectionLost::EndOfStream
                | ConnectionLost::WriteFailed(_)
                | ConnectionLost::ServerExited { .. }
        )
    );
    if exited && let Some(tail) = stderr.tail() {
        return with_hint(
            err,
            format!(
                "codex app-server exited; its stderr ended with:\n{tail}\n\
                 (is it the Codex CLI, version 0.171 or later?)"
            ),
        );
    }
    let hint = match &err {
        err if err.is_not_found() => INSTALL_HINT.to_owned(),
        AppServerError::Spawn { .. } => {
            format!("check that the binary is executable; {INSTALL_HINT}")
        }
        // A server that exits at once (an old `codex` without `app-server`, a wrong binary)
        // ends its output or, when our first write comes first, breaks the pipe: one hint.
        AppServerError::ConnectionLost(
            ConnectionLost::EndOfStream
            | ConnectionLost::WriteFailed(_)
            | ConnectionLost::ServerExited { .. },
        ) => "codex app-server exited; run with RUST_LOG=debug to see its stderr \
              (is it the Codex CLI, version 0.171 or later?)"
            .into(),
        AppServerError::Timeout { .. } => {
            "codex app-server did not answer; run with RUST_LOG=debug to see its stderr".into()
        }
        _ => "run with RUST_LOG=debug to see the server's stderr".into(),
    };
    with_hint(err, hint)
}

async fn run_turn(global: &GlobalArgs, args: &RunArgs) -> anyhow::Result<ExitCode> {
    // Bad input is refused before Codex starts, as `run` refuses it (exit 2).
    if args.prompt.trim().is_empty() {
        return Err(UsageError("the prompt is empty".into()).into());
    }
    if args
        .steer
        .as_deref()
        .is_some_and(|text| text.trim().is_empty())
    {
        return Err(UsageError("the --steer text is empty".into()).into());
    }
    let cwd = match &args.cwd {
        // Checked here: a bad working directory would otherwise surface as a failure to
        // start the Codex binary.
        Some(dir) if !dir.is_dir() => {
            return Err(UsageError(format!("--cwd `{}` is not a directory", dir.display())).into());
        }
        // Absolute: the server runs in this directory, so Codex would resolve a relative
        // thread cwd from inside it a second time (`sub` became `sub/sub`).
        Some(dir) => std::fs::canonicalize(dir)
            .map_err(|err| UsageError(format!("--cwd `{}`: {err}", dir.display())))?,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    // The protocol carries the thread's cwd as a string: a lossy conversion would name
    // another directory (refused as `run` refuses a workspace that is not UTF-8).
    if cwd.to_str().is_none() {
        let what = if args.cwd.is_some() {
            "--cwd"
        } else {
            "the current directory"
        };
        return Err(UsageError(format!(
            "{what} `{}` is not valid UTF-8, which Codex cannot take as a working directory",
            cwd.display()
        ))
        .into());
    }
    let mock_script = match (args.mock, args.mock_script.as_deref()) {
        (false, _) => None,
        (true, Some(path)) => Some(Script::load(path).map_err(|err| {
            with_hint(
                UsageError(format!("--mock-script {}: {err}", path.display())),
                "see fixtures/codex/ for example scripts",
            )
        })?),
        (true, None) => Some(Script::default()),
    };
    let journal = if args.no_journal {
        None
    } else {
        Some(crate::db::open_journal(global).await?)
    };
    let server_stderr = ServerStderr::new();
    let turn = CodexTurn {
        launch: AppServerLaunch {
            cwd: Some(cwd.clone()),
            ..launch(&args.codex_bin, &server_stderr)
        },
        mock_script,
        approvals: ApprovalPolicy::uniform(args.approve),
        request: TurnRequest {
            steer: args.steer.clone(),
            interrupt_after: args.interrupt_after,
            approval_policy: args.ask.clone(),
            ..TurnRequest::new(client_info(), &args.prompt, cwd)
        },
    };
    let mut printer = render::Printer::new(global.json);
    let signals = interrupt_signals().context("cannot listen for Ctrl-C and SIGTERM")?;
    let interrupt = || {
        let fired = std::sync::Arc::clone(&signals.fired);
        async move { fired.notified().await }
    };
    let journaled = journal.is_some();
    let thread_started = std::cell::Cell::new(false);
    let turn = run_codex_turn(turn, journal, interrupt, |event| {
        if matches!(event, TurnEvent::ThreadStarted { .. }) {
            thread_started.set(true);
        }
        printer.show(event)
    });
    // Before the thread exists there is no turn to interrupt, and a handshake call that
    // gets no answer would hold a signal for its whole timeout: a signal then stops the
    // command at once (dropping the session stops the server and the emulator).
    let before_thread = async {
        let mut count = signals.count.clone();
        loop {
            if count.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            if !thread_started.get() {
                break;
            }
        }
    };
    let result = tokio::select! {
        result = turn => Some(result),
        () = before_thread => None,
    };
    let Some(result) = result else {
        crate::output::note("agentctl: interrupted before the turn started");
        return Ok(crate::exit::Exit::Interrupted.into());
    };
    // What follows goes to stderr: on a terminal it would continue the agent's last line.
    printer.end_line()?;
    let report = result.map_err(|err| match err {
        CodexTurnError::Spawn(err) | CodexTurnError::Drive(DriveError::Setup(err)) => {
            explain(err, &server_stderr)
        }
        CodexTurnError::Drive(DriveError::Stopped(err)) => explain(err, &server_stderr)
            .context("codex app-server stopped before the turn completed"),
        CodexTurnError::Drive(DriveError::Journal(err)) => anyhow::Error::new(err),
        CodexTurnError::Drive(DriveError::Observer(err)) => err,
        CodexTurnError::Provider(err) => anyhow::Error::new(err),
        other => anyhow::anyhow!("{other}"),
    })?;
    let turn = &report.turn;
    render::turn_ended(global.json, &report)?;
    match turn.status {
        TurnStatus::Completed => Ok(ExitCode::SUCCESS),
        TurnStatus::Interrupted => Ok(crate::exit::Exit::Interrupted.into()),
        TurnStatus::Failed | TurnStatus::InProgress | TurnStatus::Unknown => {
            let message = turn
                .error
                .as_ref()
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("no error message")
                .to_owned();
            let err = anyhow::anyhow!(
                "the Codex turn ended as {}: {message}",
                turn.status.as_str()
            );
            Err(if journaled {
                with_hint(
                    err,
                    format!(
                        "the turn's events are in the journal: `{}`",
                        global.suggest(&["journal", "replay", "--thread", &report.thread_id])
                    ),
                )
            } else {
                err
            })
        }
    }
}

/// SIGINT (Ctrl-C) and SIGTERM, as they arrive.
struct Signals {
    /// Notified once for each: both interrupt the turn, and a second one gives up on it. A
    /// signal that arrives while nobody waits is kept for the next wait.
    fired: std::sync::Arc<tokio::sync::Notify>,
    /// How many have arrived.
    count: tokio::sync::watch::Receiver<u64>,
}

/// Listens for SIGINT and SIGTERM from now on. SIGTERM's default action ended the process at
/// once, the turn still running in Codex.
fn interrupt_signals() -> std::io::Result<Signals> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let fired = std::sync::Arc::new(tokio::sync::Notify::new());
    let (counter, count) = tokio::sync::watch::channel(0u64);
    let notify = std::sync::Arc::clone(&fired);
    tokio::spawn(async move {
        loop {
            let got = tokio::select! {
                got = int.recv() => got,
                got = term.recv() => got,
            };
            if got.is_none() {
                break;
            }
            notify.notify_one();
            counter.send_modify(|n| *n = n.saturating_add(1));
        }
    });
    Ok(Signals { fired, count })
}
