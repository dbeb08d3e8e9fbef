//! The connection: a child process and three tasks, behind a cheap cloneable handle.
//!
//! - The **reader** task owns the child's stdout. It resolves responses, answers server
//!   requests through the [`ServerRequestHandler`], and pushes every notification and
//!   answered request into a bounded queue. When the queue is full it waits (backpressure):
//!   nothing is dropped. When the stream ends or a line is bad, it fails every pending call.
//!   When the child has exited but its stdout stays open (a process it started holds it),
//!   the reader reads what the child wrote, then, once the output has been silent for
//!   [`EXIT_DRAIN_SILENCE`], ends as if the stream had ended, with the exit status.
//! - The **writer** task owns the child's stdin; every outgoing line goes through it.
//! - The **supervisor** task owns the child process: it publishes the child's exit, and
//!   carries out `close`: close stdin, SIGTERM to the child's process group, wait the grace
//!   period, then kill the group. `close`
//!   is bounded even if nobody drains the event queue.

use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, watch};

use crate::calls::{Delivery, Outcome, PendingCalls};
use crate::error::{AppServerError, ConnectionLost};
use crate::options::{ClientOptions, ServerCommand, StderrTarget};
use crate::policy::ServerRequestHandler;
use crate::wire::{self, Incoming, Notification, RpcError, ServerRequest};

/// Something the server sent that was not a response to one of our calls.
#[derive(Debug, Clone, PartialEq)]
pub enum AppServerEvent {
    /// A notification.
    Notification(Notification),
    /// A server request, and the reply this client already sent for it.
    Request {
        /// What the server asked.
        request: ServerRequest,
        /// What the handler answered (already sent).
        reply: Result<Value, RpcError>,
    },
}

/// The queue of [`AppServerEvent`]s, in the order the server sent them.
///
/// Consume it while calls are in flight: when it is full the reader waits, and responses
/// queued behind the unread events wait too.
#[derive(Debug)]
pub struct Events {
    rx: mpsc::Receiver<AppServerEvent>,
    calls: Arc<PendingCalls>,
}

impl Events {
    /// The next event; `None` once the connection has ended and every event was received.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future loses no event; the next call returns it.
    pub async fn recv(&mut self) -> Option<AppServerEvent> {
        self.rx.recv().await
    }

    /// The next event if one is queued now, without waiting; `None` when none is (also
    /// once the connection has ended and every event was received).
    pub fn try_recv(&mut self) -> Option<AppServerEvent> {
        self.rx.try_recv().ok()
    }

    /// Why the connection ended, once it has.
    pub fn end_reason(&self) -> Option<ConnectionLost> {
        self.calls.lost()
    }
}

/// After the child exited, how long its still-open output may stay silent before the
/// reader concludes that only a process the child started holds it, and ends. What the
/// child wrote before exiting is in the pipe already, so it is read well within this.
pub const EXIT_DRAIN_SILENCE: Duration = Duration::from_millis(500);

/// How the child process ended after [`AppServerClient::close`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseOutcome {
    /// The child's exit status, when it could be collected.
    pub status: Option<ExitStatus>,
    /// True when the child did not stop within the grace period and was killed.
    pub killed: bool,
}

/// A handle to one `codex app-server` process. Clones share the connection.
#[derive(Debug, Clone)]
pub struct AppServerClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    program: String,
    options: ClientOptions,
    calls: Arc<PendingCalls>,
    outgoing: mpsc::Sender<Vec<u8>>,
    shutdown: watch::Sender<bool>,
    close_request: mpsc::Sender<Duration>,
    exit: watch::Receiver<Option<CloseOutcome>>,
    pid: Option<u32>,
}

/// Removes a call's pending entry when the call's future ends, however it ends.
struct ForgetOnDrop<'a> {
    calls: &'a PendingCalls,
    id: i64,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        self.calls.forget(self.id);
    }
}

impl AppServerClient {
    /// Starts the server and the connection tasks. Must be called inside a Tokio runtime.
    pub fn spawn(
        command: &ServerCommand,
        options: ClientOptions,
        handler: impl ServerRequestHandler,
    ) -> Result<(AppServerClient, Events), AppServerError> {
        let program = command.program_display();
        let mut cmd = Command::new(command.resolved_program());
        for key in &command.env_removed {
            cmd.env_remove(key);
        }
        cmd.args(&command.args)
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        // A process group of its own: a terminal's Ctrl-C (SIGINT to the foreground group)
        // reaches this process alone, which decides what it means (`agentctl codex run`
        // interrupts the turn); in our group the server died of it mid-turn.
        #[cfg(unix)]
        cmd.process_group(0);
        if let Some(dir) = &command.cwd {
            cmd.current_dir(dir);
        }
        match &command.stderr {
            StderrTarget::Inherit => {
                cmd.stderr(Stdio::inherit());
            }
            StderrTarget::Null => {
                cmd.stderr(Stdio::null());
            }
            StderrTarget::File(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| AppServerError::Spawn {
                        program: program.clone(),
                        source,
                    })?;
                cmd.stderr(Stdio::from(file));
            }
        }
        let mut child = cmd.spawn().map_err(|source| AppServerError::Spawn {
            program: program.clone(),
            source,
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(AppServerError::Spawn {
                program,
                source: std::io::Error::other("the child's stdio pipes are missing"),
            });
        };
        let pid = child.id();
        Ok(Self::start(
            program, options, handler, child, stdin, stdout, pid,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        program: String,
        options: ClientOptions,
        handler: impl ServerRequestHandler,
        child: Child,
        stdin: ChildStdin,
        stdout: impl AsyncRead + Unpin + Send + 'static,
        pid: Option<u32>,
    ) -> (AppServerClient, Events) {
        let calls = Arc::new(PendingCalls::default());
        let (outgoing, outgoing_rx) = mpsc::channel::<Vec<u8>>(64);
        let (events_tx, events_rx) = mpsc::channel(options.event_capacity.max(1));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (close_request, close_rx) = mpsc::channel(1);
        let (exit_tx, exit) = watch::channel(None);

        tokio::spawn(write_loop(
            stdin,
            outgoing_rx,
            shutdown_rx.clone(),
            Arc::clone(&calls),
        ));
        tokio::spawn(read_loop(ReadLoop {
            stdout,
            max_line: options.max_line_bytes,
            calls: Arc::clone(&calls),
            handler,
            outgoing: outgoing.clone(),
            events: events_tx,
            shutdown: shutdown_rx,
            exit: exit.clone(),
        }));
        tokio::spawn(supervise(child, pid, close_rx, exit_tx));

        let client = AppServerClient {
            inner: Arc::new(Inner {
                program,
                options,
                calls: Arc::clone(&calls),
                outgoing,
                shutdown,
                close_request,
                exit,
                pid,
            }),
        };
        (
            client,
            Events {
                rx: events_rx,
                calls,
            },
        )
    }

    /// The program this client started.
    pub fn program(&self) -> &str {
        &self.inner.program
    }

    /// The child's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.inner.pid
    }

    /// The options this client was started with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// Why the connection ended, if it has.
    pub fn connection_lost(&self) -> Option<ConnectionLost> {
        self.inner.calls.lost()
    }

    /// How many calls are waiting for a response.
    pub fn pending_calls(&self) -> usize {
        self.inner.calls.len()
    }

    /// Calls `method` with the default timeout.
    ///
    /// # Cancel safety
    ///
    /// As for [`call_with_timeout`](Self::call_with_timeout).
    pub async fn call(&self, method: &str, params: Option<Value>) -> Result<Value, AppServerError> {
        self.call_with_timeout(method, params, self.inner.options.call_timeout)
            .await
    }

    /// Calls `method` and waits at most `timeout` for its response. Always resolves: with
    /// the result, the server's error, [`AppServerError::Timeout`] (or
    /// [`AppServerError::TimeoutWithUnknownAnswers`] when, meanwhile, the server answered
    /// ids this client never used), or the connection loss.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future does not withdraw the request: once queued for
    /// the writer (normally at the first poll) it is still written and the server acts on it.
    /// The call's pending entry goes with the future, so a late answer is dropped as unknown
    /// and [`pending_calls`](Self::pending_calls) does not count it.
    pub async fn call_with_timeout(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, AppServerError> {
        let (id, waiter, mark) = self.inner.calls.register()?;
        // Answered, timed out or dropped: the entry goes (a no-op once answered).
        let _entry = ForgetOnDrop {
            calls: &self.inner.calls,
            id,
        };
        let line = wire::request_line(id, method, params);
        let exchange = async {
            if self.inner.outgoing.send(line).await.is_err() {
                return Outcome::Lost(
                    self.lost_or(ConnectionLost::WriteFailed("the writer has stopped".into())),
                );
            }
            match waiter.await {
                Ok(outcome) => outcome,
                Err(_) => Outcome::Lost(self.lost_or(ConnectionLost::EndOfStream)),
            }
        };
        let outcome = match tokio::time::timeout(timeout, exchange).await {
            Ok(outcome) => outcome,
            Err(_) => {
                let method = method.to_owned();
                return Err(match self.inner.calls.unknown_since(mark) {
                    Some(unknown) => AppServerError::TimeoutWithUnknownAnswers {
                        method,
                        after: timeout,
                        unknown,
                    },
                    None => AppServerError::Timeout {
                        method,
                        after: timeout,
                    },
                });
            }
        };
        match outcome {
            Outcome::Result(value) => Ok(value),
            Outcome::Error(err) => Err(AppServerError::Rpc {
                method: method.to_owned(),
                code: err.code,
                message: err.message,
                data: err.data.map(Box::new),
            }),
            Outcome::Lost(reason) => Err(AppServerError::ConnectionLost(reason)),
        }
    }

    /// Sends a notification (no response expected).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the notification is queued for the writer only as the future completes,
    /// so a dropped future sends nothing.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), AppServerError> {
        if let Some(reason) = self.inner.calls.lost() {
            return Err(reason.into());
        }
        let line = wire::notification_line(method, params);
        self.inner.outgoing.send(line).await.map_err(|_| {
            AppServerError::ConnectionLost(
                self.lost_or(ConnectionLost::WriteFailed("the writer has stopped".into())),
            )
        })
    }

    fn lost_or(&self, fallback: ConnectionLost) -> ConnectionLost {
        self.inner.calls.lost().unwrap_or(fallback)
    }

    /// Stops the server: fails pending calls, closes its stdin, sends SIGTERM, waits the
    /// grace period, then kills it. Bounded even when the event queue is full and unread.
    /// Calling it again returns the same outcome.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not stop the shutdown: its first poll fails the pending calls
    /// and asks the supervisor task to stop the server, which it then does on its own. Only
    /// the wait is given up; a later `close` returns the outcome.
    pub async fn close(&self) -> CloseOutcome {
        self.close_within(self.inner.options.close_grace).await
    }

    /// [`close`](Self::close), waiting `grace` (instead of the configured grace period)
    /// between SIGTERM and the kill; `Duration::ZERO` kills at once. Only the first close
    /// of a client chooses the grace period.
    ///
    /// # Cancel safety
    ///
    /// As for [`close`](Self::close).
    pub async fn close_within(&self, grace: Duration) -> CloseOutcome {
        self.inner.calls.lose(ConnectionLost::ClosedByClient);
        self.inner.shutdown.send_replace(true);
        let _ = self.inner.close_request.try_send(grace);
        let mut exit = self.inner.exit.clone();
        let outcome = match exit.wait_for(Option::is_some).await {
            Ok(state) => *state,
            Err(_) => None,
        };
        outcome.unwrap_or(CloseOutcome {
            status: None,
            killed: false,
        })
    }
}

async fn write_loop(
    mut stdin: ChildStdin,
    mut outgoing: mpsc::Receiver<Vec<u8>>,
    mut shutdown: watch::Receiver<bool>,
    calls: Arc<PendingCalls>,
) {
    loop {
        let line = tokio::select! {
            line = outgoing.recv() => line,
            _ = shutdown.wait_for(|stop| *stop) => None,
        };
        let Some(line) = line else { break };
        let written = async {
            stdin.write_all(&line).await?;
            stdin.flush().await
        };
        if let Err(err) = written.await {
            tracing::debug!(error = %err, "app-server stdin write failed");
            calls.lose(ConnectionLost::WriteFailed(err.to_string()));
            break;
        }
    }
    // Dropping stdin closes it: the server's cue to exit.
    drop(stdin);
}

struct ReadLoop<R, H> {
    stdout: R,
    max_line: usize,
    calls: Arc<PendingCalls>,
    handler: H,
    outgoing: mpsc::Sender<Vec<u8>>,
    events: mpsc::Sender<AppServerEvent>,
    shutdown: watch::Receiver<bool>,
    /// The supervisor's report of the child's exit.
    exit: watch::Receiver<Option<CloseOutcome>>,
}

/// Reads lines until the stream ends, a line is bad, the client closes, or the child has
/// exited and its output stays silent (see [`EXIT_DRAIN_SILENCE`]).
async fn read_loop<R, H>(mut ctx: ReadLoop<R, H>)
where
    R: AsyncRead + Unpin,
    H: ServerRequestHandler,
{
    let mut reader = BufReader::new(ctx.stdout);
    let mut buf = Vec::new();
    let reason = loop {
        let line = tokio::select! {
            line = read_line(&mut reader, &mut buf, ctx.max_line) => line,
            _ = ctx.shutdown.wait_for(|stop| *stop) => break ConnectionLost::ClosedByClient,
            // Restarted with every line: the silence is counted from the last one read.
            status = exited_then_silent(&mut ctx.exit) => break ConnectionLost::ServerExited { status },
        };
        match line {
            Ok(true) => {}
            Ok(false) => break ConnectionLost::EndOfStream,
            Err(reason) => break reason,
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let event = match wire::parse_line(&buf) {
            Ok(Incoming::Response { id, outcome }) => {
                let outcome = match outcome {
                    Ok(value) => Outcome::Result(value),
                    Err(err) => Outcome::Error(err),
                };
                match ctx.calls.resolve(&id, outcome) {
                    Delivery::Delivered => {}
                    Delivery::Late => {
                        tracing::debug!(%id, "an answer nobody waits for any more (its call timed out or was dropped)");
                    }
                    Delivery::Unknown => {
                        tracing::warn!(%id, "the app-server answered with an id this client never used; the answer is dropped");
                    }
                }
                continue;
            }
            Ok(Incoming::Request(request)) => {
                let reply = ctx.handler.handle(&request);
                let line = wire::reply_line(&request.id, &reply);
                let sent = tokio::select! {
                    sent = ctx.outgoing.send(line) => sent.is_ok(),
                    _ = ctx.shutdown.wait_for(|stop| *stop) => break ConnectionLost::ClosedByClient,
                };
                if !sent {
                    tracing::debug!(method = %request.method, "could not send the reply to a server request");
                }
                AppServerEvent::Request { request, reply }
            }
            Ok(Incoming::Notification(note)) => AppServerEvent::Notification(note),
            Err(reason) => break reason,
        };
        // Backpressure: wait for room rather than drop; a close still gets through.
        tokio::select! {
            sent = ctx.events.send(event) => {
                if sent.is_err() {
                    tracing::debug!("event queue receiver dropped; events are no longer delivered");
                }
            }
            _ = ctx.shutdown.wait_for(|stop| *stop) => break ConnectionLost::ClosedByClient,
        }
    };
    tracing::debug!(%reason, "app-server reader stopped");
    ctx.calls.lose(reason);
}

/// Resolves with the child's exit status once the child has exited and
/// [`EXIT_DRAIN_SILENCE`] has passed since this future was first polled after that; never
/// when the exit is not reported.
async fn exited_then_silent(
    exit: &mut watch::Receiver<Option<CloseOutcome>>,
) -> Option<ExitStatus> {
    // Copied out: the watch's read lock must not be held across an await.
    let reported = exit
        .wait_for(Option::is_some)
        .await
        .map(|outcome| outcome.and_then(|o| o.status));
    let Ok(status) = reported else {
        return std::future::pending().await;
    };
    tokio::time::sleep(EXIT_DRAIN_SILENCE).await;
    status
}

/// Reads one line into `buf` without its line ending. `Ok(false)` at end of stream.
///
/// # Cancel safety
///
/// Not cancel safe: the bytes of a partly read line are consumed from `reader` and left in
/// `buf`, and the next call clears `buf` first, so that line's beginning is lost.
pub async fn read_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    buf: &mut Vec<u8>,
    max_line: usize,
) -> Result<bool, ConnectionLost> {
    buf.clear();
    let limit = u64::try_from(max_line)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    let n = (&mut *reader)
        .take(limit)
        .read_until(b'\n', buf)
        .await
        .map_err(|err| ConnectionLost::ReadFailed(err.to_string()))?;
    if n == 0 {
        return Ok(false);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    }
    if buf.len() > max_line {
        return Err(ConnectionLost::LineTooLong { limit: max_line });
    }
    Ok(true)
}

/// Owns the child: reports its exit (the reader then ends once the child's output is
/// silent), or stops it on request (or when every handle is gone).
async fn supervise(
    mut child: Child,
    pid: Option<u32>,
    mut close_rx: mpsc::Receiver<Duration>,
    exit: watch::Sender<Option<CloseOutcome>>,
) {
    let outcome = tokio::select! {
        status = child.wait() => CloseOutcome { status: status.ok(), killed: false },
        grace = close_rx.recv() => {
            let grace = grace.unwrap_or(Duration::ZERO);
            signal_group(pid, "-TERM").await;
            match tokio::time::timeout(grace, child.wait()).await {
                Ok(status) => CloseOutcome { status: status.ok(), killed: false },
                Err(_) => {
                    // The group: a wrapper's child (npm's `codex` is a Node script that
                    // starts the native binary) would outlive a kill of the wrapper alone.
                    signal_group(pid, "-KILL").await;
                    if let Err(err) = child.start_kill() {
                        tracing::debug!(error = %err, "killing the app-server failed");
                    }
                    CloseOutcome { status: child.wait().await.ok(), killed: true }
                }
            }
        }
    };
    exit.send_replace(Some(outcome));
}

/// Sends `signal` (`-TERM`, `-KILL`) to the child's process group, which it leads (best
/// effort; `kill` is used because this workspace forbids `unsafe`, and so direct `libc`
/// calls).
async fn signal_group(pid: Option<u32>, signal: &str) {
    #[cfg(unix)]
    if let Some(pid) = pid {
        let result = Command::new("kill")
            .args([signal, "--", &format!("-{pid}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
        if let Err(err) = result {
            tracing::debug!(error = %err, signal, "signalling the app-server's process group failed");
        }
    }
    #[cfg(not(unix))]
    let _ = (pid, signal);
}
