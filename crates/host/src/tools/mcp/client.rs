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
//! - A call the run gives up (`cancel`) stops its effect as `shell` does its command's:
//!   the server is sent `notifications/cancelled` for it, then its process group is killed
//!   at once; the next call starts it again.
//! - The process group is killed from the spawn on however the start ends (a failed
//!   handshake, or the future dropped: a run interrupted while its server starts), not
//!   only once the server is live.
//! - Its stdout reaches rmcp through [`super::pump`]: an answer rmcp's codec would drop
//!   without a word (a lone surrogate escape, a line over 16 MiB) is mended, or replaced
//!   by an error for its request, so the call does not wait out its timeout.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientNotification, ClientRequest, JsonObject, ServerResult,
    Tool as McpToolInfo,
};
use rmcp::service::{PeerRequestOptions, RunningService, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
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
/// When, of [`STOP_TIMEOUT`], a server whose stdin is closed is sent SIGTERM.
const TERM_AFTER: Duration = Duration::from_secs(3);
/// How long telling a server that a call is cancelled may take before it is killed anyway
/// (the notice only waits for the connection's writer).
const NOTICE_TIMEOUT: Duration = Duration::from_secs(1);

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

/// A server's process group, killed when this is dropped (or [`Group::end`]ed): taken
/// from the spawn on, so that a start given up half way (a run interrupted while its
/// server starts, the future dropped) leaves no process behind either; the child's
/// `kill_on_drop` alone would end the group's leader only, and the watchdog and what the
/// server started would live as long as the host.
struct Group {
    /// Taken by the one kill of the group.
    pgid: Option<u32>,
    /// When the group's leader started: tells it from a later process given its pid.
    started: Option<u64>,
    /// A sandboxed server's protected paths that did not exist before it started.
    protected: Vec<std::path::PathBuf>,
}

impl Group {
    /// Kills the group now (once).
    fn end(&mut self) {
        end_server(self.pgid.take(), self.started, &self.protected);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.end();
    }
}

/// A live process and the number of the start that made it. Its whole process group is
/// killed when it is dropped, stopped or not (a drive dropped mid-run drops it unstopped).
struct Live {
    /// First, so that the group is killed before the connection drops (as it was stopped).
    group: Group,
    service: Connection,
    generation: u64,
    /// A sandboxed server's `TMPDIR`, removed when it stops.
    _tmp: Option<tempfile::TempDir>,
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
            .kill_on_drop(true)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|err| format!("cannot start `{}`: {err}", self.config.command))?;
        // From here on the whole group dies with this future, however it ends.
        let pgid = child.id();
        let group = Group {
            pgid,
            started: pgid.and_then(agent_sandbox::process::start_time),
            protected,
        };
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("its stdin or stdout could not be opened".into());
        };
        let stderr = child.stderr.take();
        let (to_rmcp, from_pump) = tokio::io::duplex(64 * 1024);
        let pump = tokio::spawn(super::pump::pump(stdout, to_rmcp));
        let transport = ServerIo {
            // The pump holds lines to its own limit; rmcp's would count the newline.
            io: AsyncRwTransport::new_client(from_pump, stdin)
                .with_max_line_length(super::pump::MAX_LINE.saturating_add(2)),
            child,
            pump,
        };
        if let Some(stderr) = stderr {
            let name = self.config.name.clone();
            tokio::spawn(super::stderr::drain(stderr, move |line| {
                tracing::info!(target: "agent_host::mcp", server = %name, "{line}");
            }));
        }
        tracing::debug!(target: "agent_host::mcp", server = %self.config.name, generation, "started");
        match tokio::time::timeout(START_TIMEOUT, ().serve(transport)).await {
            Ok(Ok(service)) => Ok(Live {
                group,
                service,
                generation,
                _tmp: tmp,
            }),
            // `group` drops: the server is killed.
            Ok(Err(err)) => Err(format!(
                "it did not complete the MCP handshake: {err} (its stderr is logged: RUST_LOG=agent_host::mcp=info shows it)"
            )),
            Err(_) => Err(format!(
                "it did not answer `initialize` within {} s",
                START_TIMEOUT.as_secs()
            )),
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
                self.kill_connection(generation, "listing the tools timed out")
                    .await;
                Err(ListError::TimedOut { limit, pages })
            }
        }
    }

    /// Calls `tool` with `args`. When `cancel` fires first, the call's effect is stopped as
    /// `shell` stops a command's: the server is told (`notifications/cancelled`) and its
    /// process group is killed at once (the next call starts it again); a server being
    /// started for the call is killed with its group.
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
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let sent = tokio::select! {
            sent = peer.send_request_with_option(request, PeerRequestOptions::no_options()) => sent,
            () = cancel.cancelled() => {
                // It may have been written: the server may be acting on it.
                self.kill_connection(generation, "the run was interrupted").await;
                return Err(CallError::Cancelled);
            }
        };
        let handle = match sent {
            Ok(handle) => handle,
            Err(err) => {
                self.drop_connection(generation).await;
                return Err(CallError::Broken(err.to_string()));
            }
        };
        let id = handle.id.clone();
        let limit = self.config.tool_timeout;
        let answer = tokio::select! {
            answer = tokio::time::timeout(limit, handle.await_response()) => answer,
            () = cancel.cancelled() => {
                // Told first, in case it stops cleanly, then killed (it may not listen).
                let notice = CancelledNotification::new(CancelledNotificationParam::new(
                    Some(id),
                    Some("the run was interrupted".into()),
                ));
                let _ = tokio::time::timeout(
                    NOTICE_TIMEOUT,
                    peer.send_notification(ClientNotification::CancelledNotification(notice)),
                )
                .await;
                self.kill_connection(generation, "the run was interrupted").await;
                return Err(CallError::Cancelled);
            }
        };
        let Ok(answer) = answer else {
            self.kill_connection(generation, "a call timed out").await;
            return Err(CallError::TimedOut(limit));
        };
        match answer {
            Ok(ServerResult::CallToolResult(result)) => Ok(result),
            // A result with no content at all reads as `{}` (as rmcp's own `call_tool` has it).
            Ok(ServerResult::EmptyResult(_)) => Ok(CallToolResult::default()),
            Ok(_) => Err(CallError::Broken(
                ServiceError::UnexpectedResponse.to_string(),
            )),
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
    /// time, or one the run gave up: it is not asked to exit first), if it is still the
    /// live one; `why` is logged.
    async fn kill_connection(&self, generation: u64, why: &str) {
        let mut live = self.live.lock().await;
        if live.as_ref().is_some_and(|l| l.generation == generation)
            && let Some(mut old) = live.take()
        {
            tracing::warn!(target: "agent_host::mcp", server = %self.config.name, "{why}; the server is stopped and the next call restarts it");
            old.group.end();
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

/// A server's stdio as rmcp uses it: its stdin as it is, its stdout through
/// [`super::pump`] (which mends or replaces what rmcp's codec would drop without a word).
struct ServerIo {
    io: AsyncRwTransport<RoleClient, tokio::io::DuplexStream, tokio::process::ChildStdin>,
    /// Killed when dropped (its group is [`Group`]'s).
    child: tokio::process::Child,
    pump: tokio::task::JoinHandle<()>,
}

impl Drop for ServerIo {
    fn drop(&mut self) {
        self.pump.abort();
    }
}

impl Transport<RoleClient> for ServerIo {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        Transport::<RoleClient>::send(&mut self.io, item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        Transport::<RoleClient>::receive(&mut self.io)
    }

    /// The stdio shutdown the spec describes: stdin closed, then a wait for the server to
    /// exit, then SIGTERM (the caller bounds the whole, then kills the group).
    async fn close(&mut self) -> Result<(), Self::Error> {
        Transport::<RoleClient>::close(&mut self.io).await?;
        if tokio::time::timeout(TERM_AFTER, self.child.wait())
            .await
            .is_err()
        {
            if let Some(pid) = self.child.id() {
                let _ = tokio::process::Command::new("kill")
                    .args(["-TERM", "--", &pid.to_string()])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .await;
            }
            let _ = self.child.wait().await;
        }
        Ok(())
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
