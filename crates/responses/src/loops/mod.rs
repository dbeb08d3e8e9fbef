//! Tool loops over the client, as in the seed: direct (and PTC), async streaming, compaction.

mod async_mode;
mod compact;
mod direct;
mod error;
mod executor;

pub use async_mode::{AsyncOutcome, run_async};
pub use compact::{CompactOutcome, run_compact};
pub use direct::{DirectOutcome, MAX_MODEL_TURNS, run_direct};
pub use error::LoopError;
pub use executor::{ToolExecutor, ToolFailure, output_for};

use crate::types::Tool;

/// What every loop sends besides the conversation.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    pub model: String,
    pub instructions: Option<String>,
    pub tools: Vec<Tool>,
    /// Model turns before giving up (the seed's budget is 12).
    pub max_turns: usize,
}

impl LoopConfig {
    pub fn new(model: impl Into<String>, instructions: Option<String>, tools: Vec<Tool>) -> Self {
        Self {
            model: model.into(),
            instructions,
            tools,
            max_turns: MAX_MODEL_TURNS,
        }
    }
}
