//! `agent-responses`: a client for the OpenAI Responses API.
//!
//! - [`types`]: requests, responses, items, tools and stream events; unknown fields, items
//!   and events are kept and sent back verbatim.
//! - [`sse`]: an incremental SSE parser (chunk-split independent) and event decoding.
//! - [`http`]: `POST /responses` (JSON, SSE), `/responses/compact`, with the official SDK's
//!   retry policy ([`retry`]) and typed errors ([`error`]); the key never leaves the header.
//!   What it reads of an answer is bounded: a JSON body at [`http::MAX_JSON_BODY`], an
//!   error body at [`http::MAX_ERROR_BODY`], an event-stream frame at
//!   [`sse::DEFAULT_MAX_FRAME`].
//! - [`loops`]: tool loops (direct/PTC, async, compaction) over a [`loops::ToolExecutor`].
//! - `demo` (cargo feature `demo`, off by default): a fictional `scan` tool and its
//!   prompts, for the CLI's `api` command and the contract tests; not part of the library API.
//!
//! Reading a stream: bytes in any chunking go through [`sse::SseParser`], each frame
//! decodes to a typed [`types::StreamEvent`].
//!
//! ```
//! use agent_responses::sse::{Decoded, SseParser, decode_frame};
//! use agent_responses::types::StreamEvent;
//!
//! let wire = b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":3,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hel\"}\n\ndata: [DONE]\n\n";
//! let mut parser = SseParser::new();
//! let mut frames = Vec::new();
//! // Split anywhere: the frames are the same.
//! parser.push(&wire[..17], &mut frames)?;
//! parser.push(&wire[17..], &mut frames)?;
//! parser.finish(&mut frames)?;
//! assert_eq!(frames.len(), 2);
//! match decode_frame(&frames[0])? {
//!     Decoded::Event(StreamEvent::OutputTextDelta(delta)) => assert_eq!(delta.delta, "Hel"),
//!     other => panic!("unexpected {other:?}"),
//! }
//! assert_eq!(decode_frame(&frames[1])?, Decoded::Done);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

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
pub use http::{ApiKey, Client, ClientConfig, EventStream, RawEvent};
