//! The entry point a sandboxed command is started through.

use std::convert::Infallible;
use std::ffi::{OsStr, OsString};

use crate::{Policy, SandboxError};

/// The first argument that sends the `agentctl` binary to [`exec_sandboxed`], before any
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

/// The entry point of a binary: restricts this process and execs the program, or reports why
/// not on stderr and returns the exit status to end with ([`EXIT_NOT_SANDBOXED`] or
/// [`EXIT_CANNOT_EXEC`]); nothing ran then.
pub fn entry_main(args: &[OsString]) -> u8 {
    match exec_sandboxed(args) {
        Ok(never) => match never {},
        Err(err) => {
            eprintln!("error: agentctl sandbox: {err}");
            match err {
                SandboxError::Exec { .. } => EXIT_CANNOT_EXEC,
                _ => EXIT_NOT_SANDBOXED,
            }
        }
    }
}

/// Restricts this process as `args` (what follows [`ENTRY`]) say, then execs the program.
/// Returns only on failure, and then nothing was run.
pub fn exec_sandboxed(args: &[OsString]) -> Result<Infallible, SandboxError> {
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
    restrict_and_exec(&policy, program, rest)
}

#[cfg(target_os = "linux")]
fn restrict_and_exec(
    policy: &Policy,
    program: &OsStr,
    args: &[OsString],
) -> Result<Infallible, SandboxError> {
    use std::os::unix::process::CommandExt as _;
    crate::linux::restrict_self(policy)?;
    let err = std::process::Command::new(program).args(args).exec();
    Err(SandboxError::Exec {
        program: program.to_string_lossy().into_owned(),
        reason: err.to_string(),
    })
}

#[cfg(not(target_os = "linux"))]
fn restrict_and_exec(
    _policy: &Policy,
    _program: &OsStr,
    _args: &[OsString],
) -> Result<Infallible, SandboxError> {
    Err(SandboxError::Unsupported(format!(
        "the sandbox needs Linux (Landlock and seccomp); this is {}",
        std::env::consts::OS
    )))
}
