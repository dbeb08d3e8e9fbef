//! `agent-host`: what composes several crates of the workspace.
//!
//! The agent host (`agentctl run`) lives in [`run`]: a run is one journal thread, folded into
//! state by one function used live and on resume ([`run::RunState::apply`]); model calls go
//! through `agent-responses` (HTTP+SSE), tool calls through `agent-runtime` (the model's
//! `call_id` is the runtime's call id), and the journal is the only source of truth.
//!
//! Resume rules (each is a test in `crates/agentctl/tests/host_*.rs`):
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
//! runtime).
//!
//! Only one process drives a run: the host appends its own events with the journal's
//! expected-version append, records itself as the driver, and `resume` refuses a run whose
//! recorded driver still lives.

pub mod codex;
mod error;
pub mod executor;
pub mod run;
pub mod steer_bridge;
pub mod tools;

pub use error::HostError;
