//! The one integration-test binary of `agentctl` (one link instead of fifteen): real
//! `agentctl` processes, the emulator over HTTP+SSE on 127.0.0.1, SQLite files and (with
//! AGENTCTL_TEST_PG_URL) PostgreSQL. Run one suite with `cargo test -p agentctl --test all
//! worker_pool::`. `worker_pg_restart` stays a binary of its own: it restarts the PostgreSQL
//! server, so no other test may run beside it (cargo runs test binaries one at a time).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

// Support shared by the suites.
#[path = "support/fake_codex.rs"]
mod fake_codex;
#[path = "host/mod.rs"]
mod host;
#[path = "support/served.rs"]
mod served;
#[path = "support/mod.rs"]
mod support;
#[path = "support/webdriver.rs"]
mod webdriver;
#[path = "workers/mod.rs"]
mod workers;

// The agent host (`run`, `resume`, approvals, steers, tools, sandbox, ...).
#[path = "host/approvals.rs"]
mod approvals;
#[path = "host/cli_safety.rs"]
mod cli_safety;
#[path = "host/crash.rs"]
mod crash;
#[path = "host/fixture_journal.rs"]
mod fixture_journal;
#[path = "host/lifecycle.rs"]
mod lifecycle;
#[path = "host/mcp.rs"]
mod mcp;
#[path = "host/model_replies.rs"]
mod model_replies;
#[path = "host/output_bounds.rs"]
mod output_bounds;
#[path = "host/output_schema.rs"]
mod output_schema;
#[path = "host/refusals.rs"]
mod refusals;
#[path = "host/run_output.rs"]
mod run_output;
#[path = "host/sandbox.rs"]
mod sandbox;
#[path = "host/sandbox_fallback.rs"]
mod sandbox_fallback;
#[path = "host/sandbox_kernel.rs"]
mod sandbox_kernel;
#[path = "host/sandbox_resume.rs"]
mod sandbox_resume;
#[path = "host/sandbox_settings.rs"]
mod sandbox_settings;
#[path = "host/search.rs"]
mod search;
#[path = "host/steer.rs"]
mod steer;
#[path = "host/steer_ws.rs"]
mod steer_ws;
#[path = "host/subagents.rs"]
mod subagents;
#[path = "host/subagents_resume.rs"]
mod subagents_resume;
#[path = "host/tools.rs"]
mod tools;
#[path = "host/trust.rs"]
mod trust;

// The other commands, the HTTP API and console, the worker pool, interop.
#[path = "all/allocator.rs"]
mod allocator;
#[path = "all/api_cli.rs"]
mod api_cli;
#[path = "all/api_steer.rs"]
mod api_steer;
#[path = "all/cli_demo_runtime.rs"]
mod cli_demo_runtime;
#[path = "all/cli_json.rs"]
mod cli_json;
#[path = "all/cli_memory.rs"]
mod cli_memory;
#[path = "all/codex_docs.rs"]
mod codex_docs;
#[path = "all/codex_interop.rs"]
mod codex_interop;
#[cfg(target_os = "linux")]
#[path = "all/disk_full.rs"]
mod disk_full;
#[path = "all/docs_agree.rs"]
mod docs_agree;
#[path = "all/help_flags.rs"]
mod help_flags;
#[path = "all/journal_cli.rs"]
mod journal_cli;
#[path = "all/mcp_interop.rs"]
mod mcp_interop;
#[path = "all/pg_outage.rs"]
mod pg_outage;
#[path = "all/secrets.rs"]
mod secrets;
#[path = "all/serve.rs"]
mod serve;
#[path = "all/serve_browser.rs"]
mod serve_browser;
#[path = "all/serve_browser_approval.rs"]
mod serve_browser_approval;
#[path = "all/serve_browser_opener.rs"]
mod serve_browser_opener;
#[path = "all/serve_browser_profile.rs"]
mod serve_browser_profile;
#[path = "all/serve_browser_text.rs"]
mod serve_browser_text;
#[path = "all/serve_open.rs"]
mod serve_open;
#[path = "all/thread_limit.rs"]
mod thread_limit;
#[path = "all/worker_pg_connections.rs"]
mod worker_pg_connections;
#[path = "all/workers.rs"]
mod worker_pool;
