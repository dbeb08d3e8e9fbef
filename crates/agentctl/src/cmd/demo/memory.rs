//! `agentctl demo memory`: the context-and-memory story on agent-context.

use agent_context::{ContextStore, MemoryEntry, NewEvidence, Unit, Window};
use serde::Serialize;
use serde_json::json;

use crate::cmd::history::summarize;
use crate::cmd::memory::describe;
use crate::global::GlobalArgs;
use crate::output::{line, typed_line};

/// The story's `now` and `max_age` (abstract time units, small so the ages are readable).
const NOW: i64 = 50;
const MAX_AGE: i64 = 30;

/// Run the story. Without `--db` it uses a private in-memory store; with `--db` it writes
/// into that store under names prefixed `demo-<run>-` so that it never collides with (or
/// changes) anything already there.
pub async fn run(global: &GlobalArgs) -> anyhow::Result<std::process::ExitCode> {
    let (url, prefix) = match &global.db {
        None => ("sqlite::memory:".to_string(), String::new()),
        Some(_) => (global.database_url()?, format!("demo-{}-", run_id())),
    };
    let store = crate::db::open_context_at(&url).await?;
    let result = story(&store, &prefix).await;
    store.close().await;
    let report = result?;
    if global.json {
        typed_line("demo.memory", &report)?;
    } else {
        print_human(&report, &prefix)?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// What the story produced; printed for a person, or as one JSON object with `--json`.
#[derive(Debug, Serialize)]
struct Report {
    thread: String,
    project: String,
    window: Window,
    /// The error for a unit whose function_call has no output.
    refused_unpaired: Option<String>,
    search_term: &'static str,
    search_hits: Vec<Unit>,
    memory: Vec<MemoryEntry>,
    revoked: String,
    memory_after_revoke: Vec<MemoryEntry>,
    now: i64,
    max_age: i64,
}

async fn story(store: &ContextStore, prefix: &str) -> anyhow::Result<Report> {
    let thread = format!("{prefix}a");
    let project = format!("{prefix}project-A");
    let name = |s: &str| format!("{prefix}{s}");

    store
        .append_unit(
            &thread,
            "u1",
            &[json!({"type": "message", "text": "错误码 E42 是旧登录模块的故障"})],
        )
        .await?;
    store
        .append_unit(
            &thread,
            "u2",
            &[
                json!({"type": "function_call", "call_id": "c1", "name": "test"}),
                json!({"type": "function_call_output", "call_id": "c1", "output": "failed"}),
            ],
        )
        .await?;
    store
        .append_unit(
            &thread,
            "u3",
            &[json!({"type": "message", "text": "当前目标：只读诊断"})],
        )
        .await?;
    // An unpaired call is refused (the history-unit contract), naming the id.
    let refused_unpaired = store
        .append_unit(
            &thread,
            "u4",
            &[json!({"type": "function_call", "call_id": "c2", "name": "test"})],
        )
        .await
        .err()
        .map(|err| err.to_string());

    let window = store.window(&thread, "只读诊断", 2).await?;
    let search_hits = store.search(&thread, "E42", 5).await?;

    store
        .add_evidence(&evidence(&name("rollout-1"), &project, "jdk", "8", 1, true))
        .await?;
    store
        .add_evidence(&evidence(
            &name("rollout-2"),
            &project,
            "jdk",
            "17",
            10,
            true,
        ))
        .await?;
    store
        .add_evidence(&evidence(
            &name("web-guess"),
            &project,
            "jdk",
            "99",
            11,
            false,
        ))
        .await?;
    store.consolidate().await?;
    let memory = store.recall(&project, NOW, MAX_AGE).await?;

    let revoked = name("rollout-2");
    store.revoke(&revoked).await?;
    store.consolidate().await?;
    let memory_after_revoke = store.recall(&project, NOW, MAX_AGE).await?;

    Ok(Report {
        thread,
        project,
        window,
        refused_unpaired,
        search_term: "E42",
        search_hits,
        memory,
        revoked,
        memory_after_revoke,
        now: NOW,
        max_age: MAX_AGE,
    })
}

fn evidence(
    source: &str,
    project: &str,
    key: &str,
    value: &str,
    observed: i64,
    confirmed: bool,
) -> NewEvidence {
    NewEvidence {
        source: source.into(),
        project: project.into(),
        key: key.into(),
        value: value.into(),
        observed,
        confirmed,
    }
}

fn print_human(report: &Report, prefix: &str) -> anyhow::Result<()> {
    if !prefix.is_empty() {
        line(&format!(
            "(names prefixed `{prefix}` in the store given by --db)"
        ))?;
    }
    line(&format!(
        "1. Window of thread `{}` (pinned goal + last 2 units; a tool call stays with its output):",
        report.thread
    ))?;
    line(&format!("   goal: {}", report.window.pinned_goal))?;
    for unit in &report.window.recent_units {
        line(&format!(
            "   #{} {}: {}",
            unit.position,
            unit.unit,
            summarize(unit)
        ))?;
    }
    if let Some(err) = &report.refused_unpaired {
        line(&format!("   refused: {err}"))?;
    }
    line(&format!(
        "2. Search \"{}\" in `{}`: {} hit(s)",
        report.search_term,
        report.thread,
        report.search_hits.len()
    ))?;
    for unit in &report.search_hits {
        line(&format!(
            "   #{} {}: {}",
            unit.position,
            unit.unit,
            summarize(unit)
        ))?;
    }
    line(&format!(
        "3. Memory of `{}` at t={NOW} (max age {MAX_AGE}; the unconfirmed web-guess = 99 is ignored):",
        report.project
    ))?;
    for entry in &report.memory {
        line(&format!("   {}", describe(entry)))?;
    }
    line(&format!("4. After revoking {}:", report.revoked))?;
    for entry in &report.memory_after_revoke {
        line(&format!("   {}", describe(entry)))?;
    }
    Ok(())
}

fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}", nanos & 0xffff_ffff, std::process::id() & 0xffff)
}
