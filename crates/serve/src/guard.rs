//! The door: every request passes here first.
//!
//! Order (each step answers before the next one looks):
//! 1. `Host` (HTTP/2: `:authority`) must name this server (DNS rebinding): else 403
//!    `forbidden_host`.
//! 2. The token, from `Authorization: Bearer` or the `agentctl_token_PORT` cookie.
//! 3. A `POST` with an `Origin` must come from this server's origin; a `POST` authenticated
//!    by the cookie must carry one (CSRF): else 403 `forbidden_origin`.
//! 4. Without a token, `/api/...` answers 401; the console's pages get [`Authed`]`(false)`
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
        cookie(headers, &app.cookie)
            .filter(|t| app.token.matches(t))
            .map(|_| By::Cookie)
    });
    if req.method() == Method::POST {
        let origin = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok());
        let fine = match (origin, by) {
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

/// The value of cookie `name`, if the request has it.
pub(crate) fn cookie<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}
