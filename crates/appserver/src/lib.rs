//! `agent-appserver`: a JSON-RPC stdio client for `codex app-server`.
//!
//! Start a server with [`AppServerClient::spawn`] (`codex app-server --listen stdio://` via
//! [`ServerCommand::codex`], or any command), do the handshake with
//! [`AppServerClient::initialize`], then `thread/start`, `turn/start`, `turn/steer`,
//! `turn/interrupt`, and read the turn's progress from [`Events`].
//!
//! Contracts (each is a test in `tests/all/fake_server.rs` or `tests/all/server_faults.rs`):
//! - Every call resolves: with its result, the server's error, a timeout (15 s default), or
//!   the connection loss, which every pending and later call receives. The server's exit is
//!   a connection loss even when a process it started keeps its output open.
//! - An answer with an id this client never used is logged at warn level, and a call that
//!   then times out says such answers came.
//! - Every server request is answered by a [`ServerRequestHandler`]; the default
//!   [`ApprovalPolicy`] declines approvals and refuses unknown methods (fail closed).
//! - Notifications are never dropped: the event queue is bounded and applies backpressure
//!   to the reader; [`AppServerClient::close`] is bounded even when nobody reads it.
//! - The server leads a process group of its own, so a terminal's Ctrl-C reaches the client
//!   alone. Closing closes stdin, sends SIGTERM to the group, waits a grace period, then
//!   kills the group (a wrapper's child too, such as npm's `codex` starts).
//! - A relative program path with a directory in it (`bin/codex`) is resolved against the
//!   client's working directory, also when the server is given another one.
//! - A malformed, non-JSON-RPC or oversized line is a typed [`ConnectionLost`], never a panic.
//!
//! What the client answers when the server asks (the default policy declines approvals and
//! refuses what it does not know, so no request is left waiting and nothing runs unasked):
//!
//! ```
//! use agent_appserver::{
//!     ApprovalDecision, ApprovalPolicy, COMMAND_APPROVAL, METHOD_NOT_FOUND, ServerRequest,
//!     ServerRequestHandler,
//! };
//! use serde_json::json;
//!
//! let ask = |method: &str| ServerRequest { id: json!(0), method: method.into(), params: json!({}) };
//! let policy = ApprovalPolicy::default();
//! assert_eq!(policy.handle(&ask(COMMAND_APPROVAL)), Ok(json!({"decision": "decline"})));
//! let refused = policy.handle(&ask("item/tool/requestUserInput")).unwrap_err();
//! assert_eq!(refused.code, METHOD_NOT_FOUND);
//!
//! let trusting = ApprovalPolicy::uniform("accept".parse::<ApprovalDecision>()?);
//! assert_eq!(trusting.handle(&ask(COMMAND_APPROVAL)), Ok(json!({"decision": "accept"})));
//! # Ok::<(), agent_appserver::UnknownDecision>(())
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod api;
mod calls;
mod client;
pub mod codex_home;
mod error;
mod options;
mod policy;
mod protocol;
mod wire;

pub use client::{AppServerClient, AppServerEvent, CloseOutcome, EXIT_DRAIN_SILENCE, Events};
pub use error::{AppServerError, ConnectionLost, UnknownAnswers};
pub use options::{ClientOptions, ServerCommand, StderrTarget};
pub use policy::{
    ApprovalDecision, ApprovalPolicy, COMMAND_APPROVAL, FILE_CHANGE_APPROVAL, METHOD_NOT_FOUND,
    ServerRequestHandler, UnknownDecision, refuse,
};
pub use protocol::{
    ClientInfo, InitializeResponse, Thread, ThreadItem, ThreadStartParams, ThreadStartResponse,
    Turn, TurnInterruptParams, TurnNotification, TurnStartParams, TurnStartResponse, TurnStatus,
    TurnSteerParams, TurnSteerResponse, UserInput,
};
pub use wire::{Notification, RpcError, ServerRequest};

/// The line reader and the line parser, reachable for the fuzz target
/// (`tests/all/fuzz_wire.rs`) only; not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::client::read_line;
    pub use crate::wire::{Incoming, notification_line, parse_line, reply_line, request_line};
}
