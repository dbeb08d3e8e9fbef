//! A run's journal events as the API sends them: `{seq, kind, at, lines}`, `lines` being the
//! `--json` lines of `docs/cli-json.md` the event gives.
//!
//! The converter is stateful (an item's later lines need its earlier ones: a call's tool
//! and arguments, the run's sandbox mode), so a reader that starts after `seq` first feeds
//! it the events up to `seq` and drops their lines, or goes on with a converter an earlier
//! reader left at `seq` or before ([`Converters`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

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

/// Converters that readers of runs' events left behind, each at the last event it
/// converted, so that the next page (`after` = the previous page's `last_seq`) or a stream
/// resumed from `Last-Event-ID` goes on from there instead of converting the run again
/// from its first event: paging a run costs about the run, not its square.
///
/// Invariants:
/// - A kept converter of run `run` at `seen` has converted exactly the run's events up to
///   `seen`, in order: the journal's events up to a seq never change, so it converts the
///   later ones as one primed from the first event would (the pages are the same bytes).
/// - At most [`Converters::CAPACITY`] are kept, the least recently left going first; a
///   converter holds the run's tool names and call arguments, not its events.
/// - A converter is taken out while it is used: two readers never share one.
#[derive(Default)]
pub(crate) struct Converters {
    kept: Mutex<VecDeque<Kept>>,
    /// Events read to prime converters, in all (what tests bound).
    primed: AtomicU64,
}

struct Kept {
    run: String,
    seen: i64,
    conv: ExecJson,
}

impl Converters {
    /// Most converters kept.
    pub(crate) const CAPACITY: usize = 32;

    /// The kept converter of `run` furthest on that has seen nothing after `after`, taken
    /// out.
    fn take(&self, run: &str, after: i64) -> Option<(i64, ExecJson)> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let at = kept
            .iter()
            .enumerate()
            .filter(|(_, k)| k.run == run && k.seen <= after)
            .max_by_key(|(_, k)| k.seen)
            .map(|(at, _)| at)?;
        kept.remove(at).map(|k| (k.seen, k.conv))
    }

    fn keep(&self, run: String, seen: i64, conv: ExecJson) {
        if seen <= 0 {
            return; // a fresh converter costs nothing to make
        }
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.retain(|k| !(k.run == run && k.seen == seen));
        if kept.len() >= Self::CAPACITY {
            kept.pop_front();
        }
        kept.push_back(Kept { run, seen, conv });
    }

    /// Events read to prime converters so far.
    #[cfg(test)]
    pub(crate) fn primed_events(&self) -> u64 {
        self.primed.load(Ordering::Relaxed)
    }
}

/// Converts the events of one run in order; when dropped, it is left in its
/// [`Converters`] for the next reader.
pub(crate) struct Converter {
    conv: ExecJson,
    run: String,
    /// The seq of the last event converted (0: none).
    seen: i64,
    home: Arc<Converters>,
}

impl Drop for Converter {
    fn drop(&mut self) {
        let conv = std::mem::take(&mut self.conv);
        self.home
            .keep(std::mem::take(&mut self.run), self.seen, conv);
    }
}

impl Converter {
    /// A converter of run `id` that has seen every event up to `after`: one `home` kept,
    /// fed the events after it up to `after`, or a new one fed the run from its start.
    pub(crate) async fn primed(
        home: &Arc<Converters>,
        journal: &Journal,
        id: &str,
        after: i64,
    ) -> Result<Converter, ApiError> {
        let (seen, conv) = home
            .take(id, after)
            .unwrap_or_else(|| (0, ExecJson::new(id)));
        let mut conv = Converter {
            conv,
            run: id.to_string(),
            seen,
            home: Arc::clone(home),
        };
        if conv.seen < after {
            let thread = agent_host::run::kinds::thread_of(id);
            let mut earlier = journal.replay_stream(&thread, conv.seen);
            while let Some(event) = earlier.next().await {
                home.primed.fetch_add(1, Ordering::Relaxed);
                let event = event.map_err(|err| ApiError::internal(err.to_string()))?;
                if event.seq > after {
                    break;
                }
                conv.conv.convert(&event);
                conv.seen = event.seq;
            }
        }
        Ok(conv)
    }

    /// The API's shape of `event`.
    pub(crate) fn convert(&mut self, event: &Event) -> ApiEvent {
        self.seen = self.seen.max(event.seq);
        let lines = self
            .conv
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

/// The events of run `id` after `after`, at most `limit` of them, and whether more follow.
pub(crate) async fn page(
    home: &Arc<Converters>,
    journal: &Journal,
    id: &str,
    after: i64,
    limit: usize,
) -> Result<(Vec<ApiEvent>, bool), ApiError> {
    let mut conv = Converter::primed(home, journal, id, after).await?;
    let mut stream = journal.replay_stream(&agent_host::run::kinds::thread_of(id), after);
    let mut page = Vec::new();
    while let Some(event) = stream.next().await {
        let event = event.map_err(|e| ApiError::internal(e.to_string()))?;
        if page.len() == limit {
            return Ok((page, true));
        }
        page.push(conv.convert(&event));
    }
    Ok((page, false))
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod paging_tests;

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
