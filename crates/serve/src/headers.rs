//! What every answer carries, the API's as well as the console's: `Cache-Control: no-store`
//! (a run's prompts, arguments and outputs must not stay in a browser's disk cache after
//! the session, where anyone who reads the profile later finds them) and
//! `X-Content-Type-Options: nosniff` (JSON is never read as a script or a page).

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

pub(crate) async fn every_answer(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
