//! The one integration-test binary of `agent-responses`: each module is a suite that used to
//! be a binary of its own (one link instead of seven). Run one suite with
//! `cargo test -p agent-responses --test all client::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "all/common.rs"]
mod common;

#[path = "all/body_limits.rs"]
mod body_limits;
#[path = "all/client.rs"]
mod client;
#[path = "all/fuzz_events.rs"]
mod fuzz_events;
#[path = "all/fuzz_retry_after.rs"]
mod fuzz_retry_after;
#[path = "all/loops.rs"]
mod loops;
#[path = "all/pool.rs"]
mod pool;
#[path = "all/roundtrip.rs"]
mod roundtrip;
#[path = "all/sse_differential.rs"]
mod sse_differential;
#[path = "all/unusual_answers.rs"]
mod unusual_answers;
#[path = "all/ws_steer.rs"]
mod ws_steer;
