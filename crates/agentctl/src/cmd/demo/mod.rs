//! `agentctl demo ...`: runnable stories of what the crates guarantee (README.md lists them).
//! Each demo lives in its own module; add a variant and a match arm for a new one.

pub mod gui;
pub mod memory;
pub mod orchestrate;
pub mod runtime;

use clap::Subcommand;

use crate::global::GlobalArgs;

/// Runnable demos of what the crates guarantee.
#[derive(Debug, Subcommand)]
pub enum DemoCmd {
    /// Context and memory: a window that keeps tool calls with their outputs, search that
    /// recalls E42 (CJK text), memory jdk=17 from rollout-2, and jdk=8 from rollout-1 once
    /// rollout-2 is revoked. Without --db it runs on a private in-memory store.
    Memory,
    /// The turn runtime: two tools run concurrently on thread `demo`, independent work is
    /// journaled meanwhile, a steer arrives, the results come back stale, the commit at
    /// revision 0 is refused and the one at revision 1 accepted; prints the results, the
    /// turn's journal replay and the elapsed time. Uses the configured journal (--db).
    Runtime,
    /// Fan-out: scan api, ui and unknown concurrently, validate each output row, and report
    /// `partial` with one finding and one failure listed by input.
    Orchestrate,
    /// Observe-act loop: open the filters, type "penguin", verify the app's final state
    /// within an action budget of 5.
    Gui,
}

pub async fn run(global: &GlobalArgs, cmd: DemoCmd) -> anyhow::Result<std::process::ExitCode> {
    match cmd {
        DemoCmd::Memory => memory::run(global).await,
        DemoCmd::Runtime => runtime::run(global).await,
        DemoCmd::Orchestrate => orchestrate::run(global).await,
        DemoCmd::Gui => gui::run(global).await,
    }
}
