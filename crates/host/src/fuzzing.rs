//! Entry points for the fuzz targets: the parts of the MCP tool path that read what a
//! server sends, reachable without a server (`tests/all/fuzz_mcp.rs`), and what a driving
//! host makes of a run's journal without driving it (`tests/all/fuzz_fold.rs`). Not part
//! of the API.

use serde_json::Value;

use crate::tools::Policy;

/// What the model would read of a `tools/call` result given as JSON text; `None` when the
/// text is not a result (the client refuses it before our code sees it).
pub fn mcp_result_text(json: &str) -> Option<String> {
    let result: rmcp::model::CallToolResult = serde_json::from_str(json).ok()?;
    Some(crate::tools::mcp::result_text(&result))
}

/// How a `tools/list` entry given as JSON text of server `server` is offered: its exposed
/// name, its policy and whether it is retry-safe; `None` when the text is not a tool.
pub fn mcp_tool_offer(server: &str, json: &str) -> Option<(String, Policy, bool, Value)> {
    let tool: rmcp::model::Tool = serde_json::from_str(json).ok()?;
    Some(crate::tools::mcp::offer(server, &tool))
}

/// The fold a resume makes of `events`, a run's thread in journal order (what
/// `load_for_resume` does on a journal): from the checkpoint of the latest
/// `context.compacted` event when it carries one this version reads, then the events after
/// it; otherwise a driving host's fold of all of them.
pub fn resume_fold(run_id: &str, events: &[agent_journal::Event]) -> crate::run::RunState {
    use crate::run::{RunState, kinds};
    let latest = events
        .iter()
        .rposition(|e| &*e.kind == kinds::CONTEXT_COMPACTED);
    let resumed = latest.and_then(|i| {
        let (state, _) = RunState::from_checkpoint(run_id, events.get(i)?)?;
        Some((state, i + 1))
    });
    let (mut state, rest) = resumed.unwrap_or_else(|| (RunState::for_driving(run_id), 0));
    for event in events.get(rest..).unwrap_or_default() {
        state.apply(event);
    }
    state
}

/// The next model request of `state` as a driving host writes it.
#[derive(Debug)]
pub struct NextRequest {
    /// The sha256 the driver records before it encodes the body.
    pub sha256: String,
    /// The length it records with it.
    pub len: usize,
    /// The body, encoded into a buffer of `len` bytes.
    pub body: Vec<u8>,
    /// The input items a compaction before it would send, or why they cannot be written.
    pub compaction_items: Result<usize, String>,
}

/// The next request of `state` (`None` without a spec), or why it cannot be written.
pub fn next_request(state: &crate::run::RunState) -> Option<Result<NextRequest, String>> {
    use crate::run::step_request;
    let spec = state.spec()?;
    let written = step_request::request_digest(state, spec, true).and_then(|digest| {
        let body = step_request::encode_sized(state, spec, true, digest.len)?;
        Ok(NextRequest {
            sha256: digest.sha256,
            len: digest.len,
            body,
            compaction_items: step_request::compaction_input(state, spec).map(|i| i.len()),
        })
    });
    Some(written)
}

/// The checkpoint a driving host would write into a compaction before `before_step` of
/// `state` (with an empty runtime checkpoint), or `None` when it would take none.
pub fn checkpoint(state: &crate::run::RunState, before_step: u64) -> Option<Value> {
    crate::run::checkpoint::take(
        state,
        before_step,
        Some(agent_runtime::ThreadCheckpoint::default()),
    )
}

/// The summary the runs table keeps of `state` (what `runs list` shows).
pub fn table_row(state: &crate::run::RunState) -> Value {
    crate::run::table::summary(state)
}
