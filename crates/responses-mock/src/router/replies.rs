//! How the emulator answers over HTTP: the API's headers, JSON bodies and error objects,
//! also for requests axum itself would refuse with plain text.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::Value;

use crate::respond::new_id;
use crate::validate::ApiFailure;

pub(super) fn base_headers(
    builder: axum::http::response::Builder,
) -> axum::http::response::Builder {
    builder
        .header("x-request-id", new_id("req"))
        .header("openai-version", "2020-10-01")
        .header("openai-processing-ms", "1")
}

pub(super) fn json_response(status: u16, body: &Value) -> Response {
    base_headers(Response::builder())
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_default()
}

pub(super) fn failure(f: &ApiFailure) -> Response {
    let mut response = json_response(f.status, &f.body());
    for (name, value) in &f.headers {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

pub(crate) fn error_reply(e: &crate::script::ErrorReply) -> ApiFailure {
    ApiFailure {
        status: e.status,
        message: e.message.clone(),
        kind: e
            .kind
            .clone()
            .unwrap_or_else(|| default_kind(e.status).to_owned()),
        code: e.code.clone(),
        param: e.param.clone(),
        headers: e.header_pairs().collect(),
    }
}

fn default_kind(status: u16) -> &'static str {
    match status {
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

pub(super) fn parse_failure(err: &serde_json::Error) -> ApiFailure {
    ApiFailure::invalid(
        format!(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.) ({err})"
        ),
        None,
        None,
    )
}

/// A request body within axum's limit (2 MiB); one that cannot be read (too large, cut
/// off) is answered with the API's JSON error instead of axum's plain text.
pub(super) struct ApiBody(pub(super) Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBody {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        Bytes::from_request(request, state)
            .await
            .map(ApiBody)
            .map_err(|rejection| {
                failure(&request_error(
                    rejection.status().as_u16(),
                    format!(
                        "The request body could not be read: {}",
                        rejection.body_text()
                    ),
                ))
            })
    }
}

pub(super) fn request_error(status: u16, message: String) -> ApiFailure {
    ApiFailure {
        status,
        message,
        kind: "invalid_request_error".into(),
        code: None,
        param: None,
        headers: Vec::new(),
    }
}
