//! Answers to server-to-client requests.
//!
//! Invariant: every server request gets exactly one reply, so the server is never left
//! waiting. Methods a handler does not know are refused with a JSON-RPC error (fail
//! closed); approvals are never granted unless the policy says so.

use std::fmt;
use std::str::FromStr;

use serde_json::{Value, json};

use crate::wire::{RpcError, ServerRequest};

/// The server asks whether it may run a command.
pub const COMMAND_APPROVAL: &str = "item/commandExecution/requestApproval";
/// The server asks whether it may apply a file change.
pub const FILE_CHANGE_APPROVAL: &str = "item/fileChange/requestApproval";
/// JSON-RPC "method not found", sent for server requests we do not handle.
pub const METHOD_NOT_FOUND: i64 = -32601;

/// Decides the reply to each server request. Called on the reader task: it must not block.
pub trait ServerRequestHandler: Send + Sync + 'static {
    /// The `result` to send back, or the JSON-RPC error to refuse with.
    fn handle(&self, request: &ServerRequest) -> Result<Value, RpcError>;
}

/// A decision on an approval request, as the v2 protocol spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalDecision {
    /// Run it this once.
    Accept,
    /// Run it, and similar requests for the rest of the session.
    AcceptForSession,
    /// Do not run it; the turn goes on and the model is told.
    #[default]
    Decline,
    /// Do not run it and stop the turn.
    Cancel,
}

impl ApprovalDecision {
    /// The wire value (`"accept"`, `"acceptForSession"`, `"decline"`, `"cancel"`).
    pub fn as_wire(self) -> &'static str {
        match self {
            ApprovalDecision::Accept => "accept",
            ApprovalDecision::AcceptForSession => "acceptForSession",
            ApprovalDecision::Decline => "decline",
            ApprovalDecision::Cancel => "cancel",
        }
    }
}

impl fmt::Display for ApprovalDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_wire())
    }
}

/// A string that is not an approval decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown approval decision `{0}` (expected accept, accept-for-session, decline or cancel)")]
pub struct UnknownDecision(pub String);

impl FromStr for ApprovalDecision {
    type Err = UnknownDecision;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "accept" => Ok(ApprovalDecision::Accept),
            "accept-for-session" | "acceptForSession" => Ok(ApprovalDecision::AcceptForSession),
            "decline" => Ok(ApprovalDecision::Decline),
            "cancel" => Ok(ApprovalDecision::Cancel),
            other => Err(UnknownDecision(other.to_owned())),
        }
    }
}

/// The default handler: approval requests get a fixed decision (decline unless told
/// otherwise); every other server request is refused with `-32601`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApprovalPolicy {
    /// The answer to `item/commandExecution/requestApproval`.
    pub command: ApprovalDecision,
    /// The answer to `item/fileChange/requestApproval`.
    pub file_change: ApprovalDecision,
}

impl ApprovalPolicy {
    /// The same decision for commands and file changes.
    pub fn uniform(decision: ApprovalDecision) -> Self {
        ApprovalPolicy {
            command: decision,
            file_change: decision,
        }
    }
}

impl ServerRequestHandler for ApprovalPolicy {
    fn handle(&self, request: &ServerRequest) -> Result<Value, RpcError> {
        match request.method.as_str() {
            COMMAND_APPROVAL => Ok(json!({ "decision": self.command.as_wire() })),
            FILE_CHANGE_APPROVAL => Ok(json!({ "decision": self.file_change.as_wire() })),
            other => Err(refuse(other)),
        }
    }
}

/// The error sent for a server request nobody handles.
pub fn refuse(method: &str) -> RpcError {
    RpcError {
        code: METHOD_NOT_FOUND,
        message: format!("this client does not handle server request `{method}`"),
        data: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str) -> ServerRequest {
        ServerRequest {
            id: Value::from(0),
            method: method.into(),
            params: json!({}),
        }
    }

    #[test]
    fn declines_by_default_and_fails_closed() {
        let policy = ApprovalPolicy::default();
        assert_eq!(
            policy.handle(&request(COMMAND_APPROVAL)).unwrap(),
            json!({"decision":"decline"})
        );
        assert_eq!(
            policy.handle(&request(FILE_CHANGE_APPROVAL)).unwrap(),
            json!({"decision":"decline"})
        );
        let err = policy
            .handle(&request("item/tool/requestUserInput"))
            .unwrap_err();
        assert_eq!(err.code, METHOD_NOT_FOUND);
    }

    #[test]
    fn parses_decisions() {
        assert_eq!(
            "accept-for-session".parse::<ApprovalDecision>().unwrap(),
            ApprovalDecision::AcceptForSession
        );
        assert!("yes".parse::<ApprovalDecision>().is_err());
        let policy = ApprovalPolicy::uniform(ApprovalDecision::Accept);
        assert_eq!(
            policy.handle(&request(COMMAND_APPROVAL)).unwrap(),
            json!({"decision":"accept"})
        );
    }
}
