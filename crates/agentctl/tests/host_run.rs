#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! The agent host end to end: real `agentctl` processes, the emulator over HTTP+SSE on
//! 127.0.0.1, SQLite files and (with AGENTCTL_TEST_PG_URL) PostgreSQL. One test binary for
//! every host test (it links once).

#[path = "host/mod.rs"]
mod host;

#[path = "host/crash.rs"]
mod crash;

#[path = "host/approvals.rs"]
mod approvals;

#[path = "host/tools.rs"]
mod tools;

#[path = "host/lifecycle.rs"]
mod lifecycle;

#[path = "host/steer.rs"]
mod steer;

#[path = "host/steer_ws.rs"]
mod steer_ws;

#[path = "host/search.rs"]
mod search;

#[path = "host/mcp.rs"]
mod mcp;

#[path = "host/fixture_journal.rs"]
mod fixture_journal;

#[path = "host/sandbox.rs"]
mod sandbox;

#[path = "host/output_schema.rs"]
mod output_schema;

#[path = "host/subagents.rs"]
mod subagents;
