//! Request bodies: JSON read by hand so that every failure is the API's error shape (a
//! field named on a 400, a 413 past the limit), never the framework's plain text.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// The largest request body taken.
pub const MAX_BODY: usize = 1 << 20;

/// `T` from a JSON body (`{}` when it is empty and `T` allows it).
pub(crate) fn json<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("the body is over {MAX_BODY} bytes"),
            )
        } else {
            ApiError::bad_request(format!("body: {}", rejection.body_text()))
        }
    })?;
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        &bytes
    };
    serde_json::from_slice(text).map_err(|err| ApiError::bad_request(format!("body: {err}")))
}
