//! Tool loops over the client: direct (and PTC), async streaming, compaction.

mod async_mode;
mod compact;
mod direct;
mod error;
mod executor;

pub use async_mode::{AsyncOutcome, run_async};
pub use compact::{CompactOutcome, run_compact};
pub use direct::{DirectOutcome, MAX_MODEL_TURNS, run_direct};
pub use error::LoopError;
pub use executor::{ExecutorFailure, ToolExecutor, output_for};

use crate::types::ToolDefinition;

/// What every loop sends besides the conversation.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// The model slug of every request.
    pub model: String,
    /// Instructions sent with every request (they are not carried over otherwise).
    pub instructions: Option<String>,
    /// The tools offered on every request.
    pub tools: Vec<ToolDefinition>,
    /// Model turns before giving up ([`direct::MAX_MODEL_TURNS`] by default).
    pub max_turns: usize,
}

impl LoopConfig {
    /// A configuration with the default turn budget.
    pub fn new(
        model: impl Into<String>,
        instructions: Option<String>,
        tools: Vec<ToolDefinition>,
    ) -> Self {
        Self {
            model: model.into(),
            instructions,
            tools,
            max_turns: MAX_MODEL_TURNS,
        }
    }
}
