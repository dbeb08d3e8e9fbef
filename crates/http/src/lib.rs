//! HTTP server plumbing shared by the workspace's two servers, `agentctl serve`
//! (`agent-serve`) and the Responses API emulator (`agent-responses-mock`), both axum.
//!
//! - [`close_if_unread`]: a middleware that marks `Connection: close` on a response whose
//!   request body was not read to its end (see [`unread_body`]).
//! - [`server::serve`]: an accept loop that closes idle connections and bounds how many
//!   are open, so that idle connections cannot lock clients out (see [`server`]).

pub mod server;
pub mod unread_body;

pub use unread_body::close_if_unread;
