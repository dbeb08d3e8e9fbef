//! The emulator's shared state: the script and its rule counters, stored responses, issued
//! opaque items, recorded requests and gates. Locks are held briefly and never across an
//! await.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use agent_responses::types::Item;
use axum::http::{HeaderMap, Method};
use serde_json::Value;
use tokio::sync::Notify;

use crate::bounded::{Recent, RecentMap};
use crate::chain::Chain;
use crate::script::{RequestView, Rule, Script};
use crate::validate::{ApiFailure, Issued, previous_not_found};

/// One request as the emulator received it (the bearer key is redacted).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// `GET` or `POST`.
    pub method: String,
    /// The request path, e.g. `/v1/responses`.
    pub path: String,
    /// Every header in arrival order (names lower-case; credentials `<redacted>`).
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Value::Null` when it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// A header's value (names are lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A request as kept: the body stays raw until someone asks (parsing every body on the
/// hot path cost a quarter of the emulator's CPU under load).
#[derive(Clone)]
pub(crate) struct Received {
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Box<[u8]>,
}

impl crate::bounded::Weigh for Received {
    fn weight(&self) -> usize {
        let headers: usize = self.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
        self.body.len() + self.path.len() + headers
    }
}

impl Received {
    /// The request as callers see it, body parsed (`Value::Null` when it is not JSON).
    pub(crate) fn to_recorded(&self) -> RecordedRequest {
        RecordedRequest {
            method: self.method.to_string(),
            path: self.path.clone(),
            headers: self.headers.clone(),
            body: serde_json::from_slice(&self.body).unwrap_or(Value::Null),
        }
    }
}

/// Request headers that carry credentials; recorded as `<redacted>`.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
];

/// A stored response and the conversation it ends (what `previous_response_id` continues),
/// sharing the conversation it continued ([`Chain`]) instead of copying it.
pub(super) struct Stored {
    pub(super) response: Value,
    pub(super) context: Arc<Chain>,
}

impl crate::bounded::Weigh for Stored {
    fn weight(&self) -> usize {
        crate::bounded::json_len(&self.response) + self.context.own_bytes()
    }
}

/// Shared emulator state.
pub(crate) struct AppState {
    pub api_key: Option<String>,
    pub script: Script,
    /// How often each script rule has answered (index = rule).
    used: Mutex<Vec<u32>>,
    /// `store: true` responses, the most recent first-in-first-out, bounded by count and
    /// estimated bytes.
    pub(super) store: Mutex<RecentMap<String, Stored>>,
    /// Opaque items the emulator handed out, so forged ones can be refused.
    pub(super) issued: Mutex<Issued>,
    pub recorded: Mutex<Recent<Received>>,
    gates: Mutex<HashMap<String, Arc<Notify>>>,
    /// WebSocket mode settings and state shared by its connections.
    pub ws: crate::ws::WsShared,
    /// Characters per streamed delta when a rule does not say.
    pub delta_chars: usize,
    /// How long a reply takes when neither its rule nor the script says.
    pub latency: crate::Latency,
}

/// Locks `m`, taking the data of a poisoned lock as it is (no handler panics while holding
/// one, so the data is whole).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl AppState {
    pub(crate) fn new(script: Script, api_key: Option<String>) -> Self {
        let rules = script.rules.len();
        let issued = Issued {
            compactions: scripted_compactions(&script),
            ..Issued::default()
        };
        Self {
            api_key,
            script,
            used: Mutex::new(vec![0; rules]),
            store: Mutex::new(RecentMap::default()),
            issued: Mutex::new(issued),
            recorded: Mutex::new(Recent::default()),
            gates: Mutex::new(HashMap::new()),
            delta_chars: 8,
            latency: crate::Latency::default(),
            ws: crate::ws::WsShared::default(),
        }
    }

    /// The latency of a reply by `rule` (`None`: no rule matched): the rule's, else the
    /// script's, else the server's.
    pub(crate) fn latency_of(&self, rule: Option<&Rule>) -> crate::Latency {
        rule.and_then(|r| r.latency)
            .or(self.script.latency)
            .unwrap_or(self.latency)
    }

    pub(crate) fn gate(&self, name: &str) -> Arc<Notify> {
        Arc::clone(lock(&self.gates).entry(name.to_owned()).or_default())
    }

    /// Keeps a request for inspection (the most recent
    /// [`MAX_RECORDED`](crate::bounded::MAX_RECORDED), up to
    /// [`MAX_RECORDED_BYTES`](crate::bounded::MAX_RECORDED_BYTES)); called once the request passed the
    /// key check. Credentials in any of [`SECRET_HEADERS`] are redacted.
    pub(super) fn record(&self, method: &Method, path: &str, headers: &HeaderMap, body: &[u8]) {
        let headers = headers
            .iter()
            .map(|(k, v)| {
                let value = if SECRET_HEADERS.contains(&k.as_str()) {
                    "<redacted>".to_owned()
                } else {
                    String::from_utf8_lossy(v.as_bytes()).into_owned()
                };
                (k.as_str().to_owned(), value)
            })
            .collect();
        lock(&self.recorded).push(Received {
            method: method.clone(),
            path: path.to_owned(),
            headers,
            body: body.into(),
        });
    }

    /// The first rule that matches and is not used up; marks it used. Used by HTTP and
    /// WebSocket requests alike, which share the rules' counters.
    pub(crate) fn pick(&self, view: &RequestView<'_>) -> Option<Rule> {
        let mut used = lock(&self.used);
        for (i, rule) in self.script.rules.iter().enumerate() {
            let available = rule
                .times
                .is_none_or(|t| used.get(i).copied().unwrap_or(0) < t);
            if available && rule.when.matches(view) {
                if let Some(n) = used.get_mut(i) {
                    *n += 1;
                }
                return Some(rule.clone());
            }
        }
        None
    }

    /// Checks `context` as the API does, opaque items against what this emulator issued
    /// (over HTTP or WebSocket).
    pub(crate) fn check(&self, context: &[Item]) -> Result<(), ApiFailure> {
        crate::validate::check_context(context, &lock(&self.issued))
    }

    /// Remembers the opaque items of `output` (program fingerprints, compaction contents),
    /// so that they are accepted when they come back whole and refused when forged.
    pub(crate) fn remember_issued(&self, output: &[Item]) {
        let mut issued = lock(&self.issued);
        for item in output {
            match item {
                Item::Program(p) => {
                    issued
                        .programs
                        .insert(p.call_id.clone(), p.fingerprint.clone());
                }
                Item::Compaction(c) => {
                    issued.compactions.insert(c.encrypted_content.clone());
                }
                _ => {}
            }
        }
    }

    /// The stored conversation `previous` ends (`None`: none) and its items, to append to;
    /// store the result with [`Chain::after`] on that conversation.
    pub(super) fn context_of(
        &self,
        previous: Option<&str>,
    ) -> Result<(Option<Arc<Chain>>, Vec<Item>), ApiFailure> {
        let Some(id) = previous else {
            return Ok((None, Vec::new()));
        };
        let chain = lock(&self.store)
            .get(id)
            .map(|s| Arc::clone(&s.context))
            .ok_or_else(|| previous_not_found(id))?;
        let items = chain.to_vec();
        Ok((Some(chain), items))
    }
}

/// The compaction contents a script's replies hold as written: issued by every emulator
/// process that runs the script, so a run compacted by one `--mock` process (or one test's
/// emulator) is resumed by another, as the content `POST /responses/compact` makes
/// ([`crate::sealed`]) already is. Content a request renders from its input is not known
/// up front and stays this process's.
fn scripted_compactions(script: &Script) -> std::collections::HashSet<String> {
    script
        .rules
        .iter()
        .filter_map(|rule| match &rule.reply {
            crate::script::Reply::Items { items, .. } => Some(items),
            _ => None,
        })
        .flatten()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("compaction"))
        .filter_map(|item| item.get("encrypted_content").and_then(Value::as_str))
        .filter(|content| !content.contains("{{"))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A compaction item a script writes out verifies in a process that never answered
    /// with it (a resumed run's new emulator); one the script does not hold still does not.
    #[test]
    fn a_scripted_compaction_verifies_in_any_process_running_the_script() {
        let script = Script::from_json_str(
            r#"{"rules": [{"reply": {"items": [
                {"type": "compaction", "encrypted_content": "cmp-scripted"}]}}]}"#,
        )
        .unwrap();
        let state = AppState::new(script, None);
        let item = |content: &str| -> Item {
            serde_json::from_value(json!({"type": "compaction", "encrypted_content": content}))
                .unwrap()
        };
        assert!(state.check(&[item("cmp-scripted")]).is_ok());
        assert!(state.check(&[item("cmp-forged")]).is_err());
    }

    /// A conversation continued over HTTP stores each turn's own items and shares the rest:
    /// 200 chained turns of 10 KB are ~4 MB stored, not 200 growing copies (~400 MB).
    #[test]
    fn a_chained_response_shares_the_conversation_it_continues() {
        let state = AppState::new(Script::default(), None);
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer k".parse().unwrap());
        let mut previous: Option<String> = None;
        let mut ids = Vec::new();
        for n in 0..5 {
            let mut body = json!({"model": "m", "input": format!("turn {n}")});
            if let Some(id) = &previous {
                body["previous_response_id"] = json!(id);
            }
            let created =
                super::super::create::create_inner(&state, &headers, body.to_string().as_bytes())
                    .unwrap();
            let super::super::create::Created::Json { response, .. } = created else {
                panic!("not a JSON reply");
            };
            let id = response["id"].as_str().unwrap().to_owned();
            ids.push(id.clone());
            previous = Some(id);
        }
        let store = lock(&state.store);
        let chain = |id: &str| Arc::clone(&store.get(id).unwrap().context);
        for pair in ids.windows(2) {
            let (parent, child) = (chain(&pair[0]), chain(&pair[1]));
            assert!(Arc::ptr_eq(child.parent().unwrap(), &parent));
            // Its own input and its own output, nothing of the turns before.
            assert_eq!(child.own().len(), 2);
        }
        let last = chain(&ids[4]).to_vec();
        assert_eq!(last.len(), 10);
        assert_eq!(
            crate::script::last_user_text(&last).as_deref(),
            Some("turn 4")
        );
    }
}
