//! `agentctl history`: append to, window and search conversation history (agent-context).

use agent_context::Unit;
use clap::Subcommand;
use serde_json::{Value, json};

use crate::global::GlobalArgs;
use crate::output::{UsageError, line, typed_line, with_hint};

/// History kept in whole units (a tool call always with its output).
#[derive(Debug, Subcommand)]
pub enum HistoryCmd {
    /// Search one thread for a case-insensitive substring (CJK included; each character
    /// compared by its Unicode lowercase, so `ς` and `σ`, `ß` and `ss` differ), oldest hit
    /// first.
    /// The text searched is each unit's stored JSON (its items serialised compactly), with
    /// the term escaped as its text was: a quote, a backslash or a line break in a message
    /// is found as typed (`C:\Users`, `say "hi"`), and keys such as type match too, though
    /// not with JSON's own quotes around them.
    Search {
        /// Thread to search; other threads are never searched.
        #[arg(long)]
        thread: String,
        /// Text to find (1 to 1024 bytes; 3+ characters use the trigram index, shorter ones
        /// a scan of the thread).
        term: String,
        /// Most hits to print (1-1000).
        #[arg(long, default_value_t = 5,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
                  .range(1..=agent_context::limits::MAX_SEARCH_LIMIT as u64))]
        limit: usize,
    },
    /// Print the pinned goal plus the most recent units of a thread, oldest first.
    Window {
        /// Thread to read.
        #[arg(long)]
        thread: String,
        /// The goal to pin at the top of the window.
        #[arg(long, default_value = "")]
        goal: String,
        /// How many recent units to keep (1-10000).
        #[arg(long, default_value_t = 2, conflicts_with = "budget",
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
                  .range(1..=agent_context::limits::MAX_WINDOW_UNITS as u64))]
        keep: usize,
        /// Instead of --keep: as many recent units as fit this many bytes of JSON
        /// (goal included; units are never split; the goal is printed even when it alone
        /// is over the budget).
        #[arg(long)]
        budget: Option<u64>,
    },
    /// Append one unit: a JSON array of Responses API items (argument, or `-` for stdin, at
    /// most 1 MiB), stored as written. Refused when a function_call has no
    /// function_call_output with its call_id (or the reverse), when the unit id already
    /// exists in the thread, or for a run's thread (`run:<id>`, derived from the run's
    /// journal by `runs search`).
    Append {
        /// Thread to append to (created on first use; not `run:...`).
        #[arg(long)]
        thread: String,
        /// Unit id, unique within the thread.
        #[arg(long)]
        unit: String,
        /// JSON array of items, e.g. '[{"type":"message","text":"hi"}]'; `-` reads stdin.
        items: String,
    },
    /// List threads with their unit counts.
    Threads,
}

impl HistoryCmd {
    /// Whether the command writes to the store (the others open it read-only when it
    /// cannot be written).
    fn writes(&self) -> bool {
        matches!(self, HistoryCmd::Append { .. })
    }
}

pub async fn run(global: &GlobalArgs, cmd: HistoryCmd) -> anyhow::Result<std::process::ExitCode> {
    if let HistoryCmd::Append { thread, .. } = &cmd
        && thread.starts_with(RUN_THREAD_PREFIX)
    {
        return Err(with_hint(
            UsageError(format!(
                "thread `{}` is a run's history: it is derived from the run's journal, and \
                 units appended to it would stop that",
                crate::output::field(thread)
            )),
            "append to a thread whose name does not start with `run:`; a run's history is \
             searched with `agentctl runs search`",
        ));
    }
    let store = if cmd.writes() {
        crate::db::open_context(global).await?
    } else {
        crate::db::open_context_for_reading(global).await?
    };
    match cmd {
        HistoryCmd::Search {
            thread,
            term,
            limit,
        } => {
            let hits = store.search(&thread, &term, limit).await?;
            if global.json {
                for unit in &hits {
                    typed_line(
                        "history.hit",
                        json!({"thread": thread, "unit": unit.unit, "position": unit.position, "items": unit.items}),
                    )?;
                }
            } else if hits.is_empty() {
                line(&format!("no unit of thread `{thread}` contains \"{term}\""))?;
            } else {
                for unit in &hits {
                    line(&format!(
                        "#{} {}: {}",
                        unit.position,
                        unit.unit,
                        summarize(unit)
                    ))?;
                }
            }
        }
        HistoryCmd::Window {
            thread,
            goal,
            keep,
            budget,
        } => {
            let window = match budget {
                Some(bytes) => store.window_budget(&thread, &goal, bytes).await?,
                None => store.window(&thread, &goal, keep).await?,
            };
            if global.json {
                typed_line("history.window", &window)?;
            } else {
                line(&format!("goal: {}", window.pinned_goal))?;
                for unit in &window.recent_units {
                    line(&format!(
                        "#{} {}: {}",
                        unit.position,
                        unit.unit,
                        summarize(unit)
                    ))?;
                }
            }
        }
        HistoryCmd::Append {
            thread,
            unit,
            items,
        } => {
            let text = if items == "-" {
                read_items_from_stdin()?
            } else {
                items
            };
            let items = parse_items(&text)?;
            let appended = store
                .append_unit(&thread, &unit, &items)
                .await
                .map_err(|err| {
                    let hint = match &err {
                        agent_context::ContextError::UnpairedCalls { .. } => {
                            "put each function_call and its function_call_output in the same unit"
                        }
                        agent_context::ContextError::DuplicateUnit { .. } => "choose a new unit id",
                        _ => "see `agentctl history append --help`",
                    };
                    with_hint(err, hint)
                })?;
            if global.json {
                typed_line(
                    "history.appended",
                    json!({"thread": thread, "unit": unit, "position": appended.position}),
                )?;
            } else {
                line(&format!(
                    "appended {unit} to {thread} at position {}",
                    appended.position
                ))?;
            }
        }
        HistoryCmd::Threads => {
            let threads = store.threads().await?;
            for t in &threads {
                if global.json {
                    typed_line("history.thread", t)?;
                } else {
                    let name = crate::output::field(&t.thread);
                    line(&format!("{name}\t{} units", t.units))?;
                }
            }
        }
    }
    store.close().await;
    Ok(std::process::ExitCode::SUCCESS)
}

/// The prefix of the threads that hold runs' histories (`agent_host::run::kinds::thread_of`):
/// each is derived from its run's journal by `runs search`, which trusts the thread to hold
/// nothing else (see `agent_host::run::history`).
const RUN_THREAD_PREFIX: &str = "run:";

/// The items of `history append -`: stdin, read no further than a unit can hold (a pipe
/// that never ends is refused once past it, not read until memory runs out).
fn read_items_from_stdin() -> anyhow::Result<String> {
    let max = agent_context::limits::MAX_UNIT_BYTES;
    let mut over = false;
    // Bad input (too long, not UTF-8), as invalid JSON is: exit 2.
    crate::capped::read_text_or(std::io::stdin(), max, "stdin", || {
        over = true;
        // As the store words it for a unit over the limit (`ContextError::TooLarge`).
        format!("unit is over {max} bytes on stdin, the limit is {max}")
    })
    .map_err(|err| {
        let hint = if over {
            "split the items into several units (the limit counts the JSON as read: pass it \
             compact)"
        } else {
            "pass a JSON array in UTF-8"
        };
        with_hint(err, hint)
    })
}

/// `text` as a unit's items, each as written: read as the store reads them back
/// (`agent_schema::json`), where `serde_json` alone would read an object whose key is one of
/// its private tokens as another value than the one stored.
fn parse_items(text: &str) -> anyhow::Result<Vec<Value>> {
    let refused = |what: String| {
        // Bad input, as the README's exit statuses have it: exit 2.
        with_hint(
            UsageError(what),
            r#"pass a JSON array, e.g. '[{"type":"message","text":"hi"}]'"#,
        )
    };
    match agent_schema::json::from_str(text) {
        Ok(Value::Array(items)) => Ok(items),
        Ok(other) => Err(refused(format!(
            "items are not a JSON array: got {}",
            json_kind(&other)
        ))),
        Err(err) => Err(refused(match err.classify() {
            serde_json::error::Category::Data => format!("items are not a JSON array: {err}"),
            _ => format!("items are not valid JSON: {err}"),
        })),
    }
}

/// What `value` is, in JSON's words.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One line describing a unit's items: message text, tool calls with their outputs.
pub fn summarize(unit: &Unit) -> String {
    let parts: Vec<String> = unit.items.iter().map(summarize_item).collect();
    parts.join(" | ")
}

fn summarize_item(item: &Value) -> String {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("item");
    let field = |name: &str| item.get(name).and_then(Value::as_str).unwrap_or("");
    let text = match kind {
        k if k.ends_with("_call_output") => format!(
            "{kind} {} -> {}",
            field("call_id"),
            short(&text_of(item.get("output")))
        ),
        k if k.ends_with("_call") => format!("{kind} {} {}", field("call_id"), field("name")),
        _ => {
            let body = item.get("text").or_else(|| item.get("content"));
            format!("{kind}: {}", short(&text_of(body)))
        }
    };
    text.trim_end().to_string()
}

fn text_of(value: Option<&Value>) -> String {
    match value {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn short(text: &str) -> String {
    const MAX: usize = 120;
    if text.chars().count() <= MAX {
        text.to_string()
    } else {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}…")
    }
}
