//! `agent-responses`: a client for the OpenAI Responses API.
//!
//! - [`types`]: requests, responses, items, tools and stream events; unknown fields, items
//!   and events are kept and sent back verbatim.
//! - [`sse`]: an incremental SSE parser (chunk-split independent) and event decoding.
//! - [`http`]: `POST /responses` (JSON, SSE), `/responses/compact`, with the official SDK's
//!   retry policy ([`retry`]) and typed errors ([`error`]); the key never leaves the header.
//! - [`loops`]: the seed's tool loops (direct/PTC, async, compaction) over a [`loops::ToolExecutor`].
//! - `demo` (cargo feature `demo`, off by default): the seed's fictional `scan` tool and
//!   prompts, for the CLI's `api` command and the contract tests; not part of the library API.

#[cfg(feature = "demo")]
pub mod demo;
pub mod error;
pub mod http;
pub mod loops;
pub mod retry;
pub mod sse;
pub mod types;
pub mod ws;

pub use error::{ApiError, ClientError};
pub use http::{ApiKey, Client, ClientConfig, EventStream};
