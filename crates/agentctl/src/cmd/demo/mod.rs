//! `agentctl demo ...`: the seed's demo stories, run on the Rust crates.
//! Each demo lives in its own module; add a variant and a match arm for a new one.

pub mod memory;

use clap::Subcommand;

use crate::global::GlobalArgs;

/// Runnable demos of what the crates guarantee.
#[derive(Debug, Subcommand)]
pub enum DemoCmd {
    /// Context and memory: a window that keeps tool calls with their outputs, search that
    /// recalls E42 (CJK text), memory jdk=17 from rollout-2, and jdk=8 from rollout-1 once
    /// rollout-2 is revoked. Without --db it runs on a private in-memory store.
    Memory,
}

pub async fn run(global: &GlobalArgs, cmd: DemoCmd) -> anyhow::Result<std::process::ExitCode> {
    match cmd {
        DemoCmd::Memory => memory::run(global).await,
    }
}
