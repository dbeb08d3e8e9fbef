//! WebSocket mode (<https://developers.openai.com/api/docs/guides/websocket-mode>): a session to `{base}/responses`, typed client and
//! server events, the steering state machine and the SDK's reconnect policy.
//!
//! - [`events`]: `response.create` / `response.steer`, every server event (unknown kept).
//! - [`connection`]: [`WsSession`], one task owning the socket; handshake and request timeouts.
//! - [`steering`]: [`SteerTracker`]: accepted = queued, successor's `response.created` = commit.
//! - [`reconnect`]: recoverable close codes, retries and delays; no replay of in-flight requests.

pub mod connection;
mod error;
pub mod events;
mod inflight;
pub mod reconnect;
pub mod steering;

pub use connection::{SessionEvent, WsConfig, WsSession, websocket_url};
pub use error::WsError;
pub use events::{
    ClientEvent, RequiredInput, ResponseCreate, ServerEvent, SteerAccepted, SteerEvent,
    SteerFailCode, SteerFailed, SteerInput, SteerPending, SteerRequest,
};
pub(crate) use inflight::deadline_after;
pub use reconnect::ReconnectPolicy;
pub use steering::{
    FillError, SteerState, SteerTracker, SteerUpdate, fill_request, fill_required_input,
};
