//! One MCP server over stdio: started on demand, restarted after it broke, stopped with
//! the run.
//!
//! Invariants:
//! - At most one live process per server handle; a call that finds none starts one.
//! - A transport failure (the process died, stdout closed, a malformed stream) drops the
//!   connection it happened on, and only that one: the next call starts a fresh process.
//!   An error the server answers (JSON-RPC error, `isError`) keeps the connection.
//! - The process never sees `OPENAI_API_KEY` or the database URLs unless the server's own
//!   `env` sets them; its stdin/stdout carry only the protocol; its stderr goes to the log
//!   (target `agent_host::mcp`), never to this process's stdout, a line at most
//!   [`super::stderr::MAX_LINE`] bytes long.
//! - It runs in a process group of its own (a terminal's Ctrl-C reaches only the host);
//!   [`ServerHandle::shutdown`] closes its stdin, waits, then kills the whole group, as
//!   dropping the handle does at once (a drive dropped mid-run). A
//!   watchdog in the group kills it once the host is gone, so after a `kill -9` of the host
//!   no process of it is left, not even one it started that ignores stdin (`npx` leaves
//!   such a grandchild).
//! - A sandboxed server (`sandbox = ...`) is started through the sandbox's entry point with
//!   a private `TMPDIR` that lives as long as the process; the watchdog stays outside, and
//!   after a `kill -9` of the host moves aside the protected paths the server created, as
//!   the host does when it stops the server (`agent_sandbox::protected`).
//! - A call that takes longer than the server's `tool_timeout_sec` fails, and the server
//!   is stopped; the next call starts it again. Listing the tools is held to the same
//!   limit.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, Tool as McpToolInfo};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceError, ServiceExt as _};
use tokio::sync::Mutex;

use super::super::ServerConfig;
use super::super::secrets::HIDDEN_ENV;
use super::super::watchdog::{move_aside, watchdog};
use super::listing::ListError;
use crate::sandbox::SandboxSpec;
use agent_runtime::CancellationToken;

/// How long a server may take to start and answer `initialize`.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server may take to exit once its stdin is closed (then SIGTERM, then kill).
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

type Connection = RunningService<RoleClient, ()>;

/// Starts the program `$(3 + $2)...` (directly, or through the sandbox's entry point) with
/// a watchdog in its process group that kills the whole group once process `$1` (this
/// host) is gone (`tools::watchdog`). `$3...` are the `$2` protected paths that did
/// not exist before a sandboxed server started (`agent_sandbox::protected`): when the host
/// is gone, the watchdog moves aside any that exists once the server is, as the host would
/// have. The watchdog holds none of the protocol's pipes.
const WRAPPER: &str = concat!(
    watchdog!(concat!(
        "if [ \"$2\" -gt 0 ]; then ",
        move_aside!("\"${@:3:$2}\""),
        " fi;"
    )),
    "shift $(($2 + 2)); exec \"$@\""
);

/// A live process and the number of the start that made it. Its whole process group is
/// killed when it is dropped, stopped or not (a drive dropped mid-run drops it unstopped):
/// the handle's own child alone would die, and the watchdog and what the server started
/// would live as long as the host.
struct Live {
    service: Connection,
    /// Taken by the one kill of the group.
    pgid: Option<u32>,
    /// When the group's leader started: tells it from a later process given its pid.
    started: Option<u64>,
    generation: u64,
    /// A sandboxed server's `TMPDIR`, removed when it stops.
    _tmp: Option<tempfile::TempDir>,
    /// A sandboxed server's protected paths that did not exist before it started.
    protected: Vec<std::path::PathBuf>,
}

impl Drop for Live {
    fn drop(&mut self) {
        end_server(self.pgid.take(), self.started, &self.protected);
    }
}

/// A cheap handle to one configured server (shared by its tools).
pub(crate) struct ServerHandle {
    config: ServerConfig,
    /// The sandbox it runs in (`off`: none).
    sandbox: SandboxSpec,
    cwd: std::path::PathBuf,
    live: Mutex<Option<Live>>,
    starts: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}

/// Why a call did not produce a result; the text is what the model is told (the server's
/// own text in it uncapped: the tool caps it).
#[derive(Debug)]
pub(crate) enum CallError {
    /// The server could not be started (or initialized).
    Start(String),
    /// No answer within the server's `tool_timeout_sec`; the server was stopped.
    TimedOut(Duration),
    /// The server answered with a protocol error; it stays up.
    Answered(String),
    /// The connection broke during the call; the server is restarted for the next one.
    Broken(String),
    /// The run was interrupted.
    Cancelled,
}

impl ServerHandle {
    /// A handle for `config`, whose processes run in `cwd` under `sandbox`. Nothing is
    /// started yet.
    pub(crate) fn new(
        config: ServerConfig,
        sandbox: SandboxSpec,
        cwd: &std::path::Path,
    ) -> Arc<ServerHandle> {
        Arc::new(ServerHandle {
            config,
            sandbox,
            cwd: cwd.to_path_buf(),
            live: Mutex::new(None),
            starts: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The server's name.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// The configuration it starts with.
    pub(crate) fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The live connection's peer, starting a process if there is none.
    async fn peer(&self) -> Result<(rmcp::Peer<RoleClient>, u64), String> {
        let mut live = self.live.lock().await;
        if let Some(l) = live.as_ref().filter(|l| !l.service.is_closed()) {
            return Ok((l.service.peer().clone(), l.generation));
        }
        if let Some(old) = live.take() {
            stop(old).await;
        }
        let started = self.start().await?;
        let peer = started.service.peer().clone();
        let generation = started.generation;
        *live = Some(started);
        Ok((peer, generation))
    }

    async fn start(&self) -> Result<Live, String> {
        let generation = self
            .starts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if let Some(why) = super::program::missing_for(&self.config, &self.cwd) {
            return Err(format!("cannot start it: {why}"));
        }
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(WRAPPER)
            .arg("agentctl-mcp")
            .arg(std::process::id().to_string())
            .current_dir(&self.cwd);
        let mut protected = Vec::new();
        let tmp = if self.sandbox.mode.is_sandboxed() {
            let tmp = crate::tools::scratch::scratch_dir("agentctl-mcp-")
                .map_err(|err| format!("cannot create its temp dir: {err}"))?;
            let mut policy = self.sandbox.policy(&self.cwd, Some(tmp.path()));
            // Out of the entry point's group, so that `kill(0)` from the server cannot end
            // the entry point, and killed with it however it ends (a server that left every
            // group, or its stopping killed the entry point first): the namespace goes too.
            policy.own_group = true;
            policy.dies_with_entry = true;
            protected = agent_sandbox::protected::missing(&policy);
            let launcher = crate::sandbox::launcher().map_err(|err| err.to_string())?;
            let program = std::ffi::OsString::from(&self.config.command);
            let args: Vec<std::ffi::OsString> = self.config.args.iter().map(Into::into).collect();
            cmd.arg(protected.len().to_string())
                .args(&protected)
                .arg(launcher)
                .args(
                    agent_sandbox::entry_args(&policy, &program, &args)
                        .map_err(|e| e.to_string())?,
                )
                .env("TMPDIR", tmp.path());
            Some(tmp)
        } else {
            cmd.arg("0")
                .arg(&self.config.command)
                .args(&self.config.args);
            None
        };
        for name in HIDDEN_ENV {
            cmd.env_remove(name);
        }
        cmd.envs(&self.config.env)
            .process_group(0)
            .kill_on_drop(true);
        let (transport, stderr) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|err| format!("cannot start `{}`: {err}", self.config.command))?;
        let pgid = transport.id();
        let started = pgid.and_then(agent_sandbox::process::start_time);
        if let Some(stderr) = stderr {
            let name = self.config.name.clone();
            tokio::spawn(super::stderr::drain(stderr, move |line| {
                tracing::info!(target: "agent_host::mcp", server = %name, "{line}");
            }));
        }
        tracing::debug!(target: "agent_host::mcp", server = %self.config.name, generation, "started");
        match tokio::time::timeout(START_TIMEOUT, ().serve(transport)).await {
            Ok(Ok(service)) => Ok(Live {
                service,
                pgid,
                started,
                generation,
                _tmp: tmp,
                protected,
            }),
            Ok(Err(err)) => {
                end_server(pgid, started, &protected);
                Err(format!(
                    "it did not complete the MCP handshake: {err} (its stderr is logged: RUST_LOG=agent_host::mcp=info shows it)"
                ))
            }
            Err(_) => {
                end_server(pgid, started, &protected);
                Err(format!(
                    "it did not answer `initialize` within {} s",
                    START_TIMEOUT.as_secs()
                ))
            }
        }
    }

    /// Every tool the server offers (all pages, see [`super::listing`]), within the
    /// server's `tool_timeout_sec`. A server that fails to list its tools is stopped (killed
    /// at once when it ran out of time).
    pub(crate) async fn list_tools(&self) -> Result<Vec<McpToolInfo>, ListError> {
        let (peer, generation) = self.peer().await.map_err(ListError::Start)?;
        let limit = self.config.tool_timeout;
        let mut pages = 0;
        let listed = tokio::time::timeout(
            limit,
            super::listing::list_all(&peer, &self.config.name, &mut pages),
        )
        .await;
        match listed {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(err)) => {
                self.drop_connection(generation).await;
                Err(err)
            }
            Err(_) => {
                self.kill_connection(generation).await;
                Err(ListError::TimedOut { limit, pages })
            }
        }
    }

    /// Calls `tool` with `args`; stops waiting when `cancel` fires.
    pub(crate) async fn call(
        &self,
        tool: &str,
        args: JsonObject,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, CallError> {
        let (peer, generation) = tokio::select! {
            peer = self.peer() => peer.map_err(CallError::Start)?,
            () = cancel.cancelled() => return Err(CallError::Cancelled),
        };
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
        let limit = self.config.tool_timeout;
        let answer = tokio::select! {
            answer = tokio::time::timeout(limit, peer.call_tool(params)) => answer,
            () = cancel.cancelled() => return Err(CallError::Cancelled),
        };
        let Ok(answer) = answer else {
            self.kill_connection(generation).await;
            return Err(CallError::TimedOut(limit));
        };
        match answer {
            Ok(result) => Ok(result),
            // The code first: the message may be cut.
            Err(ServiceError::McpError(err)) => Err(CallError::Answered(format!(
                "JSON-RPC error {}: {}",
                err.code.0, err.message
            ))),
            Err(err) => {
                self.drop_connection(generation).await;
                Err(CallError::Broken(err.to_string()))
            }
        }
    }

    /// Drops the connection of start `generation` if it is still the live one.
    async fn drop_connection(&self, generation: u64) {
        let mut live = self.live.lock().await;
        if live.as_ref().is_some_and(|l| l.generation == generation)
            && let Some(old) = live.take()
        {
            tracing::warn!(target: "agent_host::mcp", server = %self.config.name, "connection lost; the next call restarts it");
            stop(old).await;
        }
    }

    /// Kills the process group of start `generation` at once (a call it did not answer in
    /// time: it is not asked to exit first), if it is still the live one.
    async fn kill_connection(&self, generation: u64) {
        let mut live = self.live.lock().await;
        if live.as_ref().is_some_and(|l| l.generation == generation)
            && let Some(mut old) = live.take()
        {
            tracing::warn!(target: "agent_host::mcp", server = %self.config.name, "a call timed out; the server is stopped and the next call restarts it");
            end_server(old.pgid.take(), old.started, &old.protected);
            stop(old).await;
        }
    }

    /// Stops the live process, if any (the run ended).
    pub(crate) async fn shutdown(&self) {
        if let Some(old) = self.live.lock().await.take() {
            stop(old).await;
        }
    }
}

/// Closes the connection (stdin first: the stdio shutdown the spec describes), then kills
/// what is left of the process group (as `live` drops).
async fn stop(mut live: Live) {
    let _ = live.service.close_with_timeout(STOP_TIMEOUT).await;
}

/// Kills a server's process group and its leader's children, then moves aside what it
/// created of `protected` once they are gone (a server that did not start, and [`Live`]'s
/// drop). A sandboxed server is the first process of a PID namespace, in a process group of
/// its own, killed by the kernel when its entry point (the group's leader) dies
/// (`Policy::dies_with_entry`), whoever killed that first; its end takes the namespace,
/// a daemon that left every group included. The leader's children are read, to be killed
/// and awaited, only while its pid still names it (`started`): once reaped, the pid may name
/// another process; the leader is then gone, and its namespace with it or about to be.
fn end_server(pgid: Option<u32>, started: Option<u64>, protected: &[std::path::PathBuf]) {
    let Some(pgid) = pgid else { return };
    let children = match started {
        Some(at) if agent_sandbox::process::start_time(pgid) == Some(at) => {
            agent_sandbox::process::children(pgid)
        }
        _ => Vec::new(),
    };
    crate::tools::shell::kill_group_and(pgid, &children);
    if !protected.is_empty() && children.is_empty() {
        // No process to await: give the kernel a moment to end the namespace.
        std::thread::sleep(Duration::from_millis(100));
    }
    crate::tools::shell::move_aside_after(&children, protected);
}
