//! The records the fold keeps per step, call and approval.

use super::events::ApprovalReason;
pub use super::events::Decision;
use super::spec::TokenUsage;
use crate::RawJson;

/// One completed model step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// The step number, from 1.
    pub step: u64,
    /// The response's id.
    pub response_id: String,
    /// Output items, verbatim.
    pub output: Vec<RawJson>,
    /// Tokens of this step.
    pub usage: TokenUsage,
    /// Why the response stopped short, when it was `incomplete`.
    pub incomplete: Option<String>,
}

impl StepRecord {
    /// Its `message` and `reasoning` output items (what `codex exec --json` numbers).
    pub fn message_items(&self) -> u64 {
        self.output
            .iter()
            .filter(|i| matches!(i.item_type().as_deref(), Some("message" | "reasoning")))
            .count() as u64
    }
}

/// What the model is told a call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutput {
    /// Whether the call succeeded.
    pub ok: bool,
    /// The text the model reads.
    pub text: String,
}

/// Where one call (by the model's `call_id`) is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallProgress {
    /// Nothing recorded yet.
    New,
    /// Scheduled in the runtime turn `turn`, no terminal event yet.
    Scheduled {
        /// The runtime turn it was scheduled in.
        turn: String,
        /// Whether `tool.started` was journaled.
        started: bool,
    },
    /// Cut off by a crash (`tool.interrupted`); `started`: its effect may have happened.
    /// `approval`: the `indeterminate` approval round asked since, if any.
    Interrupted {
        /// Whether the call had started when it was cut off.
        started: bool,
        /// The `indeterminate` approval round asked since, if any.
        approval: Option<u32>,
    },
    /// Finished (or refused): this is what the model sees.
    Done(CallOutput),
}

/// An approval round of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRecord {
    /// The round: 0 for the first request of a call, then counting up.
    pub round: u32,
    /// Why a human is asked.
    pub reason: ApprovalReason,
    /// The sha256 of the arguments the request showed.
    pub args_sha256: String,
    /// The first decision, once made.
    pub decision: Option<Decision>,
}

/// One model tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    /// The model's call id (also the runtime's).
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the model wrote them (JSON text).
    pub arguments: String,
    /// The step number, from 1.
    pub step: u64,
    /// Where the call is.
    pub progress: CallProgress,
    /// Its approval rounds, in order.
    pub approvals: Vec<ApprovalRecord>,
}

impl CallRecord {
    /// The approval round awaiting a decision, if any.
    pub fn pending_approval(&self) -> Option<&ApprovalRecord> {
        self.approvals.last().filter(|a| a.decision.is_none())
    }
}
