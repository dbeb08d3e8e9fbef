//! What a script may say beyond its shape: values the emulator can serve, matchers that can
//! match, fault fields that belong to their fault. A script that breaks one is refused at
//! load with the rule and the field named, instead of being served as something else.

use super::{Fault, FaultKind, Match, Reply, Rule, ScriptEndpoint};

/// The `reply.status` values a response can end with.
pub(super) const STATUSES: [&str; 3] = ["completed", "incomplete", "failed"];

/// The `text.format.type` values a request can send (`text` when it sends none).
const TEXT_FORMATS: [&str; 3] = ["text", "json_schema", "json_object"];

/// How a rule is named in an error: `rule `NAME``, or `rule N` (1-based) without a name.
pub(super) fn label(index: usize, name: &str) -> String {
    if name.is_empty() {
        format!("rule {}", index + 1)
    } else {
        format!("rule `{name}`")
    }
}

/// Why `rule` cannot be served as written, if it cannot.
pub(super) fn rule(rule: &Rule) -> Result<(), String> {
    if rule.times == Some(0) {
        return Err("times must be at least 1 (a rule with `times: 0` never answers)".into());
    }
    reply(&rule.reply)?;
    matcher(&rule.when)?;
    unused(rule)?;
    if let Some(fault) = &rule.fault {
        self::fault(fault)?;
    }
    if let Some(latency) = rule.latency {
        latency.check()?;
    }
    Ok(())
}

/// Parts of `rule` its reply never uses: a fault or a hold where nothing is streamed (an
/// error reply, a rule for the compact endpoint or for unstreamed requests only), a structured answer where the
/// compact endpoint would answer with its default compaction instead.
fn unused(rule: &Rule) -> Result<(), String> {
    let compact = rule.when.endpoint == ScriptEndpoint::Compact;
    let streamless = match (&rule.reply, compact, rule.when.stream) {
        (Reply::Error { .. }, ..) => Some("an `error` reply is not streamed"),
        (_, true, _) => Some("`endpoint: compact` is not streamed"),
        (.., Some(false)) => Some("the rule answers requests without `stream: true` only"),
        _ => None,
    };
    if let Some(why) = streamless {
        if rule.fault.is_some() {
            return Err(format!("fault never applies: {why}"));
        }
        if rule.hold_for_steer_ms.is_some() {
            return Err(format!("hold_for_steer_ms never applies: {why}"));
        }
    }
    if compact && matches!(rule.reply, Reply::Json { .. }) {
        return Err(
            "reply.json is no compaction: `endpoint: compact` needs `items` (or `echo`, `error`)"
                .into(),
        );
    }
    Ok(())
}

fn reply(reply: &Reply) -> Result<(), String> {
    placeholders(reply)?;
    match reply {
        Reply::Error { error } => error.check(),
        Reply::Items {
            status,
            delta_chars,
            ..
        } => {
            if !STATUSES.contains(&status.as_str()) {
                return Err(format!(
                    "reply.status must be one of {}, not `{status}`",
                    STATUSES.join(", ")
                ));
            }
            if *delta_chars == Some(0) {
                return Err("reply.delta_chars must be at least 1".into());
            }
            Ok(())
        }
        Reply::Json { .. } | Reply::Echo { .. } => Ok(()),
    }
}

fn matcher(when: &Match) -> Result<(), String> {
    if let Some(format) = &when.text_format
        && !TEXT_FORMATS.contains(&format.as_str())
    {
        return Err(format!(
            "when.text_format must be one of {}, not `{format}`",
            TEXT_FORMATS.join(", ")
        ));
    }
    if when.tool_outputs_below == Some(0) {
        return Err(
            "when.tool_outputs_below: 0 never matches (no context holds fewer than 0 tool outputs)"
                .into(),
        );
    }
    tool_output_conditions(when)?;
    if when.endpoint == ScriptEndpoint::Compact {
        if when.stream == Some(true) {
            return Err(
                "when.stream: true never matches `endpoint: compact` (compaction is not streamed)"
                    .into(),
            );
        }
        if when.text_format.as_deref().is_some_and(|f| f != "text") {
            return Err(
                "when.text_format never matches `endpoint: compact` (it sends no text format)"
                    .into(),
            );
        }
    }
    Ok(())
}

/// The tool-output conditions that contradict each other, with `c` the context's
/// `function_call_output` items and `t` the tool outputs counting those compactions stand
/// for (`t >= c`): `has_tool_outputs` is `c >= 1` (or `c == 0`), `tool_outputs` `c == n`,
/// `tool_outputs_below` `c < n`, `tool_outputs_total` `t == n`. (`has_tool_outputs: false`
/// with `tool_outputs_below` (at least 1) matches a context without outputs.)
fn tool_output_conditions(when: &Match) -> Result<(), String> {
    let never = |what: String| Err(format!("{what}: the rule never matches"));
    if let Some(has) = when.has_tool_outputs {
        match (has, when.tool_outputs) {
            (false, Some(n)) if n >= 1 => {
                return never(format!(
                    "when.has_tool_outputs: false contradicts when.tool_outputs: {n}"
                ));
            }
            (true, Some(0)) => {
                return never(
                    "when.has_tool_outputs: true contradicts when.tool_outputs: 0".into(),
                );
            }
            _ => {}
        }
        if let (true, Some(below)) = (has, when.tool_outputs_below)
            && below <= 1
        {
            return never(format!(
                "when.has_tool_outputs: true contradicts when.tool_outputs_below: {below} \
                 (a context with tool outputs holds at least 1)"
            ));
        }
        if has && when.tool_outputs_total == Some(0) {
            return never(
                "when.has_tool_outputs: true contradicts when.tool_outputs_total: 0 (the total \
                 counts the context's tool outputs too)"
                    .into(),
            );
        }
    }
    if let Some(n) = when.tool_outputs {
        if let Some(below) = when.tool_outputs_below
            && n >= below
        {
            return never(format!(
                "when.tool_outputs: {n} contradicts when.tool_outputs_below: {below}"
            ));
        }
        if let Some(total) = when.tool_outputs_total
            && total < n
        {
            return never(format!(
                "when.tool_outputs_total: {total} contradicts when.tool_outputs: {n} (the \
                 total counts the context's tool outputs too, so it is at least as many)"
            ));
        }
    }
    Ok(())
}

fn fault(fault: &Fault) -> Result<(), String> {
    let kind = fault.kind;
    let misplaced = |field: &str, owner: &str| {
        Err(format!(
            "fault.{field} is for `kind: {owner}` only, not for this `{}` fault",
            kind_name(kind)
        ))
    };
    match (&fault.gate, kind) {
        (None, FaultKind::Gate) => {
            return Err("fault.gate: a `gate` fault needs the gate's name".into());
        }
        (Some(name), FaultKind::Gate) if name.is_empty() => {
            return Err("fault.gate: the gate's name must not be empty".into());
        }
        (Some(_), k) if k != FaultKind::Gate => return misplaced("gate", "gate"),
        _ => {}
    }
    match (&fault.shape, kind) {
        (Some(shape), FaultKind::ErrorEvent) if shape != "nested" && shape != "flat" => {
            return Err(format!(
                "fault.shape must be `nested` or `flat`, not `{shape}`"
            ));
        }
        (Some(_), k) if k != FaultKind::ErrorEvent => return misplaced("shape", "error_event"),
        _ => {}
    }
    match (fault.every_ms, kind) {
        (Some(0), FaultKind::KeepAlive) => Err("fault.every_ms must be at least 1".into()),
        (Some(_), k) if k != FaultKind::KeepAlive => misplaced("every_ms", "keep_alive"),
        _ => Ok(()),
    }
}

fn kind_name(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Cut => "cut",
        FaultKind::Stall => "stall",
        FaultKind::KeepAlive => "keep_alive",
        FaultKind::Gate => "gate",
        FaultKind::ErrorEvent => "error_event",
    }
}

/// Names a user means as `{{last_user}}` or `{{outputs}}` but wrote otherwise (spaced,
/// capitalised, singular): such a placeholder would be sent as written. Other `{{...}}`
/// text (a template in a scripted answer) is left alone.
fn placeholders(reply: &Reply) -> Result<(), String> {
    let mut strings = Vec::new();
    match reply {
        Reply::Items { items, .. } => items.iter().for_each(|i| collect(i, &mut strings)),
        Reply::Json { json } => collect(json, &mut strings),
        Reply::Error { error } => strings.push(error.message.as_str()),
        Reply::Echo { .. } => {}
    }
    for text in strings {
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            let after = &rest[start + 2..];
            let Some(end) = after.find("}}") else { break };
            let name = &after[..end];
            let meant = match normalized(name).as_str() {
                "lastuser" | "lastusertext" | "lastusermessage" => Some("last_user"),
                "outputs" | "output" | "tooloutputs" | "tooloutput" => Some("outputs"),
                _ => None,
            };
            if let Some(meant) = meant
                && name != meant
            {
                return Err(format!(
                    "`{{{{{name}}}}}` is not a placeholder and would be sent as written; write `{{{{{meant}}}}}`"
                ));
            }
            rest = &after[end + 2..];
        }
    }
    Ok(())
}

fn normalized(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

fn collect<'a>(value: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match value {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(a) => a.iter().for_each(|v| collect(v, out)),
        serde_json::Value::Object(o) => o.values().for_each(|v| collect(v, out)),
        _ => {}
    }
}
