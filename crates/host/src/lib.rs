//! `agent-host`: what composes several crates of the workspace.
//!
//! The agent host (`agentctl run`) lives in [`run`]: a run is one journal thread, folded into
//! state by one function used live and on resume ([`run::RunState::apply`]); model calls go
//! through `agent-responses` (HTTP+SSE), tool calls through `agent-runtime` (the model's
//! `call_id` is the runtime's call id), and the journal is the only source of truth.
//!
//! Resume rules (each is a test in `crates/agentctl/tests/host_run.rs` and its modules in
//! `crates/agentctl/tests/host/`):
//! 1. A step with `model.completed` is never requested again: its recorded output is reused.
//! 2. A step with `model.requested` and no completion is requested again (next attempt).
//! 3. A tool call with a terminal event is never run again: its recorded output is what the
//!    model sees.
//! 4. A call scheduled and never finished: a retry-safe tool (or one that never started)
//!    runs again; any other becomes `approval.requested` with reason `indeterminate`.
//! 5. Approvals pending at the crash are pending again; decisions made while no host ran
//!    are found in the journal and applied.
//!
//! Also here, what else composes several crates: [`codex`] (a whole Codex turn over
//! `codex app-server`, journaled), [`steer_bridge`] (WebSocket steering as runtime
//! revisions) and [`executor::RuntimeExecutor`] (the Responses loops' tools through the
//! runtime). For front ends: [`follow`] (a journal thread, live), [`run_wait`] (until a run
//! stops) and [`signals`] (stopping long-running work on SIGINT/SIGTERM).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_host::run::{Budgets, DriveOptions, Host, NewRun, RunEnd};
//! use agent_host::tools::ApprovalMode;
//! use agent_responses::{ApiKey, Client, ClientConfig};
//! use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer};
//!
//! // The emulator plays the built-in story: list, read, shell, write, answer.
//! let mock = MockServer::start(MockConfig::for_mode("run")?.with_api_key(MOCK_API_KEY)).await?;
//! let key = ApiKey::new(MOCK_API_KEY).ok_or("key")?;
//! let client = Client::new(ClientConfig::new(mock.base_url(), key))?;
//! let journal = agent_journal::Journal::open("memory:").await?;
//! let workspace = tempfile::tempdir()?;
//! std::fs::write(workspace.path().join("README.md"), "hello\n")?;
//!
//! let run = NewRun::new("look around", workspace.path())
//!     .budgets(Budgets { max_steps: 10, max_tokens: None })
//!     .approval(ApprovalMode::Auto);
//! let report = Host::new(journal, client).start(run, DriveOptions::default()).await?;
//! assert!(matches!(report.end, RunEnd::Completed { .. }));
//! assert_eq!(report.state.step_count(), 5);
//! assert!(workspace.path().join("SUMMARY.md").exists());
//! # Ok(()) }
//! ```
//!
//! Only one process drives a run: the host appends its own events with the journal's
//! expected-version append, records itself as the driver, and `resume` refuses a run whose
//! recorded driver still lives.

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

pub mod codex;
mod error;
pub mod executor;
pub mod follow;
#[doc(hidden)]
pub mod fuzzing;
mod raw_json;
pub mod run;
pub mod run_history;
pub mod run_wait;
pub mod sandbox;
pub mod signals;
pub mod steer_bridge;
pub mod tools;
pub mod worker;

pub use error::HostError;
pub use raw_json::RawJson;
