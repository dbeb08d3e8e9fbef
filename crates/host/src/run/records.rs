//! The records the fold keeps per step, call and approval.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::spec::Usage;

/// One completed model step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    pub step: u64,
    pub response_id: String,
    /// Output items, verbatim.
    pub output: Vec<Value>,
    pub usage: Usage,
}

/// What the model is told a call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutput {
    pub ok: bool,
    pub text: String,
}

/// Where one call (by the model's `call_id`) is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallProgress {
    /// Nothing recorded yet.
    New,
    /// Scheduled in the runtime turn `turn`, no terminal event yet.
    Scheduled { turn: String, started: bool },
    /// Cut off by a crash (`tool.interrupted`); `started`: its effect may have happened.
    /// `approval`: the `indeterminate` approval round asked since, if any.
    Interrupted {
        started: bool,
        approval: Option<u32>,
    },
    /// Finished (or refused): this is what the model sees.
    Done(CallOutput),
}

/// An approval round of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRecord {
    pub round: u32,
    /// `policy` or `indeterminate`.
    pub reason: String,
    pub args_sha256: String,
    pub decision: Option<Decision>,
}

/// A human's decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub approve: bool,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub by: Option<String>,
    /// `run`: approve this tool for the rest of the run.
    #[serde(default)]
    pub scope: Option<String>,
}

/// One model tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    pub call_id: String,
    pub name: String,
    /// The arguments as the model wrote them (JSON text).
    pub arguments: String,
    pub step: u64,
    pub progress: CallProgress,
    pub approvals: Vec<ApprovalRecord>,
}

impl CallRecord {
    /// The approval round awaiting a decision, if any.
    pub fn pending_approval(&self) -> Option<&ApprovalRecord> {
        self.approvals.last().filter(|a| a.decision.is_none())
    }
}
