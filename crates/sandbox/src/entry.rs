//! The entry point a sandboxed command is started through.

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::process::ExitStatus;

use crate::{Policy, SandboxError};

/// The first argument that sends the `agentctl` binary to [`run_sandboxed`], before any
/// other parsing.
pub const ENTRY: &str = "__sandbox-exec";

/// The first argument that sends the binary to [`init_main`]: the program's first process
/// in its PID namespace, started by the entry point, which then becomes the program.
pub const INIT: &str = "__sandbox-init";

/// The small binary that serves as the entry point when it sits beside `agentctl`: it links
/// nothing but this crate, so it starts faster than the whole `agentctl`.
pub const ENTRY_BINARY: &str = "agentctl-sandbox";

/// The entry point's own failures (as `env` and `timeout` report theirs): the sandbox could
/// not be applied, so nothing ran.
pub const EXIT_NOT_SANDBOXED: u8 = 125;
/// The program could not be executed.
pub const EXIT_CANNOT_EXEC: u8 = 127;

/// The arguments (after the binary) that run `program args` under `policy`.
pub fn entry_args(
    policy: &Policy,
    program: &OsStr,
    args: &[OsString],
) -> Result<Vec<OsString>, SandboxError> {
    let json =
        serde_json::to_string(policy).map_err(|err| SandboxError::BadPolicy(err.to_string()))?;
    let mut out = vec![
        OsString::from(ENTRY),
        json.into(),
        "--".into(),
        program.to_owned(),
    ];
    out.extend(args.iter().cloned());
    Ok(out)
}

/// The entry point of a binary: runs the program sandboxed and returns the exit status to
/// end with: the program's (128 + N when signal N ended it and re-raising it here did not
/// end this process too), or, reported on stderr, [`EXIT_NOT_SANDBOXED`] or
/// [`EXIT_CANNOT_EXEC`] when nothing ran.
pub fn entry_main(args: &[OsString]) -> u8 {
    match run_sandboxed(args) {
        Ok(status) => exit_code(status),
        Err(err) => {
            // Not `eprintln!`: a closed stderr must not turn this exit code into a panic's.
            let _ = writeln!(std::io::stderr(), "error: agentctl sandbox: {err}");
            match err {
                SandboxError::Exec { .. } => EXIT_CANNOT_EXEC,
                _ => EXIT_NOT_SANDBOXED,
            }
        }
    }
}

/// Restricts this process as `args` (what follows [`ENTRY`]) say, runs the program (which
/// inherits every restriction and cannot lift any of them) and waits for it. On Linux the
/// program is the first process of a PID namespace of its own: when it exits, the kernel
/// ends everything it started (a daemon that left its process group included) before this
/// returns. An `Err` means nothing ran.
pub fn run_sandboxed(args: &[OsString]) -> Result<ExitStatus, SandboxError> {
    let [policy, sep, program, rest @ ..] = args else {
        return Err(SandboxError::BadPolicy(format!(
            "usage: agentctl {ENTRY} POLICY_JSON -- PROGRAM [ARGS...]"
        )));
    };
    if sep != "--" {
        return Err(SandboxError::BadPolicy(
            "expected `--` after the policy".into(),
        ));
    }
    let policy: Policy = serde_json::from_str(&policy.to_string_lossy())
        .map_err(|err| SandboxError::BadPolicy(err.to_string()))?;
    if !policy.mode.is_sandboxed() {
        return Err(SandboxError::BadPolicy(
            "mode `off` is not run through the sandbox".into(),
        ));
    }
    restrict_and_run(&policy, program, rest)
}

#[cfg(target_os = "linux")]
fn restrict_and_run(
    policy: &Policy,
    program: &OsStr,
    args: &[OsString],
) -> Result<ExitStatus, SandboxError> {
    let were_missing = crate::protected::missing(policy);
    crate::linux::restrict_self(policy)?;
    crate::linux::close_inherited()?;
    let mut command = if policy.dies_with_entry {
        // The program starts as this binary's `INIT` step, which ties its life to this
        // process before it becomes the program (see `init_main`).
        let exe = std::env::current_exe().map_err(|err| SandboxError::Exec {
            program: program.to_string_lossy().into_owned(),
            reason: format!("cannot find the sandbox's own binary: {err}"),
        })?;
        let mut command = std::process::Command::new(exe);
        command
            .arg(INIT)
            .arg(std::process::id().to_string())
            .arg("--")
            .arg(program)
            .args(args);
        command
    } else {
        let mut command = std::process::Command::new(program);
        command.args(args);
        command
    };
    if policy.own_group {
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
    }
    let status = command.status().map_err(|err| SandboxError::Exec {
        program: program.to_string_lossy().into_owned(),
        reason: err.to_string(),
    })?;
    for refused in crate::protected::move_aside(&were_missing) {
        let _ = writeln!(std::io::stderr(), "agentctl sandbox: {refused}");
    }
    Ok(status)
}

/// The first process of the program's PID namespace, started by the entry point as
/// `INIT ENTRY_PID -- PROGRAM ARGS`: asks the kernel to kill it when the entry point dies,
/// then becomes the program (`exec`). Killing the first process of a PID namespace ends
/// everything in it, so the program and all it started (a daemon that called `setsid`
/// included) never outlive the entry point, however it ended: a `SIGKILL` of its process
/// group by the host, or by the program itself (`kill -KILL 0`), before the entry point
/// could move aside what the program created. The parent-death signal survives `exec`
/// (the program gains no privilege) and cannot be escaped from inside: the program could
/// clear it, but only by running code, which it may, and only while the entry point lives.
/// Returns the exit status to end with when nothing ran.
pub fn init_main(args: &[OsString]) -> u8 {
    let fail = |reason: String| {
        let _ = writeln!(std::io::stderr(), "error: agentctl sandbox: {reason}");
        EXIT_NOT_SANDBOXED
    };
    let [parent, sep, program, rest @ ..] = args else {
        return fail(format!(
            "usage: agentctl {INIT} ENTRY_PID -- PROGRAM [ARGS...]"
        ));
    };
    if sep != "--" {
        return fail("expected `--` after the entry point's pid".into());
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
    #[cfg(target_os = "linux")]
    {
        if let Err(err) =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        {
            return fail(format!("cannot tie the command to the sandbox: {err}"));
        }
        // The entry point may have died before the request above: then no signal comes.
        let parent = parent.to_str().and_then(|p| p.parse().ok());
        if !parent.is_some_and(crate::process::alive) {
            return fail("the sandbox's entry point is gone".into());
        }
    }
    let err =
        std::os::unix::process::CommandExt::exec(std::process::Command::new(program).args(rest));
    let _ = writeln!(
        std::io::stderr(),
        "error: agentctl sandbox: {}",
        SandboxError::Exec {
            program: program.to_string_lossy().into_owned(),
            reason: err.to_string(),
        }
    );
    EXIT_CANNOT_EXEC
}

#[cfg(not(target_os = "linux"))]
fn restrict_and_run(
    _policy: &Policy,
    _program: &OsStr,
    _args: &[OsString],
) -> Result<ExitStatus, SandboxError> {
    Err(SandboxError::Unsupported(format!(
        "the sandbox needs Linux (Landlock and seccomp); this is {}",
        std::env::consts::OS
    )))
}

/// The exit code that passes `status` on. A program ended by a signal ends this process by
/// the same signal where it can, so that the caller sees what it would have seen.
fn exit_code(status: ExitStatus) -> u8 {
    #[cfg(target_os = "linux")]
    if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&status)
        .and_then(rustix::process::Signal::from_named_raw)
    {
        let _ = rustix::process::kill_process(rustix::process::getpid(), sig);
    }
    exit_byte(status)
}

/// The exit status a process that ran a program passes on as its own: the program's code,
/// or 128 + N when signal N ended it (as shells report it).
pub fn exit_byte(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}
