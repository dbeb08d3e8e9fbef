//! A run's history in `agent-context`, derived from its journal, for search.
//!
//! Invariants:
//! - The journal is the source; the context thread `run:<id>` holds only units derived from
//!   it and can be rebuilt from it at any time.
//! - One unit per completed model step (`step:<n>`: the steers applied before it as user
//!   messages, then its output items other than function calls and other than tool items
//!   that do not pair up within it, see `step_items`) and one per finished tool call
//!   (`call:<call_id>`: the model's `function_call` and its `function_call_output`). A unit
//!   is derived only once its content is final (`model.completed`, a terminal call event or
//!   a refusal), so re-deriving it gives the same unit; a step whose output is only calls
//!   has no step unit.
//! - Catch-up ([`catch_up`]) appends the units the context thread lacks; one already there
//!   (`DuplicateUnit`) is skipped, so running it again, or in two processes at once, writes
//!   nothing new. It runs at search time: a run's history is searchable as far as its
//!   journal goes, whoever drove it and whether or not it crashed.
//! - A unit over the context store's size limit (a step or a call's output over 1 MiB; the
//!   journal takes up to 4 MiB) is kept shortened: its longest texts are cut until it fits,
//!   so search finds what is kept. One the store refuses otherwise is skipped with a
//!   warning and tried again at the first catch-up after the run moves on; the journal
//!   keeps the full text.
//! - The thread's `derived_through` is a journal seq of the run through which every unit is
//!   in the thread (written with the units, or once they are all there; a run with no unit
//!   the store holds has a thread with no units, for this record). A run whose last seq is
//!   not past it has nothing to catch up, and a search over every run reads it from the
//!   journal only to show its hits.
//! - The thread is the catch-up's alone: it trusts the thread's unit count (units are
//!   appended in history order), so `agentctl history append` refuses a `run:` thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use agent_context::{ContextError, ContextStore, NewUnit, Unit};
use agent_journal::Journal;
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::HostError;
use crate::raw_json::RawJson;
use crate::run::state::{CallProgress, CallRecord, RunState};
use crate::run::{self, kinds};

/// Why a history search could not be done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// Reading the run from the journal failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The context store failed.
    #[error(transparent)]
    Context(#[from] ContextError),
}

/// A history unit derived from a run's journal.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryUnit {
    /// `step:<n>` or `call:<call_id>`.
    pub id: String,
    /// Responses API items, as the context store keeps them.
    pub items: Vec<Value>,
}

/// The units of `state`, in history order (each step, then its finished calls).
pub fn units_of(state: &RunState) -> Vec<HistoryUnit> {
    sources(state).iter().map(Source::unit).collect()
}

/// What a unit of a run is made of, its items not built yet: a catch-up learns how many
/// units a run has (and so whether its thread is caught up) without building any.
enum Source<'a> {
    /// A step: the steers applied before it, then its output items it keeps
    /// ([`step_items`]).
    Step {
        id: String,
        steers: Vec<&'a str>,
        output: Vec<&'a RawJson>,
    },
    /// A finished call: the model's `function_call` item and the call's output.
    Call {
        id: String,
        made: &'a RawJson,
        call_id: &'a str,
        output: &'a str,
    },
}

impl Source<'_> {
    /// The unit. Items came from parsed JSON, so each reads back (see
    /// `RawJson::to_value`); one that did not would be kept as `null`, which the context
    /// store refuses (the unit is then skipped with a warning, see [`catch_up`]).
    fn unit(&self) -> HistoryUnit {
        let item = |raw: &RawJson| raw.to_value().unwrap_or(Value::Null);
        match self {
            Source::Step { id, steers, output } => HistoryUnit {
                id: id.clone(),
                items: steers
                    .iter()
                    .map(|text| json!({"type": "message", "role": "user", "content": text}))
                    .chain(output.iter().map(|raw| item(raw)))
                    .collect(),
            },
            Source::Call {
                id,
                made,
                call_id,
                output,
            } => HistoryUnit {
                id: id.clone(),
                items: vec![
                    item(made),
                    json!({"type": "function_call_output", "call_id": call_id,
                           "output": output}),
                ],
            },
        }
    }
}

/// The units of `state` as [`Source`]s, in history order.
fn sources(state: &RunState) -> Vec<Source<'_>> {
    // Each step's steers and calls, gathered in one pass over each list rather than
    // looked for among all of them at every step.
    let mut steers_at = state.applied_steers();
    let mut calls_at: HashMap<u64, Vec<&CallRecord>> = HashMap::new();
    for call in &state.calls {
        calls_at.entry(call.step).or_default().push(call);
    }
    let mut sources = Vec::new();
    for step in &state.steps {
        let steers: Vec<&str> = steers_at
            .remove(&step.step)
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.text.as_str())
            .collect();
        let output = step_items(&step.output);
        if !steers.is_empty() || !output.is_empty() {
            sources.push(Source::Step {
                id: format!("step:{}", step.step),
                steers,
                output,
            });
        }
        for call in calls_at.get(&step.step).into_iter().flatten() {
            let CallProgress::Done(output) = &call.progress else {
                continue;
            };
            let made = step.output.iter().find(|i| {
                i.item_type().as_deref() == Some("function_call")
                    && i.str_field("call_id").as_deref() == Some(call.call_id.as_str())
            });
            let Some(made) = made else {
                continue;
            };
            sources.push(Source::Call {
                id: format!("call:{}", call.call_id),
                made,
                call_id: &call.call_id,
                output: &output.text,
            });
        }
    }
    sources
}

/// The items of a step's `output` its step unit keeps: not its `function_call`s (each is
/// in its call's unit), nor an item the context store would refuse the unit for, so that
/// the rest of the step is stored and searchable. Left out are: an item that is not an
/// object, and a tool call or output (`agent_context::CALL_OUTPUT_TYPES`) without a partner
/// of the same `call_id` among the step's other items, or without a string `call_id`, or
/// whose `call_id` comes twice as a call or as an output. A model's output holds no tool
/// outputs and the host answers only function calls, so what is left out is an anomaly (an
/// output the model sent itself, a call of a kind the host refuses); the journal keeps it.
fn step_items(output: &[RawJson]) -> Vec<&RawJson> {
    /// A tool call or output among a step's items.
    struct Tool {
        is_call: bool,
        call_id: Option<String>,
    }
    /// The tool role of an item of type `kind`, if it has one.
    fn is_call(kind: &str) -> Option<bool> {
        agent_context::CALL_OUTPUT_TYPES
            .iter()
            .find_map(|(call, out)| match kind {
                k if k == *call => Some(true),
                k if k == *out => Some(false),
                _ => None,
            })
    }
    let mut kept: Vec<(&RawJson, Option<Tool>)> = Vec::new();
    for item in output {
        if !item.get().trim_start().starts_with('{') {
            continue;
        }
        let kind = item.item_type();
        if kind.as_deref() == Some("function_call") {
            continue;
        }
        let tool = kind.as_deref().and_then(is_call).map(|is_call| Tool {
            is_call,
            call_id: item.str_field("call_id"),
        });
        kept.push((item, tool));
    }
    // How many calls and outputs name each call_id.
    let mut counts: HashMap<&str, (usize, usize)> = HashMap::new();
    for tool in kept.iter().filter_map(|(_, tool)| tool.as_ref()) {
        if let Some(call_id) = &tool.call_id {
            let count = counts.entry(call_id.as_str()).or_default();
            if tool.is_call {
                count.0 += 1;
            } else {
                count.1 += 1;
            }
        }
    }
    kept.iter()
        .filter(|(_, tool)| match tool {
            None => true,
            Some(tool) => tool
                .call_id
                .as_deref()
                .is_some_and(|id| counts.get(id) == Some(&(1, 1))),
        })
        .map(|(item, _)| *item)
        .collect()
}

/// Appends the units of `state` that its context thread lacks; returns how many were
/// written (0 when caught up). See the module invariants.
///
/// The units the thread lacks are first tried as one batch (one transaction, where one per
/// unit made the first `runs search --all` over many runs wait mostly for disk syncs); when
/// the batch is refused (a unit already held, one over the limits), unit by unit as below.
/// A batch that fails otherwise (a lock held past the store's busy timeout, a full disk) is
/// that error: unit by unit would only meet it again, after another wait.
/// Appends are derived ([`append_derived_units`](ContextStore::append_derived_units)):
/// their commits do not wait for the disk, since a batch lost to a power cut is derived again
/// by the next catch-up. Every catch-up that ends without an error (a batch, unit by unit,
/// or a thread found caught up) records the run's last journal seq as the thread's
/// [`derived_through`](ContextStore::derived_through), so that a later search over every run
/// skips reading a run that has not moved since. Unit by unit, that includes a unit the store
/// refused: its content is final, so trying it again before the run moves on would be refused
/// the same way (and cost an append per unit of the run at every search).
///
/// # Cancel safety
/// Each append is atomic (the batch, or one unit): dropped midway, the units written stay
/// and the next call appends the rest (a unit already held is skipped).
pub async fn catch_up(store: &ContextStore, state: &RunState) -> Result<usize, HistoryError> {
    catch_up_marking(store, state, &Marks::default()).await
}

/// Whether a search still records [`derived_through`](ContextStore::derived_through): not
/// once the store refused a record for a lock held past its busy timeout, since each
/// further try (one per run caught up) would wait that long again for a record that only
/// saves a later search a read.
#[derive(Debug, Default)]
struct Marks {
    locked_out: AtomicBool,
}

/// [`catch_up`], recording `derived_through` as `marks` allows.
async fn catch_up_marking(
    store: &ContextStore,
    state: &RunState,
    marks: &Marks,
) -> Result<usize, HistoryError> {
    let thread = kinds::thread_of(&state.id);
    let sources = sources(state);
    // One row read (not a listing of every thread): a catch-up over all runs stays O(runs).
    let held = store.thread_units(&thread).await?;
    if held == sources.len() as u64 {
        // Also with no units: the record creates the thread, so a run with nothing to
        // search is not read again either until it moves on.
        record_derived_through(store, &thread, state, marks).await;
        return Ok(0);
    }
    let new_unit = |source: &Source<'_>| {
        let unit = source.unit();
        NewUnit {
            unit: unit.id,
            items: unit.items,
        }
    };
    // Units are appended in history order, so the thread usually holds a prefix.
    let missing: Vec<NewUnit> = usize::try_from(held)
        .ok()
        .and_then(|held| sources.get(held..))
        .unwrap_or_default()
        .iter()
        .map(new_unit)
        .collect();
    if !missing.is_empty() {
        match store
            .append_derived_units_through(&thread, &missing, state.last_seq)
            .await
        {
            Ok(_) => return Ok(missing.len()),
            // Refused for what a unit holds (or one already there): unit by unit below.
            Err(err) if err.is_input_refused() => {}
            Err(err) => return Err(err.into()),
        }
    }
    let mut written = 0;
    for unit in sources.iter().map(new_unit) {
        let mut appended = store
            .append_derived_units(&thread, std::slice::from_ref(&unit))
            .await;
        if matches!(appended, Err(ContextError::TooLarge { .. }))
            && let Some(short) = shortened(&unit, agent_context::limits::MAX_UNIT_BYTES)
        {
            appended = store
                .append_derived_units(&thread, std::slice::from_ref(&short))
                .await;
        }
        match appended {
            Ok(_) => written += 1,
            Err(ContextError::DuplicateUnit { .. }) => {}
            Err(
                err @ (ContextError::TooLarge { .. }
                | ContextError::TooManyItems { .. }
                | ContextError::NulChar { .. }
                | ContextError::InvalidItem { .. }
                | ContextError::UnpairedCalls { .. }
                | ContextError::DuplicateCallId { .. }),
            ) => {
                tracing::warn!(run = %state.id, unit = %unit.unit, error = %err, "history unit not stored; search will not find it");
            }
            Err(err) => return Err(err.into()),
        }
    }
    record_derived_through(store, &thread, state, marks).await;
    Ok(written)
}

/// `unit` cut to at most `max` bytes as the store keeps it (compact JSON of its items), by
/// halving its longest text, then the next longest, until it fits, each cut marked `[…]`;
/// `None` when it does not fit after as many cuts as make sense (a unit of many small
/// values). Deterministic, so deriving the unit again gives the same one. The journal keeps
/// the whole text; search finds what is kept.
fn shortened(unit: &NewUnit, max: usize) -> Option<NewUnit> {
    let mut items = unit.items.clone();
    for _ in 0..64 {
        if serde_json::to_string(&items).ok()?.len() <= max {
            return Some(NewUnit {
                unit: unit.unit.clone(),
                items,
            });
        }
        let mut longest = None;
        for item in &mut items {
            longest_text(item, &mut longest);
        }
        let text = longest?;
        let mut keep = text.len() / 2;
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
        text.truncate(keep);
        text.push_str(" […]");
    }
    None
}

/// The longest string in `value` (the first of equals), if longer than `longest`.
fn longest_text<'v>(value: &'v mut Value, longest: &mut Option<&'v mut String>) {
    match value {
        Value::String(text) if longest.as_ref().is_none_or(|l| text.len() > l.len()) => {
            *longest = Some(text);
        }
        Value::Array(values) => {
            for value in values {
                longest_text(value, longest);
            }
        }
        Value::Object(map) => {
            for (_, value) in map.iter_mut() {
                longest_text(value, longest);
            }
        }
        _ => {}
    }
}

/// Records that `thread` holds every unit of `state` it can hold, creating it when `state`
/// has none it can hold. Only saves a later search a read of the run: a store that cannot
/// take it (a lock held by a host, a full disk, a read-only role) does not fail this
/// search; after a lock held past the store's busy timeout, the rest of the search records
/// nothing (see [`Marks`]).
async fn record_derived_through(
    store: &ContextStore,
    thread: &str,
    state: &RunState,
    marks: &Marks,
) {
    if marks.locked_out.load(Ordering::Relaxed) {
        return;
    }
    // Not `mark_derived_through`, which leaves an unknown thread unknown: a run whose units
    // were all refused, or that has none yet, is recorded too (a thread with no units).
    if let Err(err) = store
        .append_derived_units_through(thread, &[], state.last_seq)
        .await
    {
        if let ContextError::Database(db) = &err
            && db.kind() == agent_context::DatabaseErrorKind::Timeout
        {
            marks.locked_out.store(true, Ordering::Relaxed);
        }
        tracing::debug!(run = %state.id, error = %err, "history caught up, not recorded");
    }
}

/// A unit of a run's history that holds the search term.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// The run.
    pub run_id: String,
    /// The step (of a call: the step that made it).
    pub step: u64,
    /// `model` (a step's output) or `tool` (a call with its output).
    pub kind: &'static str,
    /// The unit id (`step:<n>` or `call:<call_id>`).
    pub unit: String,
    /// The call's id, for a tool unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The call's tool, for a tool unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The text around the first match, on one line.
    pub snippet: String,
}

/// Searches the history of `run_id` (every run when `None`, newest first) for `term`,
/// catching each run up first; at most `limit` hits in all.
///
/// Over every run, runs are read from the journal one ahead: the next run is read and
/// folded (on the journal's reader threads) while this one is caught up and searched (on
/// the store's), so the two costs of a first search over many runs overlap instead of
/// adding up. A run whose thread is caught up with its journal (`derived_through`) is not
/// read unless it has hits. Once `limit` hits are found no further run is caught up, and
/// none is read past the one already read ahead.
///
/// # Cancel safety
/// As [`catch_up`]: units written before the drop stay; the search itself only reads.
pub async fn search(
    journal: &Journal,
    store: &ContextStore,
    run_id: Option<&str>,
    term: &str,
    limit: usize,
) -> Result<Vec<Hit>, HistoryError> {
    search_beside(journal, None, store, run_id, term, limit)
        .await
        .map(|searched| searched.hits)
}

/// What [`search_beside`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Searched {
    /// The hits, as [`search`] gives them.
    pub hits: Vec<Hit>,
    /// How many runs were read from the journal and caught up in the store searched.
    pub caught_up: usize,
}

/// [`search`], where a run caught up with its journal in `earlier` (and not in `store`) is
/// searched there, and only the others are caught up in `store`: for a database whose
/// own store cannot take writes (opened read-only as `earlier`), with `store` in memory.
///
/// # Cancel safety
/// As [`search`].
pub async fn search_beside(
    journal: &Journal,
    earlier: Option<&ContextStore>,
    store: &ContextStore,
    run_id: Option<&str>,
    term: &str,
    limit: usize,
) -> Result<Searched, HistoryError> {
    let mut searched = Searched::default();
    let marks = Marks::default();
    if let Some(id) = run_id {
        let state = run::load(journal, id).await?;
        if limit == 0 {
            return Ok(searched);
        }
        match caught_up_in(earlier, store, id, Some(state.last_seq)).await? {
            Some(held) => searched.hits = hits_in(held, &state, term, limit).await?,
            None => {
                searched.hits = search_run(store, &state, term, limit, &marks).await?;
                searched.caught_up = 1;
            }
        }
        return Ok(searched);
    }
    let ids = run::ids(journal).await?;
    let mut ids = ids.iter().map(String::as_str);
    let mut next = prepare(journal, earlier, store, ids.next()).await?;
    while let Some(run) = next.take() {
        if searched.hits.len() >= limit {
            break;
        }
        let found = search_prepared(
            journal,
            store,
            run,
            term,
            limit - searched.hits.len(),
            &marks,
        );
        // The read first: it goes to the journal's reader threads before the search takes
        // this task (the store's short reads may run on it).
        let (prepared, found) = tokio::join!(prepare(journal, earlier, store, ids.next()), found);
        let (hits, caught_up) = found?;
        searched.hits.extend(hits);
        searched.caught_up += usize::from(caught_up);
        next = prepared?;
    }
    Ok(searched)
}

/// A run of a search, ready to search.
enum Prepared<'s> {
    /// This store's thread of the run holds every unit of the journal as it is now
    /// (`derived_through`): the run is not read from the journal unless it has hits.
    CaughtUp(String, &'s ContextStore),
    /// Read from the journal, to be caught up first (boxed: a run's fold is large).
    Loaded(Box<RunState>),
    /// Its journal holds an event that cannot be read: left out of a search of every run.
    Unreadable,
}

/// The run `id`, when there is one: caught up already, or read from the journal.
async fn prepare<'s>(
    journal: &Journal,
    earlier: Option<&'s ContextStore>,
    store: &'s ContextStore,
    id: Option<&str>,
) -> Result<Option<Prepared<'s>>, HistoryError> {
    let Some(id) = id else {
        return Ok(None);
    };
    let last = journal
        .last_seq(&kinds::thread_of(id))
        .await
        .map_err(HostError::from)?;
    if let Some(held) = caught_up_in(earlier, store, id, last).await? {
        return Ok(Some(Prepared::CaughtUp(id.to_string(), held)));
    }
    match run::load(journal, id).await {
        Ok(state) => Ok(Some(Prepared::Loaded(Box::new(state)))),
        Err(err) if run::unreadable_run(&err) => {
            tracing::warn!(run = id, %err, "history search: a run that cannot be read");
            Ok(Some(Prepared::Unreadable))
        }
        Err(err) => Err(err.into()),
    }
}

/// `store`, else `earlier`, when its thread of run `id` is derived through `last`, the
/// run's last journal seq.
async fn caught_up_in<'s>(
    earlier: Option<&'s ContextStore>,
    store: &'s ContextStore,
    id: &str,
    last: Option<i64>,
) -> Result<Option<&'s ContextStore>, HistoryError> {
    let Some(last) = last else {
        return Ok(None);
    };
    let thread = kinds::thread_of(id);
    for held in std::iter::once(store).chain(earlier) {
        if held
            .derived_through(&thread)
            .await?
            .is_some_and(|derived| last <= derived)
        {
            return Ok(Some(held));
        }
    }
    Ok(None)
}

/// The hits of `run` for `term` (at most `limit`), catching it up in `store` first when it
/// was read; with whether it was.
async fn search_prepared(
    journal: &Journal,
    store: &ContextStore,
    run: Prepared<'_>,
    term: &str,
    limit: usize,
    marks: &Marks,
) -> Result<(Vec<Hit>, bool), HistoryError> {
    match run {
        Prepared::CaughtUp(id, held) => {
            let found = held.search(&kinds::thread_of(&id), term, limit).await?;
            if found.is_empty() {
                return Ok((Vec::new(), false));
            }
            // The run as the journal has it, for the hits' steps and tools; a thread
            // without `run.created` is no run (as below), whoever caught it up.
            let state = run::load(journal, &id).await?;
            if state.spec.is_none() {
                return Ok((Vec::new(), false));
            }
            let hits = found.iter().map(|unit| hit(&state, unit, term)).collect();
            Ok((hits, false))
        }
        // A thread without `run.created` is no run (as in `run::list`).
        Prepared::Loaded(state) if state.spec.is_none() => Ok((Vec::new(), false)),
        Prepared::Unreadable => Ok((Vec::new(), false)),
        Prepared::Loaded(state) => Ok((search_run(store, &state, term, limit, marks).await?, true)),
    }
}

/// [`catch_up`] `state`, then its hits for `term` (at most `limit`).
async fn search_run(
    store: &ContextStore,
    state: &RunState,
    term: &str,
    limit: usize,
    marks: &Marks,
) -> Result<Vec<Hit>, HistoryError> {
    catch_up_marking(store, state, marks).await?;
    hits_in(store, state, term, limit).await
}

/// The hits for `term` (at most `limit`) in `store`'s thread of the run `state`.
async fn hits_in(
    store: &ContextStore,
    state: &RunState,
    term: &str,
    limit: usize,
) -> Result<Vec<Hit>, HistoryError> {
    let found = store
        .search(&kinds::thread_of(&state.id), term, limit)
        .await?;
    Ok(found.iter().map(|unit| hit(state, unit, term)).collect())
}

fn hit(state: &RunState, unit: &Unit, term: &str) -> Hit {
    let (kind, step, call) = match unit.unit.split_once(':') {
        Some(("call", id)) => {
            let call = state.call(id);
            ("tool", call.map_or(0, |c| c.step), call)
        }
        Some((_, n)) => ("model", n.parse().unwrap_or(0), None),
        None => ("model", 0, None),
    };
    Hit {
        run_id: state.id.clone(),
        step,
        kind,
        unit: unit.unit.clone(),
        call_id: call.map(|c| c.call_id.clone()),
        tool: call.map(|c| c.name.clone()),
        snippet: snippet(&text_of(&unit.items), term),
    }
}

/// The readable text of a unit's items: messages, reasoning summaries, calls and outputs.
fn text_of(items: &[Value]) -> String {
    let mut parts = Vec::new();
    for item in items {
        let field = |name: &str| item.get(name).and_then(Value::as_str).unwrap_or("");
        match item.get("type").and_then(Value::as_str).unwrap_or("") {
            "function_call" => parts.push(format!("{}({})", field("name"), field("arguments"))),
            "function_call_output" => parts.push(format!("-> {}", field("output"))),
            _ => collect_text(item, &mut parts),
        }
    }
    parts.join(" ")
}

fn collect_text(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("text" | "content", Value::String(s)) => out.push(s.clone()),
                    (_, Value::Array(_) | Value::Object(_)) => collect_text(v, out),
                    _ => {}
                }
            }
        }
        Value::Array(values) => values.iter().for_each(|v| collect_text(v, out)),
        _ => {}
    }
}

/// About 100 characters of `text` around the first case-insensitive match of `term`, on
/// one line (the start of the text when the term matched only the unit's JSON).
///
/// A match starts where a character of `text` starts, compared case-folded: the text is
/// folded once, with where each character's fold begins, and searched as one string (a
/// unit's text can be a tool's whole output).
fn snippet(text: &str, term: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut folded = String::with_capacity(text.len());
    // `starts[i]`: the byte offset in `folded` where the fold of `chars[i]` begins.
    let mut starts = Vec::with_capacity(chars.len());
    let mut buf = [0u8; 4];
    for c in &chars {
        starts.push(folded.len());
        if c.is_ascii() {
            // What `fold` does to ASCII, without a string per character.
            folded.push(c.to_ascii_lowercase());
        } else {
            folded.push_str(&agent_context::fold(c.encode_utf8(&mut buf)));
        }
    }
    let needle = agent_context::fold(term);
    let at = first_match(&folded, &starts, &needle).unwrap_or(0);
    around(&chars, at, needle.chars().count())
}

/// `len` characters of `chars` from `at`, with about 50 on each side, on one line, marked
/// `…` where cut.
fn around(chars: &[char], at: usize, len: usize) -> String {
    const AROUND: usize = 50;
    let start = at.saturating_sub(AROUND);
    let end = at
        .saturating_add(len)
        .saturating_add(AROUND)
        .min(chars.len());
    let mut out: String = chars
        .get(start..end)
        .unwrap_or_default()
        .iter()
        .map(|c| if c.is_whitespace() { ' ' } else { *c })
        .collect();
    if start > 0 {
        out.insert(0, '…');
    }
    if end < chars.len() {
        out.push('…');
    }
    out
}

/// The index of the first character whose fold begins a match of `needle` in `folded`
/// (`starts`: where each character's fold begins). Matches may overlap: one starting inside
/// a character's fold (`İ` folds to two) does not hide one starting at the next character.
fn first_match(folded: &str, starts: &[usize], needle: &str) -> Option<usize> {
    let mut from = 0;
    loop {
        let at = from + folded.get(from..)?.find(needle)?;
        if let Ok(index) = starts.binary_search(&at) {
            return Some(index);
        }
        from = at + folded.get(at..)?.chars().next()?.len_utf8();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::test_events::ev;

    fn three_steps() -> RunState {
        let mut events = vec![ev(
            1,
            kinds::RUN_CREATED,
            json!({"prompt": "p", "model": "m", "workspace": "/w", "tools": [],
                   "approval": "default", "budgets": {"max_steps": 5}}),
        )];
        for step in 1..=3u64 {
            events.push(ev(
                step as i64 + 1,
                kinds::MODEL_COMPLETED,
                json!({"step": step, "response_id": "r", "output": [
                    {"type": "message", "role": "assistant", "content": format!("answer {step}")}]}),
            ));
        }
        RunState::from_events("r", &events)
    }

    #[tokio::test]
    async fn catch_up_appends_the_missing_units_once_batched_or_not() {
        let state = three_steps();
        let store = ContextStore::open("sqlite::memory:").await.unwrap();
        assert_eq!(catch_up(&store, &state).await.unwrap(), 3);
        assert_eq!(catch_up(&store, &state).await.unwrap(), 0);
        // A thread that holds a unit out of order: the batch is refused as a duplicate and
        // the units are appended one by one, the held one skipped.
        let store = ContextStore::open("sqlite::memory:").await.unwrap();
        let thread = kinds::thread_of("r");
        let units = units_of(&state);
        store
            .append_unit(&thread, &units[1].id, &units[1].items)
            .await
            .unwrap();
        assert_eq!(catch_up(&store, &state).await.unwrap(), 2);
        let held = store.window(&thread, "g", 10).await.unwrap().recent_units;
        let ids: Vec<&str> = held.iter().map(|u| u.unit.as_str()).collect();
        assert_eq!(ids, ["step:2", "step:1", "step:3"]);
        assert_eq!(catch_up(&store, &state).await.unwrap(), 0);
    }

    /// A unit over the store's size limit is kept shortened (its text cut until it fits),
    /// its head found by search; the catch-up, which went unit by unit, records the run as
    /// derived through its last seq, so the next search over every run does not read it
    /// again until it moves on.
    #[tokio::test]
    async fn a_unit_over_the_limit_is_kept_shortened_and_its_run_caught_up() {
        let huge = format!(
            "HEADWORD {} TAILWORD",
            "x".repeat(agent_context::limits::MAX_UNIT_BYTES)
        );
        let mut events = vec![ev(
            1,
            kinds::RUN_CREATED,
            json!({"prompt": "p", "model": "m", "workspace": "/w", "tools": [],
                   "approval": "default", "budgets": {"max_steps": 5}}),
        )];
        for (step, content) in [(1u64, "answer 1"), (2, huge.as_str()), (3, "answer 3")] {
            events.push(ev(
                step as i64 + 1,
                kinds::MODEL_COMPLETED,
                json!({"step": step, "response_id": "r", "output": [
                    {"type": "message", "role": "assistant", "content": content}]}),
            ));
        }
        let state = RunState::from_events("r", &events);
        assert_eq!(units_of(&state).len(), 3);
        let store = ContextStore::open("sqlite::memory:").await.unwrap();
        let thread = kinds::thread_of("r");
        assert_eq!(catch_up(&store, &state).await.unwrap(), 3);
        assert_eq!(store.thread_units(&thread).await.unwrap(), 3);
        assert_eq!(store.derived_through(&thread).await.unwrap(), Some(4));
        assert_eq!(store.search(&thread, "answer 3", 5).await.unwrap().len(), 1);
        // The long step is there, cut: its head is found, its tail is not.
        let head = store.search(&thread, "headword", 5).await.unwrap();
        assert_eq!(head.len(), 1);
        assert_eq!(head[0].unit, "step:2");
        assert!(
            store
                .search(&thread, "tailword", 5)
                .await
                .unwrap()
                .is_empty()
        );
        // Derived again, it is the same unit: nothing new is written.
        assert_eq!(catch_up(&store, &state).await.unwrap(), 0);
    }

    /// Runs `r1`..`r4` (`r4` the newest), each with one step whose answer holds `NEEDLE`,
    /// and a `run:` thread with no `run.created` (no run), sorted before every run.
    async fn four_runs_and_a_stray_thread() -> Journal {
        let journal = Journal::open("memory:").await.unwrap();
        for n in 1..=4 {
            let thread = kinds::thread_of(&format!("r{n}"));
            let events = vec![
                agent_journal::NewEvent::new(
                    thread.clone(),
                    kinds::RUN_CREATED,
                    json!({"prompt": "p", "model": "m", "workspace": "/w", "tools": [],
                           "approval": "default", "budgets": {"max_steps": 5}}),
                ),
                agent_journal::NewEvent::new(
                    thread,
                    kinds::MODEL_COMPLETED,
                    json!({"step": 1, "response_id": "x", "output": [{"type": "message",
                           "role": "assistant", "content": format!("NEEDLE of run {n}")}]}),
                ),
            ];
            journal.append_batch(events).await.unwrap();
        }
        journal
            .append(agent_journal::NewEvent::new(
                kinds::thread_of("zz-stray"),
                kinds::MODEL_COMPLETED,
                json!({"step": 1, "output": [{"type": "message", "content": "NEEDLE"}]}),
            ))
            .await
            .unwrap();
        journal
    }

    /// Over every run: newest first, the stray thread skipped, each run caught up once; with a
    /// limit, the runs after the limit was reached are not caught up.
    #[tokio::test]
    async fn a_search_over_every_run_goes_newest_first_and_stops_at_the_limit() {
        let journal = four_runs_and_a_stray_thread().await;
        let store = ContextStore::open("sqlite::memory:").await.unwrap();
        let runs_of = |hits: &[Hit]| hits.iter().map(|h| h.run_id.clone()).collect::<Vec<_>>();

        let two = search(&journal, &store, None, "needle", 2).await.unwrap();
        assert_eq!(runs_of(&two), ["r4", "r3"]);
        for (run, units) in [("r4", 1), ("r3", 1), ("r2", 0), ("r1", 0), ("zz-stray", 0)] {
            let held = store.thread_units(&kinds::thread_of(run)).await.unwrap();
            assert_eq!(held, units, "{run}");
        }

        let all = search(&journal, &store, None, "needle", 10).await.unwrap();
        assert_eq!(runs_of(&all), ["r4", "r3", "r2", "r1"]);
        assert!(
            all.iter().all(|h| h.kind == "model" && h.step == 1),
            "{all:?}"
        );
        // The run table lists the same runs in the same order.
        let listed: Vec<String> = run::list(&journal)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(listed, runs_of(&all));
        assert!(
            search(&journal, &store, None, "needle", 0)
                .await
                .unwrap()
                .is_empty()
        );
        // One run, by id.
        let one = search(&journal, &store, Some("r2"), "needle", 10)
            .await
            .unwrap();
        assert_eq!(runs_of(&one), ["r2"]);
    }

    /// A caught-up run records the journal seq it was derived through; a search over every
    /// run then reads it only to show its hits, and a run that moved on is read and caught
    /// up again: its new units are found, with their steps and tools.
    #[tokio::test]
    async fn a_run_caught_up_is_searched_without_reading_it_until_it_moves_on() {
        let journal = four_runs_and_a_stray_thread().await;
        let store = ContextStore::open("sqlite::memory:").await.unwrap();
        let thread = kinds::thread_of("r2");
        assert_eq!(store.derived_through(&thread).await.unwrap(), None);
        let all = search(&journal, &store, None, "needle", 10).await.unwrap();
        assert_eq!(all.len(), 4);
        let last = journal.last_seq(&thread).await.unwrap();
        assert_eq!(store.derived_through(&thread).await.unwrap(), last);
        // The same answers from the caught-up threads, hits shown as before.
        assert_eq!(
            search(&journal, &store, None, "needle", 10).await.unwrap(),
            all
        );
        assert!(
            search(&journal, &store, None, "absent", 10)
                .await
                .unwrap()
                .is_empty()
        );
        // r2 moves on: a second step calls a tool, which is refused (a terminal call).
        journal
            .append_batch(vec![
                agent_journal::NewEvent::new(
                    thread.clone(),
                    kinds::MODEL_COMPLETED,
                    json!({"step": 2, "response_id": "y", "output": [{"type": "function_call",
                           "call_id": "c1", "name": "shell",
                           "arguments": "{\"command\":\"echo HAYSTACK\"}"}]}),
                ),
                agent_journal::NewEvent::new(
                    thread.clone(),
                    kinds::TOOL_REFUSED,
                    json!({"call_id": "c1", "tool": "shell", "message": "HAYSTACK refused"}),
                ),
            ])
            .await
            .unwrap();
        let found = search(&journal, &store, None, "haystack", 10)
            .await
            .unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].run_id.as_str(), found[0].kind, found[0].step),
            ("r2", "tool", 2)
        );
        assert_eq!(found[0].tool.as_deref(), Some("shell"));
        let moved = journal.last_seq(&thread).await.unwrap();
        assert!(moved > last);
        assert_eq!(store.derived_through(&thread).await.unwrap(), moved);
        // Found again through the caught-up thread, shown the same way.
        assert_eq!(
            search(&journal, &store, None, "haystack", 10)
                .await
                .unwrap(),
            found
        );
        // A thread without `run.created`, caught up when searched by its id, is still no
        // run of a search over every run.
        search(&journal, &store, Some("zz-stray"), "needle", 10)
            .await
            .unwrap();
        let stray = kinds::thread_of("zz-stray");
        assert_eq!(
            store.derived_through(&stray).await.unwrap(),
            journal.last_seq(&stray).await.unwrap()
        );
        let all_again = search(&journal, &store, None, "needle", 10).await.unwrap();
        assert_eq!(all_again, all);
    }

    /// Runs whose derivation stores nothing or leaves items out, each run's events:
    /// - `r1`: a step with a message, a tool output no call of the step has (`ghost`), a
    ///   paired custom call, a computer call without output and an item that is no object;
    /// - `r2`: a step whose only item is such an output (no step unit);
    /// - `r3`: no step at all;
    /// - `r4`: a step of more items than a unit can hold (refused by the store).
    async fn runs_whose_history_stores_little() -> Journal {
        let journal = Journal::open("memory:").await.unwrap();
        let created = json!({"prompt": "p", "model": "m", "workspace": "/w", "tools": [],
                             "approval": "default", "budgets": {"max_steps": 5}});
        let ghost = json!({"type": "function_call_output", "call_id": "ghost", "output": "x"});
        let many: Vec<Value> = (0..=agent_context::limits::MAX_ITEMS_PER_UNIT)
            .map(|n| json!({"type": "message", "role": "assistant", "content": format!("m{n}")}))
            .collect();
        let steps = [
            (
                "r1",
                Some(json!([
                    {"type": "message", "role": "assistant", "content": "ZEBRAWORD answer"},
                    ghost,
                    {"type": "custom_tool_call", "call_id": "k1", "name": "t", "input": "i"},
                    {"type": "custom_tool_call_output", "call_id": "k1", "output": "o"},
                    {"type": "computer_call", "call_id": "cc", "action": {}},
                    "not an object"
                ])),
            ),
            ("r2", Some(json!([ghost]))),
            ("r3", None),
            ("r4", Some(Value::Array(many))),
        ];
        for (run, output) in steps {
            let thread = kinds::thread_of(run);
            let mut events = vec![agent_journal::NewEvent::new(
                thread.clone(),
                kinds::RUN_CREATED,
                created.clone(),
            )];
            if let Some(output) = output {
                events.push(agent_journal::NewEvent::new(
                    thread,
                    kinds::MODEL_COMPLETED,
                    json!({"step": 1, "response_id": "x", "output": output}),
                ));
            }
            journal.append_batch(events).await.unwrap();
        }
        journal
    }

    /// A step keeps the items that pair up (an orphan tool output, a call without output or
    /// an item that is no object left out), so the rest of it is stored and found; and every
    /// run is recorded derived through its last seq, also one whose derivation stored
    /// nothing, so a second search over every run reads none of them.
    async fn every_run_is_caught_up_once_whatever_it_stores(store: ContextStore) {
        let journal = runs_whose_history_stores_little().await;
        let first = search_beside(&journal, None, &store, None, "zebraword", 10)
            .await
            .unwrap();
        assert_eq!(first.caught_up, 4);
        assert_eq!(first.hits.len(), 1, "{:?}", first.hits);
        assert_eq!(
            (first.hits[0].run_id.as_str(), first.hits[0].unit.as_str()),
            ("r1", "step:1")
        );
        let state = run::load(&journal, "r1").await.unwrap();
        let units = units_of(&state);
        assert_eq!(units.len(), 1, "{units:?}");
        let kinds_kept: Vec<&str> = units[0]
            .items
            .iter()
            .map(|i| i.get("type").and_then(Value::as_str).unwrap_or("(no type)"))
            .collect();
        assert_eq!(
            kinds_kept,
            ["message", "custom_tool_call", "custom_tool_call_output"]
        );
        assert!(units_of(&run::load(&journal, "r2").await.unwrap()).is_empty());
        for (run, held) in [("r1", 1), ("r2", 0), ("r3", 0), ("r4", 0)] {
            let thread = kinds::thread_of(run);
            assert_eq!(store.thread_units(&thread).await.unwrap(), held, "{run}");
            assert_eq!(
                store.derived_through(&thread).await.unwrap(),
                journal.last_seq(&thread).await.unwrap(),
                "{run}"
            );
        }
        let again = search_beside(&journal, None, &store, None, "zebraword", 10)
            .await
            .unwrap();
        assert_eq!(again.caught_up, 0);
        assert_eq!(again.hits, first.hits);
        // A run that moves on is read again: r3's first step is found.
        journal
            .append(agent_journal::NewEvent::new(
                kinds::thread_of("r3"),
                kinds::MODEL_COMPLETED,
                json!({"step": 1, "response_id": "y", "output": [{"type": "message",
                       "role": "assistant", "content": "ZEBRAWORD later"}]}),
            ))
            .await
            .unwrap();
        let moved = search_beside(&journal, None, &store, None, "zebraword", 10)
            .await
            .unwrap();
        assert_eq!(moved.caught_up, 1);
        let runs: Vec<&str> = moved.hits.iter().map(|h| h.run_id.as_str()).collect();
        assert_eq!(runs, ["r3", "r1"]);
    }

    #[tokio::test]
    async fn every_run_is_caught_up_once_whatever_it_stores_sqlite() {
        let store = ContextStore::open("sqlite::memory:").await.unwrap();
        every_run_is_caught_up_once_whatever_it_stores(store).await;
    }

    #[tokio::test]
    async fn every_run_is_caught_up_once_whatever_it_stores_postgres() {
        // `None`: skipped (said on stderr); under `CI=true` the fixture panics instead.
        let Some(db) = agent_testkit::FreshDb::postgres("host_history").await else {
            return;
        };
        let store = ContextStore::open(db.url()).await.unwrap();
        every_run_is_caught_up_once_whatever_it_stores(store.clone()).await;
        store.close().await;
    }

    /// The snippet as first written: each character folded alone, and the fold compared
    /// at every character until it matched (quadratic in a long unit).
    fn snippet_by_scanning(text: &str, term: &str) -> String {
        let chars: Vec<char> = text.chars().collect();
        let folded: Vec<String> = chars
            .iter()
            .map(|c| agent_context::fold(&c.to_string()))
            .collect();
        let needle = agent_context::fold(term);
        let at = (0..chars.len())
            .find(|&i| {
                let mut s = String::new();
                for f in folded.iter().skip(i) {
                    if s.len() >= needle.len() {
                        break;
                    }
                    s.push_str(f);
                }
                s.starts_with(&needle)
            })
            .unwrap_or(0);
        around(&chars, at, needle.chars().count())
    }

    use proptest::prelude::*;

    proptest! {
        /// Texts and terms from characters whose folds differ in length or expand to
        /// several characters (`İ`, `ẞ`, final sigma), with the term often cut from the
        /// text itself: the same snippet as the scan.
        #[test]
        fn snippet_finds_what_the_scan_found(
            text in "[aAİiẞßΣσς\u{307}x \n]{0,160}",
            cut in proptest::option::of((0usize..160, 1usize..6)),
            other in "[aAİiẞßΣσς\u{307}x]{1,4}",
        ) {
            let chars: Vec<char> = text.chars().collect();
            let term: String = match cut {
                Some((from, len)) if from < chars.len() => {
                    chars[from..(from + len).min(chars.len())].iter().collect()
                }
                _ => other,
            };
            prop_assert_eq!(snippet(&text, &term), snippet_by_scanning(&text, &term));
        }
    }

    /// A match that starts inside `İ`'s two-character fold overlaps the one that starts
    /// at the next character; the second is the snippet's.
    #[test]
    fn a_match_inside_a_fold_does_not_hide_the_next() {
        let text = format!("{}İ\u{307}\u{307}{}", "a".repeat(80), "b".repeat(80));
        let term = "\u{307}\u{307}";
        assert_eq!(snippet(&text, term), snippet_by_scanning(&text, term));
        assert!(snippet(&text, term).starts_with('…'));
    }

    #[test]
    fn snippet_centres_on_the_term_case_insensitively() {
        let text = format!("{} Needle here {}", "a".repeat(80), "b".repeat(80));
        let s = snippet(&text, "NEEDLE");
        assert!(s.contains("Needle here"), "{s}");
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert_eq!(snippet("short", "zzz"), "short");
        assert_eq!(snippet("", "x"), "");
    }

    /// A long run, steered and calling a tool at every step: every step's steer and call
    /// is a unit, in order. (It took 15 s here when every step looked through every steer
    /// and call; speed is the benches' to show, so this test does not time it.)
    #[test]
    fn the_units_of_a_long_run_are_each_step_s_steer_and_call() {
        use crate::run::state::{CallOutput, CallRecord, SteerRecord, SteerStatus, StepRecord};
        let n: u64 = 30_000;
        let mut state = three_steps();
        let call = |step: u64| {
            RawJson::from_value(
                &json!({"type": "function_call", "call_id": format!("c{step}"),
                "name": "list_dir", "arguments": "{}"}),
            )
        };
        state.steps = (1..=n)
            .map(|step| StepRecord {
                step,
                response_id: format!("resp{step}"),
                output: vec![call(step)],
                usage: Default::default(),
                incomplete: None,
            })
            .collect();
        state.calls = (1..=n)
            .map(|step| CallRecord {
                call_id: format!("c{step}"),
                name: "list_dir".into(),
                arguments: "{}".into(),
                step,
                progress: CallProgress::Done(CallOutput {
                    ok: true,
                    text: "x".into(),
                }),
                approvals: Vec::new(),
            })
            .collect();
        state.steers = (1..=n)
            .map(|step| SteerRecord {
                id: format!("s{step}"),
                text: format!("steer {step}"),
                status: SteerStatus::Applied { step },
            })
            .collect();
        let units = units_of(&state);
        assert_eq!(units.len() as u64, 2 * n);
        assert_eq!(units[0].items[0]["content"], json!("steer 1"));
        assert_eq!(units[1].id, "call:c1");
    }
}
