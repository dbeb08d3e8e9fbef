//! History units: validation (call/output pairing), the stored form, and what reads return.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;

use crate::error::{ContextError, Result};
use crate::limits;

/// Item types that open a tool interaction, each with the type that must answer it.
/// Pairing is by `call_id` across the whole unit.
pub const CALL_OUTPUT_TYPES: &[(&str, &str)] = &[
    ("function_call", "function_call_output"),
    ("custom_tool_call", "custom_tool_call_output"),
    ("computer_call", "computer_call_output"),
    ("local_shell_call", "local_shell_call_output"),
];

/// A unit to append: an id unique within its thread and its Responses API items.
#[derive(Debug, Clone, PartialEq)]
pub struct NewUnit {
    /// The unit's id, unique within its thread.
    pub unit: String,
    /// Its Responses API items; tool calls and outputs must pair up by `call_id`.
    pub items: Vec<Value>,
}

/// A stored unit as returned by [`window`](crate::ContextStore::window) and
/// [`search`](crate::ContextStore::search).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unit {
    /// The caller's unit id.
    pub unit: String,
    /// 1-based position in the thread (append order).
    pub position: u64,
    /// The items, exactly as appended.
    pub items: Vec<Value>,
}

/// Pinned goal plus the most recent units, oldest first; units are never split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// The goal, always kept whole.
    pub pinned_goal: String,
    /// The most recent units, oldest first.
    pub recent_units: Vec<Unit>,
    /// Sum of the returned units' [`Unit`] sizes (bytes of their stored JSON).
    pub units_bytes: u64,
}

/// Result of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnitsAppended {
    /// Position of the (last) appended unit in its thread.
    pub position: u64,
}

/// A unit checked and serialised, ready for the database.
pub(crate) struct Prepared {
    pub unit: String,
    /// Compact JSON array of the items (what is stored and returned).
    pub body: String,
    /// `fold(body)`: the text the substring index covers.
    pub folded: String,
}

/// Case folding used for search, applied to both stored text and terms: each character's
/// Unicode lowercase mapping, character by character (no context rules), so a substring of
/// the text always folds to a substring of the folded text.
///
/// It is not Unicode case folding, and cannot become it without re-folding every stored
/// unit: the folded text is written with each unit (and indexed) when it is appended, so a
/// fold that changed would have old units miss terms folded the new way (a term-side rule
/// alone cannot help, since `ς` and `σ` are both found in stored text as themselves). What
/// differs from case folding, for users: the final sigma `ς` is its own letter (`Σ` and `σ`
/// match each other, not `ς`); `ß` does not match `ss`; `İ` folds to `i` followed by U+0307,
/// so `istanbul` does not find `İstanbul` (its `stanbul` does, and `İSTANBUL`).
///
/// Every appended unit's whole JSON body is folded on the append path, so this is written
/// for speed: ASCII (most of a body) is lowered byte by byte, and only other characters go
/// through the Unicode tables. The result is exactly
/// `text.chars().flat_map(char::to_lowercase).collect()` (stored folded text and the index
/// built from it depend on that; `tests::fold_is_the_unicode_lowercase_map` checks it).
pub fn fold(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        // The longest ASCII prefix is lowered in one pass (byte-wise: for ASCII,
        // `to_lowercase` is `to_ascii_lowercase`).
        let ascii = rest.bytes().take_while(u8::is_ascii).count();
        let (run, tail) = rest.split_at(ascii);
        if run.bytes().any(|b| b.is_ascii_uppercase()) {
            out.extend(run.bytes().map(|b| char::from(b.to_ascii_lowercase())));
        } else {
            out.push_str(run);
        }
        let mut chars = tail.chars();
        match chars.next() {
            Some(c) => out.extend(c.to_lowercase()),
            None => break,
        }
        rest = chars.as_str();
    }
    out
}

/// Check a unit against the limits and the pairing rule, and serialise it.
pub(crate) fn prepare(thread: &str, unit: &str, items: &[Value]) -> Result<Prepared> {
    limits::name("thread", thread)?;
    limits::name("unit id", unit)?;
    if items.is_empty() {
        return Err(ContextError::EmptyUnit { unit: unit.into() });
    }
    if items.len() > limits::MAX_ITEMS_PER_UNIT {
        return Err(ContextError::TooManyItems {
            unit: unit.into(),
            got: items.len(),
            max: limits::MAX_ITEMS_PER_UNIT,
        });
    }
    check_pairs(unit, items)?;
    // Before serialising: serialising recurses once per level, and a `Value` built in
    // memory can nest deep enough to overflow the stack. Deeper than this, the stored body
    // would not read back either (the thread's windows would fail). The body is one level
    // deeper than its items.
    const _: () = assert!(agent_schema::json::MAX_NESTING == 127);
    if let Some(index) = items
        .iter()
        .position(|item| nests_deeper(item, agent_schema::json::MAX_NESTING - 1))
    {
        // The reason is a literal (the error keeps `&'static str`); it names the limit.
        return Err(ContextError::InvalidItem {
            unit: unit.into(),
            index,
            reason: "it nests arrays and objects more than 126 levels deep",
        });
    }
    let body = serde_json::to_string(items)
        .map_err(|err| ContextError::Corrupt(format!("cannot serialise unit items: {err}")))?;
    if body.len() > limits::MAX_UNIT_BYTES {
        return Err(ContextError::TooLarge {
            field: "unit",
            got: body.len(),
            max: limits::MAX_UNIT_BYTES,
        });
    }
    let folded = fold(&body);
    Ok(Prepared {
        unit: unit.into(),
        body,
        folded,
    })
}

/// Whether `value` nests arrays and objects more than `levels` deep. Recurses at most
/// `levels + 1` calls deep, whatever the depth of `value`.
fn nests_deeper(value: &Value, levels: usize) -> bool {
    let Some(inner) = levels.checked_sub(1) else {
        return matches!(value, Value::Array(_) | Value::Object(_));
    };
    match value {
        Value::Array(items) => items.iter().any(|v| nests_deeper(v, inner)),
        Value::Object(map) => map.values().any(|v| nests_deeper(v, inner)),
        _ => false,
    }
}

fn check_pairs(unit: &str, items: &[Value]) -> Result<()> {
    let mut calls = BTreeSet::new();
    let mut outputs = BTreeSet::new();
    for (index, item) in items.iter().enumerate() {
        let Some(object) = item.as_object() else {
            return Err(ContextError::InvalidItem {
                unit: unit.into(),
                index,
                reason: "an item must be a JSON object",
            });
        };
        let Some(kind) = object.get("type").and_then(Value::as_str) else {
            continue;
        };
        let is_call = CALL_OUTPUT_TYPES.iter().any(|(call, _)| *call == kind);
        let is_output = CALL_OUTPUT_TYPES.iter().any(|(_, output)| *output == kind);
        if !is_call && !is_output {
            continue;
        }
        let Some(call_id) = object.get("call_id").and_then(Value::as_str) else {
            return Err(ContextError::InvalidItem {
                unit: unit.into(),
                index,
                reason: "a tool call or output needs a string call_id",
            });
        };
        let set = if is_call { &mut calls } else { &mut outputs };
        if !set.insert(call_id.to_string()) {
            return Err(ContextError::DuplicateCallId {
                unit: unit.into(),
                call_id: call_id.into(),
                kind: kind.into(),
            });
        }
    }
    if calls != outputs {
        return Err(ContextError::UnpairedCalls {
            unit: unit.into(),
            calls_without_output: calls.difference(&outputs).cloned().collect(),
            outputs_without_call: outputs.difference(&calls).cloned().collect(),
        });
    }
    Ok(())
}

/// Decode a stored body.
pub(crate) fn decode(unit: String, position: i64, body: &str) -> Result<Unit> {
    // Read as written: `serde_json` alone gives some keys a meaning (`agent_schema::json`).
    let items = match agent_schema::json::from_str(body) {
        Ok(Value::Array(items)) => items,
        Ok(_) => {
            return Err(ContextError::Corrupt(format!(
                "unit `{unit}`: the stored body is not a list of items"
            )));
        }
        Err(err) => return Err(ContextError::Corrupt(format!("unit `{unit}`: {err}"))),
    };
    let position = u64::try_from(position)
        .map_err(|_| ContextError::Corrupt(format!("unit `{unit}`: negative position")))?;
    Ok(Unit {
        unit,
        position,
        items,
    })
}

/// Which way a search is served.
pub(crate) enum TermPlan {
    /// The term has at least 3 characters: served by the trigram index.
    Indexed(String),
    /// Shorter terms: a scan of the thread's own units (bounded by the thread).
    ThreadScan(String),
}

/// How many of a thread's first units an indexed search tests directly before it asks the
/// trigram index: four per requested hit, at least 16 and at most 256. A term found in at
/// least a quarter of the units gives `limit` hits among them and is answered there (they
/// are its first `limit` hits in position order), without loading the term's long posting
/// lists; a rarer term costs this short scan plus an index query over the positions after
/// it. Both backends use it.
pub(crate) fn search_prefix(limit: usize) -> i64 {
    i64::try_from(limit)
        .unwrap_or(i64::MAX)
        .saturating_mul(4)
        .clamp(16, 256)
}

/// How `term` is searched for. A unit is kept, indexed and scanned as the JSON text of its
/// items, where a backslash, a quote or a control character is escaped: the term is
/// written the same way first, so that it finds the text as the unit reads
/// (`C:\Users`), not its escapes.
pub(crate) fn plan_term(term: &str) -> TermPlan {
    let written = serde_json::to_string(term).unwrap_or_default();
    let escaped = written
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(term);
    let folded = fold(escaped);
    if folded.chars().count() >= 3 {
        TermPlan::Indexed(folded)
    } else {
        TermPlan::ThreadScan(folded)
    }
}

#[cfg(test)]
mod tests {
    use super::fold;

    fn reference(text: &str) -> String {
        text.chars().flat_map(char::to_lowercase).collect()
    }

    #[test]
    fn fold_is_the_unicode_lowercase_map() {
        for text in [
            "",
            "abc",
            "ABC xyz",
            "[{\"type\":\"message\",\"text\":\"Find the BUG\"}]",
            "旧登录模块 Error",
            "İstanbul ΣΑΣ ẞ Ǆ",
            "A\u{10400}B\u{1E900}c",
            "mixed ÀÉÎõü and ASCII ZZ at the end",
            "\u{0}\u{7f}\u{80}",
        ] {
            assert_eq!(fold(text), reference(text), "{text:?}");
        }
        // Every scalar value, one at a time and between ASCII letters.
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            let text = format!("A{c}b{c}");
            assert_eq!(fold(&text), reference(&text), "{c:?}");
        }
    }
}
