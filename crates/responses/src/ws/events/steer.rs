//! The three steering server events and the pieces they carry.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::types::tagged::{EmitsTag, tagged_union};

/// `steer` object of the steering events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerRef {
    /// `None` when the steer was rejected before an id was allocated.
    #[serde(default)]
    pub id: Option<String>,
    /// The response the steer was sent to.
    pub previous_response_id: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `response.steer.accepted`: the server owns the input; it is queued, not yet applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerAccepted {
    /// Position in the stream; increases by one per event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<u64>,
    /// The lane of the steered response, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    /// Which steer this is about.
    pub steer: SteerRef,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for SteerAccepted {}

/// `response.steer.pending`: the parent stopped for client-owned input; fill `required_input`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerPending {
    /// Position in the stream; increases by one per event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<u64>,
    /// The lane of the steered response, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    /// Which steer this is about.
    pub steer: SteerRef,
    /// Extensible; known: `waiting_for_required_input`.
    pub reason: String,
    /// The outputs the client must send before the successor can be created.
    #[serde(default)]
    pub required_input: Vec<RequiredInput>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for SteerPending {}

/// `response.steer.failed`: `error.code` says why (see [`SteerFailCode`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerFailed {
    /// Position in the stream; increases by one per event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<u64>,
    /// The lane of the steered response, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    /// Which steer this is about (with its `input` echoed).
    pub steer: SteerRef,
    /// Why it failed.
    pub error: SteerError,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for SteerFailed {}

impl SteerFailed {
    /// The failure code, typed (unknown codes kept).
    pub fn code(&self) -> SteerFailCode {
        SteerFailCode::parse(self.error.code.as_deref().unwrap_or(""))
    }
}

/// The `error` object of `response.steer.failed` (`type` is always `invalid_request_error`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerError {
    /// The error class; `invalid_request_error` for every steering failure.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The failure code (see [`SteerFailCode`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What went wrong, for people.
    #[serde(default)]
    pub message: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `response.steer.failed` codes as the API documents them; the list is extensible
/// ([`SteerFailCode::Other`] keeps any code not named here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SteerFailCode {
    /// No such response on this connection (nor stored).
    ResponseNotFound,
    /// The input is empty or not user messages.
    InvalidInput,
    /// The response uses `conversation` or automatic compaction.
    SteeringNotSupported,
    /// The response already holds the most steers it queues.
    TooManyPendingSteers,
    /// The response finished before the steer arrived.
    ResponseAlreadyCompleted,
    /// The response ended otherwise (incomplete, failed, or never generated).
    ResponseNotActive,
    /// The parent ended but its successor could not be created.
    SuccessorCreationFailed,
    /// A code this client does not know, kept as sent.
    Other(String),
}

impl SteerFailCode {
    /// Every code the API documents, in its order.
    pub const KNOWN: [&'static str; 7] = [
        "response_not_found",
        "invalid_input",
        "steering_not_supported",
        "too_many_pending_steers",
        "response_already_completed",
        "response_not_active",
        "successor_creation_failed",
    ];

    /// The typed code for a wire code (unknown codes kept in `Other`).
    pub fn parse(code: &str) -> Self {
        match code {
            "response_not_found" => Self::ResponseNotFound,
            "invalid_input" => Self::InvalidInput,
            "steering_not_supported" => Self::SteeringNotSupported,
            "too_many_pending_steers" => Self::TooManyPendingSteers,
            "response_already_completed" => Self::ResponseAlreadyCompleted,
            "response_not_active" => Self::ResponseNotActive,
            "successor_creation_failed" => Self::SuccessorCreationFailed,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The wire code.
    pub fn as_str(&self) -> &str {
        match self {
            Self::ResponseNotFound => "response_not_found",
            Self::InvalidInput => "invalid_input",
            Self::SteeringNotSupported => "steering_not_supported",
            Self::TooManyPendingSteers => "too_many_pending_steers",
            Self::ResponseAlreadyCompleted => "response_already_completed",
            Self::ResponseNotActive => "response_not_active",
            Self::SuccessorCreationFailed => "successor_creation_failed",
            Self::Other(code) => code,
        }
    }
}

impl std::fmt::Display for SteerFailCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

tagged_union! {
    /// A `required_input` stub of `response.steer.pending`: which output the client must send.
    pub enum RequiredInput {
        /// The output of a function call.
        FunctionCallOutput(CallStub) = "function_call_output",
        /// The output of a custom tool call.
        CustomToolCallOutput(CallStub) = "custom_tool_call_output",
        /// The output of a computer-use call.
        ComputerCallOutput(CallStub) = "computer_call_output",
        /// The output of a shell call.
        ShellCallOutput(CallStub) = "shell_call_output",
        /// The output of an apply-patch call.
        ApplyPatchCallOutput(CallStub) = "apply_patch_call_output",
        /// The output of a tool search.
        ToolSearchOutput(CallStub) = "tool_search_output",
        /// An answer to an MCP approval request.
        McpApprovalResponse(ApprovalStub) = "mcp_approval_response",
    }
}

/// A stub naming a tool call by `call_id` (`name` only on `function_call_output`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallStub {
    /// Pairs a call with its output: the output names the same `call_id`.
    pub call_id: String,
    /// The function's name, on `function_call_output` stubs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for CallStub {}

/// `mcp_approval_response {approval_request_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalStub {
    /// The approval request to answer.
    pub approval_request_id: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
impl EmitsTag for ApprovalStub {}

tagged_union! {
    /// The three steering server events.
    pub enum SteerEvent {
        /// The server took the input; it is queued, not yet applied.
        Accepted(SteerAccepted) = "response.steer.accepted",
        /// The parent stopped for client-owned input; the steer waits for it.
        Pending(SteerPending) = "response.steer.pending",
        /// The steer was refused; `error.code` says why.
        Failed(SteerFailed) = "response.steer.failed",
    }
}
