//! What a tool call came to, and how that is journaled.

use agent_journal::{JournalError, NewEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events;

/// How a call ended. Exactly one of these is journaled per scheduled call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// The tool returned a value.
    Completed,
    /// The tool reported a failure (or could not be started).
    Failed,
    /// A deadline expired; `phase` says which.
    Timeout,
    /// The turn was cancelled while the call was pending.
    Cancelled,
    /// The process running the call died; recovery ended it without a re-run.
    Interrupted,
}

impl CallStatus {
    /// The journal event kind for this terminal status.
    pub fn kind(self) -> &'static str {
        match self {
            CallStatus::Completed => events::TOOL_COMPLETED,
            CallStatus::Failed => events::TOOL_FAILED,
            CallStatus::Timeout => events::TOOL_TIMEOUT,
            CallStatus::Cancelled => events::TOOL_CANCELLED,
            CallStatus::Interrupted => events::TOOL_INTERRUPTED,
        }
    }

    /// The status for a journal event kind, if it is a terminal one.
    pub fn from_kind(kind: &str) -> Option<CallStatus> {
        match kind {
            events::TOOL_COMPLETED => Some(CallStatus::Completed),
            events::TOOL_FAILED => Some(CallStatus::Failed),
            events::TOOL_TIMEOUT => Some(CallStatus::Timeout),
            events::TOOL_CANCELLED => Some(CallStatus::Cancelled),
            events::TOOL_INTERRUPTED => Some(CallStatus::Interrupted),
            _ => None,
        }
    }
}

/// Which deadline expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadlinePhase {
    /// Waiting for a slot (schedule-to-start): the tool never started.
    Queue,
    /// Running (start-to-close).
    Run,
}

/// The settled outcome of one call, as journaled in its terminal event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// How the call ended.
    pub status: CallStatus,
    /// The turn revision the call was launched under.
    pub revision: u64,
    /// Whether the tool began running (false: it never started, safe to retry).
    pub started: bool,
    /// The tool's value, for `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The failure message, for every status but `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Which deadline expired, for `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DeadlinePhase>,
}

impl Outcome {
    pub(crate) fn completed(revision: u64, value: Value) -> Self {
        Outcome {
            status: CallStatus::Completed,
            revision,
            started: true,
            value: Some(value),
            error: None,
            phase: None,
        }
    }

    pub(crate) fn failed(revision: u64, error: String) -> Self {
        Outcome {
            status: CallStatus::Failed,
            revision,
            started: true,
            value: None,
            error: Some(error),
            phase: None,
        }
    }

    pub(crate) fn timeout(revision: u64, phase: DeadlinePhase) -> Self {
        Outcome {
            status: CallStatus::Timeout,
            revision,
            started: phase == DeadlinePhase::Run,
            value: None,
            error: Some("timeout".into()),
            phase: Some(phase),
        }
    }

    pub(crate) fn cancelled(revision: u64, started: bool) -> Self {
        Outcome {
            status: CallStatus::Cancelled,
            revision,
            started,
            value: None,
            error: Some("cancelled".into()),
            phase: None,
        }
    }

    pub(crate) fn interrupted(revision: u64, started: bool) -> Self {
        Outcome {
            status: CallStatus::Interrupted,
            revision,
            started,
            value: None,
            error: Some("interrupted".into()),
            phase: None,
        }
    }

    /// The call's one terminal event, keyed so that a second one is never written.
    pub(crate) fn terminal_event(
        &self,
        thread: &str,
        turn: &str,
        call_id: &str,
    ) -> Result<NewEvent, JournalError> {
        /// Field order as journaled: owner, revision, then what the call came to.
        #[derive(Serialize)]
        struct Terminal<'a> {
            turn_id: &'a str,
            call_id: &'a str,
            revision: u64,
            started: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            value: Option<&'a Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            phase: Option<DeadlinePhase>,
        }
        let payload = Terminal {
            turn_id: turn,
            call_id,
            revision: self.revision,
            started: self.started,
            value: self.value.as_ref(),
            error: self.error.as_deref(),
            phase: self.phase,
        };
        Ok(NewEvent::encoded(thread, self.status.kind(), &payload)?
            .with_dedup_key(events::done_key(turn, call_id)))
    }

    /// Whether the value (a string or key anywhere in it) or the error holds a NUL
    /// character, which the journal cannot store.
    pub(crate) fn holds_nul(&self) -> bool {
        self.value.as_ref().is_some_and(agent_journal::holds_nul)
            || self.error.as_ref().is_some_and(|e| e.contains('\0'))
    }

    /// The same outcome with every NUL character of its value and error replaced by
    /// U+FFFD: what a tool that printed binary output is recorded (and answered) with.
    pub(crate) fn without_nul(mut self) -> Self {
        if let Some(value) = &mut self.value {
            replace_nul(value);
        }
        if let Some(error) = &mut self.error {
            *error = error.replace('\0', "\u{FFFD}");
        }
        self
    }

    /// Reads an outcome back from a terminal event.
    pub(crate) fn from_event(kind: &str, payload: &Value) -> Option<Outcome> {
        let status = CallStatus::from_kind(kind)?;
        Some(Outcome {
            status,
            revision: payload.get("revision")?.as_u64()?,
            started: payload
                .get("started")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            value: payload.get("value").cloned(),
            error: payload
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_string),
            phase: payload
                .get("phase")
                .and_then(|p| serde_json::from_value(p.clone()).ok()),
        })
    }
}

fn replace_nul(value: &mut Value) {
    match value {
        Value::String(text) if text.contains('\0') => *text = text.replace('\0', "\u{FFFD}"),
        Value::Array(items) => items.iter_mut().for_each(replace_nul),
        Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                *map = std::mem::take(map)
                    .into_iter()
                    .map(|(k, v)| (k.replace('\0', "\u{FFFD}"), v))
                    .collect();
            }
            map.values_mut().for_each(replace_nul);
        }
        _ => {}
    }
}

/// What `result` answers: the outcome plus whether it predates the turn's current
/// revision. Serialises as `ok`, `value`/`error`, `stale`, `call_id` (the shape
/// `agentctl` prints).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call this result answers.
    pub call_id: String,
    /// `true` exactly when `status` is `completed`.
    pub ok: bool,
    /// How the call ended.
    pub status: CallStatus,
    /// The tool's value, for `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The failure message, for every status but `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Which deadline expired, for `status: timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DeadlinePhase>,
    /// False when the tool never began running.
    pub started: bool,
    /// The revision the call was launched under.
    pub revision: u64,
    /// True when the turn was steered after the call was launched.
    pub stale: bool,
}

impl ToolResult {
    pub(crate) fn new(call_id: &str, outcome: Outcome, current_revision: u64) -> Self {
        ToolResult {
            call_id: call_id.to_string(),
            ok: outcome.status == CallStatus::Completed,
            status: outcome.status,
            stale: outcome.revision != current_revision,
            value: outcome.value,
            error: outcome.error,
            phase: outcome.phase,
            started: outcome.started,
            revision: outcome.revision,
        }
    }
}
