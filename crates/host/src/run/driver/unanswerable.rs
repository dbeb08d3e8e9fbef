//! Output items a run cannot answer: a call of a tool the run never offered, a
//! `function_call` without a `call_id`, or one whose `call_id` the journal's dedup keys
//! cannot carry. Refused before the response is journaled, since a recorded step is never
//! asked again.

use serde_json::Value;

use crate::run::events::FunctionCall;

/// The longest `call_id` the journal's dedup keys can carry in a run whose runtime turn is
/// `turn`: [`agent_journal::MAX_DEDUP_KEY_BYTES`] less the longest of the other bytes of
/// every key that holds one (the runtime's scheduling and terminal keys, which hold the
/// turn; the host's approval, refusal and sub-agent keys, with the largest round or index).
pub(super) fn max_call_id_bytes(turn: &str) -> usize {
    use crate::run::kinds as k;
    let overhead = [
        agent_runtime::events::scheduled_key(turn, "").len(),
        agent_runtime::events::done_key(turn, "").len(),
        k::approval_request_key("", u32::MAX).len(),
        k::approval_key("", u32::MAX).len(),
        k::refused_key("").len(),
        k::subagent_key("", u32::MAX).len(),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    agent_journal::MAX_DEDUP_KEY_BYTES.saturating_sub(overhead)
}

/// Why the output item `item` cannot be answered in a run whose runtime turn is `turn`,
/// whatever else the response holds: a call of a tool the run never offered (see
/// [`FunctionCall::unanswerable_type`]), a `function_call` without a `call_id`, or one
/// whose `call_id` is too long for the journal's keys ([`max_call_id_bytes`]).
pub(super) fn unanswerable(item: &Value, turn: &str) -> Option<String> {
    if let Some(kind) = FunctionCall::unanswerable_type(item) {
        return Some(format!(
            "the model made a `{kind}` item, a call of a tool the run does not offer (it offers function tools only), which cannot be answered"
        ));
    }
    let call = FunctionCall::of(item)?;
    if call.call_id.is_empty() {
        return Some("the model made a function call without a call_id".into());
    }
    let max = max_call_id_bytes(turn);
    if call.call_id.len() > max {
        return Some(format!(
            "the model made a function call whose call_id is {} bytes long, more than the {max} the journal can key a call by",
            call.call_id.len()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A turn id as the runtime makes them (a UUIDv7, simple form).
    const TURN: &str = "0190f3a1b2c37d4e8f901234567890ab";

    #[test]
    fn the_longest_call_id_fits_every_key_that_carries_it() {
        let max = max_call_id_bytes(TURN);
        assert_eq!(
            max,
            agent_journal::MAX_DEDUP_KEY_BYTES - "sched:".len() - TURN.len() - 1
        );
        let id = "x".repeat(max);
        for key in [
            agent_runtime::events::scheduled_key(TURN, &id),
            agent_runtime::events::done_key(TURN, &id),
            crate::run::kinds::approval_request_key(&id, u32::MAX),
            crate::run::kinds::approval_key(&id, u32::MAX),
            crate::run::kinds::refused_key(&id),
            crate::run::kinds::subagent_key(&id, u32::MAX),
        ] {
            assert!(key.len() <= agent_journal::MAX_DEDUP_KEY_BYTES, "{key}");
        }
        let call = |id: &str| json!({"type": "function_call", "call_id": id, "name": "t", "arguments": "{}"});
        assert_eq!(unanswerable(&call(&id), TURN), None);
        let too_long = unanswerable(&call(&format!("{id}y")), TURN).unwrap();
        assert!(
            too_long.contains(&format!("is {} bytes long", max + 1)),
            "{too_long}"
        );
        assert!(unanswerable(&call(""), TURN).is_some());
    }

    #[test]
    fn only_calls_of_kinds_never_offered_are_unanswerable() {
        for kind in [
            "custom_tool_call",
            "local_shell_call",
            "computer_call",
            "mcp_call",
            "shell_call",
            "apply_patch_call",
            "mcp_approval_request",
        ] {
            let problem = unanswerable(&json!({"type": kind, "call_id": "c1"}), TURN).unwrap();
            assert!(problem.contains(&format!("`{kind}`")), "{problem}");
        }
        for kind in [
            "message",
            "reasoning",
            "compaction",
            "program",
            "function_call_output",
        ] {
            assert_eq!(unanswerable(&json!({"type": kind}), TURN), None, "{kind}");
        }
        assert_eq!(unanswerable(&json!({"no": "type"}), TURN), None);
    }
}
