//! Request bodies: JSON read by hand so that every failure is the API's error shape (a
//! field named on a 400, a 413 past the limit), never the framework's plain text.
//!
//! Invariant: a body [`json`] accepts is a JSON object whose strings hold no NUL (the
//! journal cannot store one); a NUL is a 400 `invalid` that names its field, so no body
//! field ever reaches the journal's own refusal (which would read as a bad run id).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

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
    if !text.trim_ascii_start().starts_with(b"{") {
        return Err(ApiError::bad_request(
            "body: must be a JSON object (`{\"field\": ...}`)",
        ));
    }
    let value = serde_json::from_slice(text)
        .map_err(|err| ApiError::bad_request(format!("body: {err}")))?;
    if let Some(field) = nul_field(text) {
        return Err(ApiError::invalid(format!(
            "{field}: must not contain NUL characters"
        )));
    }
    Ok(value)
}

/// The field (`name`, `name.inner`, `name[2]`) of the first string in the JSON `text` that
/// holds a NUL, which the journal refuses to store; `None` when none does. A NUL can only
/// be written `\u0000` in JSON, so a body without that escape is not parsed again.
fn nul_field(text: &[u8]) -> Option<String> {
    if !text.windows(6).any(|w| w == b"\\u0000") {
        return None;
    }
    let value: Value = serde_json::from_slice(text).ok()?;
    fn walk(value: &Value, at: &str) -> Option<String> {
        match value {
            Value::String(s) if s.contains('\0') => Some(at.to_string()),
            Value::Object(map) => map.iter().find_map(|(key, inner)| {
                let at = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                walk(inner, &at)
            }),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, inner)| walk(inner, &format!("{at}[{i}]"))),
            _ => None,
        }
    }
    walk(&value, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_holding_a_nul_is_named() {
        assert_eq!(nul_field(br#"{"text": "a\u0000b"}"#), Some("text".into()));
        assert_eq!(
            nul_field(br#"{"a": "ok", "b": {"c": ["x", "\u0000"]}}"#),
            Some("b.c[1]".into())
        );
        // An escaped backslash before `u0000` is text, not a NUL.
        assert_eq!(nul_field(br#"{"text": "a\\u0000b"}"#), None);
        assert_eq!(nul_field(br#"{"text": "plain"}"#), None);
    }
}
