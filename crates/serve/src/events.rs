//! A run's journal events as the API sends them: `{seq, kind, at, lines}`, `lines` being the
//! `--json` lines of `docs/cli-json.md` the event gives.
//!
//! The converter is stateful (an item's later lines need its earlier ones: a call's tool
//! and arguments, the run's sandbox mode), so a reader that starts after `seq` first feeds
//! it the events up to `seq` and drops their lines.

use agent_host::run::events::RunEvent;
use agent_host::run::exec_json::ExecJson;
use agent_journal::{Event, Journal};
use futures::StreamExt as _;
use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;

/// One journal event, as the API sends it.
#[derive(Debug, Clone, Serialize)]
pub struct ApiEvent {
    /// Its journal position (the SSE `id`).
    pub seq: i64,
    /// The journal event kind.
    pub kind: String,
    /// When it was appended (Unix ms).
    pub at: i64,
    /// The `--json` lines it gives (possibly none).
    pub lines: Vec<Value>,
    /// What a console shows of an event that gives no line: a step's usage
    /// (`model.completed`: `step`, `usage`), who took the run over (`run.resumed`: `owner`,
    /// `epoch`, `budgets`), a sandbox change or a requeue (their payloads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

/// The `detail` of `event`, for the kinds that have one (read through the host's typed
/// events; a payload the host cannot read has none).
fn detail(event: &Event) -> Option<Value> {
    let mut out = serde_json::Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value.filter(|v| !v.is_null()) {
            out.insert(key.to_owned(), value);
        }
    };
    match RunEvent::parse(&event.kind, &event.payload).ok()?? {
        RunEvent::ModelCompleted(done) => {
            put("step", Some(Value::from(done.step)));
            put("usage", Some(done.usage.clone()));
        }
        RunEvent::Resumed(resumed) => {
            put("owner", to_value(&resumed.owner));
            put("epoch", resumed.epoch.map(Value::from));
            put("budgets", to_value(&resumed.budgets));
        }
        RunEvent::SandboxChanged(changed) => return to_value(&changed),
        RunEvent::Requeued(requeued) => return to_value(&requeued),
        _ => return None,
    }
    Some(Value::Object(out))
}

fn to_value(value: &impl Serialize) -> Option<Value> {
    serde_json::to_value(value).ok()
}

/// Converts the events of one run in order.
pub(crate) struct Converter(ExecJson);

impl Converter {
    /// A converter of run `id` that has seen every event up to `after`.
    pub(crate) async fn primed(
        journal: &Journal,
        id: &str,
        after: i64,
    ) -> Result<Converter, ApiError> {
        let mut conv = ExecJson::new(id);
        if after > 0 {
            let thread = agent_host::run::kinds::thread_of(id);
            let mut earlier = journal.replay_stream(&thread, 0);
            while let Some(event) = earlier.next().await {
                let event = event.map_err(|err| ApiError::internal(err.to_string()))?;
                if event.seq > after {
                    break;
                }
                conv.convert(&event);
            }
        }
        Ok(Converter(conv))
    }

    /// The API's shape of `event`.
    pub(crate) fn convert(&mut self, event: &Event) -> ApiEvent {
        let lines = self
            .0
            .convert(event)
            .into_iter()
            .filter_map(|line| serde_json::to_value(line).ok())
            .collect();
        ApiEvent {
            seq: event.seq,
            kind: event.kind.to_string(),
            at: event.at,
            lines,
            detail: detail(event),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn event(kind: &str, payload: Value) -> Event {
        Event {
            seq: 1,
            thread: Arc::from("run:r1"),
            kind: Arc::from(kind),
            payload,
            at: 0,
            dedup_key: None,
            epoch: None,
        }
    }

    #[test]
    fn a_steps_usage_and_a_takeover_have_a_detail_and_other_kinds_none() {
        let usage = json!({"input_tokens": 5, "output_tokens": 3});
        let done = event(
            "model.completed",
            json!({"step": 2, "attempt": 1, "response_id": "resp_1", "status": "completed",
                   "usage": usage, "output": []}),
        );
        assert_eq!(detail(&done), Some(json!({"step": 2, "usage": usage})));
        let resumed = event(
            "run.resumed",
            json!({"owner": {"host": "h", "pid": 7}, "after_seq": 3, "epoch": 4}),
        );
        let shown = detail(&resumed).unwrap();
        assert_eq!(shown["owner"]["pid"], 7);
        assert_eq!(shown["epoch"], 4);
        assert!(shown.get("budgets").is_none(), "{shown}");
        assert_eq!(
            detail(&event("steer.requested", json!({"text": "x"}))),
            None
        );
        // A payload the host cannot read gives no detail (and no error).
        assert_eq!(
            detail(&event("model.completed", json!({"step": "x"}))),
            None
        );
    }
}
