//! The console: its page and assets (compiled in), the token link, the login page.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest as _, Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use futures::StreamExt as _;

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
<form method=\"post\" action=\"/\"><label for=\"token\">Token</label> \
<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required> \
<button type=\"submit\">Sign in</button></form></main></body></html>\n";

/// What every console response carries: no framing, no referrer (the token link must not
/// leak), scripts and styles from this server only, and a browsing context of its own
/// (`Cross-Origin-Opener-Policy: same-origin`: a page of another origin, another local
/// server's, that opens the console keeps no handle to navigate or watch it). `no-store`
/// and `nosniff`: every answer has them, `headers`.
fn hardened(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
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

/// The login page. Its form posts the token, and under `no-referrer` a browser sends a
/// form's `POST` with `Origin: null`, which the guard refuses: this page's policy is
/// `same-origin` (the origin to this server, nothing to any other; it links nowhere else).
fn login(status: StatusCode) -> Response {
    let mut response = html(status, LOGIN);
    response.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// `GET /`: the console when signed in; `?token=` signs in (the printed link: a cookie,
/// then a redirect that takes the token out of the address bar), and so does `?code=` with
/// a one-time code (`--open`'s link), once; the login page otherwise.
pub(crate) async fn index(
    State(app): State<Arc<App>>,
    Extension(Authed(authed)): Extension<Authed>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Some(given) = query.get("token") {
        return sign_in_with(&app, given);
    }
    if let Some(code) = query.get("code") {
        return if app.once.redeem(code) {
            signed_in(&app)
        } else {
            login(StatusCode::UNAUTHORIZED)
        };
    }
    if authed {
        html(StatusCode::OK, INDEX)
    } else {
        login(StatusCode::UNAUTHORIZED)
    }
}

/// The largest sign-in form taken: `token=` and a token (at least 32 characters; one made
/// at start is 64), with room to spare. It is read before the token is known, so it is
/// kept small: a stalled or endless form holds little.
pub(crate) const SIGN_IN_BODY: usize = 4096;

/// The login page's form.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct SignIn {
    token: String,
}

/// `POST /`: the login page's form signs in as `?token=` does, the token in the body: a
/// token pasted there never enters a URL, so it stays out of the browser's history. A body
/// over [`SIGN_IN_BODY`] is `413` (at once when its `Content-Length` says so, unread); any
/// other unreadable form (one that did not arrive in time too) is `400`.
pub(crate) async fn sign_in(State(app): State<Arc<App>>, req: Request) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > SIGN_IN_BODY as u64) {
        return login(StatusCode::PAYLOAD_TOO_LARGE);
    }
    let (parts, body) = req.into_parts();
    let mut chunks = body.into_data_stream();
    let mut form = Vec::new();
    while let Some(chunk) = chunks.next().await {
        let Ok(chunk) = chunk else {
            return login(StatusCode::BAD_REQUEST);
        };
        if form.len().saturating_add(chunk.len()) > SIGN_IN_BODY {
            return login(StatusCode::PAYLOAD_TOO_LARGE);
        }
        form.extend_from_slice(&chunk);
    }
    let req = Request::from_parts(parts, Body::from(form));
    match Form::<SignIn>::from_request(req, &()).await {
        Ok(Form(form)) => sign_in_with(&app, form.token.trim()),
        Err(_) => login(StatusCode::BAD_REQUEST),
    }
}

/// The cookie and a redirect to the console for the right token, the login page else.
fn sign_in_with(app: &App, given: &str) -> Response {
    if !app.token.matches(given) {
        return login(StatusCode::UNAUTHORIZED);
    }
    signed_in(app)
}

/// The cookie (the token) and a redirect to the console.
fn signed_in(app: &App) -> Response {
    let cookie = format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/",
        app.cookie,
        app.token.reveal()
    );
    let Ok(cookie) = HeaderValue::from_str(&cookie) else {
        return login(StatusCode::UNAUTHORIZED);
    };
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    hardened(response)
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
