//! The HTTP surface: `POST /v1/responses`, `POST /v1/responses/compact`,
//! `GET /v1/responses/{id}`. Handlers never hold a lock across an await.
//!
//! The handlers are here; `state.rs` holds what they share, `replies.rs` how they answer,
//! `create.rs` and `compact.rs` the two POST endpoints.

mod compact;
mod create;
mod replies;
mod state;
mod typed;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use self::create::Created;
pub(crate) use self::replies::error_reply;
use self::replies::{ApiBody, failure, json_response, request_error};
pub(crate) use self::state::AppState;
pub use self::state::RecordedRequest;
use self::state::lock;
pub(crate) use self::typed::create_frame_wrong;
use crate::validate::{ApiFailure, check_auth};

/// The axum router over `state`.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/responses", post(create).get(crate::ws::upgrade))
        .route("/v1/responses/compact", post(compact))
        .route("/v1/responses/{id}", get(retrieve))
        .route("/__mock/requests", get(recorded_requests))
        .fallback(not_found)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn(agent_http::close_if_unread))
        .with_state(state)
}

async fn not_found(method: Method, uri: axum::http::Uri) -> Response {
    failure(&request_error(
        404,
        format!("Invalid URL ({method} {})", uri.path()),
    ))
}

/// A known path with a method it does not serve: the API's JSON error, not an empty 405.
async fn wrong_method(method: Method, uri: axum::http::Uri) -> Response {
    failure(&request_error(
        405,
        format!("Invalid method for URL ({method} {})", uri.path()),
    ))
}

async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> Response {
    let started = tokio::time::Instant::now();
    match create::create_inner(&state, &headers, &body) {
        Ok(Created::Json { response, latency }) => {
            tokio::time::sleep_until(crate::latency::deadline(started, latency)).await;
            json_response(200, &response)
        }
        Ok(Created::Stream {
            response,
            fault,
            delta_chars,
            text_deltas,
            latency,
        }) => create::stream_body(
            &state,
            &response,
            fault,
            (delta_chars, text_deltas),
            latency,
            started,
        ),
        Err(f) => failure(&f),
    }
}

async fn compact(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> Response {
    match compact::compact_inner(&state, &headers, &body) {
        Ok((value, latency)) => {
            tokio::time::sleep(latency).await;
            json_response(200, &value)
        }
        Err(f) => failure(&f),
    }
}

async fn retrieve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    if let Err(f) = check_auth(&headers, state.api_key.as_deref()) {
        return failure(&f);
    }
    // An id that is not UTF-8 once decoded: the API's JSON error, not axum's plain text.
    let id = match id {
        Ok(Path(id)) => id,
        Err(rejection) => {
            // axum's text already reads "Invalid URL: ...".
            return failure(&request_error(
                rejection.status().as_u16(),
                rejection.body_text(),
            ));
        }
    };
    state.record(&Method::GET, &format!("/v1/responses/{id}"), &headers, &[]);
    let stored = lock(&state.store).get(&id).map(|s| s.response.clone());
    match stored {
        Some(response) => json_response(200, &response),
        None => failure(&ApiFailure {
            status: 404,
            message: format!("Response with id '{id}' not found."),
            kind: "invalid_request_error".into(),
            code: None,
            param: None,
            headers: Vec::new(),
        }),
    }
}

/// `GET /__mock/requests`: the recorded requests as JSON, for out-of-process tests (interop).
/// Under `--require-key` it needs the key like every other route.
async fn recorded_requests(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(f) = check_auth(&headers, state.api_key.as_deref()) {
        return failure(&f);
    }
    // Copied out first: the lock is not held while the bodies are parsed.
    let kept: Vec<_> = lock(&state.recorded).iter().cloned().collect();
    let list: Vec<Value> = kept
        .iter()
        .map(|r| {
            let r = r.to_recorded();
            let headers: serde_json::Map<String, Value> = r
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            json!({"method": r.method, "path": r.path, "headers": headers, "body": r.body})
        })
        .collect();
    json_response(200, &Value::Array(list))
}
