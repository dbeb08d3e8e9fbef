//! Script files: which reply the emulator gives to which request.
//!
//! Format (JSON, documented in `fixtures/responses/README.md`):
//! ```json
//! {"description": "...",
//!  "rules": [{"name": "first turn",
//!             "when": {"endpoint": "responses", "last_user_contains": "api", "has_tool_outputs": false},
//!             "times": 1,
//!             "reply": {"items": [...], "status": "completed", "text_deltas": true},   // or {"json": {...}}
//!             "fault": {"after_events": 3, "kind": "cut"}}]}
//! ```
//! Rules are tried in order; the first whose `when` matches and whose `times` is not used up
//! answers. No match: the default reply (echo the last user input, or acknowledge tool output).
//! The WebSocket mode plays the same rules the same way (its requests are streamed, so
//! `"stream": true` matches them); a rule's `hold_for_steer_ms` holds its reply there for a
//! `response.steer`. A `latency` (`{"first_token_ms": 300, "tokens_per_second": 50}`), at
//! the top or in a rule, makes replies take a model's time.

mod check;
mod reply_shape;

use std::path::Path;

use agent_responses::types::{Input, Item, MessageItem};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::latency::{Latency, MIN_TOKENS_PER_SECOND};

/// A whole script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// What the script is for, for people.
    #[serde(default)]
    pub description: String,
    /// The rules, tried in order; the first available match answers.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// How long every reply takes (a rule's own `latency` replaces it); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
}

/// Cannot load a script.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The script file cannot be read.
    #[error("cannot read script {path}: {source}")]
    Read {
        /// The file, as given.
        path: String,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// The text is not a valid script (unknown fields are refused).
    #[error("invalid script: {0}")]
    Parse(#[from] serde_json::Error),
    /// The script parses, but a value in it cannot be used.
    #[error("invalid script: {0}")]
    Invalid(String),
    /// The script file is larger than a script may be.
    #[error("script {path} is over {max} bytes")]
    TooLarge {
        /// The file, as given.
        path: String,
        /// [`MAX_SCRIPT_BYTES`].
        max: u64,
    },
}

/// The largest script file read: far above any script's replies (each reply is held in
/// memory while it is served), far below what would exhaust memory.
pub const MAX_SCRIPT_BYTES: u64 = 64 << 20;

impl Script {
    /// Parses a script from JSON text: one JSON object (an array, which serde would read as
    /// the fields in order, is refused like an unknown field).
    pub fn from_json_str(text: &str) -> Result<Self, ScriptError> {
        let mut reader = serde_json::Deserializer::from_str(text);
        let script = serde::Deserializer::deserialize_map(&mut reader, ObjectOnly)
            .map_err(|err| Self::explain(text, err))?;
        reader.end()?;
        script.check()?;
        Ok(script)
    }

    /// Refuses values that parse but cannot be used, naming the rule and the field: a
    /// latency's rate, an error reply whose status is not an error (400-599) or whose
    /// headers cannot be sent, a `status` no response ends with, a matcher that can never
    /// match, a fault field that belongs to another kind of fault (see `script/check.rs`).
    pub fn check(&self) -> Result<(), ScriptError> {
        for (index, rule) in self.rules.iter().enumerate() {
            check::rule(rule).map_err(|why| {
                ScriptError::Invalid(format!("{}: {why}", check::label(index, &rule.name)))
            })?;
        }
        if let Some(latency) = self.latency {
            latency.check().map_err(ScriptError::Invalid)?;
        }
        Ok(())
    }

    /// The rule a script that does not parse breaks, named, when one does: serde's own
    /// error names a line and column only.
    fn explain(text: &str, err: serde_json::Error) -> ScriptError {
        let Ok(Value::Object(script)) = serde_json::from_str::<Value>(text) else {
            return ScriptError::Parse(err);
        };
        let Some(Value::Array(rules)) = script.get("rules") else {
            return ScriptError::Parse(err);
        };
        for (index, rule) in rules.iter().enumerate() {
            if let Err(why) = Rule::deserialize(rule) {
                let name = rule.get("name").and_then(Value::as_str).unwrap_or_default();
                return ScriptError::Invalid(format!("{}: {why}", check::label(index, name)));
            }
        }
        ScriptError::Parse(err)
    }

    /// Reads and parses a script file of at most [`MAX_SCRIPT_BYTES`] (an endless file,
    /// `/dev/zero`, is refused once past it, not read until memory runs out).
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        use std::io::Read as _;
        let read_err = |source| ScriptError::Read {
            path: path.display().to_string(),
            source,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(read_err)?
            .take(MAX_SCRIPT_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(read_err)?;
        if text.len() as u64 > MAX_SCRIPT_BYTES {
            return Err(ScriptError::TooLarge {
                path: path.display().to_string(),
                max: MAX_SCRIPT_BYTES,
            });
        }
        Self::from_json_str(&text)
    }
}

/// Reads a [`Script`] from a JSON object only.
struct ObjectOnly;

impl<'de> serde::de::Visitor<'de> for ObjectOnly {
    type Value = Script;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a script object, such as {\"rules\": []}")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Script, A::Error> {
        Script::deserialize(serde::de::value::MapAccessDeserializer::new(map))
    }
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A label for logs and failures.
    #[serde(default)]
    pub name: String,
    /// The conditions a request must meet.
    #[serde(default)]
    pub when: Match,
    /// How many requests this rule may answer (unlimited when absent).
    #[serde(default)]
    pub times: Option<u32>,
    /// What the rule answers.
    pub reply: Reply,
    /// A stream fault to inject into the answer, if any (over HTTP SSE and WebSocket alike).
    #[serde(default)]
    pub fault: Option<Fault>,
    /// WebSocket mode only: hold the reply at its steering acceptance point (right after a
    /// function call's `output_item.added`, or after the first text delta) for up to this
    /// many milliseconds, waiting for a `response.steer` naming it. Absent: the reply is
    /// never held. Ignored over HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_for_steer_ms: Option<u64>,
    /// How long this rule's reply takes, over HTTP (streamed or not) and WebSocket alike;
    /// replaces the script's `latency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
}

/// Which endpoint a rule is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScriptEndpoint {
    /// `POST /v1/responses`.
    #[default]
    Responses,
    /// `POST /v1/responses/compact`.
    Compact,
    /// Either endpoint.
    Any,
}

/// Conditions on the request; all given ones must hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// The endpoint the request went to.
    #[serde(default)]
    pub endpoint: ScriptEndpoint,
    /// The last user message contains this text.
    pub last_user_contains: Option<String>,
    /// The raw request body contains this text.
    pub body_contains: Option<String>,
    /// The context has (or has no) `function_call_output` items.
    pub has_tool_outputs: Option<bool>,
    /// The context holds exactly this many `function_call_output` items: a script keyed on
    /// it answers the same way however often a request is retried or a client restarts,
    /// which is what a host resumed after a crash needs.
    pub tool_outputs: Option<usize>,
    /// The context holds fewer than this many `function_call_output` items (long loops
    /// written as one rule).
    pub tool_outputs_below: Option<usize>,
    /// The context holds exactly this many tool outputs, counting those an emulator's
    /// compaction in it stands for: a script keyed on it goes on where it was after the
    /// history is compacted (as `agentctl run --mock --compact-at` needs).
    pub tool_outputs_total: Option<usize>,
    /// The context has an item of this type (`message` also matches a message sent
    /// without a `type`, or a bare string input).
    pub input_has_type: Option<String>,
    /// `stream: true` was (or was not) asked for.
    pub stream: Option<bool>,
    /// `previous_response_id` is (or is not) set.
    pub previous_response: Option<bool>,
    /// The request's `text.format.type` is this (`text` when it sends none), e.g.
    /// `json_schema` for a request with an output schema.
    pub text_format: Option<String>,
}

/// What to answer: exactly one of `items`, `json`, `error`, `echo` (read by
/// `script/reply_shape.rs`, which refuses unknown and misplaced fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, try_from = "reply_shape::RawReply")]
pub enum Reply {
    /// An HTTP error.
    Error {
        /// The status, headers and error body to send.
        error: ErrorReply,
    },
    /// A response with these output items (ids filled in when missing). Strings may use
    /// `{{last_user}}` and `{{outputs}}` (the tool outputs in the request, joined by `; `).
    Items {
        /// The output items, as JSON; rendered per request.
        items: Vec<Value>,
        /// The response's `status` (`completed` unless given).
        status: String,
        /// Characters per text/arguments delta when streamed.
        delta_chars: Option<usize>,
        /// `false`: no `response.output_text.delta` events when streamed; the text arrives
        /// only in the `.done` events and the terminal one, as some servers send it.
        #[serde(skip_serializing_if = "is_true")]
        text_deltas: bool,
    },
    /// One assistant message whose text is this JSON value, encoded: a structured answer
    /// (for a request with a `json_schema` text format). Not checked against the schema,
    /// so a script can also play a model that answers wrongly.
    Json {
        /// The answer.
        json: Value,
    },
    /// The default conversation (echo).
    Echo {
        /// Marks the variant in the script file; must be `true`.
        echo: bool,
    },
}

fn completed() -> String {
    "completed".into()
}

fn is_true(value: &bool) -> bool {
    *value
}

/// A reply rendered for one request: what HTTP and WebSocket both send for it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rendered {
    /// The output items, rendered against the request's context and finished (ids filled).
    pub(crate) output: Vec<Value>,
    /// The response's `status`.
    pub(crate) status: String,
    /// Characters per delta when streamed, if the rule set it.
    pub(crate) delta_chars: Option<usize>,
    /// Whether the text is streamed in `response.output_text.delta` events.
    pub(crate) text_deltas: bool,
}

impl Reply {
    /// This reply for a request whose context is `context`; a scripted error as `Err`.
    pub(crate) fn render_for(self, context: &[Item]) -> Result<Rendered, ErrorReply> {
        let (items, status, delta_chars, text_deltas) = match self {
            Reply::Error { error } => return Err(error.rendered(context)),
            Reply::Items {
                items,
                status,
                delta_chars,
                text_deltas,
            } => (
                items.iter().map(|item| render(item, context)).collect(),
                status,
                delta_chars,
                text_deltas,
            ),
            // Rendered before it is encoded: a `{{last_user}}` holding quotes or line
            // breaks is escaped as JSON, not pasted into the encoded text.
            Reply::Json { json } => (
                vec![assistant_message(&render(&json, context).to_string())],
                completed(),
                None,
                true,
            ),
            Reply::Echo { .. } => (echo_items(context), completed(), None, true),
        };
        let output = items.iter().map(crate::respond::finish_item).collect();
        Ok(Rendered {
            output,
            status,
            delta_chars,
            text_deltas,
        })
    }
}

/// Headers an error reply may not script, lower-case: they frame the reply or manage the
/// connection, which the server does; with one the server dropped the connection instead
/// of answering.
pub const FRAMING_HEADERS: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
    "host",
];

/// An HTTP error reply: status, extra headers and the `{"error": {...}}` body fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    /// The HTTP status.
    pub status: u16,
    /// Extra response headers (e.g. `retry-after`, `x-should-retry`).
    #[serde(default)]
    pub headers: Map<String, Value>,
    /// The error body's `message`.
    pub message: String,
    /// The error body's `type`; derived from the status when absent.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// The error body's `code`.
    #[serde(default)]
    pub code: Option<String>,
    /// The error body's `param`.
    #[serde(default)]
    pub param: Option<String>,
}

impl ErrorReply {
    /// Why this reply cannot be sent, if it cannot: its status must be an HTTP error
    /// (400-599), its header names and values valid in HTTP, and none of them one of
    /// [`FRAMING_HEADERS`] (the server sets those; a scripted one broke the reply).
    pub fn check(&self) -> Result<(), String> {
        if !(400..=599).contains(&self.status) {
            return Err(format!(
                "reply.error.status must be an HTTP error status (400-599), not {}",
                self.status
            ));
        }
        for (name, value) in self.header_pairs() {
            if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!(
                    "reply.error.headers: `{name}` is not a valid header name"
                ));
            }
            if FRAMING_HEADERS.contains(&name.as_str()) {
                return Err(format!(
                    "reply.error.headers: `{name}` cannot be scripted (the server sets how \
                     a reply is framed and its connection)"
                ));
            }
            if axum::http::HeaderValue::from_str(&value).is_err() {
                return Err(format!(
                    "reply.error.headers: the value of `{name}` is not a valid header value"
                ));
            }
        }
        Ok(())
    }

    /// This reply for a request whose context is `context`: `{{last_user}}` and
    /// `{{outputs}}` in its message replaced, as in a reply's items.
    pub(crate) fn rendered(mut self, context: &[Item]) -> Self {
        let message = Value::String(std::mem::take(&mut self.message));
        self.message = render(&message, context)
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self
    }

    /// The headers as sent: names lower-case, a value that is not a string as its JSON.
    pub(crate) fn header_pairs(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.headers.iter().map(|(k, v)| {
            (
                k.to_lowercase(),
                v.as_str().map_or_else(|| v.to_string(), str::to_owned),
            )
        })
    }
}

/// A stream fault, applied after `after_events` events were sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// How many events are sent before the fault.
    pub after_events: usize,
    /// What goes wrong.
    pub kind: FaultKind,
    /// For `gate`: the name the test opens with `MockServer::open_gate`.
    #[serde(default)]
    pub gate: Option<String>,
    /// For `error_event`: `nested` (what the API sends, default) or `flat` (what the SDK types).
    #[serde(default)]
    pub shape: Option<String>,
    /// For `keep_alive`: milliseconds between two keep-alives (default 100, at least 1).
    #[serde(default)]
    pub every_ms: Option<u64>,
}

impl Fault {
    /// How often a `keep_alive` fault sends one.
    pub fn keep_alive_every(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.every_ms.unwrap_or(100).max(1))
    }
}

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// End the body in the middle of the next event.
    Cut,
    /// Send nothing more until the client goes away (past any idle timeout).
    Stall,
    /// Send no event, only keep-alives (an SSE comment line over HTTP, a ping over
    /// WebSocket) every `every_ms`, until the client goes away: a proxy holding the
    /// connection open in front of a model that stopped answering.
    KeepAlive,
    /// Wait until the named gate is opened, then continue.
    Gate,
    /// Send an `error` event and end the stream.
    ErrorEvent,
}

/// What a rule sees of a request.
#[derive(Debug)]
pub struct RequestView<'a> {
    /// The endpoint the request went to.
    pub endpoint: ScriptEndpoint,
    /// The raw body, for `body_contains`.
    pub body_text: &'a str,
    /// The whole conversation: the previous response's context plus this input.
    pub items: &'a [Item],
    /// Whether `stream: true` was asked for.
    pub stream: bool,
    /// Whether `previous_response_id` is set.
    pub previous_response: bool,
    /// The request's `text.format.type` (`text` when it sends none).
    pub text_format: &'a str,
}

impl Match {
    /// Whether every condition given holds for `req`.
    pub fn matches(&self, req: &RequestView<'_>) -> bool {
        let endpoint_ok = match self.endpoint {
            ScriptEndpoint::Any => true,
            e => e == req.endpoint,
        };
        endpoint_ok
            && self
                .last_user_contains
                .as_ref()
                .is_none_or(|t| last_user_text(req.items).is_some_and(|u| u.contains(t.as_str())))
            && self
                .body_contains
                .as_ref()
                .is_none_or(|t| req.body_text.contains(t.as_str()))
            && self
                .has_tool_outputs
                .is_none_or(|want| want != tool_outputs(req.items).is_empty())
            && self
                .tool_outputs
                .is_none_or(|n| tool_output_count(req.items) == n)
            && self
                .tool_outputs_below
                .is_none_or(|n| tool_output_count(req.items) < n)
            && self
                .tool_outputs_total
                .is_none_or(|n| tool_output_total(req.items) == n)
            && self
                .input_has_type
                .as_ref()
                .is_none_or(|t| req.items.iter().any(|i| item_type(i) == Some(t.as_str())))
            && self.stream.is_none_or(|s| s == req.stream)
            && self
                .previous_response
                .is_none_or(|p| p == req.previous_response)
            && self
                .text_format
                .as_ref()
                .is_none_or(|t| t == req.text_format)
    }
}

/// The wire type of `item`: `message` also for an "easy" message written without a
/// `type` (a bare string input is one), which the API reads as a message.
fn item_type(item: &Item) -> Option<&str> {
    match item {
        Item::Message(_) => Some("message"),
        other => other.type_name(),
    }
}

/// The text of the last user message in `items`.
pub fn last_user_text(items: &[Item]) -> Option<String> {
    items.iter().rev().find_map(|item| match item {
        Item::Message(m) if m.role == "user" => Some(m.text()),
        _ => None,
    })
}

/// How many `function_call_output` items `items` holds.
pub fn tool_output_count(items: &[Item]) -> usize {
    items
        .iter()
        .filter(|item| matches!(item, Item::FunctionCallOutput(_)))
        .count()
}

/// How many tool outputs `items` holds, counting those each emulator compaction in it
/// stands for (a compaction of a compacted history counts the earlier one's too).
pub fn tool_output_total(items: &[Item]) -> usize {
    items
        .iter()
        .map(|item| match item {
            Item::FunctionCallOutput(_) => 1,
            Item::Compaction(c) => crate::sealed::outputs(&c.encrypted_content),
            _ => 0,
        })
        .fold(0, usize::saturating_add)
}

/// The tool outputs in `items`, as text.
pub fn tool_outputs(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| match item {
            Item::FunctionCallOutput(o) => Some(o.text()),
            _ => None,
        })
        .collect()
}

/// Replaces `{{last_user}}` and `{{outputs}}` in every string of `value`.
pub fn render(value: &Value, items: &[Item]) -> Value {
    let last_user = last_user_text(items).unwrap_or_default();
    let outputs = tool_outputs(items).join("; ");
    fn walk(v: &Value, last_user: &str, outputs: &str) -> Value {
        match v {
            Value::String(s) if s.contains("{{") => Value::String(
                s.replace("{{last_user}}", last_user)
                    .replace("{{outputs}}", outputs),
            ),
            Value::Array(a) => {
                Value::Array(a.iter().map(|x| walk(x, last_user, outputs)).collect())
            }
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| (k.clone(), walk(x, last_user, outputs)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    walk(value, &last_user, &outputs)
}

/// The default answer to any conversation: echo the last user input, or acknowledge outputs.
pub fn echo_items(items: &[Item]) -> Vec<Value> {
    let outputs = tool_outputs(items);
    let text = if matches!(items.last(), Some(Item::FunctionCallOutput(_))) {
        format!("Received tool output: {}", outputs.join("; "))
    } else {
        match last_user_text(items) {
            Some(text) => format!("Echo: {text}"),
            None => "Echo: (no user input)".to_owned(),
        }
    };
    vec![assistant_message(&text)]
}

/// An assistant message of `text`.
fn assistant_message(text: &str) -> Value {
    serde_json::json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
}

/// Items of a request input (a bare string is one user message).
pub fn input_items(input: Option<&Input>) -> Vec<Item> {
    match input {
        Some(input) => input.to_items(),
        None => Vec::<Item>::new(),
    }
}

/// A user message item, for tests and defaults.
pub fn user(text: &str) -> Item {
    Item::Message(MessageItem::user(text))
}
