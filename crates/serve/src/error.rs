//! Errors as the API answers them: a status and `{"error": {"code", "message", ...}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use agent_host::HostError;

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable word for programs (`not_found`, `already_decided`, ...).
    pub code: &'static str,
    /// What happened, for a person.
    pub message: String,
    /// More fields of the error object, for some codes.
    pub extra: Option<Value>,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            extra: None,
        }
    }

    /// A malformed request: the message names the field.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// A well-formed request that cannot be taken: the message names the field or says why.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid", message)
    }

    /// No such run, call or route.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The token is missing or wrong.
    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid token is needed: `Authorization: Bearer TOKEN`, or open the link `agentctl serve` printed",
        )
    }

    /// The journal or something else below the API failed.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"code": self.code, "message": self.message});
        if let (Some(obj), Some(Value::Object(extra))) = (error.as_object_mut(), self.extra) {
            obj.extend(extra);
        }
        (self.status, axum::Json(json!({ "error": error }))).into_response()
    }
}

impl From<HostError> for ApiError {
    fn from(err: HostError) -> ApiError {
        let message = err.to_string();
        match err {
            HostError::NotFound(_) | HostError::NoSuchCall { .. } => ApiError::not_found(message),
            // An id no thread can have (a NUL, too long): no such run. Body fields never
            // get here: `body::json` refuses a NUL in any of them first.
            HostError::Journal(agent_journal::JournalError::InvalidInput { .. }) => {
                ApiError::not_found(format!("no such run ({message})"))
            }
            // The database refuses writes (a full disk, a lost connection): nothing of
            // this request was taken, and the server reopens its journal (at most once a
            // second) on a later request.
            HostError::Journal(agent_journal::JournalError::WriterFailed(_)) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "journal_unavailable",
                message,
            ),
            HostError::AlreadyDecided {
                decision,
                ref by,
                ref reason,
                ..
            } => {
                let decision = if decision == "approved" {
                    "approve"
                } else {
                    "deny"
                };
                ApiError {
                    extra: Some(
                        json!({"decided": {"decision": decision, "by": by, "reason": reason}}),
                    ),
                    ..ApiError::new(StatusCode::CONFLICT, "already_decided", message)
                }
            }
            HostError::NoPendingApproval(_) => {
                ApiError::new(StatusCode::CONFLICT, "not_pending", message)
            }
            HostError::Ended { .. }
            | HostError::SteerAfterEnd { .. }
            | HostError::DrivenElsewhere { .. }
            | HostError::Superseded(_)
            | HostError::NotDriven { .. }
            | HostError::NotPaused { .. } => {
                ApiError::new(StatusCode::CONFLICT, "conflict", message)
            }
            HostError::ArgsMismatch { .. }
            | HostError::EmptySteer
            | HostError::InvalidSteerId
            | HostError::BudgetBelowUsed { .. }
            | HostError::BudgetUsedUp { .. }
            | HostError::Workspace { .. }
            | HostError::Config(_)
            | HostError::McpStart { .. }
            | HostError::McpServerMissing { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid", message)
            }
            // A usage error of the CLI's (exit 2) not named above: the request, not the
            // server, is at fault.
            other if other.is_usage() => ApiError::invalid(message),
            _ => {
                tracing::warn!(target: "agent_serve", %message, "request failed");
                ApiError::internal(message)
            }
        }
    }
}
