//! Listing a server's tools: every page of `tools/list`, bounded, read leniently.
//!
//! Invariants:
//! - Listing ends: the caller bounds it in time ([`ListError::TimedOut`]), it stops after
//!   [`MAX_PAGES`] pages and at the first `nextCursor` the server repeats, so a server
//!   that pages forever costs neither unbounded time nor unbounded memory.
//! - A listed tool that rmcp cannot read (no `inputSchema`, a wrong type) is skipped with
//!   a warning naming it; the server's other tools are kept.
//! - A server's error text in a [`ListError`] is cut to
//!   [`RESULT_CAP`](crate::tools::result_cap::RESULT_CAP) bytes.

use std::collections::HashSet;
use std::time::Duration;

use rmcp::model::{
    ClientRequest, CustomResult, ListToolsRequest, PaginatedRequestParams, ServerResult,
    Tool as McpToolInfo,
};
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::Value;

use crate::tools::result_cap::cap;

/// Pages of `tools/list` read at most from one server.
pub(crate) const MAX_PAGES: usize = 100;

/// Why a server's tools could not be listed (the text completes "MCP server `S`: ...").
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListError {
    /// The server could not be started (or initialized).
    #[error("{0}")]
    Start(String),
    /// The listing took longer than the server's `tool_timeout_sec`; the server was stopped.
    #[error(
        "it did not list its tools within {} s (its tool_timeout_sec): `tools/list` was \
         answered {pages} time(s) before that; the server was stopped",
        limit.as_secs_f64()
    )]
    TimedOut {
        /// The time limit.
        limit: Duration,
        /// Pages answered in time.
        pages: usize,
    },
    /// The server sent a `nextCursor` it had sent before: it would page forever.
    #[error(
        "its `tools/list` page {page} repeated an earlier `nextCursor`; listing stopped \
         (it would never end)"
    )]
    RepeatedCursor {
        /// The page (from 1) that repeated a cursor.
        page: usize,
    },
    /// The server paged past [`MAX_PAGES`].
    #[error(
        "its `tools/list` had more than {MAX_PAGES} pages (`nextCursor` never ended); listing stopped"
    )]
    TooManyPages,
    /// An answer to `tools/list` that is not a list of tools.
    #[error("it did not list its tools: its answer to `tools/list` has no `tools` array")]
    NotAList,
    /// The request failed (a JSON-RPC error, or the connection broke).
    #[error("it did not list its tools: {0}")]
    Failed(String),
}

impl From<ServiceError> for ListError {
    fn from(err: ServiceError) -> ListError {
        ListError::Failed(cap(err.to_string()))
    }
}

/// Every tool `server` lists through `peer`, page after page; `pages` counts the pages
/// answered so far (for the caller's timeout message).
pub(crate) async fn list_all(
    peer: &Peer<RoleClient>,
    server: &str,
    pages: &mut usize,
) -> Result<Vec<McpToolInfo>, ListError> {
    let mut tools = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor = None;
    loop {
        if *pages >= MAX_PAGES {
            return Err(ListError::TooManyPages);
        }
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let answer = peer
            .send_request(ClientRequest::ListToolsRequest(
                ListToolsRequest::with_param(params),
            ))
            .await?;
        *pages += 1;
        let (page, next) = read_page(answer, server)?;
        tools.extend(page);
        match next {
            None => return Ok(tools),
            Some(next) if !seen.insert(next.clone()) => {
                return Err(ListError::RepeatedCursor { page: *pages });
            }
            Some(next) => cursor = Some(next),
        }
    }
}

/// The tools of one answer to `tools/list`, and its `nextCursor`. rmcp reads the answer as
/// a whole; one it cannot (a tool it rejects) arrives as a [`CustomResult`] and is read
/// here tool by tool.
fn read_page(
    answer: ServerResult,
    server: &str,
) -> Result<(Vec<McpToolInfo>, Option<String>), ListError> {
    match answer {
        ServerResult::ListToolsResult(page) => Ok((page.tools, page.next_cursor)),
        ServerResult::CustomResult(CustomResult(value)) => lenient_page(&value, server),
        _ => Err(ListError::NotAList),
    }
}

fn lenient_page(
    value: &Value,
    server: &str,
) -> Result<(Vec<McpToolInfo>, Option<String>), ListError> {
    let Some(listed) = value.get("tools").and_then(Value::as_array) else {
        return Err(ListError::NotAList);
    };
    let mut tools = Vec::with_capacity(listed.len());
    for item in listed {
        match serde_json::from_value::<McpToolInfo>(item.clone()) {
            Ok(tool) => tools.push(tool),
            Err(err) => {
                let mut name = match item.get("name") {
                    Some(Value::String(name)) => name.clone(),
                    _ => "(unnamed)".into(),
                };
                name = cap_name(name);
                tracing::warn!(target: "agent_host::mcp", server = %server, tool = %name, error = %err, "a listed tool is malformed; skipped");
            }
        }
    }
    let next = value
        .get("nextCursor")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok((tools, next))
}

/// A tool name fit for a log line (a server may send any string).
fn cap_name(mut name: String) -> String {
    if crate::tools::result_cap::truncate(&mut name, 200).is_some() {
        name.push('…');
    }
    name
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn page(v: Value) -> Result<(Vec<McpToolInfo>, Option<String>), ListError> {
        read_page(serde_json::from_value(v).unwrap(), "s")
    }

    #[test]
    fn a_tool_without_schema_is_skipped_not_the_list() {
        let (tools, next) = page(serde_json::json!({"tools": [
            {"name": "bad"},
            {"name": "good", "inputSchema": {"type": "object"}}],
            "nextCursor": "c2"}))
        .unwrap();
        let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["good"]);
        assert_eq!(next.as_deref(), Some("c2"));
        let (tools, next) =
            page(serde_json::json!({"tools": [{"name": "ok", "inputSchema": {}}]})).unwrap();
        assert_eq!((tools.len(), next), (1, None));
        assert!(matches!(
            page(serde_json::json!({"things": []})),
            Err(ListError::NotAList)
        ));
    }
}
