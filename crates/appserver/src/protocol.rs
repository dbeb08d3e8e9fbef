//! Typed v2 messages for the thread/turn core (the protocol of
//! <https://github.com/openai/codex/tree/main/codex-rs/app-server>).
//!
//! Every type keeps the fields it does not name in `extra`, so nothing the server sends is
//! lost and unknown fields never fail a parse. Casing follows the wire: camelCase params,
//! except `text_elements`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::wire::Notification;

/// `initialize` params' `clientInfo`; `name` becomes Codex's `originator`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientInfo {
    /// Identifies the client to the server (Codex records it as the originator).
    pub name: String,
    /// A display name, when different from `name`.
    pub title: Option<String>,
    /// The client's version.
    pub version: String,
}

/// The `initialize` result: `{userAgent, codexHome, platformFamily, platformOs, …}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResponse {
    /// The server's user agent (Codex's name and version).
    #[serde(default)]
    pub user_agent: Option<String>,
    /// The `CODEX_HOME` the server runs with.
    #[serde(default)]
    pub codex_home: Option<String>,
    /// `unix` or `windows`.
    #[serde(default)]
    pub platform_family: Option<String>,
    /// The server's operating system, e.g. `linux`.
    #[serde(default)]
    pub platform_os: Option<String>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// Every key of the result object as received, sorted.
    #[serde(skip)]
    pub keys: Vec<String>,
}

/// One piece of user input: `{"type":"text","text":…,"text_elements":[]}` and friends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UserInput(pub Value);

impl UserInput {
    /// A text input.
    pub fn text(text: impl Into<String>) -> Self {
        UserInput(serde_json::json!({
            "type": "text",
            "text": text.into(),
            "text_elements": [],
        }))
    }
}

/// `thread/start` params. Unset fields are omitted (the server's defaults apply).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStartParams {
    /// The working directory for the thread's commands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The model slug; the server's configured default when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The `model_providers` entry to use (e.g. a local emulator).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_provider: Option<String>,
    /// `"untrusted"`, `"on-request"` or `"never"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<String>,
    /// Kebab-case: `"read-only"`, `"workspace-write"`, `"danger-full-access"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// `true`: the thread is not persisted by the server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<bool>,
    /// Any other params, sent as given.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A thread as the server describes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Thread {
    /// The thread's id, named by every later turn call.
    pub id: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `thread/start` result.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStartResponse {
    /// The thread just started.
    pub thread: Thread,
    /// The model the server chose for the thread.
    #[serde(default)]
    pub model: Option<String>,
    /// The provider the server chose for the thread.
    #[serde(default)]
    pub model_provider: Option<String>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `turn/start` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStartParams {
    /// The thread to run the turn on.
    pub thread_id: String,
    /// What the user says.
    pub input: Vec<UserInput>,
    /// Overrides the thread's working directory from this turn on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// `"untrusted"`, `"on-request"` or `"never"`; sticks for later turns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<String>,
    /// Tagged object, camelCase: `{"type":"readOnly"}`, `{"type":"workspaceWrite",…}`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox_policy: Option<Value>,
    /// Overrides the thread's model from this turn on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Any other params, sent as given.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A turn's status. Values this client does not know parse as `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TurnStatus {
    /// The turn is running.
    InProgress,
    /// The turn finished normally.
    Completed,
    /// The turn was interrupted (`turn/interrupt`).
    Interrupted,
    /// The turn failed; `Turn::error` says why.
    Failed,
    /// A status this client does not know.
    #[serde(other)]
    Unknown,
}

impl TurnStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::InProgress => "inProgress",
            TurnStatus::Completed => "completed",
            TurnStatus::Interrupted => "interrupted",
            TurnStatus::Failed => "failed",
            TurnStatus::Unknown => "unknown",
        }
    }
}

/// A turn: `{id, status, items, error, …}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Turn {
    /// The turn's id, named by `turn/steer` and `turn/interrupt`.
    pub id: String,
    /// Where the turn is; final in `turn/completed`.
    pub status: TurnStatus,
    /// The turn's items, kept as sent.
    #[serde(default)]
    pub items: Vec<Value>,
    /// `{message, codexErrorInfo, additionalDetails, …}` when the turn failed.
    #[serde(default)]
    pub error: Option<Value>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `turn/start` result.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TurnStartResponse {
    /// The turn just started.
    pub turn: Turn,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `turn/steer` params: the steer applies only if `expected_turn_id` is still the active turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSteerParams {
    /// The thread of the turn to steer.
    pub thread_id: String,
    /// The turn the steer is meant for; the server refuses it once another turn is active.
    pub expected_turn_id: String,
    /// The input added to the running turn.
    pub input: Vec<UserInput>,
}

/// `turn/steer` result.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSteerResponse {
    /// The turn that received the input.
    pub turn_id: String,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `turn/interrupt` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnInterruptParams {
    /// The thread of the turn to interrupt.
    pub thread_id: String,
    /// The turn to interrupt.
    pub turn_id: String,
}

/// An item of a thread: `{"type":"agentMessage"|"userMessage"|"commandExecution"|…, "id", …}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ThreadItem {
    /// The item's `type`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The item's id, stable from `item/started` to `item/completed`.
    pub id: String,
    /// Agent message text.
    #[serde(default)]
    pub text: Option<String>,
    /// Command execution / file change status (`inProgress`, `completed`, `failed`, `declined`).
    #[serde(default)]
    pub status: Option<String>,
    /// The command line of a command execution.
    #[serde(default)]
    pub command: Option<String>,
    /// Fields not named here, kept and sent back verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The turn notifications a turn driver needs, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnNotification {
    /// `turn/started`.
    TurnStarted {
        /// The thread the notification is about.
        thread_id: String,
        /// The turn, as it started.
        turn: Turn,
    },
    /// `turn/completed`: the turn is over; `turn.status` says how.
    TurnCompleted {
        /// The thread the notification is about.
        thread_id: String,
        /// The turn, final.
        turn: Turn,
    },
    /// `item/started`.
    ItemStarted {
        /// The thread the notification is about.
        thread_id: String,
        /// The turn the item belongs to.
        turn_id: String,
        /// The item, as it started.
        item: ThreadItem,
    },
    /// `item/completed`.
    ItemCompleted {
        /// The thread the notification is about.
        thread_id: String,
        /// The turn the item belongs to.
        turn_id: String,
        /// The item, final.
        item: ThreadItem,
    },
    /// `item/agentMessage/delta`.
    AgentMessageDelta {
        /// The thread the notification is about.
        thread_id: String,
        /// The turn the item belongs to.
        turn_id: String,
        /// The agent message the text belongs to.
        item_id: String,
        /// The new text; concatenated in order they give the message.
        delta: String,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TurnParams {
    thread_id: String,
    turn: Turn,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ItemParams {
    thread_id: String,
    turn_id: String,
    item: ThreadItem,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeltaParams {
    thread_id: String,
    turn_id: String,
    item_id: String,
    delta: String,
}

impl TurnNotification {
    /// Types `note` if it is one of the turn notifications; `Ok(None)` for other methods.
    pub fn parse(note: &Notification) -> Result<Option<Self>, serde_json::Error> {
        let params = || note.params.clone();
        let typed = match note.method.as_str() {
            "turn/started" => {
                let p: TurnParams = serde_json::from_value(params())?;
                TurnNotification::TurnStarted {
                    thread_id: p.thread_id,
                    turn: p.turn,
                }
            }
            "turn/completed" => {
                let p: TurnParams = serde_json::from_value(params())?;
                TurnNotification::TurnCompleted {
                    thread_id: p.thread_id,
                    turn: p.turn,
                }
            }
            "item/started" => {
                let p: ItemParams = serde_json::from_value(params())?;
                TurnNotification::ItemStarted {
                    thread_id: p.thread_id,
                    turn_id: p.turn_id,
                    item: p.item,
                }
            }
            "item/completed" => {
                let p: ItemParams = serde_json::from_value(params())?;
                TurnNotification::ItemCompleted {
                    thread_id: p.thread_id,
                    turn_id: p.turn_id,
                    item: p.item,
                }
            }
            "item/agentMessage/delta" => {
                let p: DeltaParams = serde_json::from_value(params())?;
                TurnNotification::AgentMessageDelta {
                    thread_id: p.thread_id,
                    turn_id: p.turn_id,
                    item_id: p.item_id,
                    delta: p.delta,
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(typed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn note(method: &str, params: Value) -> Notification {
        Notification {
            method: method.into(),
            params,
            emitted_at_ms: None,
        }
    }

    #[test]
    fn parses_turn_notifications_with_unknown_fields() {
        let done = note(
            "turn/completed",
            json!({"threadId":"t","turn":{"id":"u","status":"interrupted","items":[],"itemsView":"notLoaded","error":null,"novel":1}}),
        );
        let Some(TurnNotification::TurnCompleted { turn, .. }) =
            TurnNotification::parse(&done).unwrap()
        else {
            panic!("not a turn/completed")
        };
        assert_eq!(turn.status, TurnStatus::Interrupted);
        assert_eq!(turn.extra.get("novel"), Some(&json!(1)));

        let odd = note(
            "turn/completed",
            json!({"threadId":"t","turn":{"id":"u","status":"paused"}}),
        );
        let Some(TurnNotification::TurnCompleted { turn, .. }) =
            TurnNotification::parse(&odd).unwrap()
        else {
            panic!("not a turn/completed")
        };
        assert_eq!(turn.status, TurnStatus::Unknown);

        let delta = note(
            "item/agentMessage/delta",
            json!({"threadId":"t","turnId":"u","itemId":"m","delta":"hi","x":[]}),
        );
        assert!(
            matches!(TurnNotification::parse(&delta).unwrap(), Some(TurnNotification::AgentMessageDelta { ref delta, .. }) if delta == "hi")
        );

        let item = note(
            "item/completed",
            json!({"threadId":"t","turnId":"u","item":{"type":"commandExecution","id":"call_1","status":"declined","command":"touch x","exitCode":null}}),
        );
        let Some(TurnNotification::ItemCompleted { item, .. }) =
            TurnNotification::parse(&item).unwrap()
        else {
            panic!("not an item")
        };
        assert_eq!(item.status.as_deref(), Some("declined"));

        assert_eq!(
            TurnNotification::parse(&note("configWarning", json!({}))).unwrap(),
            None
        );
        assert!(TurnNotification::parse(&note("turn/completed", json!({"threadId":1}))).is_err());
    }

    #[test]
    fn serialises_params_in_wire_casing() {
        let p = TurnStartParams {
            thread_id: "t".into(),
            input: vec![UserInput::text("hi")],
            approval_policy: Some("untrusted".into()),
            ..TurnStartParams::default()
        };
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"threadId":"t","input":[{"type":"text","text":"hi","text_elements":[]}],"approvalPolicy":"untrusted"})
        );
        let s = TurnSteerParams {
            thread_id: "t".into(),
            expected_turn_id: "u".into(),
            input: vec![],
        };
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({"threadId":"t","expectedTurnId":"u","input":[]})
        );
    }
}
