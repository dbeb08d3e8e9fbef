//! `agent-host`: what composes several crates of the workspace.
//!
//! The agent host (`agentctl run`) lives in [`run`]: a run is one journal thread, folded into
//! state by one function used live and on resume ([`run::RunState::apply`]); model calls go
//! through `agent-responses` (HTTP+SSE), tool calls through `agent-runtime` (the model's
//! `call_id` is the runtime's call id), and the journal is the only source of truth.
//!
//! Resume rules (each is a test in `crates/agentctl/tests/all.rs`: its modules in
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
//! runtime). For front ends: [`follow`] (a journal thread, live), [`run::wait`] (until a run
//! stops) and [`signals`] (stopping long-running work on SIGINT/SIGTERM).
//!
//! # From `Host::new` to a tool of your own
//!
//! A host is a journal (the only source of truth: `memory:`, a SQLite file or a
//! PostgreSQL URL) and a model client; a run is a prompt and a workspace. Here the
//! emulator (`agent-responses-mock`, in this process) plays the model's built-in story.
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
//! [`DriveOptions`](run::DriveOptions) say how this process drives: an
//! [`Observer`](run::Observer) sees every event as it is journaled, a
//! [`Decider`](run::Decider) answers approvals inline (without one, a call that asks pauses
//! the run: [`run::decide`] from anywhere, then [`Host::resume`](run::Host::resume)).
//!
//! A tool of your own is a [`tools::RustTool`]: a name, a description, an argument type
//! whose JSON Schema `schemars` derives, and an async function. Registered with
//! [`Host::tool`](run::Host::tool), its calls go through the runtime like the built-ins'
//! (journaled before they run, never run twice, a call cut off by a crash asks a human
//! before it runs again unless the tool is [`retry_safe`](tools::RustTool::retry_safe)).
//! Its [`Policy`](tools::Policy) says whether it runs, asks or is refused.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_host::run::{DriveOptions, Host, NewRun, RunEnd};
//! use agent_host::tools::{Policy, RustTool};
//! use agent_responses::{ApiKey, Client, ClientConfig};
//! use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Lookup {
//!     /// The ticket number.
//!     id: u32,
//! }
//!
//! let tickets = RustTool::new("ticket", "Read a ticket by number.", |t: Lookup| async move {
//!     match t.id {
//!         7 => Ok(serde_json::json!({"id": 7, "title": "Parser crash"})),
//!         other => Err(format!("no ticket {other}")), // the model is told; the run goes on
//!     }
//! })
//! .read_only()
//! .policy(Policy::Auto);
//!
//! // The model asks for ticket 7, then answers with what the tool returned.
//! let script = Script::from_json_str(r#"{"rules": [
//!   {"when": {"tool_outputs": 0}, "reply": {"items": [{"type": "function_call",
//!      "call_id": "c1", "name": "ticket", "arguments": "{\"id\": 7}"}]}},
//!   {"reply": {"items": [{"type": "message", "role": "assistant",
//!      "content": [{"type": "output_text", "text": "Found: {{outputs}}"}]}]}}]}"#)?;
//! let mock = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY)).await?;
//! let client = Client::new(ClientConfig::new(mock.base_url(), ApiKey::new(MOCK_API_KEY).ok_or("key")?))?;
//! let host = Host::new(agent_journal::Journal::open("memory:").await?, client).tool(tickets);
//! let workspace = tempfile::tempdir()?;
//! let report = host.start(NewRun::new("what is ticket 7?", workspace.path()), DriveOptions::default()).await?;
//! assert_eq!(report.end, RunEnd::Completed {
//!     text: r#"Found: {"id":7,"title":"Parser crash"}"#.into()
//! });
//! # Ok(()) }
//! ```
//!
//! A run whose final answer must be JSON of a given shape takes an
//! [`OutputSchema`](run::OutputSchema) ([`NewRun::output_schema`](run::NewRun::output_schema)):
//! the schema goes to the model as `text.format`, an answer that does not match is sent back
//! with its errors, and the parsed answer is [`RunReport::output`](run::RunReport::output).
//! Whole programs: `examples/custom_tool.rs` and `examples/structured_output.rs`.
//!
//! # Sub-agents
//!
//! A run given [`SubagentLimits`](subagents::SubagentLimits)
//! ([`NewRun::subagents`](run::NewRun::subagents), `--max-children`) offers the model the
//! built-in `spawn_agents` tool: one call runs several child runs concurrently and returns
//! each one's answer or failure. A child is a run of its own, created once however often a
//! resumed parent runs the call (see [`subagents`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_host::run::{DriveOptions, Host, NewRun, RunEnd};
//! use agent_host::subagents::SubagentLimits;
//! use agent_host::tools::ApprovalMode;
//! use agent_responses::{ApiKey, Client, ClientConfig};
//! use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
//!
//! // The parent asks for one sub-agent, which answers; the parent answers with its result.
//! let script = Script::from_json_str(r#"{"rules": [
//!   {"when": {"last_user_contains": "CHILD"}, "reply": {"items": [{"type": "message",
//!      "role": "assistant", "content": [{"type": "output_text", "text": "42"}]}]}},
//!   {"when": {"tool_outputs": 0}, "reply": {"items": [{"type": "function_call",
//!      "call_id": "c1", "name": "spawn_agents", "arguments":
//!      "{\"agents\": [{\"prompt\": \"CHILD: the answer?\", \"instructions\": null, \"tools\": []}]}"}]}},
//!   {"reply": {"items": [{"type": "message", "role": "assistant",
//!      "content": [{"type": "output_text", "text": "done"}]}]}}]}"#)?;
//! let mock = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY)).await?;
//! let client = Client::new(ClientConfig::new(mock.base_url(), ApiKey::new(MOCK_API_KEY).ok_or("key")?))?;
//! let host = Host::new(agent_journal::Journal::open("memory:").await?, client);
//! let workspace = tempfile::tempdir()?;
//! let run = NewRun::new("ask a sub-agent", workspace.path())
//!     .approval(ApprovalMode::Auto)
//!     .subagents(Some(SubagentLimits::new(2)));
//! let report = host.start(run, DriveOptions::default()).await?;
//! assert_eq!(report.end, RunEnd::Completed { text: "done".into() });
//! let child = &report.state.children()[0];
//! assert_eq!(child.ended, Some(agent_host::run::events::ChildEnd::Completed));
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
pub mod paths;
mod raw_json;
pub mod run;
pub mod sandbox;
pub mod signals;
pub mod steer_bridge;
pub mod subagents;
pub mod tools;
pub mod worker;

pub use error::HostError;
pub use raw_json::RawJson;
