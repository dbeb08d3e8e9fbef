//! `agentctl journal threads|replay|tail`.

use std::process::ExitCode;

use agent_host::follow::follow_thread;
use agent_host::signals::until_signal;
use agent_journal::Event;
use clap::Subcommand;
use futures::{Stream, StreamExt as _};

use crate::global::GlobalArgs;
use crate::output;

#[derive(Debug, Subcommand)]
pub enum JournalCmd {
    /// List every thread that has events.
    Threads,
    /// Print a thread's events in order (all of them, or those after a seq).
    Replay {
        /// The thread to replay.
        #[arg(long, value_parser = thread_name)]
        thread: String,
        /// Only events with a seq greater than this.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        after: i64,
    },
    /// Print a thread's events, then follow new ones as they are appended (Ctrl-C stops).
    Tail {
        /// The thread to follow.
        #[arg(long, value_parser = thread_name)]
        thread: String,
        /// Start after this seq (0: from the beginning).
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        after: i64,
    },
}

/// A thread name the journal accepts (a usage error otherwise, before any database is
/// opened).
fn thread_name(name: &str) -> Result<String, String> {
    match agent_journal::check_thread(name) {
        Ok(()) => Ok(name.to_string()),
        Err(agent_journal::JournalError::InvalidInput { reason, .. }) => Err(reason),
        Err(other) => Err(other.to_string()),
    }
}

pub async fn run(global: &GlobalArgs, cmd: JournalCmd) -> anyhow::Result<ExitCode> {
    let journal = crate::db::open_journal_for_reading(global).await?;
    let result = match cmd {
        JournalCmd::Threads => threads(&journal, global.json).await,
        JournalCmd::Replay { thread, after } => {
            print_events(journal.replay_stream(&thread, after), global.json).await
        }
        // Ctrl-C or SIGTERM ends the follow; what was printed stands.
        JournalCmd::Tail { thread, after } => until_signal(print_events(
            follow_thread(&journal, &thread, after),
            global.json,
        ))
        .await
        .map_err(anyhow::Error::from)
        .and_then(|printed| printed.unwrap_or(Ok(()))),
    };
    journal.close().await;
    result.map(|()| ExitCode::SUCCESS)
}

async fn threads(journal: &agent_journal::Journal, json: bool) -> anyhow::Result<()> {
    for thread in journal.threads().await? {
        if json {
            output::typed_line("thread", serde_json::json!({ "thread": thread }))?;
        } else {
            output::line(&output::field(&thread))?;
        }
    }
    Ok(())
}

/// Prints every event of `events` until it ends or fails.
async fn print_events(
    events: impl Stream<Item = Result<Event, agent_journal::JournalError>>,
    json: bool,
) -> anyhow::Result<()> {
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        print_event(&event?, json)?;
    }
    Ok(())
}

/// `{"type":"event", seq, thread, kind, payload, at, ...}`, or one aligned line.
fn print_event(event: &Event, json: bool) -> anyhow::Result<()> {
    if json {
        output::typed_line("event", event)
    } else {
        output::line(&format!(
            "{:>8}  {}  {:<22} {}",
            event.seq,
            event.at,
            event.kind,
            output::json_text(&event.payload)?
        ))
    }
}
