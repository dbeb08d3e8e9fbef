//! The integration tests of `agent-host` in one binary: each module is a suite that used to
//! be a binary of its own (one link instead of seven). Run one suite with
//! `cargo test -p agent-host --test all executor::`. `codex_driver` stays a binary of its
//! own: it has its own harness, since the test binary is also the app-server it spawns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "all/bench_script.rs"]
mod bench_script;
#[path = "all/decision_race.rs"]
mod decision_race;
#[path = "all/driver_fold.rs"]
mod driver_fold;
#[path = "all/dropped_drive.rs"]
mod dropped_drive;
#[path = "all/durable_commits.rs"]
mod durable_commits;
#[path = "all/edited_journal.rs"]
mod edited_journal;
#[path = "all/executor.rs"]
mod executor;
#[path = "all/file_tools_swap.rs"]
mod file_tools_swap;
#[path = "all/fuzz_fold.rs"]
mod fuzz_fold;
#[path = "all/fuzz_mcp.rs"]
mod fuzz_mcp;
#[path = "all/fuzz_tools.rs"]
mod fuzz_tools;
#[path = "all/resume_claim.rs"]
mod resume_claim;
#[path = "all/rust_tools.rs"]
mod rust_tools;
#[path = "all/steer_bridge.rs"]
mod steer_bridge;
#[path = "all/subagents.rs"]
mod subagents;
