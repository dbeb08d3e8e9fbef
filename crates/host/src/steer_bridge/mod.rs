//! The bridge between WebSocket steering and runtime revisions.
//!
//! [`run_steered`] creates a response over a WebSocket session, steers it as soon as it
//! exists, and returns the successor's answer; with a [`RevisionBridge`], the steer is
//! also a durable runtime turn: the accepted steer bumps the turn's revision, a proposal
//! built on the superseded response is refused at commit, and the successor's answer is
//! committed at the new revision.
//!
//! Invariants:
//! - The steer is sent once, at the parent's `response.created`; it is `accepted` (queued)
//!   first, and the successor's `response.created` is the commit point. Only then does the
//!   successor's completion end the run.
//! - Every other turn of events (a failed steer, a failed response, an `error` event,
//!   `pending` in a tool-less request, an incomplete response other than the steered
//!   parent, a dropped connection) is a [`SteerError::Unexpected`], never a partial answer.
//! - The whole run is bounded by the session's `request_timeout`; past it the steer's
//!   outcome is unknown ([`SteerError::TimedOut`]).

mod revision;

pub use revision::{BridgeError, RevisionBridge};

use std::time::Duration;

use agent_responses::types::{CreateResponse, Input, StreamEvent};
use agent_responses::ws::steering::is_steered_incomplete;
use agent_responses::ws::{
    ResponseCreate, ServerEvent, SessionEvent, SteerInput, SteerTracker, SteerUpdate, WsConfig,
    WsError, WsSession,
};

/// What to create and how to steer it.
#[derive(Debug, Clone)]
pub struct SteeredRequest {
    /// The model.
    pub model: String,
    /// The user's prompt for the parent response.
    pub prompt: String,
    /// The steering input sent once the parent exists.
    pub steer: String,
}

/// Progress of a steered run, in order, for the caller to show.
#[derive(Debug)]
pub enum SteerProgress<'a> {
    /// The server queued the steer (not yet applied).
    Accepted {
        /// The steer's id.
        steer_id: &'a str,
        /// The response it steers.
        parent: &'a str,
    },
    /// The runtime turn's revision was bumped for the accepted steer.
    RevisionBumped {
        /// The runtime revision now current.
        revision: u64,
    },
    /// The successor exists: the steer is applied.
    Committed {
        /// The successor response's id.
        successor: &'a str,
    },
    /// The runtime refused the superseded proposal and committed the successor's answer.
    RuntimeCommitted {
        /// The runtime's refusal of the proposal built on the parent.
        stale_refused: &'a agent_runtime::RuntimeError,
        /// The revision the answer was committed at.
        revision: u64,
    },
}

/// The successor's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteeredAnswer {
    /// The successor response.
    pub response_id: String,
    /// Its message text, one entry per line.
    pub lines: Vec<String>,
}

/// Why a steered run did not end with the successor's answer. `E` is the observer's error.
#[derive(Debug, thiserror::Error)]
pub enum SteerError<E> {
    /// The WebSocket session could not be opened.
    #[error(transparent)]
    Connect(WsError),
    /// The request could not be sent.
    #[error(transparent)]
    Send(WsError),
    /// The server did something other than accept, steer and complete.
    #[error("{reason}")]
    Unexpected {
        /// What happened instead.
        reason: String,
    },
    /// The runtime side failed.
    #[error(transparent)]
    Bridge(#[from] BridgeError),
    /// The run did not end within the session's request timeout.
    #[error("timed out after {after:?}; acceptance outcome may be unknown")]
    TimedOut {
        /// The limit.
        after: Duration,
    },
    /// The observer failed (for example, stdout was closed).
    #[error("cannot report the steered run's progress: {0}")]
    Observer(E),
}

fn unexpected<E>(reason: impl Into<String>) -> SteerError<E> {
    SteerError::Unexpected {
        reason: reason.into(),
    }
}

/// Creates the request over a session with `config`, steers it once it exists and returns
/// the successor's answer (see the module docs); `observe` sees each [`SteerProgress`].
///
/// # Cancel safety
/// Dropping the future closes the WebSocket session; whether the steer was applied is then
/// unknown, and a bridge's turn stays as it was (revision bumped or not, nothing committed).
pub async fn run_steered<O, E>(
    config: WsConfig,
    request: &SteeredRequest,
    bridge: Option<&mut RevisionBridge>,
    observe: O,
) -> Result<SteeredAnswer, SteerError<E>>
where
    O: FnMut(SteerProgress<'_>) -> Result<(), E>,
{
    let after = config.request_timeout;
    match tokio::time::timeout(after, steer_session(config, request, bridge, observe)).await {
        Ok(result) => result,
        Err(_) => Err(SteerError::TimedOut { after }),
    }
}

async fn steer_session<O, E>(
    config: WsConfig,
    request: &SteeredRequest,
    mut bridge: Option<&mut RevisionBridge>,
    mut observe: O,
) -> Result<SteeredAnswer, SteerError<E>>
where
    O: FnMut(SteerProgress<'_>) -> Result<(), E>,
{
    let mut session = WsSession::connect(config)
        .await
        .map_err(SteerError::Connect)?;
    let mut tracker = SteerTracker::new();
    let create = CreateResponse::new(&request.model, Input::Text(request.prompt.clone()));
    session
        .create(ResponseCreate {
            request: create,
            stream_id: None,
            generate: None,
        })
        .await
        .map_err(SteerError::Send)?;
    let mut parent: Option<String> = None;
    let mut successor: Option<String> = None;
    loop {
        let event = match session.next_event().await {
            Ok(Some(event)) => event,
            Ok(None) => return Err(unexpected("Connection ended before successor completion")),
            Err(err) => return Err(unexpected(err.to_string())),
        };
        for update in tracker.observe(&event) {
            match update {
                SteerUpdate::Accepted { steer_id, parent } => {
                    tracing::info!(%steer_id, %parent, "steer accepted: revision bump point");
                    observe(SteerProgress::Accepted {
                        steer_id: &steer_id,
                        parent: &parent,
                    })
                    .map_err(SteerError::Observer)?;
                    if let Some(bridge) = bridge.as_deref_mut() {
                        let revision = bridge.steer_accepted(&request.steer).await?;
                        observe(SteerProgress::RevisionBumped { revision })
                            .map_err(SteerError::Observer)?;
                    }
                }
                SteerUpdate::Committed { successor: id, .. } => {
                    observe(SteerProgress::Committed { successor: &id })
                        .map_err(SteerError::Observer)?;
                    successor = Some(id);
                }
                SteerUpdate::Failed { code, message, .. } => {
                    return Err(unexpected(format!(
                        "response.steer.failed: {code}: {message}"
                    )));
                }
                SteerUpdate::Pending { .. } => {
                    return Err(unexpected(
                        "Unexpected pending in no-tool demo; a tool-enabled client must fill required_input using saved results",
                    ));
                }
                SteerUpdate::OutcomeUnknown { .. } => {
                    return Err(unexpected(
                        "Connection ended before successor completion; steering outcome unknown",
                    ));
                }
                SteerUpdate::ParentSteered { .. } | SteerUpdate::ParentCompleted { .. } => {}
            }
        }
        let server = match event {
            SessionEvent::Server(server) => server,
            SessionEvent::Disconnected { code, reason, .. } => {
                return Err(unexpected(format!(
                    "Connection ended before successor completion (close code {}: {reason}); steering outcome unknown",
                    code.map_or_else(|| "none".to_owned(), |c| c.to_string())
                )));
            }
            SessionEvent::Reconnected { .. } => continue,
        };
        match &server {
            ServerEvent::Stream(StreamEvent::Created(e)) if parent.is_none() => {
                let id = e.response.id.clone();
                let steer = session
                    .steer(&id, SteerInput::Text(request.steer.clone()))
                    .await
                    .map_err(|e| unexpected(e.to_string()))?;
                tracker.sent(steer);
                parent = Some(id);
            }
            ServerEvent::Stream(StreamEvent::Failed(_) | StreamEvent::Error(_)) => {
                return Err(unexpected(
                    server
                        .to_json()
                        .unwrap_or_else(|_| "response failed".into()),
                ));
            }
            ServerEvent::Stream(StreamEvent::Incomplete(e))
                if !(Some(&e.response.id) == parent.as_ref() && is_steered_incomplete(&server)) =>
            {
                return Err(unexpected(format!(
                    "Unexpected incomplete response {}",
                    e.response.id
                )));
            }
            ServerEvent::Stream(StreamEvent::Completed(e))
                if successor.as_ref() == Some(&e.response.id) =>
            {
                let lines = e.response.message_lines();
                if let (Some(bridge), Some(parent)) = (bridge.as_deref_mut(), parent.as_deref()) {
                    let refusal = bridge
                        .commit(parent, &e.response.id, &lines.join("\n"))
                        .await?;
                    observe(SteerProgress::RuntimeCommitted {
                        stale_refused: &refusal,
                        revision: bridge.revision(),
                    })
                    .map_err(SteerError::Observer)?;
                }
                let answer = SteeredAnswer {
                    response_id: e.response.id.clone(),
                    lines,
                };
                session.close().await;
                return Ok(answer);
            }
            _ => {}
        }
    }
}
