//! The one integration-test binary of `agent-context`: each module is a suite that used to
//! be a binary of its own. PostgreSQL suites need `AGENTCTL_TEST_PG_URL` (skipped without
//! it, failing under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "all/common.rs"]
mod common;

#[path = "all/checkpoint.rs"]
mod checkpoint;
#[path = "all/conformance.rs"]
mod conformance;
#[path = "all/crash.rs"]
mod crash;
#[path = "all/deferred_index.rs"]
mod deferred_index;
#[cfg(target_os = "linux")]
#[path = "all/disk_full.rs"]
mod disk_full;
#[path = "all/fuzz_units.rs"]
mod fuzz_units;
#[path = "all/open_while_locked.rs"]
mod open_while_locked;
#[path = "all/pg_database.rs"]
mod pg_database;
#[cfg(target_os = "linux")]
#[path = "all/read_only.rs"]
mod read_only;
#[path = "all/schema.rs"]
mod schema;
#[path = "all/sqlite_build.rs"]
mod sqlite_build;
