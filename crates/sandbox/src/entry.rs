//! The entry point a sandboxed command is started through.

use std::ffi::{OsStr, OsString};
use std::process::ExitStatus;

use crate::{Policy, SandboxError};

/// The first argument that sends the `agentctl` binary to [`run_sandboxed`], before any
/// other parsing.
pub const ENTRY: &str = "__sandbox-exec";

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
            eprintln!("error: agentctl sandbox: {err}");
            match err {
                SandboxError::Exec { .. } => EXIT_CANNOT_EXEC,
                _ => EXIT_NOT_SANDBOXED,
            }
        }
    }
}

/// Runs the program as `args` (what follows [`ENTRY`]) say and waits for it. On Linux this
/// process makes the namespaces and mounts and starts the first process of a PID namespace
/// of their own (this binary again, at [`INIT`]), which mounts that namespace's `/proc`,
/// restricts itself and becomes the program: the program inherits every restriction and
/// cannot lift any of them, and when it exits the kernel ends everything it started (a
/// daemon that left its process group included) before this returns. Without a mount
/// namespace this process restricts itself and starts the program. An `Err` means nothing
/// ran.
pub fn run_sandboxed(args: &[OsString]) -> Result<ExitStatus, SandboxError> {
    if let [marker, ptys, rest @ ..] = args
        && marker == INIT
    {
        let (policy, _, program, args) = parse(rest)?;
        return Err(init(&policy, ptys == PRIVATE_PTYS, program, args));
    }
    let (policy, raw, program, rest) = parse(args)?;
    restrict_and_run(&policy, raw, program, rest)
}

/// The second stage's marker: `ENTRY INIT PTYS POLICY_JSON -- PROGRAM ARGS`, where PTYS
/// says whether the first stage mounted pseudo-terminals of the sandbox's own.
const INIT: &str = "--init";
/// PTYS when the sandbox has its own pseudo-terminals.
const PRIVATE_PTYS: &str = "private-ptys";
/// PTYS otherwise.
const HOST_PTYS: &str = "host-ptys";

/// `POLICY_JSON -- PROGRAM ARGS`: the policy, as read and as given, the program, its
/// arguments.
fn parse(args: &[OsString]) -> Result<(Policy, &OsString, &OsStr, &[OsString]), SandboxError> {
    let [raw, sep, program, rest @ ..] = args else {
        return Err(SandboxError::BadPolicy(format!(
            "usage: agentctl {ENTRY} POLICY_JSON -- PROGRAM [ARGS...]"
        )));
    };
    if sep != "--" {
        return Err(SandboxError::BadPolicy(
            "expected `--` after the policy".into(),
        ));
    }
    let policy: Policy = serde_json::from_str(&raw.to_string_lossy())
        .map_err(|err| SandboxError::BadPolicy(err.to_string()))?;
    if !policy.mode.is_sandboxed() {
        return Err(SandboxError::BadPolicy(
            "mode `off` is not run through the sandbox".into(),
        ));
    }
    Ok((policy, raw, program, rest))
}

#[cfg(target_os = "linux")]
fn restrict_and_run(
    policy: &Policy,
    raw: &OsString,
    program: &OsStr,
    args: &[OsString],
) -> Result<ExitStatus, SandboxError> {
    let were_missing = crate::protected::missing(policy);
    let prepared = crate::linux::prepare(policy)?;
    let status = if prepared.namespaced {
        // Without it the first process keeps the host's `/proc` (see `own_proc`).
        crate::linux::pass_mount_right();
        // This binary again, whatever path it was started by (that path may be hidden now).
        std::process::Command::new("/proc/self/exe")
            .arg(ENTRY)
            .arg(INIT)
            .arg(if prepared.ptys {
                PRIVATE_PTYS
            } else {
                HOST_PTYS
            })
            .arg(raw)
            .arg("--")
            .arg(program)
            .args(args)
            .status()
            .map_err(|err| SandboxError::Apply {
                step: "start the sandbox's first process",
                reason: err.to_string(),
            })?
    } else {
        crate::linux::confine(policy, &prepared)?;
        std::process::Command::new(program)
            .args(args)
            .status()
            .map_err(|err| SandboxError::Exec {
                program: program.to_string_lossy().into_owned(),
                reason: err.to_string(),
            })?
    };
    for refused in crate::protected::move_aside(&were_missing) {
        eprintln!("agentctl sandbox: {refused}");
    }
    Ok(status)
}

/// The first process of the sandbox's PID namespace: takes that namespace's `/proc`,
/// restricts itself and execs the program. Returns only what kept it from running.
#[cfg(target_os = "linux")]
fn init(policy: &Policy, ptys: bool, program: &OsStr, args: &[OsString]) -> SandboxError {
    use std::os::unix::process::CommandExt as _;
    let confined = crate::linux::Prepared::inherited(policy, ptys).and_then(|prepared| {
        crate::linux::own_proc();
        crate::linux::confine(policy, &prepared)
    });
    if let Err(err) = confined {
        return err;
    }
    let err = std::process::Command::new(program).args(args).exec();
    SandboxError::Exec {
        program: program.to_string_lossy().into_owned(),
        reason: err.to_string(),
    }
}

#[cfg(not(target_os = "linux"))]
fn init(_policy: &Policy, _ptys: bool, _program: &OsStr, _args: &[OsString]) -> SandboxError {
    SandboxError::Unsupported(format!(
        "the sandbox needs Linux (Landlock and seccomp); this is {}",
        std::env::consts::OS
    ))
}

#[cfg(not(target_os = "linux"))]
fn restrict_and_run(
    _policy: &Policy,
    _raw: &OsString,
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
