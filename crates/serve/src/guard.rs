//! The door: every request passes here first.
//!
//! Order (each step answers before the next one looks):
//! 1. `Host` (HTTP/2: `:authority`) must name this server (DNS rebinding): else 403
//!    `forbidden_host`; a request with more than one `Host` is 400 (RFC 9112, 3.2).
//! 2. The token, from `Authorization: Bearer` or the `agentctl_token_PORT` cookie (any
//!    cookie of that name: a page on another port of the host can set one more, with a
//!    longer path that browsers send first, and must not lock the console out).
//! 3. A `POST` with an `Origin` must come from this server's origin; a `POST` authenticated
//!    by the cookie must carry one (CSRF), and only one: else 403 `forbidden_origin`.
//! 4. A `POST` to `/api/...` authenticated by the cookie must say its body is JSON
//!    (`Content-Type: application/json`, which a browser sends across sites only after a
//!    preflight this server never answers): else 415 `unsupported_media_type`, a second
//!    wall behind the `Origin` check.
//! 5. Without a token, `/api/...` answers 401; the console's pages get [`Authed`]`(false)`
//!    and show the login page, never data.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};

use crate::app::App;
use crate::error::ApiError;

/// Whether the request carried the token (a request extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Authed(pub(crate) bool);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Bearer,
    Cookie,
}

pub(crate) async fn guard(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    if req.headers().get_all(header::HOST).iter().count() > 1 {
        return ApiError::bad_request("a request names one Host").into_response();
    }
    if !names_this_server(&app, &req) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden_host",
            "the Host header does not name this server (start it with --allowed-host to add one)",
        )
        .into_response();
    }
    let headers = req.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(bearer)
        .filter(|t| app.token.matches(t.trim()))
        .map(|_| By::Bearer);
    let by = bearer.or_else(|| {
        cookies(headers, &app.cookie)
            .any(|t| app.token.matches(t))
            .then_some(By::Cookie)
    });
    if req.method() == Method::POST {
        let origins = headers.get_all(header::ORIGIN).iter().count();
        let origin = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok());
        let fine = match (origin, by) {
            _ if origins > 1 => false,
            (Some(origin), _) => app.allows_origin(origin),
            (None, Some(By::Cookie)) => false,
            (None, _) => true,
        };
        if !fine {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                "a cross-site request is refused",
            )
            .into_response();
        }
    }
    if req.method() == Method::POST
        && by == Some(By::Cookie)
        && req.uri().path().starts_with("/api/")
        && !says_json(headers)
    {
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be sent as Content-Type: application/json",
        )
        .into_response();
    }
    if by.is_none() && req.uri().path().starts_with("/api/") {
        return ApiError::unauthorized().into_response();
    }
    req.extensions_mut().insert(Authed(by.is_some()));
    next.run(req).await
}

/// Whether the request names this server: by its `Host` header (HTTP/1.1), its URI's
/// authority (HTTP/2's `:authority`; an HTTP/1.1 absolute-form target), or both, each of
/// them allowed. A request naming neither is refused.
fn names_this_server(app: &App, req: &Request) -> bool {
    let host = req.headers().get(header::HOST).map(|h| h.to_str().ok());
    let authority = req.uri().authority().map(|a| Some(a.as_str()));
    let named = [host, authority];
    named.iter().any(Option::is_some)
        && named
            .iter()
            .flatten()
            .all(|name| name.is_some_and(|n| app.allows_host(n)))
}

/// The credentials of an `Authorization` header of the `Bearer` scheme, whose name is
/// case-insensitive (RFC 9110, 11.1): `bearer TOKEN` is as good as `Bearer TOKEN`.
fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// The values of every cookie `name` the request has.
fn cookies<'a>(
    headers: &'a axum::http::HeaderMap,
    name: &'a str,
) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(move |(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether the request's one `Content-Type` is `application/json` (with any parameters).
fn says_json(headers: &axum::http::HeaderMap) -> bool {
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    match (types.next(), types.next()) {
        (Some(value), None) => value.to_str().is_ok_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        }),
        _ => false,
    }
}
