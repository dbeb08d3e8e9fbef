//! `agentctl codex run`: one whole Codex turn through `codex app-server`.
//!
//! The agent's text streams to stdout; approval requests are answered by `--approve`;
//! every notification and every answered server request is journaled (thread = the Codex
//! thread id, kind = `codex:<method>` or `codex-request:<method>`); the exit status comes
//! from the turn's status. With `--mock`, the Responses emulator runs in-process and a
//! temporary `CODEX_HOME` makes it Codex's model provider, so the turn runs offline.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agent_appserver::{
    AppServerClient, AppServerError, ApprovalDecision, ApprovalPolicy, ClientInfo, ClientOptions,
    ConnectionLost, Events, ServerCommand, ServerEvent, StderrTarget, ThreadStartParams,
    TurnNotification, TurnStartParams, TurnStatus, UserInput,
};
use agent_journal::{Journal, MAX_KIND_BYTES, MAX_PAYLOAD_BYTES, NewEvent};
use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use tokio::sync::mpsc;

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
        Some(mock::MockProvider::start(args.mock_script.as_deref()).await?)
    } else {
        None
    };
    let env = mock
        .as_ref()
        .map(mock::MockProvider::env)
        .unwrap_or_default();
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
    let outcome = drive(
        &client,
        &mut events,
        args,
        &cwd,
        journal.clone(),
        global.json,
    )
    .await;
    client.close().await;
    if let Some(journal) = journal {
        journal.close().await;
    }
    drop(mock);
    let (status, turn) = outcome?;
    match status {
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
                anyhow::anyhow!("the Codex turn ended as {}: {message}", status.as_str()),
                "the events are in the journal: agentctl journal replay THREAD",
            ))
        }
    }
}

/// Results of steer/interrupt calls, sent while the event loop keeps consuming events.
enum Control {
    Steered(Result<String, AppServerError>),
    Interrupted(Result<(), AppServerError>),
}

/// Handshake, thread, turn, then events until our turn completes.
async fn drive(
    client: &AppServerClient,
    events: &mut Events,
    args: &RunArgs,
    cwd: &Path,
    journal: Option<Journal>,
    json_out: bool,
) -> anyhow::Result<(TurnStatus, agent_appserver::Turn)> {
    // Events that arrive during the setup calls wait here, so the queue never fills up
    // behind a response; they are journaled under the thread id like the rest.
    let mut early = VecDeque::new();
    while_buffering(events, &mut early, client.initialize(client_info()))
        .await
        .map_err(explain)?;
    let thread_params = ThreadStartParams {
        cwd: Some(cwd.display().to_string()),
        ..ThreadStartParams::default()
    };
    let thread = while_buffering(events, &mut early, client.thread_start(&thread_params))
        .await
        .map_err(explain)?;
    let thread_id = thread.thread.id;
    let recorder = Recorder::start(journal, thread_id.clone());
    if json_out {
        json_line(
            &json!({"type": "thread", "threadId": thread_id, "model": thread.model, "modelProvider": thread.model_provider}),
        )?;
    } else {
        eprintln!("agentctl: codex thread {thread_id}");
    }
    let turn_params = TurnStartParams {
        thread_id: thread_id.clone(),
        input: vec![UserInput::text(&args.prompt)],
        approval_policy: Some(args.ask.clone()),
        ..TurnStartParams::default()
    };
    let turn = while_buffering(events, &mut early, client.turn_start(&turn_params))
        .await
        .map_err(explain)?
        .turn;
    let turn_id = turn.id.clone();

    let (control_tx, mut control_rx) = mpsc::channel::<Control>(4);
    let mut steer = args.steer.clone();
    let mut interrupt_after = args.interrupt_after;
    let mut deltas = 0u64;
    let mut mid_line = false;
    let mut printer = Printer { json: json_out };

    let interrupt = |client: &AppServerClient, tx: &mpsc::Sender<Control>| {
        let (client, tx, thread_id, turn_id) = (
            client.clone(),
            tx.clone(),
            thread_id.clone(),
            turn_id.clone(),
        );
        tokio::spawn(async move {
            let result = client.turn_interrupt(&thread_id, &turn_id).await;
            let _ = tx.send(Control::Interrupted(result)).await;
        });
    };

    let finished = loop {
        let event = match early.pop_front() {
            Some(event) => Some(event),
            None => tokio::select! {
            event = events.recv() => event,
            Some(control) = control_rx.recv() => {
                match control {
                    Control::Steered(Ok(id)) => tracing::info!(turn = %id, "steer accepted"),
                    // The turn may have finished first; the turn's own end decides the outcome.
                    Control::Steered(Err(err)) => eprintln!("agentctl: steer failed: {err}"),
                    Control::Interrupted(Ok(())) => tracing::info!("interrupt accepted"),
                    Control::Interrupted(Err(err)) => eprintln!("agentctl: interrupt failed: {err}"),
                }
                continue;
            }
            _ = tokio::signal::ctrl_c() => {
                eprintln!("agentctl: interrupting the turn (Ctrl-C)");
                interrupt(client, &control_tx);
                continue;
            }
            // Nothing from Codex for a while (it retries an unreachable model by itself).
            () = tokio::time::sleep(QUIET_NOTICE) => {
                eprintln!(
                    "agentctl: no event from Codex for {} s; still waiting (Ctrl-C interrupts the turn)",
                    QUIET_NOTICE.as_secs()
                );
                continue;
            }
            },
        };
        let Some(event) = event else {
            let reason = events.end_reason().unwrap_or(ConnectionLost::EndOfStream);
            recorder.finish().await?;
            return Err(explain(AppServerError::ConnectionLost(reason)))
                .context("codex app-server stopped before the turn completed");
        };
        recorder.record(&event).await?;
        printer.event(&event)?;
        let ServerEvent::Notification(note) = &event else {
            continue;
        };
        let typed = match TurnNotification::parse(note) {
            Ok(typed) => typed,
            Err(err) => {
                tracing::warn!(method = %note.method, error = %err, "unexpected notification shape");
                None
            }
        };
        match typed {
            Some(TurnNotification::AgentMessageDelta {
                turn_id: t, delta, ..
            }) if t == turn_id => {
                if !json_out {
                    printer.text(&delta)?;
                    mid_line = !delta.ends_with('\n');
                }
                deltas += 1;
                if let Some(text) = steer.take() {
                    let (client, tx, thread_id, turn_id) = (
                        client.clone(),
                        control_tx.clone(),
                        thread_id.clone(),
                        turn_id.clone(),
                    );
                    tokio::spawn(async move {
                        let result = client
                            .turn_steer(&thread_id, &turn_id, vec![UserInput::text(text)])
                            .await
                            .map(|r| r.turn_id);
                        let _ = tx.send(Control::Steered(result)).await;
                    });
                }
                if interrupt_after.is_some_and(|n| deltas >= n) {
                    interrupt_after = None;
                    interrupt(client, &control_tx);
                }
            }
            Some(
                TurnNotification::ItemStarted { item, .. }
                | TurnNotification::ItemCompleted { item, .. },
            ) if item.kind == "agentMessage" && mid_line && !json_out => {
                printer.text("\n")?;
                mid_line = false;
            }
            // Codex refuses an interrupt until it reports the turn started.
            Some(TurnNotification::TurnStarted { turn, .. })
                if turn.id == turn_id && interrupt_after == Some(0) =>
            {
                interrupt_after = None;
                interrupt(client, &control_tx);
            }
            Some(TurnNotification::TurnCompleted { turn, .. }) if turn.id == turn_id => {
                if mid_line && !json_out {
                    printer.text("\n")?;
                }
                break turn;
            }
            _ => {}
        }
    };
    recorder.finish().await?;
    if json_out {
        json_line(
            &json!({"type": "turn", "threadId": thread_id, "turnId": turn_id, "status": finished.status.as_str(), "error": finished.error}),
        )?;
    }
    Ok((finished.status, finished))
}

/// Silence from Codex after which `codex run` says it is still waiting.
const QUIET_NOTICE: std::time::Duration = std::time::Duration::from_secs(15);

/// Awaits `call` while moving arriving events into `early`.
async fn while_buffering<T>(
    events: &mut Events,
    early: &mut VecDeque<ServerEvent>,
    call: impl Future<Output = T>,
) -> T {
    tokio::pin!(call);
    loop {
        tokio::select! {
            out = &mut call => return out,
            Some(event) = events.recv() => early.push_back(event),
        }
    }
}

/// Writes what the user sees.
struct Printer {
    json: bool,
}

impl Printer {
    fn text(&mut self, text: &str) -> anyhow::Result<()> {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
        Ok(())
    }

    fn event(&mut self, event: &ServerEvent) -> anyhow::Result<()> {
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

fn reply_json(reply: &Result<Value, agent_appserver::RpcError>) -> Value {
    match reply {
        Ok(result) => json!({"result": result}),
        Err(err) => json!({"error": {"code": err.code, "message": err.message}}),
    }
}

/// Journals events on its own task, in batches, so printing never waits for an fsync.
/// Nothing is dropped: the channel is bounded and `record` waits for room.
struct Recorder {
    tx: Option<mpsc::Sender<NewEvent>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<u64>>>,
    thread: String,
}

impl Recorder {
    fn start(journal: Option<Journal>, thread: String) -> Self {
        let Some(journal) = journal else {
            return Recorder {
                tx: None,
                task: None,
                thread,
            };
        };
        let (tx, mut rx) = mpsc::channel::<NewEvent>(1024);
        let task = tokio::spawn(async move {
            let mut written = 0u64;
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < 256 {
                    match rx.try_recv() {
                        Ok(event) => batch.push(event),
                        Err(_) => break,
                    }
                }
                let n = batch.len() as u64;
                journal
                    .append_batch(batch)
                    .await
                    .context("cannot journal the turn's events")?;
                written += n;
            }
            Ok(written)
        });
        Recorder {
            tx: Some(tx),
            task: Some(task),
            thread,
        }
    }

    async fn record(&self, event: &ServerEvent) -> anyhow::Result<()> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let (kind, payload) = match event {
            ServerEvent::Notification(note) => {
                (format!("codex:{}", note.method), note.params.clone())
            }
            ServerEvent::Request { request, reply } => (
                format!("codex-request:{}", request.method),
                json!({"id": request.id, "params": request.params, "reply": reply_json(reply)}),
            ),
        };
        let kind = truncate(kind, MAX_KIND_BYTES);
        let size = payload.to_string().len();
        let payload = if size > MAX_PAYLOAD_BYTES {
            json!({"omitted": "payload larger than the journal's limit", "bytes": size})
        } else {
            payload
        };
        tx.send(NewEvent::new(self.thread.clone(), kind, payload))
            .await
            .map_err(|_| anyhow::anyhow!("the journal writer stopped"))
    }

    async fn finish(mut self) -> anyhow::Result<()> {
        drop(self.tx.take());
        if let Some(task) = self.task.take() {
            let written = task.await.context("the journal task failed")??;
            tracing::info!(written, thread = %self.thread, "journaled the turn's events");
        }
        Ok(())
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// `--mock`: the Responses emulator as Codex's model provider.
mod mock {
    use std::ffi::OsString;
    use std::path::Path;

    use agent_appserver::codex_home;
    use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
    use anyhow::Context as _;

    use crate::output::with_hint;

    /// The emulator, running in-process, and the temporary `CODEX_HOME` whose
    /// `config.toml` points Codex at it. Both live as long as this value.
    pub struct MockProvider {
        server: MockServer,
        home: tempfile::TempDir,
    }

    impl MockProvider {
        /// Starts the emulator with `script` (default: echo the prompt) and writes the config.
        pub async fn start(script: Option<&Path>) -> anyhow::Result<Self> {
            let script = match script {
                Some(path) => Script::load(path)
                    .map_err(|err| with_hint(err, "see fixtures/codex/ for example scripts"))?,
                None => Script::default(),
            };
            let server = MockServer::start(MockConfig::new(script))
                .await
                .context("cannot start the Responses emulator")?;
            let home = tempfile::Builder::new()
                .prefix("agentctl-codex-home-")
                .tempdir()
                .context("cannot create a temporary CODEX_HOME")?;
            codex_home::write_provider_config(home.path(), &server.base_url())
                .context("cannot write the temporary CODEX_HOME/config.toml")?;
            tracing::info!(base_url = %server.base_url(), codex_home = %home.path().display(), "emulator started");
            Ok(MockProvider { server, home })
        }

        /// Environment for the Codex child: its home and the provider's key.
        pub fn env(&self) -> Vec<(OsString, OsString)> {
            tracing::debug!(addr = %self.server.addr(), "codex uses the emulator");
            vec![
                ("CODEX_HOME".into(), self.home.path().into()),
                (codex_home::PROVIDER_KEY_ENV.into(), MOCK_API_KEY.into()),
            ]
        }
    }
}
