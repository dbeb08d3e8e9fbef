//! The request of a step, written from the run state.
//!
//! Invariant: the request is a pure function of the run state (instructions, the prompt,
//! then every step's output items verbatim, each followed by the outputs of its calls in
//! the order the model made them; a steer applied before step N is a user message just
//! before step N's output; a final answer the output schema rejected is followed by a user
//! message listing its errors; after a compaction: the prompt, the compaction output, the
//! host's frontier note, then the steps after it), so a resumed run sends what the crashed
//! one would have. A run with an output schema sends it as `text.format` on every step.

use std::collections::{HashMap, HashSet};

#[cfg(test)]
use agent_responses::types::CreateResponse;
use agent_responses::types::{Item, MessageItem};

use super::state::{CallProgress, CompactionRecord, RunSpec, RunState};
use crate::RawJson;

/// What the host tells the model after a compaction: where the run stands. A function of
/// the compaction record and the calls made before it (a compaction happens at a step
/// boundary, where every call has its result), so a resumed run writes the same note.
fn frontier_note(state: &RunState, c: &CompactionRecord) -> String {
    let steps = c.before_step.saturating_sub(1);
    let calls = state.elided.calls.saturating_add(
        state
            .calls
            .iter()
            .filter(|call| call.step < c.before_step)
            .count() as u64,
    );
    let last_steer = state
        .steers
        .iter()
        .rev()
        .find(|s| c.covered_steers.contains(&s.id))
        .map(|s| format!(" The user's latest steer: \"{}\".", s.text))
        .unwrap_or_default();
    format!(
        "[agentctl frontier] The history above was compacted before step {}. Your task is the \
         first user message above. Done so far: {steps} model steps and {calls} tool calls, \
         each with its result; no call is pending.{last_steer}",
        c.before_step
    )
}

/// The request for the next step of `state`, as [`request_body`] encodes it.
#[cfg(test)]
pub(crate) fn build_request(state: &RunState, spec: &RunSpec) -> Result<CreateResponse, String> {
    let body = request_body(state, spec, false)?;
    serde_json::from_slice(&body).map_err(|err| format!("unreadable request: {err}"))
}

/// The encoded request for the next step of `state` (with `"stream": true` when `stream`).
///
/// Written from the run state by reference: the output items go out as the journal holds
/// them, not through typed items and copies of the history at every step.
#[cfg(test)]
pub(crate) fn request_body(
    state: &RunState,
    spec: &RunSpec,
    stream: bool,
) -> Result<Vec<u8>, String> {
    let mut counted = ByteCount(0);
    serde_json::to_writer(&mut counted, &body(state, spec, stream)).map_err(encode_err)?;
    encode_sized(state, spec, stream, counted.0)
}

/// The sha256 and length of what [`request_body`] encodes, from a pass that keeps none of
/// it: a run records its request's hash before it needs the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BodyDigest {
    /// Lowercase hex.
    pub(crate) sha256: String,
    /// Bytes.
    pub(crate) len: usize,
}

/// The [`BodyDigest`] of the next step's request.
pub(crate) fn request_digest(
    state: &RunState,
    spec: &RunSpec,
    stream: bool,
) -> Result<BodyDigest, String> {
    use sha2::Digest as _;
    let mut hashed = HashCount(sha2::Sha256::new(), 0);
    serde_json::to_writer(&mut hashed, &body(state, spec, stream)).map_err(encode_err)?;
    Ok(BodyDigest {
        sha256: super::digest::hex(&hashed.0.finalize()),
        len: hashed.1,
    })
}

/// The request encoded into a buffer of `len` bytes (from [`request_digest`] or a counting
/// pass): a buffer grown by doubling holds up to twice its bytes, and at a thousand runs
/// hundreds of bodies are being sent at once.
pub(crate) fn encode_sized(
    state: &RunState,
    spec: &RunSpec,
    stream: bool,
    len: usize,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(len);
    serde_json::to_writer(&mut out, &body(state, spec, stream)).map_err(encode_err)?;
    Ok(out)
}

fn body<'a>(state: &'a RunState, spec: &'a RunSpec, stream: bool) -> Body<'a> {
    Body {
        model: &spec.model,
        input: History {
            state,
            spec,
            own_lead: true,
        },
        instructions: spec.instructions.as_deref(),
        tools: spec.tools.iter().map(FunctionToolRef::of).collect(),
        text: spec.output.as_ref().map(|o| TextRef {
            format: FormatRef {
                kind: "json_schema",
                name: &o.name,
                schema: &o.schema,
                strict: o.strict,
            },
        }),
        stream: stream.then_some(true),
    }
}

/// `text` of a request: the output schema's format.
#[derive(serde::Serialize)]
struct TextRef<'a> {
    format: FormatRef<'a>,
}

/// The output schema as [`agent_responses::types::JsonSchemaFormat`] writes it.
#[derive(serde::Serialize)]
struct FormatRef<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    schema: &'a serde_json::Value,
    strict: bool,
}

fn encode_err(err: serde_json::Error) -> String {
    format!("cannot encode the request: {err}")
}

/// A writer that keeps nothing, only the count of the bytes written to it.
#[cfg(test)]
struct ByteCount(usize);

#[cfg(test)]
impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer that keeps only the hash and the count of the bytes written to it.
struct HashCount(sha2::Sha256, usize);

impl std::io::Write for HashCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        sha2::Digest::update(&mut self.0, buf);
        self.1 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(serde::Serialize)]
struct Body<'a> {
    model: &'a str,
    input: History<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<&'a str>,
    tools: Vec<FunctionToolRef<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<TextRef<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
}

/// A run's tool as [`agent_responses::types::FunctionTool::new`] writes it: a function
/// tool, strict unless its schema cannot be (a Rust tool's may not).
#[derive(serde::Serialize)]
struct FunctionToolRef<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    description: &'a str,
    parameters: &'a RawJson,
    strict: bool,
}

impl<'a> FunctionToolRef<'a> {
    fn of(tool: &'a crate::tools::ToolSpec) -> Self {
        Self {
            kind: "function",
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.parameters,
            strict: tool.strict,
        }
    }
}

/// The input of a compaction before the next step: the next request's input without
/// what the host puts in front of a compaction's output itself (the prompt, the frontier
/// note). Sent, those came back among the output's user messages and were put in front of
/// them again: every compaction added a copy, so the history grew instead of shrinking.
pub(crate) fn compaction_input(state: &RunState, spec: &RunSpec) -> Result<Vec<Item>, String> {
    let history = History {
        state,
        spec,
        own_lead: false,
    };
    let text = serde_json::to_vec(&history).map_err(encode_err)?;
    serde_json::from_slice(&text).map_err(|err| format!("unreadable compaction input: {err}"))
}

/// The input items of the next step (see the module's invariant for their order).
struct History<'a> {
    state: &'a RunState,
    spec: &'a RunSpec,
    /// With the prompt and, after a compaction, the frontier note (false: a compaction's
    /// input, see [`compaction_input`]).
    own_lead: bool,
}

impl serde::Serialize for History<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        let (state, spec) = (self.state, self.spec);
        let user = |text: &str| Item::Message(MessageItem::user(text));
        let mut seq = s.serialize_seq(None)?;
        // The goal (the prompt) is never left to a compaction; the history before the
        // compaction's step is its output, verbatim, then the host's frontier note.
        if self.own_lead {
            seq.serialize_element(&user(&spec.prompt))?;
        }
        let (from_step, covered) = match &state.compaction {
            Some(c) => {
                for raw in &c.output {
                    seq.serialize_element(raw)?;
                }
                if self.own_lead {
                    seq.serialize_element(&user(&frontier_note(state, c)))?;
                }
                (c.before_step, c.covered_steers.as_slice())
            }
            None => (1, &[][..]),
        };
        // The steers applied before each step that the compaction does not cover.
        let covered: HashSet<&str> = covered.iter().map(String::as_str).collect();
        let applied = state.applied_steers();
        let steers_before = |step: u64| {
            applied
                .get(&step)
                .into_iter()
                .flatten()
                .filter(|s| !covered.contains(s.id.as_str()))
                .map(|s| s.text.as_str())
        };
        // The first rejection of each step, the same way.
        let mut rejections: HashMap<u64, &[String]> = HashMap::new();
        for rejected in &state.rejections {
            rejections.entry(rejected.step).or_insert(&rejected.errors);
        }
        // Calls are kept in the order they were made, so each step's calls are one run of
        // them: walk both lists together (linear in the history, not steps x calls).
        let mut calls = state.calls.iter().peekable();
        for step in state.steps.iter().filter(|s| s.step >= from_step) {
            for text in steers_before(step.step) {
                seq.serialize_element(&user(text))?;
            }
            for raw in &step.output {
                seq.serialize_element(raw)?;
            }
            while calls.peek().is_some_and(|c| c.step < step.step) {
                calls.next();
            }
            while let Some(call) = calls.next_if(|c| c.step == step.step) {
                if let CallProgress::Done(output) = &call.progress {
                    seq.serialize_element(&FunctionCallOutputRef {
                        kind: "function_call_output",
                        call_id: &call.call_id,
                        output: &output.text,
                    })?;
                }
            }
            if let Some(errors) = rejections.get(&step.step) {
                seq.serialize_element(&user(&super::output::rejection_message(errors)))?;
            }
        }
        for text in steers_before(state.next_step()) {
            seq.serialize_element(&user(text))?;
        }
        seq.end()
    }
}

/// A call's output as [`agent_responses::types::FunctionCallOutput::new`] writes it (text, no status).
#[derive(serde::Serialize)]
struct FunctionCallOutputRef<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    call_id: &'a str,
    output: &'a str,
}

#[cfg(test)]
#[path = "step_request_tests.rs"]
mod tests;
