//! `cargo xtask install [--prefix DIR]`: the release `agentctl` and its sandbox entry point,
//! `agentctl-sandbox`, built as they are meant to ship and copied to `DIR/bin`.
//!
//! The entry point is linked statically (`crt-static`): every sandboxed command starts
//! through it, and a static binary skips the dynamic loader (about 0.3 ms of each call on
//! this kind of machine; `docs/benchmarks.md`, sandbox section). Cargo cannot ask for that
//! per binary in a manifest, so it is a `cargo rustc` of that one binary; `agentctl` itself
//! stays dynamic (static glibc cannot resolve host names through NSS).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::process::{cargo, run_cmd, workspace_root};

const USAGE: &str = "usage: cargo xtask install [--prefix DIR]

  Builds the release agentctl and a statically linked agentctl-sandbox (the entry point
  every sandboxed command starts through) and copies both to DIR/bin (default: ~/.local).
  Then checks that the installed pair runs a sandboxed command.";

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let prefix = match args {
        [] => dirs_home()?.join(".local"),
        [flag, dir] if flag == "--prefix" => PathBuf::from(dir),
        [flag] if flag == "-h" || flag == "--help" => {
            println!("{USAGE}");
            return Ok(());
        }
        _ => bail!("{USAGE}"),
    };
    let built = build_release(&target_dir())?;
    let bin = prefix.join("bin");
    std::fs::create_dir_all(&bin).with_context(|| format!("cannot create {}", bin.display()))?;
    for from in [&built.agentctl, &built.entry] {
        let Some(name) = from.file_name() else {
            bail!("{} has no file name", from.display());
        };
        let to = bin.join(name);
        // A new file, renamed over the old one: a running agentctl keeps its own inode.
        let partial = bin.join(format!(".{}.partial", name.to_string_lossy()));
        std::fs::copy(from, &partial)
            .with_context(|| format!("cannot copy {} to {}", from.display(), partial.display()))?;
        std::fs::rename(&partial, &to)
            .with_context(|| format!("cannot install {}", to.display()))?;
        eprintln!("xtask: installed {}", to.display());
    }
    check_installed(&bin.join("agentctl"))?;
    eprintln!(
        "xtask: done; {} has agentctl and agentctl-sandbox (static)",
        bin.display()
    );
    Ok(())
}

/// The release binaries as [`build_release`] leaves them in the target directory.
pub struct Built {
    pub agentctl: PathBuf,
    /// `agentctl-sandbox`, statically linked, beside `agentctl` (where its launcher looks).
    pub entry: PathBuf,
}

/// Builds the release `agentctl`, then relinks `agentctl-sandbox` statically in its place
/// beside it (a later plain `cargo build --release` relinks it dynamically again).
pub fn build_release(target: &Path) -> anyhow::Result<Built> {
    eprintln!("xtask: [1/2] cargo build --release: agentctl");
    run_cmd(cargo().args([
        "build",
        "--release",
        "-j2",
        "-p",
        "agentctl",
        "--bin",
        "agentctl",
    ]))?;
    eprintln!("xtask: [2/2] agentctl-sandbox, statically linked");
    link_static_entry("release")?;
    let release = target.join("release");
    let built = Built {
        agentctl: release.join("agentctl"),
        entry: release.join("agentctl-sandbox"),
    };
    ensure_static(&built.entry)?;
    Ok(built)
}

/// `agentctl-sandbox` of `profile`, relinked with `crt-static` (given to that crate alone,
/// so build scripts and proc macros stay dynamic as they must).
pub fn link_static_entry(profile: &str) -> anyhow::Result<()> {
    run_cmd(cargo().args([
        "rustc",
        "--profile",
        profile,
        "-j2",
        "-p",
        "agentctl",
        "--bin",
        "agentctl-sandbox",
        "--",
        "-C",
        "target-feature=+crt-static",
    ]))
}

/// CI's check that the entry point links statically and runs: `cargo xtask install` does
/// the same in release, which CI does not build.
pub fn check_static_entry() -> anyhow::Result<()> {
    eprintln!("xtask: the sandbox entry point, statically linked (as `install` ships it)");
    link_static_entry("dev")?;
    let debug = target_dir().join("debug");
    ensure_static(&debug.join("agentctl-sandbox"))?;
    check_installed(&debug.join("agentctl"))
}

/// Fails unless `binary` is an ELF file without a program interpreter (statically linked).
fn ensure_static(binary: &Path) -> anyhow::Result<()> {
    let bytes =
        std::fs::read(binary).with_context(|| format!("cannot read {}", binary.display()))?;
    match elf_has_interpreter(&bytes) {
        Some(false) => Ok(()),
        Some(true) => bail!("{} is dynamically linked", binary.display()),
        None => bail!("{} is not a 64-bit ELF file", binary.display()),
    }
}

/// Whether a 64-bit little-endian ELF image has a `PT_INTERP` program header; `None` when
/// `bytes` is not one.
fn elf_has_interpreter(bytes: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if bytes.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    let table = usize::try_from(u64_at(0x20)?).ok()?;
    let size = usize::from(u16_at(0x36)?);
    let count = usize::from(u16_at(0x38)?);
    for i in 0..count {
        if u32_at(table.checked_add(i.checked_mul(size)?)?)? == PT_INTERP {
            return Some(true);
        }
    }
    Some(false)
}

/// Cargo's target directory (`CARGO_TARGET_DIR`, else `target/` of the workspace).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// The installed `agentctl` runs `true` through the installed entry point; a system that
/// cannot sandbox at all is a warning, a broken entry point an error.
fn check_installed(agentctl: &Path) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("agentctl-install-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let status = std::process::Command::new(agentctl)
        .args(["sandbox", "--workspace"])
        .arg(&dir)
        .args(["--", "true"])
        .status();
    let _ = std::fs::remove_dir_all(&dir);
    let status = status.with_context(|| format!("cannot start {}", agentctl.display()))?;
    match status.code() {
        Some(0) => Ok(()),
        // 125: the sandbox cannot be had on this system (no Landlock, say); the binaries
        // work, and runs fall back as `agentctl sandbox` explains.
        Some(125) => {
            eprintln!(
                "xtask: warning: this system cannot sandbox commands; \
                 `{} sandbox -- true` says why",
                agentctl.display()
            );
            Ok(())
        }
        _ => bail!(
            "the installed {} could not run `true` through its sandbox entry point ({status})",
            agentctl.display()
        ),
    }
}

fn dirs_home() -> anyhow::Result<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .context("HOME is not set; pass --prefix DIR")
}

#[cfg(test)]
mod tests {
    use super::elf_has_interpreter;

    #[test]
    fn a_dynamic_binary_has_an_interpreter_and_garbage_is_no_elf() {
        let sh = std::fs::read("/bin/sh").unwrap();
        assert_eq!(elf_has_interpreter(&sh), Some(true));
        assert_eq!(elf_has_interpreter(b"#!/bin/sh\n"), None);
        assert_eq!(elf_has_interpreter(&sh[..0x30]), None, "cut in the header");
    }
}
