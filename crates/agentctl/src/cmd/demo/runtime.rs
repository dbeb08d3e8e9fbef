//! `agentctl demo runtime`: the turn-runtime story (README.md, "Runtime") on agent-runtime, against the
//! configured journal (default: the embedded SQLite file).
//!
//! Each run is its own turn on thread `demo`; a turn left running by a killed run is marked
//! interrupted by recovery, so running it again always works.

use std::time::{Duration, Instant};

use agent_journal::Journal;
use agent_runtime::{Runtime, RuntimeOptions, ToolResult};
use serde::Serialize;
use serde_json::{Value, json};

use crate::global::GlobalArgs;
use crate::output::{line, typed_line};

const THREAD: &str = "demo";

/// What one run produced.
#[derive(Debug, Serialize)]
struct Report {
    thread: &'static str,
    turn: String,
    journal: String,
    /// The refusal of the commit at revision 0, as the runtime words it.
    rejected_commit: String,
    committed_revision: u64,
    results: Vec<ToolResult>,
    /// The turn's events, replayed from the journal.
    events: Vec<Value>,
    elapsed_s: f64,
}

pub async fn run(global: &GlobalArgs) -> anyhow::Result<std::process::ExitCode> {
    let journal = crate::db::open_journal(global).await?;
    let outcome = story(&journal).await;
    journal.close().await;
    let report = outcome?;
    if global.json {
        typed_line("demo.runtime", &report)?;
    } else {
        print_human(&report)?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

async fn story(journal: &Journal) -> anyhow::Result<Report> {
    let started = Instant::now();
    let runtime = Runtime::recover(
        journal.clone(),
        RuntimeOptions::default().tools(agent_runtime::demo::registry()),
    )
    .await?;
    let result = turn(&runtime, journal, started).await;
    runtime.close().await;
    result
}

async fn turn(runtime: &Runtime, journal: &Journal, started: Instant) -> anyhow::Result<Report> {
    let before = journal.last_seq(THREAD).await?.unwrap_or(0);
    let turn = runtime.start(THREAD).await?;
    let docs = runtime
        .launch(
            THREAD,
            &turn,
            "call-docs",
            "read_docs",
            json!({"delay": 0.08}),
        )
        .await?;
    let tests = runtime
        .launch(
            THREAD,
            &turn,
            "call-tests",
            "run_tests",
            json!({"delay": 0.12}),
        )
        .await?;
    // Scripted stand-in for independent model work while the tools run (not inference).
    tokio::time::sleep(Duration::from_millis(20)).await;
    runtime
        .record(
            THREAD,
            "independent.work",
            json!({"turn_id": turn, "text": "先整理验收清单"}),
        )
        .await?;
    let revision = runtime
        .steer(THREAD, &turn, "只给修复方案，不修改文件")
        .await?;
    let (docs, tests) = tokio::join!(
        runtime.result(THREAD, &turn, &docs),
        runtime.result(THREAD, &turn, &tests)
    );
    let results = vec![docs?, tests?];
    let rejected_commit = match runtime.commit(THREAD, &turn, 0, "旧方案").await {
        Ok(_) => anyhow::bail!("the runtime accepted a commit at a stale revision"),
        Err(err) => err.to_string(),
    };
    runtime
        .commit(THREAD, &turn, revision, "已按最新要求重新检查的只读方案")
        .await?;
    runtime.finish(THREAD, &turn).await?;
    // The thread is shared by every demo run on this database (others may run beside this
    // one): keep this turn's events.
    let events = journal
        .replay(THREAD, before)
        .await?
        .into_iter()
        .filter(|e| e.payload.get("turn_id").and_then(|t| t.as_str()) == Some(turn.as_str()))
        .map(|e| json!({"seq": e.seq, "kind": e.kind, "payload": e.payload}))
        .collect();
    Ok(Report {
        thread: THREAD,
        turn,
        journal: journal.url().to_string(),
        rejected_commit,
        committed_revision: revision,
        results,
        events,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

fn print_human(report: &Report) -> anyhow::Result<()> {
    line(&format!("旧方案被拒绝: {}", report.rejected_commit))?;
    line(&format!(
        "committed at revision {} (turn {} on thread `{}`, journal {})",
        report.committed_revision, report.turn, report.thread, report.journal
    ))?;
    line(&serde_json::to_string_pretty(&report.results)?)?;
    line(&serde_json::to_string_pretty(&report.events)?)?;
    line(&format!(
        "elapsed={:.3}s (synthetic, not a Codex benchmark)",
        report.elapsed_s
    ))
}
