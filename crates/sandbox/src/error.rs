use std::path::PathBuf;

/// Why a command could not be sandboxed. Each one means the command did not run.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel (or the container, or what this user may do there) cannot give the mode
    /// asked for; the message says what is missing, once (`agentctl run` adds how to do
    /// without the sandbox).
    #[error("{0}")]
    Unsupported(String),
    /// A probe (a `true` run through the entry point) failed, saying this.
    #[error("commands cannot be sandboxed here: {0}")]
    Probe(String),
    /// The policy handed to the entry point is not one this build wrote.
    #[error("bad sandbox policy: {0}")]
    BadPolicy(String),
    /// A path of the policy could not be opened to build a rule.
    #[error("cannot use {path:?} in the sandbox policy: {reason}")]
    Path { path: PathBuf, reason: String },
    /// A restriction step failed after others were applied; the command is not run.
    #[error("cannot apply the sandbox ({step}): {reason}")]
    Apply { step: &'static str, reason: String },
    /// `exec` of the program failed.
    #[error("cannot run {program:?}: {reason}")]
    Exec { program: String, reason: String },
}
