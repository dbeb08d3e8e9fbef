//! `cargo xtask interop`: real third-party clients against our code.
//!
//! Suites are registered in [`SUITES`]; each is a function that prepares what it needs
//! (a virtualenv, an npm install) and fails loudly when a step fails.

type Suite = (&'static str, fn() -> anyhow::Result<()>);

/// Every interop suite, by name.
const SUITES: &[Suite] = &[
    ("codex", codex_cli),
    ("openai-sdk", openai_sdk),
    ("mcp", mcp_filesystem),
];

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
/// globally), then runs `crates/agentctl/tests/all/codex_interop.rs` with `--include-ignored` and
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
            "all",
            "--",
            "codex_interop::",
        ])
        .args(["--include-ignored", "--test-threads=1"])
        .env("CODEX_BIN", &codex_bin))
}

/// `mcp`: installs the pinned `@modelcontextprotocol/server-filesystem` into
/// `interop/mcp/node_modules` (never globally), then runs
/// `crates/agentctl/tests/all/mcp_interop.rs` with `--include-ignored` and `MCP_FILESYSTEM_BIN`
/// set: a scripted run on the emulator lists a directory and reads a file through it.
fn mcp_filesystem() -> anyhow::Result<()> {
    use crate::process::{cargo, run, workspace_root};
    let dir = workspace_root().join("interop").join("mcp");
    let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
    // `npm ci` installs exactly what package-lock.json pins.
    run(std::process::Command::new(npm)
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&dir))?;
    let bin = dir
        .join("node_modules")
        .join(".bin")
        .join("mcp-server-filesystem");
    if !bin.exists() {
        anyhow::bail!("interop/mcp: npm ci did not install {}", bin.display());
    }
    run(cargo()
        .args([
            "test",
            "-j2",
            "-p",
            "agentctl",
            "--test",
            "all",
            "--",
            "mcp_interop::",
        ])
        .args(["--include-ignored", "--test-threads=1"])
        .env("MCP_FILESYSTEM_BIN", &bin))
}

/// The `openai-sdk` suite's virtualenv: `interop/openai_sdk/.venv` (created on first use)
/// holding exactly what `interop/openai_sdk/requirements.lock` pins, every transitive
/// dependency included: installed with `--no-deps` so pip never resolves an unpinned
/// package, then `pip check` proves the pinned set is complete and consistent. Returns its
/// python.
pub fn openai_venv() -> anyhow::Result<std::path::PathBuf> {
    use crate::process::{output, run, workspace_root};
    let dir = workspace_root().join("interop").join("openai_sdk");
    let venv = dir.join(".venv");
    let python = venv.join("bin").join("python");
    if !python.exists() {
        run(std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv))?;
    }
    run(std::process::Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "-r",
        ])
        .arg(dir.join("requirements.lock")))?;
    run(std::process::Command::new(&python).args([
        "-m",
        "pip",
        "check",
        "--disable-pip-version-check",
    ]))?;
    let version = output(
        std::process::Command::new(&python)
            .args(["-c", "import openai; print(openai.__version__)"]),
    )?;
    if version.trim() != OPENAI_VERSION {
        anyhow::bail!(
            "interop/openai_sdk/.venv has openai `{}`, requirements.lock pins {OPENAI_VERSION}",
            version.trim()
        );
    }
    Ok(python)
}

/// The `openai` Python SDK version `interop/openai_sdk/requirements.lock` pins.
const OPENAI_VERSION: &str = "3.57.0";

/// `openai-sdk`: the official `openai` Python SDK (pinned) against `agentctl mock serve`
/// with `interop/openai_sdk/script.json`: create, stream helper, function-call round trip,
/// compact, error classes, retries on 429 (retry-after) and 500.
fn openai_sdk() -> anyhow::Result<()> {
    use std::io::BufRead as _;

    use crate::process::{cargo, run, workspace_root};
    let root = workspace_root();
    let dir = root.join("interop").join("openai_sdk");
    let python = openai_venv()?;
    run(cargo().args(["build", "-j2", "-p", "agentctl"]))?;
    let target = std::env::var("CARGO_TARGET_DIR").map_or_else(|_| root.join("target"), Into::into);
    let agentctl = target.join("debug").join("agentctl");
    let key = "sk-interop-openai-sdk";
    let mut server = std::process::Command::new(&agentctl)
        .args([
            "mock",
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--require-key",
            key,
            "--script",
        ])
        .arg(dir.join("script.json"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", agentctl.display()))?;
    let base = server
        .stdout
        .take()
        .and_then(|out| std::io::BufReader::new(out).lines().next())
        .and_then(Result::ok)
        .map(|line| line.trim().to_owned())
        .filter(|line| line.starts_with("http://"));
    let result = match base {
        Some(base) => {
            eprintln!("xtask: emulator at {base}");
            let admin = base.trim_end_matches("/v1").to_owned();
            run(std::process::Command::new(&python)
                .args(["-m", "pytest", "-v", "-p", "no:cacheprovider"])
                .arg(dir.join("test_openai_sdk.py"))
                .arg(dir.join("test_websocket.py"))
                .env("OPENAI_BASE_URL", &base)
                .env("OPENAI_API_KEY", key)
                .env("MOCK_ADMIN_URL", admin)
                .current_dir(&dir))
        }
        None => Err(anyhow::anyhow!(
            "`agentctl mock serve` did not print its base URL"
        )),
    };
    let _ = server.kill();
    let _ = server.wait();
    result
}
