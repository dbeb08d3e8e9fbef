//! `shell {command, timeout_ms?}`: `bash -c` in the workspace.
//!
//! Invariants:
//! - The command runs in a process group of its own; on timeout, cancellation or when the
//!   call is dropped, the whole group is killed (grandchildren included), and a sandboxed
//!   command's PID namespace with it (a daemon that left the group included).
//! - Its environment has no `OPENAI_API_KEY` (nor the database URL); stdin is an empty
//!   pipe; the key's value is masked in its output.
//! - It ends when bash exits: output still arriving 200 ms later (a background job holding
//!   the pipes) is cut, and the group is killed. A watchdog in the group kills it when the
//!   host process dies, so a command never outlives a `kill -9` of the host.
//! - At most [`OUTPUT_CAP`] bytes of output reach the model: the head and the tail, with a
//!   note of how much was left out between them.
//! - A non-zero exit and a timeout are failures whose text carries the output so far.
//! - Under a sandboxed mode the command starts through the sandbox's entry point (the
//!   watchdog stays outside it, so it can still see the host), with a private `TMPDIR`
//!   removed after the call; its output's first lines say the mode. A call with
//!   `sandbox_permissions: "require_escalated"` runs unsandboxed: the driver lets it
//!   start only after a human approved it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt as _;

use agent_runtime::{Tool, ToolContext, ToolFailure};

use super::secrets::{HIDDEN_ENV, mask_key};
use super::watchdog::{move_aside, watchdog};
use super::{Workspace, arg_str, arg_u64, object, only_keys};
use crate::sandbox::SandboxSpec;

/// Bytes of output kept: half from the start, half from the end.
pub const OUTPUT_CAP: usize = 32 * 1024;
/// `timeout_ms` when the model gives none.
pub(crate) const DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// The longest `timeout_ms` accepted.
pub(crate) const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// The shell tool of one workspace.
#[derive(Debug, Clone)]
pub struct Shell {
    pub(crate) workspace: Workspace,
    /// The run's sandbox; `None` under `off`.
    pub(crate) sandbox: Option<SandboxSpec>,
}

/// The value of `sandbox_permissions` that asks to run outside the sandbox.
pub const ESCALATE: &str = "require_escalated";

/// Whether a call of tool `name` with `arguments` (JSON text) asks to leave the sandbox.
pub fn asks_escalation(name: &str, arguments: &str) -> bool {
    name == "shell"
        && serde_json::from_str::<Value>(arguments)
            .ok()
            .and_then(|v| v.get("sandbox_permissions").cloned())
            .is_some_and(|v| v == ESCALATE)
}

/// Runs `$2` in bash with a watchdog in its process group that kills the whole group once
/// process `$1` (this host) is gone, so a command outlives neither `kill -9` of the host
/// nor its normal end. The watchdog holds none of the command's pipes.
const WRAPPER: &str = concat!(watchdog!(""), "exec bash -c \"$2\"");

/// [`WRAPPER`], with the command started through the sandbox's entry point `$3` under the
/// policy `$4`; the watchdog stays outside the sandbox. `$5...` are the protected paths
/// that did not exist before the command (`agent_sandbox::protected`): once the host is
/// gone, the watchdog gives the entry point up to a second to end (it moves them aside
/// itself once its command is killed), then moves aside any that still exists, as the
/// host would have, before it kills the group.
const SANDBOXED_WRAPPER: &str = concat!(
    watchdog!(move_aside!("\"${@:5}\"")),
    "exec \"$3\" __sandbox-exec \"$4\" -- bash -c \"$2\""
);

/// How long output is still read after the command exited (a background job that keeps
/// the pipes open is killed with the group after this).
const DRAIN: Duration = Duration::from_millis(200);

impl Tool for Shell {
    fn name(&self) -> &str {
        "shell"
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        let obj = object(args)?;
        only_keys(
            obj,
            &[
                "command",
                "timeout_ms",
                "sandbox_permissions",
                "justification",
            ],
        )?;
        let command = arg_str(obj, "command")?.ok_or("missing `command` (a string)")?;
        if command.trim().is_empty() {
            return Err("`command` is empty".into());
        }
        if let Some(ms) = arg_u64(obj, "timeout_ms")?
            && !(1..=MAX_TIMEOUT_MS).contains(&ms)
        {
            return Err(format!("`timeout_ms` must be within 1..={MAX_TIMEOUT_MS}"));
        }
        match arg_str(obj, "sandbox_permissions")? {
            None | Some("use_default") => {}
            Some(ESCALATE) => {
                let why = arg_str(obj, "justification")?.unwrap_or("");
                if why.trim().is_empty() {
                    return Err(
                        "`sandbox_permissions: \"require_escalated\"` needs a one-line `justification`"
                            .into(),
                    );
                }
            }
            Some(other) => {
                return Err(format!(
                    "`sandbox_permissions` must be \"use_default\" or \"{ESCALATE}\", not {other:?}"
                ));
            }
        }
        Ok(())
    }

    fn call(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        let root = self.workspace.root().to_path_buf();
        let sandbox = self.sandbox.clone();
        Box::pin(async move {
            let obj = object(&args).map_err(ToolFailure)?;
            let command = arg_str(obj, "command").map_err(ToolFailure)?.unwrap_or("");
            let timeout = Duration::from_millis(
                arg_u64(obj, "timeout_ms")
                    .map_err(ToolFailure)?
                    .unwrap_or(DEFAULT_TIMEOUT_MS),
            );
            let escalated =
                arg_str(obj, "sandbox_permissions").map_err(ToolFailure)? == Some(ESCALATE);
            let confined = match (&sandbox, escalated) {
                (Some(spec), false) => Some(Confined::new(spec, &root)?),
                _ => None,
            };
            let note = match (&sandbox, &confined) {
                (_, Some(c)) => Some(format!("Sandbox: {}", c.label)),
                (Some(_), None) => Some("Sandbox: none (escalation approved)".to_string()),
                (None, None) => None,
            };
            Box::pin(run(
                command,
                &root,
                timeout,
                &ctx,
                confined.as_ref(),
                note.as_deref(),
            ))
            .await
        })
    }
}

/// Kills the command when dropped, unless disarmed: its group and its leader's children.
struct GroupGuard {
    pgid: Option<u32>,
    /// A sandboxed command's protected paths that did not exist before it started.
    protected: Vec<std::path::PathBuf>,
}

impl GroupGuard {
    /// Kills the group; while the leader (bash, or the sandbox's entry point, which ran
    /// `exec`) is not yet reaped, its children too: a sandboxed command is in a process
    /// group of its own, and killing the first process of its PID namespace ends everything
    /// in it, a daemon that left every group included. After the leader was reaped its pid
    /// may name another process, so only the group is killed (the command's namespace
    /// ended before the entry point could exit). Then moves aside what the command created
    /// of its protected paths (see [`move_aside_after`]); returns what it did.
    fn kill(&mut self, leader_reaped: bool) -> Vec<agent_sandbox::protected::Refused> {
        let Some(pgid) = self.pgid.take() else {
            return Vec::new();
        };
        let children = if leader_reaped {
            Vec::new()
        } else {
            agent_sandbox::process::children(pgid)
        };
        kill_group_and(pgid, &children);
        move_aside_after(&children, &self.protected)
    }
}

/// Moves aside each of `protected` (paths that did not exist before a sandboxed command)
/// that exists now, once the processes `ended` (killed: the first process of the command's
/// PID namespace among them) are gone, or after at most 2 s. The entry point does the
/// same when its command ends, but not when it is killed with it (a timeout, an interrupt):
/// then the host, outside the sandbox, does it. The namespace's end is awaited because
/// its processes could still create a path until the kernel has ended them.
pub(crate) fn move_aside_after(
    ended: &[u32],
    protected: &[std::path::PathBuf],
) -> Vec<agent_sandbox::protected::Refused> {
    if protected.is_empty() {
        return Vec::new();
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while ended.iter().any(|pid| agent_sandbox::process::alive(*pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let refused = agent_sandbox::protected::move_aside(protected);
    for r in &refused {
        tracing::warn!(target: "agent_host::sandbox", "{r}");
    }
    refused
}

/// SIGKILLs process group `pgid` and the processes `pids` (read by the caller while they
/// were the leader's children) in one `kill`, so that nothing of the group runs on between
/// the two (an unsandboxed shell whose `sleep` died first would go on to its next command).
/// No unsafe, no libc: bash's `kill` builtin signals the whole group.
pub(crate) fn kill_group_and(pgid: u32, pids: &[u32]) {
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    bash_kill(&format!(
        "kill -KILL -- -{pgid} {} 2>/dev/null",
        pids.join(" ")
    ));
}

/// Runs `script` (a `kill`) in bash, waiting for it; nothing of it is read.
fn bash_kill(script: &str) {
    let _ = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let _ = self.kill(false);
    }
}

/// What a sandboxed call runs under: the entry point, the policy, its private temp dir.
struct Confined {
    launcher: std::path::PathBuf,
    policy_json: String,
    /// The policy's protected paths that do not exist before the command.
    protected: Vec<std::path::PathBuf>,
    tmp: tempfile::TempDir,
    label: String,
}

impl Confined {
    fn new(spec: &SandboxSpec, root: &std::path::Path) -> Result<Confined, ToolFailure> {
        let fail = |what: &str, err: &dyn std::fmt::Display| {
            ToolFailure(format!(
                "cannot sandbox the command ({what}: {err}); it did not run"
            ))
        };
        let tmp =
            super::scratch::scratch_dir("agentctl-shell-").map_err(|e| fail("temp dir", &e))?;
        let mut policy = spec.policy(root, Some(tmp.path()));
        policy.own_group = true;
        let policy_json = serde_json::to_string(&policy).map_err(|e| fail("policy", &e))?;
        let launcher = crate::sandbox::launcher().map_err(|e| fail("launcher", &e))?;
        let network = if spec.network {
            "network on"
        } else {
            "network off"
        };
        Ok(Confined {
            launcher,
            policy_json,
            protected: agent_sandbox::protected::missing(&policy),
            tmp,
            label: format!("{} ({network})", spec.mode),
        })
    }
}

async fn run(
    command: &str,
    root: &std::path::Path,
    timeout: Duration,
    ctx: &ToolContext,
    confined: Option<&Confined>,
    note: Option<&str>,
) -> Result<Value, ToolFailure> {
    let started = Instant::now();
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-c")
        .arg(if confined.is_some() {
            SANDBOXED_WRAPPER
        } else {
            WRAPPER
        })
        .arg("agentctl-shell")
        .arg(std::process::id().to_string())
        .arg(command)
        .current_dir(root);
    if let Some(c) = confined {
        cmd.arg(&c.launcher)
            .arg(&c.policy_json)
            .args(&c.protected)
            .env("TMPDIR", c.tmp.path());
    }
    for name in HIDDEN_ENV {
        cmd.env_remove(name);
    }
    // stdin is a pipe closed at once, not the host's `/dev/null`: a descriptor of the host's
    // file system would let the command change that file's mode and times (`fchmod(0)`).
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| ToolFailure(format!("cannot start bash: {err}")))?;
    drop(child.stdin.take());
    let mut guard = GroupGuard {
        pgid: child.id(),
        protected: confined.map(|c| c.protected.clone()).unwrap_or_default(),
    };
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(ToolFailure("cannot read the command's output".into()));
    };
    let mut output = Capped::default();
    let mut out_buf = [0u8; 8192];
    let mut err_buf = [0u8; 8192];
    let (mut out_open, mut err_open) = (true, true);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut status = None;
    let mut drain_until: Option<tokio::time::Instant> = None;
    let ended = loop {
        if !out_open && !err_open {
            break End::Closed;
        }
        tokio::select! {
            exited = child.wait(), if status.is_none() => {
                status = exited.ok();
                drain_until = Some(tokio::time::Instant::now() + DRAIN);
            }
            () = sleep_until_opt(drain_until) => break End::Closed,
            read = stdout.read(&mut out_buf), if out_open => match read {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) => output.push(&out_buf[..n]),
            },
            read = stderr.read(&mut err_buf), if err_open => match read {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) => output.push(&err_buf[..n]),
            },
            () = &mut deadline => break End::Timeout,
            () = ctx.cancel.cancelled() => break End::Cancelled,
        }
    };
    let status = match (ended, status) {
        (End::Closed, Some(status)) => Some(status),
        // Output closed: the shell is exiting.
        (End::Closed, None) => tokio::select! {
            status = child.wait() => status.ok(),
            () = &mut deadline => None,
            () = ctx.cancel.cancelled() => None,
        },
        (End::Timeout | End::Cancelled, _) => None,
    };
    let refused = guard.kill(status.is_some());
    let wall = started.elapsed().as_secs_f64();
    let mut note = note.map(|n| format!("\n{n}")).unwrap_or_default();
    for r in &refused {
        note.push_str(&format!("\nagentctl sandbox: {r}"));
    }
    let text = |head: &str| {
        format!(
            "{head}{note}\nWall time: {wall:.3} seconds\nOutput:\n{}",
            mask_key(output.text())
        )
    };
    let head = match (ended, status) {
        (End::Closed, Some(status)) => match status.code() {
            Some(0) => return Ok(json!(text("Exit code: 0"))),
            Some(code) => format!("Exit code: {code}"),
            None => "Killed by a signal".to_string(),
        },
        _ if ctx.cancel.is_cancelled() => "Cancelled: the run was interrupted".to_string(),
        _ => format!(
            "Timed out after {} ms; the process group was killed",
            timeout.as_millis()
        ),
    };
    Err(ToolFailure(text(&head)))
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[derive(Debug, Clone, Copy)]
enum End {
    Closed,
    Timeout,
    Cancelled,
}

/// Output kept within [`OUTPUT_CAP`]: the first half as it came, the last half as a ring.
#[derive(Default)]
struct Capped {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: usize,
}

impl Capped {
    fn push(&mut self, mut bytes: &[u8]) {
        let half = OUTPUT_CAP / 2;
        if self.head.len() < half {
            let take = (half - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        self.tail.extend(bytes);
        while self.tail.len() > half {
            let excess = self.tail.len() - half;
            self.tail.drain(..excess);
            self.dropped += excess;
        }
    }

    fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!(
                "\n[... {} bytes of output truncated ...]\n",
                self.dropped
            ));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_keeps_head_and_tail() {
        let mut c = Capped::default();
        c.push(&vec![b'a'; OUTPUT_CAP]);
        c.push(&[b'b'; 100]);
        let t = c.text();
        assert!(t.starts_with(&"a".repeat(OUTPUT_CAP / 2)));
        assert!(t.ends_with(&"b".repeat(100)));
        assert!(t.contains("[... 100 bytes of output truncated ...]"));
        let mut small = Capped::default();
        small.push(b"hi");
        assert_eq!(small.text(), "hi");
    }
}
