//! `agentctl journal threads|replay|tail`.

use std::process::ExitCode;

use agent_journal::{Event, Journal, JournalError};
use anyhow::Context as _;
use clap::Subcommand;
use futures::StreamExt as _;

use crate::global::GlobalArgs;
use crate::output;

#[derive(Debug, Subcommand)]
pub enum JournalCmd {
    /// List every thread that has events.
    Threads,
    /// Print a thread's events in order (all of them, or those after a seq).
    Replay {
        /// The thread to replay.
        #[arg(long)]
        thread: String,
        /// Only events with a seq greater than this.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        after: i64,
    },
    /// Print a thread's events, then follow new ones as they are appended (Ctrl-C stops).
    Tail {
        /// The thread to follow.
        #[arg(long)]
        thread: String,
        /// Start after this seq (0: from the beginning).
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        after: i64,
    },
}

pub async fn run(global: &GlobalArgs, cmd: JournalCmd) -> anyhow::Result<ExitCode> {
    let journal = open(global).await?;
    match cmd {
        JournalCmd::Threads => {
            for thread in journal.threads().await? {
                if global.json {
                    output::json_line(&serde_json::json!({ "thread": thread }))?;
                } else {
                    output::line(&thread)?;
                }
            }
        }
        JournalCmd::Replay { thread, after } => {
            let mut events = journal.replay_stream(&thread, after);
            while let Some(event) = events.next().await {
                print_event(&event?, global.json)?;
            }
        }
        JournalCmd::Tail { thread, after } => {
            let mut events = journal.tail(&thread, after);
            loop {
                tokio::select! {
                    next = events.next() => match next {
                        Some(Ok(event)) => print_event(&event, global.json)?,
                        // A refused request (an invalid thread) will not get better.
                        Some(Err(err @ JournalError::InvalidInput { .. })) => return Err(err.into()),
                        // The stream retries a failed read itself.
                        Some(Err(err)) => tracing::warn!(%err, "journal tail: read failed; retrying"),
                        None => break,
                    },
                    _ = tokio::signal::ctrl_c() => break,
                }
            }
        }
    }
    journal.close().await;
    Ok(ExitCode::SUCCESS)
}

/// Opens the journal named by `--db`, with a hint when that fails.
pub async fn open(global: &GlobalArgs) -> anyhow::Result<Journal> {
    let url = global.database_url()?;
    Journal::open(&url).await.map_err(|err| {
        output::with_hint(
            err,
            "check --db / AGENTCTL_DB (sqlite://PATH, sqlite::memory:, postgres://USER:PASS@HOST/DB)",
        )
    })
}

fn print_event(event: &Event, json: bool) -> anyhow::Result<()> {
    if json {
        output::json_line(&serde_json::to_value(event).context("cannot encode an event")?)
    } else {
        output::line(&format!(
            "{:>8}  {}  {:<22} {}",
            event.seq, event.at, event.kind, event.payload
        ))
    }
}
