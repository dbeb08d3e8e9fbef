//! The one integration-test binary of `agent-appserver`: each module is a suite that used
//! to be a binary of its own. `fake_server` spawns the `appserver-test-fake` binary
//! (`CARGO_BIN_EXE_...`), not itself, so it shares this binary with the others.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "all/fake_server.rs"]
mod fake_server;
#[path = "all/fuzz_wire.rs"]
mod fuzz_wire;
#[path = "all/server_faults.rs"]
mod server_faults;
