//! `agentctl sandbox`: one command under the policy a run's `shell` would use, to try by
//! hand; and the hidden entry point every sandboxed command starts through.
//!
//! Invariant: the command gets the environment a run's `shell` command gets: this
//! process's, without the variables the host hides from every command it starts
//! ([`agent_host::tools::HIDDEN_ENV`]: the API key, the database URLs), with its own
//! `TMPDIR` when sandboxed.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use agent_host::sandbox::{Mode, SandboxSpec};
use anyhow::Context as _;

use crate::output::UsageError;

#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    /// read-only: writes only in a private temp dir; workspace-write: also in the workspace
    /// (but its .git and agentctl.toml) and --writable-root; off: no sandbox (the command
    /// runs as it is, in the workspace, still without the API key or database URL).
    #[arg(long, default_value = "workspace-write", value_parser = parse_mode)]
    pub mode: Mode,
    /// Allow the network (TCP and every socket family); off by default.
    #[arg(long)]
    pub network: bool,
    /// The workspace: the command's working directory (default: the current one).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Another directory the command may write (repeatable).
    #[arg(long = "writable-root", value_name = "DIR")]
    pub writable_roots: Vec<PathBuf>,
    /// Another path the command may not read (repeatable; added to the default list of
    /// credential stores).
    #[arg(long = "deny-read", value_name = "PATH")]
    pub deny_read: Vec<PathBuf>,
    /// The command and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
}

/// Runs the command as a child through the entry point and exits with its status.
pub fn sandbox(args: SandboxArgs) -> anyhow::Result<ExitCode> {
    let workspace = match args.workspace {
        Some(dir) => dir,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .map_err(|err| UsageError(format!("the workspace {}: {err}", workspace.display())))?;
    if !workspace.is_dir() {
        return Err(UsageError(format!(
            "the workspace {} is not a directory",
            workspace.display()
        ))
        .into());
    }
    if workspace.to_str().is_none() {
        return Err(UsageError(format!(
            "the workspace {} is not UTF-8, which a sandbox policy needs",
            workspace.display()
        ))
        .into());
    }
    let Some((program, rest)) = args.command.split_first() else {
        anyhow::bail!("no command given (put it after `--`)");
    };
    // Kept until the command ends: its private temp dir when sandboxed.
    let mut tmp = None;
    let mut cmd = if args.mode.is_sandboxed() {
        // Its owner's only (0700), as a run's command's is.
        let private = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o700);
        let dir = tmp.insert(
            tempfile::Builder::new()
                .permissions(private)
                .tempdir()
                .context("cannot create the command's temp dir")?,
        );
        let mut spec = SandboxSpec::of(args.mode);
        spec.network = args.network;
        spec.writable_roots = args.writable_roots;
        spec.deny_read = args.deny_read;
        // The policy adds this process's configuration directory itself.
        let policy = spec.policy(&workspace, Some(dir.path()));
        let mut cmd = std::process::Command::new(agent_host::sandbox::launcher()?);
        cmd.args(agent_sandbox::entry_args(&policy, program, rest)?)
            .env("TMPDIR", dir.path());
        cmd
    } else {
        let mut cmd = std::process::Command::new(program);
        cmd.args(rest);
        cmd
    };
    for name in agent_host::tools::HIDDEN_ENV {
        cmd.env_remove(name);
    }
    let status = match cmd.current_dir(&workspace).status() {
        Ok(status) => status,
        // As the sandbox's entry point (and a shell) answers for a program it cannot run.
        Err(err) => {
            crate::output::note(&format!(
                "error: cannot run {}: {err}",
                program.to_string_lossy()
            ));
            return Ok(ExitCode::from(agent_sandbox::EXIT_CANNOT_EXEC));
        }
    };
    drop(tmp);
    Ok(ExitCode::from(agent_sandbox::exit_byte(status)))
}

/// The hidden entry point (`agentctl __sandbox-exec POLICY -- PROGRAM ARGS`): restricts this
/// process and execs the program; returns only when that failed.
pub fn entry(args: &[OsString]) -> ExitCode {
    ExitCode::from(agent_sandbox::entry_main(args))
}
