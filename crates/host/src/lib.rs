//! `agent-host`: what composes several crates of the workspace.
//!
//! The agent host (`agentctl run`) lives here: a run is one journal thread, folded into
//! state by one function used live and on resume; model calls go through
//! `agent-responses`, tool calls through `agent-runtime` (the model's `call_id` is the
//! runtime's call id), and the journal is the only source of truth.

pub mod codex;
pub mod executor;
pub mod steer_bridge;
