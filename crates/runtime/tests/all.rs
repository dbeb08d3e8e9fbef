//! The one integration-test binary of `agent-runtime`: each module is a suite that used to
//! be a binary of its own. PostgreSQL cases need `AGENTCTL_TEST_PG_URL` (skipped without
//! it, failing under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "all/common.rs"]
mod common;
#[path = "all/support.rs"]
mod support;

#[path = "all/hostile.rs"]
mod hostile;
#[path = "all/interleavings.rs"]
mod interleavings;
#[path = "all/runtime.rs"]
mod runtime;
#[path = "all/takeover.rs"]
mod takeover;
