//! `cargo xtask <task>`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! - `ci`: format check, clippy with `-D warnings`, every test (PostgreSQL included when
//!   `AGENTCTL_TEST_PG_URL` is set; required when `CI=true`), then the interop suites when
//!   `CI=true` or `--interop` is given.
//! - `bench [AREA...]`: release-mode benchmarks beside the seed's Python baselines, written
//!   into `docs/benchmarks.md`.
//! - `interop`: the official `openai` Python SDK, the real Codex CLI and the real MCP
//!   filesystem server against our code.
//! - `fuzz [TARGET...] [--time SECONDS]`: long property-test campaigns (default 600 s each).
//! - `install [--prefix DIR]`: the release `agentctl` and its static sandbox entry point.

#[cfg(test)]
mod arch_doc;
mod bench;
mod ci;
mod fuzz;
mod install;
mod interop;
mod process;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <ci [--interop] | bench [AREA...] | interop [SUITE...] | fuzz [TARGET...] [--time SECONDS] [--list] | install [--prefix DIR]>

  ci        cargo fmt --check, clippy -D warnings, all tests (then interop under CI=true)
  bench     run benchmarks side by side with the seed; areas: journal runtime context responses host
            workers sandbox serve
  interop   run third-party clients against our code; suites: openai-sdk codex mcp
  fuzz      run property tests with large case counts for SECONDS each (default 600); --list;
            targets: sse events appserver requests script journal units redact tools mcp
  install   build the release agentctl and its static sandbox entry point into DIR/bin
            (default ~/.local)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::FAILURE;
    };
    let result = match task.as_str() {
        "ci" => ci::run(rest),
        "bench" => bench::run(rest),
        "interop" => interop::run(rest),
        "fuzz" => fuzz::run(rest),
        "install" => install::run(rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(anyhow::anyhow!("unknown task `{other}`\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
