//! `agent-runtime`: durable agent turns with steering, journaled tool calls and recovery.
//!
//! A [`Runtime`] runs turns on threads over an [`agent_journal::Journal`]:
//! - one running turn per thread; [`Runtime::steer`] bumps the revision, results launched
//!   under an older revision come back `stale`, and [`Runtime::commit`] must name the
//!   current revision;
//! - tool calls ([`Runtime::launch`]) go through an allowlist ([`ToolRegistry`]) with
//!   argument validation, are idempotent on `(thread, turn, call_id)` with a canonical
//!   signature (also across restarts), are journaled before they run (`tool.scheduled`)
//!   and get exactly one terminal event each. Those two are relaxed appends
//!   ([`agent_journal::NewEvent::relaxed`]): committed (and kept if the process is killed)
//!   when acknowledged, durable against power loss with the journal's next durable commit.
//!   A call's `tool.started` is durable before its effect (alongside it for a retry-safe
//!   tool), and a caller that acts outside the process on a result appends a durable event
//!   first;
//! - queue and run deadlines are separate ([`Deadlines`]); admission control bounds the
//!   calls in flight; finished jobs leave memory;
//! - [`Runtime::recover`] rebuilds everything from the journal after a crash; a process
//!   that drives only some threads of a shared journal starts with [`Runtime::open`] and
//!   takes threads over one by one with [`Runtime::adopt`].
//!
//! Also here: [`fanout`] (run calls concurrently, validate each output, report complete or
//! partial) and [`observe`] (an observe-act loop with an action budget). The synthetic tools
//! of `agentctl demo` live in `demo`, behind the `demo` feature.
//!
//! A turn with one tool call, on an in-process journal:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_journal::Journal;
//! use agent_runtime::{
//!     CallStatus, Runtime, RuntimeOptions, Tool, ToolContext, ToolFailure, ToolRegistry,
//! };
//! use futures::future::BoxFuture;
//! use serde_json::{Value, json};
//!
//! struct ReadDocs;
//! impl Tool for ReadDocs {
//!     fn name(&self) -> &str { "read_docs" }
//!     fn validate(&self, args: &Value) -> Result<(), String> {
//!         args.is_object().then_some(()).ok_or_else(|| "arguments must be an object".into())
//!     }
//!     fn call(&self, _: Value, _: ToolContext) -> BoxFuture<'static, Result<Value, ToolFailure>> {
//!         Box::pin(async { Ok(json!({"docs": "..."})) })
//!     }
//!     fn retry_safe(&self) -> bool { true }
//! }
//!
//! let journal = Journal::open("memory:").await?;
//! let options = RuntimeOptions::default().tools(ToolRegistry::new().with(ReadDocs));
//! let runtime = Runtime::recover(journal, options).await?;
//! let turn = runtime.start("thread-1").await?;
//! // `tool.scheduled` is committed once `launch` returns; the same call_id is the same job.
//! let key = runtime
//!     .launch("thread-1", &turn, "call-1", "read_docs", json!({"delay": 0}))
//!     .await?;
//! let result = runtime.result("thread-1", &turn, &key).await?;
//! assert_eq!(result.status, CallStatus::Completed);
//! assert!(!result.stale);
//! runtime.finish("thread-1", &turn).await?;
//! runtime.close().await;
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod checkpoint;
#[cfg(feature = "demo")]
pub mod demo;
mod error;
pub mod events;
pub mod fanout;
pub mod observe;
mod options;
mod outcome;
mod recover;
mod runtime;
mod settlement;
mod signature;
mod tool;

pub use checkpoint::{CheckpointTurn, ThreadCheckpoint};
pub use error::RuntimeError;
pub use options::{DEFAULT_RUN_DEADLINE, Deadlines, RuntimeOptions};
pub use outcome::{CallStatus, DeadlinePhase, Outcome, ToolResult};
pub use recover::{InterruptedCall, RecoveryReport};
pub use runtime::{JobKey, Runtime, RuntimeTurnStatus};
pub use signature::signature;
pub use tokio_util::sync::CancellationToken;
pub use tool::{Tool, ToolContext, ToolFailure, ToolRegistry};
