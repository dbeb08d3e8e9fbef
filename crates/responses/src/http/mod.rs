//! HTTP transport: JSON and SSE requests with the SDK's retry policy.

mod client;
mod config;
mod stream;

pub use client::{Client, MAX_ERROR_BODY, MAX_JSON_BODY};
pub use config::{ApiKey, ClientConfig, DEFAULT_BASE_URL, check_base_url};
pub use stream::{EventStream, RawEvent};
