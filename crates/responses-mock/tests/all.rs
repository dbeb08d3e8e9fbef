//! The one integration-test binary of `agent-responses-mock`: each module is a suite that
//! used to be a binary of its own. Run one suite with
//! `cargo test -p agent-responses-mock --test all bounds::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "all/fuzz_common.rs"]
mod fuzz_common;
#[path = "all/ws_client.rs"]
mod ws_client;

#[path = "all/bounds.rs"]
mod bounds;
#[path = "all/doc_agreement.rs"]
mod doc_agreement;
#[path = "all/fuzz_requests.rs"]
mod fuzz_requests;
#[path = "all/fuzz_script.rs"]
mod fuzz_script;
#[path = "all/keep_alive.rs"]
mod keep_alive;
#[path = "all/latency.rs"]
mod latency;
#[path = "all/request_errors.rs"]
mod request_errors;
#[path = "all/script_checks.rs"]
mod script_checks;
#[path = "all/ws_protocol.rs"]
mod ws_protocol;
