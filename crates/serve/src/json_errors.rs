//! Errors the framework answers itself (a path or query it cannot parse, a method a route
//! does not have) in the API's shape, like every other error: the outermost layer wraps a
//! 4xx/5xx whose body is not JSON (the console's login page aside, which is HTML on purpose).

use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};

use crate::error::ApiError;

/// The most of a framework error's text kept as the message.
const KEEP: usize = 4096;

pub(crate) async fn json_errors(req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let kind = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if kind.starts_with("application/json") || kind.starts_with("text/html") {
        return response;
    }
    let body = axum::body::to_bytes(response.into_body(), KEEP)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body).trim().to_string();
    let code = match status.as_u16() {
        400 => "bad_request",
        404 => "not_found",
        405 => "method_not_allowed",
        413 => "too_large",
        415 => "bad_request",
        _ if status.is_server_error() => "internal",
        _ => "bad_request",
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    ApiError::new(status, code, message).into_response()
}
