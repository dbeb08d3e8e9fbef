//! Entry points for the fuzz targets (`tests/all/fuzz_mcp.rs`): the parts of the MCP tool
//! path that read what a server sends, reachable without a server. Not part of the API.

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
