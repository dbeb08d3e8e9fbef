//! The one integration-test binary of `agent-journal`: each module is a suite that used to be
//! a binary of its own (one link instead of eight). Run one suite with
//! `cargo test -p agent-journal --test all leases::`. Suites that need a process to
//! themselves (crash, schema, reader threads) re-run this binary for one ignored test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "all/support.rs"]
mod support;

#[path = "all/conformance.rs"]
mod conformance;
#[path = "all/corrupt_reads.rs"]
mod corrupt_reads;
#[path = "all/crash.rs"]
mod crash;
#[cfg(target_os = "linux")]
#[path = "all/disk_full.rs"]
mod disk_full;
#[path = "all/fuzz_journal.rs"]
mod fuzz_journal;
#[path = "all/hostile.rs"]
mod hostile;
#[path = "all/leases.rs"]
mod leases;
#[path = "all/open_while_locked.rs"]
mod open_while_locked;
#[path = "all/pg_append_function.rs"]
mod pg_append_function;
#[path = "all/pg_direct.rs"]
mod pg_direct;
#[path = "all/pg_lock_free.rs"]
mod pg_lock_free;
#[path = "all/pg_pool.rs"]
mod pg_pool;
#[path = "all/pg_upgrade.rs"]
mod pg_upgrade;
#[cfg(target_os = "linux")]
#[path = "all/reader_threads.rs"]
mod reader_threads;
#[path = "all/schema.rs"]
mod schema;
