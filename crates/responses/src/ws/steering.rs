//! The steering state machine (server events in
//! <https://developers.openai.com/api/reference/resources/responses/websocket-events>), fed
//! with session events.
//!
//! Per steer: `Sent` → `Accepted` (queued, **not applied**) → `Committed` at the successor's
//! `response.created` (the commit point). On the way the parent may end `incomplete` with
//! reason `steered` (not an error) or `completed` (an automatic successor or a
//! `response.steer.pending` follows). `Pending` means the parent stopped for client-owned
//! input: the client answers the `required_input` stubs from its saved tool results and
//! sends one `response.create` per parent (same `previous_response_id` and lane) without the
//! steering input, see [`fill_request`]; the successor of that request is the commit point.
//! `response.steer.failed` ends a steer with its code. A dropped connection or a request
//! timeout before the commit point leaves the outcome **unknown**: never assume either way.
//!
//! Runtime hook: [`SteerUpdate::Accepted`] is when a caller bumps its turn revision (the
//! superseded response's proposals must be refused at commit); [`SteerUpdate::Committed`]
//! names the successor the new revision continues on.

mod fill;

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

use super::connection::SessionEvent;
use super::events::{
    RequiredInput, ServerEvent, SteerEvent, SteerFailCode, SteerPending, SteerRequest,
};
use crate::types::StreamEvent;

pub use fill::{FillError, fill_request, fill_required_input};

/// Where one steer stands.
#[derive(Debug, Clone, PartialEq)]
pub enum SteerState {
    /// Sent; the server has not answered yet.
    Sent,
    /// The server owns the input; it is queued, not applied.
    Accepted,
    /// The parent stopped for client-owned input; waiting for the client's `response.create`.
    Pending {
        /// The outputs the server waits for.
        required_input: Vec<RequiredInput>,
    },
    /// Applied: the successor exists.
    Committed {
        /// The successor response the steer was applied to.
        successor: String,
    },
    /// `response.steer.failed`: the input was not taken.
    Failed {
        /// Why it was refused.
        code: SteerFailCode,
        /// The server's message.
        message: String,
    },
    /// The connection dropped (or the request timed out) before the commit point.
    Unknown,
}

/// One tracked steer.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackedSteer {
    /// The server's `steer.id` (after accepted; may stay `None` on failure).
    pub id: Option<String>,
    /// The response the steer was sent to.
    pub parent: String,
    /// What the client sent.
    pub request: SteerRequest,
    /// Where the steer stands now.
    pub state: SteerState,
}

/// What changed, for the caller to act on.
#[derive(Debug, Clone, PartialEq)]
// Moved once per frame; boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum SteerUpdate {
    /// Queued, not applied. Bump the turn's revision here.
    Accepted {
        /// The server's id for the steer.
        steer_id: String,
        /// The steered response.
        parent: String,
    },
    /// The parent ended `incomplete` with reason `steered`: expected, not an error.
    ParentSteered {
        /// The steered response.
        parent: String,
    },
    /// The parent completed while a steer was queued; a successor or `pending` follows.
    ParentCompleted {
        /// The steered response.
        parent: String,
    },
    /// The parent stopped for client-owned input: fill `required_input` and create the
    /// continuation on `lane` (see [`fill_request`]).
    Pending {
        /// The server's id for the steer.
        steer_id: String,
        /// The response that stopped for input.
        parent: String,
        /// The parent's lane, where the continuation must go.
        lane: Option<String>,
        /// The event, with the `required_input` stubs.
        event: SteerPending,
    },
    /// The commit point: the successor's `response.created`.
    Committed {
        /// Every steer applied by this successor, in send order.
        steer_ids: Vec<String>,
        /// The steered response.
        parent: String,
        /// The successor the new revision continues on.
        successor: String,
    },
    /// `response.steer.failed`.
    Failed {
        /// The server's id for the steer, if it allocated one.
        steer_id: Option<String>,
        /// The response the steer was sent to.
        parent: String,
        /// Why it was refused.
        code: SteerFailCode,
        /// The server's message.
        message: String,
    },
    /// The connection dropped before the commit point: accepted or not, applied or not, is unknown.
    OutcomeUnknown {
        /// The server's id for the steer, if it was accepted before the drop.
        steer_id: Option<String>,
        /// The response the steer was sent to.
        parent: String,
    },
}

/// Follows every steer of one session.
#[derive(Debug, Default)]
pub struct SteerTracker {
    steers: Vec<TrackedSteer>,
    /// Indexes of steers sent but not yet answered, in send order.
    unanswered: VecDeque<usize>,
    /// Lane of each response seen created.
    lanes: HashMap<String, Option<String>>,
}

impl SteerTracker {
    /// A tracker with no steers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every steer so far, in send order.
    pub fn steers(&self) -> &[TrackedSteer] {
        &self.steers
    }

    /// The lane (`stream_id`) a response was created on, if seen.
    pub fn lane_of(&self, response_id: &str) -> Option<Option<String>> {
        self.lanes.get(response_id).cloned()
    }

    /// Records a steer the client just sent.
    pub fn sent(&mut self, request: SteerRequest) {
        self.unanswered.push_back(self.steers.len());
        self.steers.push(TrackedSteer {
            id: None,
            parent: request.previous_response_id.clone(),
            request,
            state: SteerState::Sent,
        });
    }

    /// Whether some steer is sent or accepted but neither committed, failed nor unknown.
    pub fn has_open_steers(&self) -> bool {
        self.steers.iter().any(|s| {
            matches!(
                s.state,
                SteerState::Sent | SteerState::Accepted | SteerState::Pending { .. }
            )
        })
    }

    /// Feeds one session event; returns what changed.
    pub fn observe(&mut self, event: &SessionEvent) -> Vec<SteerUpdate> {
        match event {
            SessionEvent::Server(server) => self.observe_server(server),
            SessionEvent::Disconnected { .. } => self.connection_lost(),
            SessionEvent::Reconnected { .. } => Vec::new(),
        }
    }

    /// Marks every open steer unknown (after a drop or a request timeout).
    pub fn connection_lost(&mut self) -> Vec<SteerUpdate> {
        self.unanswered.clear();
        let mut updates = Vec::new();
        for steer in &mut self.steers {
            if matches!(
                steer.state,
                SteerState::Sent | SteerState::Accepted | SteerState::Pending { .. }
            ) {
                steer.state = SteerState::Unknown;
                updates.push(SteerUpdate::OutcomeUnknown {
                    steer_id: steer.id.clone(),
                    parent: steer.parent.clone(),
                });
            }
        }
        updates
    }

    fn take_unanswered(&mut self, parent: &str) -> Option<usize> {
        let pos = self
            .unanswered
            .iter()
            .position(|&i| self.steers.get(i).is_some_and(|s| s.parent == parent))?;
        self.unanswered.remove(pos)
    }

    fn by_id(&mut self, id: &str) -> Option<&mut TrackedSteer> {
        self.steers.iter_mut().find(|s| s.id.as_deref() == Some(id))
    }

    fn observe_server(&mut self, event: &ServerEvent) -> Vec<SteerUpdate> {
        let mut updates = Vec::new();
        match event {
            ServerEvent::Steer(SteerEvent::Accepted(e)) => {
                let parent = e.steer.previous_response_id.clone();
                let steer_id = e.steer.id.clone().unwrap_or_default();
                if let Some(i) = self.take_unanswered(&parent)
                    && let Some(steer) = self.steers.get_mut(i)
                {
                    steer.id = Some(steer_id.clone());
                    steer.state = SteerState::Accepted;
                }
                updates.push(SteerUpdate::Accepted { steer_id, parent });
            }
            ServerEvent::Steer(SteerEvent::Failed(e)) => {
                let parent = e.steer.previous_response_id.clone();
                let code = e.code();
                let message = e.error.message.clone();
                let known =
                    e.steer.id.as_deref().and_then(|id| {
                        self.steers.iter().position(|s| s.id.as_deref() == Some(id))
                    });
                let index = known.or_else(|| self.take_unanswered(&parent));
                if let Some(steer) = index.and_then(|i| self.steers.get_mut(i)) {
                    steer.state = SteerState::Failed {
                        code: code.clone(),
                        message: message.clone(),
                    };
                    if steer.id.is_none() {
                        steer.id.clone_from(&e.steer.id);
                    }
                }
                updates.push(SteerUpdate::Failed {
                    steer_id: e.steer.id.clone(),
                    parent,
                    code,
                    message,
                });
            }
            ServerEvent::Steer(SteerEvent::Pending(e)) => {
                let parent = e.steer.previous_response_id.clone();
                let steer_id = e.steer.id.clone().unwrap_or_default();
                if let Some(steer) = self.by_id(&steer_id) {
                    steer.state = SteerState::Pending {
                        required_input: e.required_input.clone(),
                    };
                }
                let lane = self
                    .lanes
                    .get(&parent)
                    .cloned()
                    .unwrap_or_else(|| e.stream_id.clone());
                updates.push(SteerUpdate::Pending {
                    steer_id,
                    parent,
                    lane,
                    event: e.clone(),
                });
            }
            ServerEvent::Steer(SteerEvent::Other(_)) => {}
            ServerEvent::Stream(StreamEvent::Created(e)) => {
                let id = e.response.id.clone();
                self.lanes
                    .insert(id.clone(), event.stream_id().map(str::to_owned));
                let parent = e
                    .response
                    .extra
                    .get("previous_response_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(parent) = parent {
                    let mut steer_ids = Vec::new();
                    for steer in &mut self.steers {
                        if steer.parent == parent
                            && matches!(
                                steer.state,
                                SteerState::Accepted | SteerState::Pending { .. }
                            )
                        {
                            steer.state = SteerState::Committed {
                                successor: id.clone(),
                            };
                            steer_ids.push(steer.id.clone().unwrap_or_default());
                        }
                    }
                    if !steer_ids.is_empty() {
                        updates.push(SteerUpdate::Committed {
                            steer_ids,
                            parent,
                            successor: id,
                        });
                    }
                }
            }
            ServerEvent::Stream(StreamEvent::Incomplete(e)) => {
                let steered = e
                    .response
                    .incomplete_details
                    .as_ref()
                    .and_then(Option::as_ref)
                    .and_then(|d| d.get("reason"))
                    == Some(&Value::String("steered".into()));
                if steered {
                    updates.push(SteerUpdate::ParentSteered {
                        parent: e.response.id.clone(),
                    });
                }
            }
            ServerEvent::Stream(StreamEvent::Completed(e)) => {
                let id = &e.response.id;
                if self
                    .steers
                    .iter()
                    .any(|s| &s.parent == id && s.state == SteerState::Accepted)
                {
                    updates.push(SteerUpdate::ParentCompleted { parent: id.clone() });
                }
            }
            ServerEvent::Stream(_) => {}
        }
        updates
    }
}

/// Whether a `response.incomplete` is the expected end of a steered parent.
pub fn is_steered_incomplete(event: &ServerEvent) -> bool {
    match event {
        ServerEvent::Stream(StreamEvent::Incomplete(e)) => {
            e.response
                .incomplete_details
                .as_ref()
                .and_then(Option::as_ref)
                .and_then(|d| d.get("reason"))
                == Some(&Value::String("steered".into()))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ws::events::SteerInput;

    fn server(json: &str) -> SessionEvent {
        SessionEvent::Server(ServerEvent::from_json(json).unwrap())
    }

    #[test]
    fn accepted_then_steered_then_committed() {
        let mut t = SteerTracker::new();
        t.sent(SteerRequest {
            previous_response_id: "r1".into(),
            input: SteerInput::Text("x".into()),
        });
        let u = t.observe(&server(
            r#"{"type":"response.steer.accepted","steer":{"id":"s1","previous_response_id":"r1"}}"#,
        ));
        assert_eq!(
            u,
            vec![SteerUpdate::Accepted {
                steer_id: "s1".into(),
                parent: "r1".into()
            }]
        );
        assert_eq!(t.steers()[0].state, SteerState::Accepted);
        let u = t.observe(&server(r#"{"type":"response.incomplete","sequence_number":1,"response":{"id":"r1","status":"incomplete","incomplete_details":{"reason":"steered"}}}"#));
        assert_eq!(
            u,
            vec![SteerUpdate::ParentSteered {
                parent: "r1".into()
            }]
        );
        let u = t.observe(&server(r#"{"type":"response.created","sequence_number":0,"stream_id":"a","response":{"id":"r2","previous_response_id":"r1"}}"#));
        assert_eq!(
            u,
            vec![SteerUpdate::Committed {
                steer_ids: vec!["s1".into()],
                parent: "r1".into(),
                successor: "r2".into()
            }]
        );
        assert!(!t.has_open_steers());
    }

    #[test]
    fn completed_parent_then_automatic_successor_commits() {
        let mut t = SteerTracker::new();
        t.sent(SteerRequest {
            previous_response_id: "r1".into(),
            input: SteerInput::Text("x".into()),
        });
        t.observe(&server(
            r#"{"type":"response.steer.accepted","steer":{"id":"s1","previous_response_id":"r1"}}"#,
        ));
        let u = t.observe(&server(r#"{"type":"response.completed","sequence_number":1,"response":{"id":"r1","status":"completed"}}"#));
        assert_eq!(
            u,
            vec![SteerUpdate::ParentCompleted {
                parent: "r1".into()
            }]
        );
        let u = t.observe(&server(r#"{"type":"response.created","sequence_number":2,"response":{"id":"r2","previous_response_id":"r1"}}"#));
        assert!(matches!(&u[..], [SteerUpdate::Committed { successor, .. }] if successor == "r2"));
    }

    #[test]
    fn failed_before_an_id_matches_the_oldest_unanswered_steer() {
        let mut t = SteerTracker::new();
        t.sent(SteerRequest {
            previous_response_id: "r1".into(),
            input: SteerInput::Text("x".into()),
        });
        let u = t.observe(&server(r#"{"type":"response.steer.failed","steer":{"id":null,"previous_response_id":"r1"},"error":{"type":"invalid_request_error","code":"response_already_completed","message":"done"}}"#));
        assert!(matches!(
            &u[..],
            [SteerUpdate::Failed {
                code: SteerFailCode::ResponseAlreadyCompleted,
                ..
            }]
        ));
        assert!(matches!(t.steers()[0].state, SteerState::Failed { .. }));
        assert!(!t.has_open_steers());
    }

    #[test]
    fn drop_before_commit_is_unknown() {
        let mut t = SteerTracker::new();
        t.sent(SteerRequest {
            previous_response_id: "r1".into(),
            input: SteerInput::Text("x".into()),
        });
        let u = t.observe(&SessionEvent::Disconnected {
            code: Some(1006),
            reason: String::new(),
            in_flight: 1,
            reconnecting: false,
        });
        assert_eq!(
            u,
            vec![SteerUpdate::OutcomeUnknown {
                steer_id: None,
                parent: "r1".into()
            }]
        );
    }
}
