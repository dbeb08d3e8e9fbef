//! Events of a tool call as the host sees it: the runtime's (scheduled, started, one
//! terminal), and the host's own (refused, approval asked, decided).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::HostEvent;
use super::reasons::{ApprovalReason, DecisionScope, Verdict};
use crate::run::kinds as k;

/// `approval.requested`: a call waits for a human decision (one request per round).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequested {
    /// The model's call id.
    pub call_id: String,
    /// The tool.
    #[serde(default)]
    pub tool: String,
    /// The arguments as the model wrote them (JSON text): exactly what will run.
    #[serde(default)]
    pub arguments: String,
    /// The sha256 of `arguments`; a decision may name it to be sure of what it approves.
    #[serde(default)]
    pub args_sha256: String,
    /// Why a human is asked.
    pub reason: ApprovalReason,
    /// The round: 0 for a call's first request, then counting up.
    #[serde(default)]
    pub round: u32,
}

impl HostEvent for ApprovalRequested {
    const KIND: &'static str = k::APPROVAL_REQUESTED;
    fn dedup_key(&self) -> Option<String> {
        Some(k::approval_request_key(&self.call_id, self.round))
    }
}

/// A human's decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Approve (run it) or deny.
    pub approve: bool,
    /// Why; a denial's reason is told to the model.
    #[serde(default)]
    pub reason: Option<String>,
    /// Who decided (`user@host`).
    #[serde(default)]
    pub by: Option<String>,
    /// How far an approval reaches; `None`: this call only.
    #[serde(default)]
    pub scope: Option<DecisionScope>,
}

/// `approval.decided`: a decision on one approval round, from any process; the first one
/// wins (its dedup key is the call's and round's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecided {
    /// The decision.
    #[serde(flatten)]
    pub decision: Decision,
    /// The call decided on.
    pub call_id: String,
    /// The round decided.
    #[serde(default)]
    pub round: u32,
    /// The sha256 of the arguments the decision was made on.
    #[serde(default)]
    pub args_sha256: String,
    /// `approve` or `deny`, for readers that do not read the flag (always written; read
    /// leniently, the flag being what counts).
    #[serde(rename = "decision", default)]
    pub verdict: Option<Verdict>,
}

impl ApprovalDecided {
    /// `decision` on round `round` of `call_id`, whose arguments hash to `args_sha256`.
    pub fn new(call_id: &str, round: u32, args_sha256: &str, decision: Decision) -> Self {
        ApprovalDecided {
            verdict: Some(Verdict::of(decision.approve)),
            decision,
            call_id: call_id.to_string(),
            round,
            args_sha256: args_sha256.to_string(),
        }
    }
}

impl HostEvent for ApprovalDecided {
    const KIND: &'static str = k::APPROVAL_DECIDED;
    fn dedup_key(&self) -> Option<String> {
        Some(k::approval_key(&self.call_id, self.round))
    }
}

/// `tool.refused`: a call the policy refused, or whose tool or arguments were invalid; it
/// never ran, and the model reads `message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolRefused {
    /// The model's call id.
    pub call_id: String,
    /// The tool named.
    #[serde(default)]
    pub tool: String,
    /// What the model is told.
    #[serde(default)]
    pub message: String,
}

impl HostEvent for ToolRefused {
    const KIND: &'static str = k::TOOL_REFUSED;
    fn dedup_key(&self) -> Option<String> {
        Some(k::refused_key(&self.call_id))
    }
}

/// The runtime's `tool.scheduled`, as the host reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ToolScheduled {
    /// The model's call id.
    pub call_id: String,
    /// The runtime turn it was scheduled in.
    #[serde(default)]
    pub turn_id: String,
}

/// The runtime's `tool.started`, as the host reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ToolStarted {
    /// The model's call id.
    pub call_id: String,
}

/// How a call ended: the runtime's terminal kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolOutcome {
    /// `tool.completed`: the tool returned a value.
    Completed,
    /// `tool.failed`: the tool reported a failure.
    Failed,
    /// `tool.timeout`: a deadline expired.
    Timeout,
    /// `tool.cancelled`: cancelled with its turn (an interrupt).
    Cancelled,
    /// `tool.interrupted`: the process running it died.
    Interrupted,
}

impl ToolOutcome {
    /// The outcome of a terminal event kind.
    pub fn of_kind(kind: &str) -> Option<ToolOutcome> {
        use agent_runtime::events as rt;
        Some(match kind {
            rt::TOOL_COMPLETED => ToolOutcome::Completed,
            rt::TOOL_FAILED => ToolOutcome::Failed,
            rt::TOOL_TIMEOUT => ToolOutcome::Timeout,
            rt::TOOL_CANCELLED => ToolOutcome::Cancelled,
            rt::TOOL_INTERRUPTED => ToolOutcome::Interrupted,
            _ => return None,
        })
    }

    /// The event kind, which is also the word after `tool.` users see.
    pub fn kind(self) -> &'static str {
        use agent_runtime::events as rt;
        match self {
            ToolOutcome::Completed => rt::TOOL_COMPLETED,
            ToolOutcome::Failed => rt::TOOL_FAILED,
            ToolOutcome::Timeout => rt::TOOL_TIMEOUT,
            ToolOutcome::Cancelled => rt::TOOL_CANCELLED,
            ToolOutcome::Interrupted => rt::TOOL_INTERRUPTED,
        }
    }
}

/// A runtime terminal event of a call, as the host reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolEnded {
    /// How it ended.
    pub outcome: ToolOutcome,
    /// The model's call id.
    pub call_id: String,
    /// Whether the call had started (for `tool.interrupted`: its effect may have happened).
    pub started: bool,
    /// What a completed tool returned.
    pub value: Option<Value>,
    /// What a failed tool reported.
    pub error: Option<Value>,
}

#[derive(Deserialize)]
struct EndedFields {
    call_id: String,
    #[serde(default)]
    started: bool,
    #[serde(default, deserialize_with = "agent_schema::json::option")]
    value: Option<Value>,
    #[serde(default, deserialize_with = "agent_schema::json::option")]
    error: Option<Value>,
}

impl ToolEnded {
    pub(super) fn read(outcome: ToolOutcome, payload: &Value) -> Result<Self, serde_json::Error> {
        let fields = EndedFields::deserialize(payload)?;
        Ok(ToolEnded {
            outcome,
            call_id: fields.call_id,
            started: fields.started,
            value: fields.value,
            error: fields.error,
        })
    }

    /// What the model reads of the call: its value or error as text, or a sentence for an
    /// outcome that has neither.
    pub fn into_model_text(self) -> String {
        match self.outcome {
            ToolOutcome::Completed => match self.value {
                Some(Value::String(s)) => s,
                Some(other) => other.to_string(),
                None => String::new(),
            },
            ToolOutcome::Failed => match self.error {
                Some(Value::String(s)) => s,
                _ => String::new(),
            },
            ToolOutcome::Timeout => "The call timed out.".into(),
            ToolOutcome::Cancelled => "The call was cancelled: the run was interrupted.".into(),
            ToolOutcome::Interrupted => String::new(),
        }
    }
}

/// A JSON value as text: a string as itself, anything else as JSON.
pub(crate) fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
