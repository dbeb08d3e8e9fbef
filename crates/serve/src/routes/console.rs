//! The console: its page and assets (compiled in), the token link, the login page.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::error::ApiError;
use crate::guard::Authed;

const INDEX: &str = include_str!("../../assets/index.html");
const APP_JS: &str = include_str!("../../assets/app.js");
const STYLE: &str = include_str!("../../assets/style.css");

const LOGIN: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>agentctl: sign in</title><link rel=\"stylesheet\" href=\"/assets/style.css\"></head>\
<body><main id=\"login\"><h1>agentctl</h1>\
<p>Not signed in: open the link <code>agentctl serve</code> printed, or paste its token.</p>\
<form method=\"get\" action=\"/\"><label for=\"token\">Token</label> \
<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required> \
<button type=\"submit\">Sign in</button></form></main></body></html>\n";

/// What every console response carries: no framing, no referrer (the token link must not
/// leak), scripts and styles from this server only (`no-store` and `nosniff`: every
/// answer has them, `headers`).
fn hardened(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
        ),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

fn html(status: StatusCode, body: &'static str) -> Response {
    hardened(
        (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body,
        )
            .into_response(),
    )
}

/// `GET /`: the console when signed in; `?token=` signs in (a cookie, then a redirect that
/// takes the token out of the address bar); the login page otherwise.
pub(crate) async fn index(
    State(app): State<Arc<App>>,
    Extension(Authed(authed)): Extension<Authed>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Some(given) = query.get("token") {
        if !app.token.matches(given) {
            return html(StatusCode::UNAUTHORIZED, LOGIN);
        }
        let cookie = format!("{}={given}; HttpOnly; SameSite=Strict; Path=/", app.cookie);
        let Ok(cookie) = HeaderValue::from_str(&cookie) else {
            return html(StatusCode::UNAUTHORIZED, LOGIN);
        };
        let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
        response.headers_mut().insert(header::SET_COOKIE, cookie);
        return hardened(response);
    }
    if authed {
        html(StatusCode::OK, INDEX)
    } else {
        html(StatusCode::UNAUTHORIZED, LOGIN)
    }
}

/// `GET /assets/{file}`: the console's script and style (no data in them).
pub(crate) async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "style.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return ApiError::not_found("no such asset").into_response(),
    };
    hardened(([(header::CONTENT_TYPE, kind)], body).into_response())
}

/// Any other path.
pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found("no such route (the API is under /api/v1; see docs/http-api.md)")
}
