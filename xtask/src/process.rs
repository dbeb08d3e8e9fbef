//! Running commands from xtask with clear failures.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// `../shared` beside the checkout: the seed and its baselines.
pub fn shared_dir() -> PathBuf {
    workspace_root().join("..").join("shared")
}

/// The cargo that runs this xtask.
pub fn cargo() -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root());
    cmd
}

/// Alias kept for modules written before the rename.
pub use run_cmd as run;

/// Runs `cmd`, inheriting stdio; fails with the command line when it exits non-zero.
pub fn run_cmd(cmd: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    eprintln!("xtask: $ {shown}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

/// Runs `cmd` and returns its stdout; stderr is inherited so progress stays visible.
pub fn output(cmd: &mut Command) -> anyhow::Result<String> {
    output_shown(cmd, |shown| shown.to_owned())
}

/// [`output`], with the command line passed through `show` wherever it is printed or
/// quoted in an error (to mask a password in a database URL among its arguments).
pub fn output_shown(cmd: &mut Command, show: impl Fn(&str) -> String) -> anyhow::Result<String> {
    let shown = show(&format!("{cmd:?}"));
    eprintln!("xtask: $ {shown}");
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {shown}"))?;
    if !out.status.success() {
        bail!("{shown} failed with {}", out.status);
    }
    String::from_utf8(out.stdout).with_context(|| format!("{shown} printed non-UTF-8"))
}
