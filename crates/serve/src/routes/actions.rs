//! Deciding and steering: approvals, steers, interrupts, resumes and new runs, through the
//! same library calls as `agentctl approve|deny|steer|interrupt|submit`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use agent_host::run::events::DecisionScope;
use agent_host::run::{self, Decision, DecisionRequest};

use crate::app::{App, SubmitRequest};
use crate::body;
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Verdict {
    Approve,
    Deny,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    decision: Verdict,
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    always: bool,
    #[serde(default)]
    round: Option<u32>,
}

pub(crate) async fn decide(
    State(app): State<Arc<App>>,
    Path((id, call_id)): Path<(String, String)>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let b: DecideBody = body::json(bytes)?;
    let approve = matches!(b.decision, Verdict::Approve);
    // `always` widens an approval to the tool's later calls; a denial has no such reach
    // (the host would record it and ignore it), so a client asking for one is told.
    if b.always && !approve {
        return Err(ApiError::invalid(
            "always: only an approval reaches the tool's later calls; a denial is for this call",
        ));
    }
    // `decide` reads the run once and answers 404 for a run or call it does not have.
    let request = DecisionRequest {
        call_id: call_id.clone(),
        decision: Decision {
            approve,
            reason: b.reason,
            by: Some(app.who.clone()),
            scope: b.always.then_some(DecisionScope::Run),
        },
        args_sha256: b.sha256,
        round: b.round,
    };
    run::decide(&app.journal.get().await, &id, request).await?;
    Ok(Json(json!({
        "run_id": id, "call_id": call_id,
        "decision": if approve { "approve" } else { "deny" }, "by": app.who,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SteerBody {
    text: String,
    #[serde(default)]
    id: Option<String>,
}

pub(crate) async fn steer(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let b: SteerBody = body::json(bytes)?;
    // A steer on an ended run would only be dropped: refused (409). One that arrives as the
    // run ends is still taken and then dropped: `steer.dropped` on the stream.
    let steer_id = run::request_live_steer(&app.journal.get().await, &id, &b.text, b.id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"run_id": id, "steer_id": steer_id})),
    ))
}

pub(crate) async fn interrupt(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    run::request_interrupt(&app.journal.get().await, &id, &app.who).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"run_id": id}))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    #[serde(default)]
    max_steps: Option<u64>,
    #[serde(default)]
    max_tokens: Option<u64>,
}

pub(crate) async fn resume(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let b: ResumeBody = body::json(bytes)?;
    let change = run::Requeue {
        max_steps: b.max_steps,
        max_tokens: b.max_tokens,
        by: app.who.clone(),
    };
    run::requeue(&app.journal.get().await, &id, change).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"run_id": id}))))
}

/// `POST /runs`. A field that is there but cannot be used (an empty prompt or model, a
/// relative workspace) is `invalid`, as an empty steer is; `bad_request` is for a body of
/// the wrong shape.
pub(crate) async fn submit(
    State(app): State<Arc<App>>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request: SubmitRequest = body::json(bytes)?;
    if request.prompt.trim().is_empty() {
        return Err(ApiError::invalid("prompt: is empty"));
    }
    if request
        .model
        .as_deref()
        .is_some_and(|m| m.trim().is_empty())
    {
        return Err(ApiError::invalid(
            "model: is empty (leave it out for the default model)",
        ));
    }
    if !std::path::Path::new(&request.workspace).is_absolute() {
        return Err(ApiError::invalid("workspace: must be an absolute path"));
    }
    let Some(submitter) = &app.submitter else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "not_implemented",
            "this server does not submit runs",
        ));
    };
    let journal = app.journal.get().await;
    let id = submitter.submit(&journal, request).await?;
    Ok((StatusCode::CREATED, Json(json!({"run_id": id}))))
}
