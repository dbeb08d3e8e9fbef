//! How much of its parent's token budget each child gets.
//!
//! Invariants:
//! - The children of every `spawn_agents` call one step made share, evenly, what the parent
//!   had left when that step ended: each gets `(max_tokens - used) / children`, where `used`
//!   is the parent's tokens less what the step's own children have been counted for, and
//!   `children` counts those of every valid `spawn_agents` call of the step. The calls of a
//!   step run concurrently, so each reserves its siblings' shares without waiting to see
//!   what they used: together they hand out at most the remainder.
//! - The share is read from the parent's journal alone, so a re-run of the call (a resume
//!   after a hold, an interrupt or a crash) computes the same one; only a resume that
//!   changed the parent's `--max-tokens` changes it, and then every child of the step gets
//!   its part of the new remainder.

use super::{SpawnRequest, SubagentLimits, TOOL_NAME};
use crate::run::RunState;

/// The token budget of each child of the parent's call `call_id`, which asks for `own`
/// children, under the parent's `max_tokens` (`limits` and `offered`: the parent's, which
/// tell a sibling call's valid request).
pub(crate) fn child_share(
    parent: &RunState,
    call_id: &str,
    own: usize,
    max_tokens: u64,
    limits: &SubagentLimits,
    offered: &[String],
) -> u64 {
    let step = parent
        .calls
        .iter()
        .find(|c| c.call_id == call_id)
        .map(|c| c.step);
    let siblings: Vec<&str> = parent
        .calls
        .iter()
        .filter(|c| c.name == TOOL_NAME && Some(c.step) == step)
        .map(|c| c.call_id.as_str())
        .collect();
    let asked: usize = parent
        .calls
        .iter()
        .filter(|c| siblings.contains(&c.call_id.as_str()))
        .map(|c| {
            serde_json::from_str(&c.arguments)
                .ok()
                .and_then(|args| SpawnRequest::read(&args, limits, offered).ok())
                .map_or(0, |request| request.agents.len())
        })
        .sum();
    let below: u64 = parent
        .children
        .iter()
        .filter(|c| siblings.contains(&c.call_id.as_str()) || c.call_id == call_id)
        .map(|c| c.usage.total_tokens)
        .fold(0, u64::saturating_add);
    let used = parent.usage.total_tokens.saturating_sub(below);
    let children = u64::try_from(asked.max(own).max(1)).unwrap_or(u64::MAX);
    max_tokens.saturating_sub(used) / children
}
