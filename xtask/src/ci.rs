//! `cargo xtask ci`: what CI runs, and what a developer runs before pushing.

use crate::process::{cargo, run_cmd};

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let under_ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let interop = under_ci || args.iter().any(|a| a == "--interop");
    if std::env::var_os("AGENTCTL_TEST_PG_URL").is_none() {
        if under_ci {
            anyhow::bail!(
                "CI=true but AGENTCTL_TEST_PG_URL is unset: the PostgreSQL suite would be skipped"
            );
        }
        eprintln!(
            "xtask: NOTE: AGENTCTL_TEST_PG_URL is unset, so the PostgreSQL suite is SKIPPED \
             (set it to postgres://USER:PASS@127.0.0.1:5432/postgres to run it)"
        );
    }
    run_cmd(cargo().args(["fmt", "--all", "--check"]))?;
    run_cmd(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    // The API docs build without a warning (broken or private links rot silently).
    run_cmd(
        cargo()
            .args(["doc", "--workspace", "--no-deps"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    run_cmd(cargo().args(["test", "--workspace"]))?;
    crate::install::check_static_entry()?;
    if interop {
        crate::interop::run(&[])?;
    }
    Ok(())
}
