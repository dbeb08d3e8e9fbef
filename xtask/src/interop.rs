//! `cargo xtask interop`: real third-party clients against our code.
//!
//! Suites are registered in [`SUITES`]; each is a function that prepares what it needs
//! (a virtualenv, an npm install) and fails loudly when a step fails.

type Suite = (&'static str, fn() -> anyhow::Result<()>);

/// Every interop suite, by name.
const SUITES: &[Suite] = &[("codex", codex_cli)];

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let selected: Vec<&Suite> = if args.is_empty() {
        SUITES.iter().collect()
    } else {
        let mut chosen = Vec::new();
        for name in args {
            let suite = SUITES
                .iter()
                .find(|(n, _)| n == name)
                .ok_or_else(|| anyhow::anyhow!("unknown interop suite `{name}`"))?;
            chosen.push(suite);
        }
        chosen
    };
    if selected.is_empty() {
        eprintln!("xtask: no interop suites are registered yet");
    }
    for (name, suite) in selected {
        eprintln!("xtask: interop suite `{name}`");
        suite()?;
        eprintln!("xtask: interop suite `{name}` passed");
    }
    Ok(())
}

/// The Codex CLI version the `codex` suite pins (also in `interop/codex/package.json`).
const CODEX_VERSION: &str = "0.171.0";

/// `codex`: installs the pinned `@openai/codex` into `interop/codex/node_modules` (never
/// globally), then runs `crates/agentctl/tests/codex_interop.rs` with `--include-ignored` and
/// `CODEX_BIN` set: probe; with our emulator as Codex's model provider: a plain turn, a
/// declined command, a steer and an interrupt; and `agentctl codex run --mock`.
fn codex_cli() -> anyhow::Result<()> {
    use crate::process::{cargo, output, run, workspace_root};
    let dir = workspace_root().join("interop").join("codex");
    let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
    // `npm ci` installs exactly what package-lock.json pins.
    run(std::process::Command::new(npm)
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&dir))?;
    let codex_bin = dir.join("node_modules").join(".bin").join("codex");
    let version = output(std::process::Command::new(&codex_bin).arg("--version"))?;
    if !version.contains(CODEX_VERSION) {
        anyhow::bail!(
            "interop/codex installed `{}`, expected codex-cli {CODEX_VERSION}",
            version.trim()
        );
    }
    run(cargo()
        .args([
            "test",
            "-j2",
            "-p",
            "agentctl",
            "--test",
            "codex_interop",
            "--",
        ])
        .args(["--include-ignored", "--test-threads=1"])
        .env("CODEX_BIN", &codex_bin))
}
