//! A run's journal events as the API sends them: `{seq, kind, at, lines}`, `lines` being the
//! `--json` lines of `docs/cli-json.md` the event gives.
//!
//! The converter is stateful (an item's later lines need its earlier ones: a call's tool
//! and arguments, the run's sandbox mode), so a reader that starts after `seq` first feeds
//! it the events up to `seq` and drops their lines.

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

/// The `detail` of `event`, for the kinds that have one.
fn detail(event: &Event) -> Option<Value> {
    let p = &event.payload;
    let pick = |keys: &[&str]| {
        let mut out = serde_json::Map::new();
        for key in keys {
            if let Some(v) = p.get(*key) {
                out.insert((*key).to_string(), v.clone());
            }
        }
        Some(Value::Object(out))
    };
    match &*event.kind {
        "model.completed" => pick(&["step", "usage"]),
        "run.resumed" => pick(&["owner", "epoch", "budgets"]),
        "run.sandbox_changed" | "run.requeued" => Some(p.clone()),
        _ => None,
    }
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
