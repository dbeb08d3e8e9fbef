//! Responses after which the connection closes say so.
//!
//! hyper does not keep a connection alive past a response when the request's body was left
//! unread (a request refused at the door, a route that takes no body, a body over the
//! limit). Unless the response says `Connection: close`, a client returns the connection
//! to its pool and may send its next request on it as it closes; that request then fails
//! (the connection reset, or closed before the answer) through no fault of the client's.
//! The `serve` fuzz target ran into it after some thousands of requests, and the emulator
//! did the same to a client that called a path it does not serve with a body.
//!
//! Invariant: a response to a request that declared a body (`Content-Length` above zero,
//! or `Transfer-Encoding`) carries `Connection: close` unless the route read that body to
//! its end. Requests without a body are not touched.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};

/// The middleware (`axum::middleware::from_fn(close_if_unread)`), to be the outermost layer
/// so that it sees the body every inner layer and route was handed.
pub async fn close_if_unread(req: Request, next: Next) -> Response {
    if !declares_body(req.headers()) {
        return next.run(req).await;
    }
    let read = Arc::new(AtomicBool::new(false));
    let watched = Arc::clone(&read);
    let req = req.map(|inner| {
        Body::new(Watched {
            inner,
            read: watched,
        })
    });
    let mut response = next.run(req).await;
    if !read.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Whether the request says a body follows its head.
fn declares_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
}

/// A request body that records when it has been read to its end.
struct Watched {
    inner: Body,
    read: Arc<AtomicBool>,
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_declared_by_a_positive_length_or_a_transfer_encoding() {
        let with = |name, value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(name, HeaderValue::from_static(value));
            declares_body(&headers)
        };
        assert!(!declares_body(&HeaderMap::new()));
        assert!(!with(header::CONTENT_LENGTH, "0"));
        assert!(!with(header::CONTENT_LENGTH, "not a number"));
        assert!(with(header::CONTENT_LENGTH, "12"));
        assert!(with(header::CONTENT_LENGTH, " 12 "));
        assert!(with(header::TRANSFER_ENCODING, "chunked"));
    }
}
