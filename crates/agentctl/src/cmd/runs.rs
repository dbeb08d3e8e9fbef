//! `agentctl runs list|show|events`: what the journal says about runs.

use std::process::ExitCode;

use agent_host::follow::follow_thread;
use agent_host::run::exec_json::ExecJson;
use agent_host::run::table::status_with_lease;
use agent_host::run::view::{RunSummary, RunView, now_ms};
use agent_host::run::{self, RunStatus, kinds};
use agent_host::signals::until_signal;
use clap::Subcommand;
use futures::StreamExt as _;
use serde_json::json;

use crate::exit::Exit;
use crate::global::GlobalArgs;
use crate::output;

#[derive(Debug, Subcommand)]
pub enum RunsCmd {
    /// Every run, newest first: id, status, steps, tokens, age, first line of the prompt,
    /// and the worker driving it. Reads the runs table, refreshed from the journal first.
    List {
        /// Only runs with this status (queued, running, waiting: a call waits for your
        /// decision, paused, interrupted, completed, failed).
        #[arg(long)]
        status: Option<String>,
    },
    /// Wait until a run completes, pauses, is interrupted, fails or waits for a decision
    /// (an approval: someone must decide before it goes on, whoever drives it); exit status
    /// as `run` (0 completed, 1 failed or paused on a request the API refused, 3 paused or
    /// waiting, 130 interrupted, 124 timed out). A database that drops for a moment is
    /// waited through.
    Wait {
        /// The run id.
        run: String,
        /// Give up after this many seconds.
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<f64>,
    },
    /// One run: status, steps, usage, pending approvals, final text.
    Show {
        /// The run id.
        run: String,
    },
    /// A run's events as JSON lines in the `codex exec --json` shapes.
    Events {
        /// The run id.
        run: String,
        /// Keep following new events until Ctrl-C.
        #[arg(long)]
        follow: bool,
    },
    /// Find text in a run's history (`RUN TERM`) or in every run's (`--all TERM`): model
    /// output and tool calls with their output, case-insensitive. The history is derived
    /// from the journal and caught up before each search; when the database cannot be
    /// written (a full disk, a read-only file, a write lock another process holds for over
    /// half a second), the runs it holds caught up are read there and the others derived in
    /// memory, not kept.
    #[command(
        override_usage = "agentctl runs search RUN TERM\n       agentctl runs search --all TERM"
    )]
    Search {
        /// The run id, then the term (with --all: only the term).
        #[arg(value_name = "RUN|TERM")]
        first: String,
        /// The term.
        #[arg(value_name = "TERM")]
        second: Option<String>,
        /// Search every run, newest first.
        #[arg(long)]
        all: bool,
        /// At most this many hits.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=1000))]
        limit: u64,
    },
}

pub async fn run(global: &GlobalArgs, cmd: RunsCmd) -> anyhow::Result<ExitCode> {
    if let RunsCmd::Wait { run, timeout } = cmd {
        return wait(global, &run, timeout).await;
    }
    let journal = crate::db::open_journal_for_reading(global).await?;
    let result = match cmd {
        RunsCmd::List { status } => list(global, &journal, status).await,
        RunsCmd::Show { run } => show(global, &journal, &run).await,
        RunsCmd::Events { run, follow } => events(&journal, &run, follow).await,
        RunsCmd::Wait { .. } => unreachable_wait(),
        RunsCmd::Search {
            first,
            second,
            all,
            limit,
        } => search(global, &journal, first, second, all, limit).await,
    };
    journal.close().await;
    result
}

async fn list(
    global: &GlobalArgs,
    journal: &agent_journal::Journal,
    status: Option<String>,
) -> anyhow::Result<ExitCode> {
    let status = match status {
        Some(word) => Some(RunStatus::parse(&word).ok_or_else(|| {
            let all: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
            output::UsageError(format!(
                "unknown --status {word}; one of: {}",
                all.join(", ")
            ))
        })?),
        None => None,
    };
    let now = now_ms();
    for (depth, row) in as_tree(run::table::runs_table(journal).await?) {
        if status.is_some_and(|s| row.status != s) {
            continue;
        }
        let age_seconds = run::view::age_seconds(row.created_at, now);
        if global.json {
            let mut line = output::typed("run", &row)?;
            if let Some(obj) = line.as_object_mut() {
                obj.insert("age_seconds".into(), json!(age_seconds));
                obj.insert("depth".into(), json!(depth));
            }
            output::json_line(&line)?;
        } else {
            let worker = row
                .worker
                .as_deref()
                .map(|w| format!("  [{w}]"))
                .unwrap_or_default();
            let indent = "  ".repeat(depth);
            output::line(&format!(
                "{indent}{}  {:<11} {:>4} steps {:>8} tokens {:>7}  {}{worker}",
                row.run_id,
                row.status,
                row.steps,
                row.tokens,
                age(age_seconds),
                row.title
            ))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `rows` (newest first) as a tree: each run followed by its sub-agents (in id order),
/// with its depth. A child whose parent is not listed is shown as a root.
fn as_tree(rows: Vec<run::table::RunRow>) -> Vec<(usize, run::table::RunRow)> {
    use std::collections::HashMap;
    let ids: std::collections::HashSet<String> = rows.iter().map(|r| r.run_id.clone()).collect();
    let mut children: HashMap<String, Vec<run::table::RunRow>> = HashMap::new();
    let mut roots = Vec::new();
    for row in rows {
        match row
            .parent
            .clone()
            .filter(|p| ids.contains(p) && *p != row.run_id)
        {
            Some(parent) => children.entry(parent).or_default().push(row),
            None => roots.push(row),
        }
    }
    let mut out = Vec::new();
    let mut stack: Vec<(usize, run::table::RunRow)> =
        roots.into_iter().rev().map(|r| (0, r)).collect();
    while let Some((depth, row)) = stack.pop() {
        if let Some(mut kids) = children.remove(&row.run_id) {
            kids.sort_by(|a, b| b.run_id.cmp(&a.run_id));
            stack.extend(kids.into_iter().map(|k| (depth + 1, k)));
        }
        out.push((depth, row));
    }
    out
}

/// Waits (in the library) until the run stops; prints it and exits as `run` would.
/// Handled before the journal is opened ([`wait`] opens it itself).
fn unreachable_wait() -> anyhow::Result<ExitCode> {
    Err(anyhow::anyhow!(
        "internal error: runs wait reached the shared journal opening"
    ))
}

/// `runs wait`: the journal opened (a database out of reach is waited for, within the
/// timeout), then the wait.
async fn wait(global: &GlobalArgs, id: &str, timeout: Option<f64>) -> anyhow::Result<ExitCode> {
    let timeout = timeout
        .map(|secs| {
            std::time::Duration::try_from_secs_f64(secs).map_err(|_| {
                output::UsageError("--timeout must be a non-negative number of seconds".into())
            })
        })
        .transpose()?;
    // A timeout past the end of the clock's range (`--timeout 1e19`) is no deadline.
    let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
    let Some(opened) = until_signal(open_waiting(global, deadline)).await? else {
        return Ok(Exit::Interrupted.into());
    };
    let journal = match opened {
        Ok(journal) => journal,
        Err(Unopened::Unreachable(err)) => {
            output::note(&format!(
                "cannot reach the database within the timeout, so run {id} was not read: {err:#}"
            ));
            return Ok(Exit::TimedOut.into());
        }
        Err(Unopened::Failed(err)) => return Err(err),
    };
    let left = deadline.map(|at| at.saturating_duration_since(tokio::time::Instant::now()));
    let result = wait_on(global, &journal, id, left).await;
    journal.close().await;
    result
}

/// Why [`open_waiting`] did not open the journal.
enum Unopened {
    /// The database could not be reached before the deadline.
    Unreachable(anyhow::Error),
    /// Anything else.
    Failed(anyhow::Error),
}

/// The journal, opened again while the database cannot be reached (a connection refused
/// or cut: a server restarting) until `deadline` passes.
async fn open_waiting(
    global: &GlobalArgs,
    deadline: Option<tokio::time::Instant>,
) -> Result<agent_journal::Journal, Unopened> {
    let mut delay = std::time::Duration::from_millis(100);
    let mut said = false;
    loop {
        let err = match crate::db::open_journal_for_reading(global).await {
            Ok(journal) => return Ok(journal),
            Err(err) if out_of_reach(&err) => err,
            Err(err) => return Err(Unopened::Failed(err)),
        };
        let now = tokio::time::Instant::now();
        if deadline.is_some_and(|at| at <= now) {
            return Err(Unopened::Unreachable(err));
        }
        if !said {
            output::note(&format!("{err:#}; waiting for the database"));
            said = true;
        }
        let wake = now + delay;
        tokio::time::sleep_until(deadline.map_or(wake, |at| at.min(wake))).await;
        delay = (delay * 2).min(std::time::Duration::from_secs(1));
    }
}

/// Whether `err` says the database did not answer (a connection refused, reset, cut or
/// timed out), which a moment later it may.
fn out_of_reach(err: &anyhow::Error) -> bool {
    use std::io::ErrorKind;
    err.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::NotConnected
                    | ErrorKind::BrokenPipe
                    | ErrorKind::TimedOut
                    | ErrorKind::UnexpectedEof
            )
        })
    })
}

async fn wait_on(
    global: &GlobalArgs,
    journal: &agent_journal::Journal,
    id: &str,
    timeout: Option<std::time::Duration>,
) -> anyhow::Result<ExitCode> {
    use agent_host::run::wait::{StopAt, WaitEnd, wait_until};
    let waited = wait_until(journal, id, timeout, StopAt::StoppedOrWaiting);
    let Some(end) = until_signal(waited).await? else {
        return Ok(Exit::Interrupted.into());
    };
    let state = match end? {
        WaitEnd::Unreachable(err) => {
            output::note(&format!(
                "cannot read run {id} within the timeout (the database is out of reach): {err}"
            ));
            return Ok(Exit::TimedOut.into());
        }
        WaitEnd::Stopped(state) => state,
        WaitEnd::TimedOut(state) => {
            let status = shown_status(journal, &state).await;
            if global.json {
                // A script reading stdout gets the status it waited on, as for a stop.
                output::json_line(&RunSummary::of(&state, status, now_ms()))?;
            }
            output::note(&format!("run {id} is still {status} after the timeout"));
            return Ok(Exit::TimedOut.into());
        }
    };
    // The event the wait stopped at says how: the worker that wrote `run.paused` may still
    // hold the lease for a moment, which the lease-aware status would show as `running`.
    let status = if agent_host::run::wait::has_stopped(state.recorded_status()) {
        state.status()
    } else {
        shown_status(journal, &state).await
    };
    let line = RunSummary::of(&state, status, now_ms());
    if global.json {
        output::json_line(&line)?;
    } else {
        output::line(&format!(
            "{}  {status}{}",
            state.id(),
            state
                .final_text()
                .or(state.status_detail())
                .map(|t| format!(": {t}"))
                .unwrap_or_default()
        ))?;
    }
    Ok(Exit::of_stopped(status, state.status_detail()).into())
}

/// The status `runs show` would give `state` (its lease read), or the journaled one when
/// the lease cannot be read within a second (the database gone for a moment): a wait that
/// ended owes its answer, not an error, and a `--timeout` is not stretched by the read.
async fn shown_status(
    journal: &agent_journal::Journal,
    state: &agent_host::run::RunState,
) -> agent_host::run::RunStatus {
    let read = status_with_lease(journal, state);
    match tokio::time::timeout(std::time::Duration::from_secs(1), read).await {
        Ok(Ok(status)) => status,
        Ok(Err(err)) => {
            tracing::warn!(%err, "runs wait: the run's lease could not be read");
            state.status()
        }
        Err(_elapsed) => state.status(),
    }
}

fn age(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s}s ago"),
        s if s < 7200 => format!("{}m ago", s / 60),
        s if s < 172_800 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86400),
    }
}

async fn show(
    global: &GlobalArgs,
    journal: &agent_journal::Journal,
    id: &str,
) -> anyhow::Result<ExitCode> {
    let state = run::load(journal, id).await?;
    let status = status_with_lease(journal, &state).await?;
    let mut view = RunView::of(&state, status, now_ms());
    view.children = agent_host::run::view::ChildView::of_run(journal, &state).await?;
    if global.json {
        output::json_line(&view)?;
        return Ok(ExitCode::SUCCESS);
    }
    let u = state.usage();
    output::line(&format!("run       {}", state.id()))?;
    output::line(&format!(
        "status    {status}{}",
        state
            .status_detail()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default()
    ))?;
    output::line(&format!(
        "prompt    {}",
        state.spec().map_or("", |s| s.prompt.as_str())
    ))?;
    output::line(&format!("steps     {}", state.step_count()))?;
    output::line(&format!(
        "usage     {} input ({} cached), {} output ({} reasoning), {} total",
        u.input_tokens, u.cached_tokens, u.output_tokens, u.reasoning_tokens, u.total_tokens
    ))?;
    for p in &view.pending_approvals {
        output::line(&format!(
            "pending   {} {} ({}): {}",
            p.call_id,
            p.tool,
            p.reason,
            global.suggest(&[
                "approve",
                state.id(),
                &p.call_id,
                "--sha256",
                &p.args_sha256,
                "--round",
                &p.round.to_string()
            ])
        ))?;
    }
    if let Some(parent) = &view.parent {
        output::line(&format!("parent    {parent}"))?;
    }
    for child in &view.children {
        output::line(&format!(
            "child     {}  {:<11} {}",
            child.run_id, child.status, child.title
        ))?;
        for p in &child.pending_approvals {
            output::line(&format!(
                "  pending {} {} ({}): {}",
                p.call_id,
                p.tool,
                p.reason,
                global.suggest(&[
                    "approve",
                    &child.run_id,
                    &p.call_id,
                    "--sha256",
                    &p.args_sha256,
                    "--round",
                    &p.round.to_string()
                ])
            ))?;
        }
    }
    if let Some(text) = state.final_text() {
        output::line(&format!("final     {text}"))?;
    }
    if let Some(parsed) = state.final_output() {
        output::line(&format!("output    {}", output::json_text(parsed)?))?;
    }
    if let Some(schema) = &view.output_schema {
        output::line(&format!(
            "schema    {} ({} of {} retries used)",
            schema.name, schema.retries_used, schema.retries
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn events(
    journal: &agent_journal::Journal,
    id: &str,
    follow: bool,
) -> anyhow::Result<ExitCode> {
    run::load(journal, id).await?;
    let thread = kinds::thread_of(id);
    let events = if follow {
        follow_thread(journal, &thread, 0).boxed()
    } else {
        journal.replay_stream(&thread, 0)
    };
    let print = async {
        let mut events = events;
        let mut conv = ExecJson::new(id);
        while let Some(event) = events.next().await {
            for line in conv.convert(&event?) {
                output::json_line(&line)?;
            }
        }
        anyhow::Ok(())
    };
    // Ctrl-C or SIGTERM ends the listing; what was printed stands.
    until_signal(print).await?.unwrap_or(Ok(()))?;
    Ok(ExitCode::SUCCESS)
}

/// Why [`search_in`] failed: the history index (the context store: opening it, or its
/// catch-up writes), or anything else (the journal, an unknown run).
enum SearchFailure {
    Index(anyhow::Error),
    Other(anyhow::Error),
}

impl From<SearchFailure> for anyhow::Error {
    fn from(failure: SearchFailure) -> Self {
        match failure {
            SearchFailure::Index(err) | SearchFailure::Other(err) => err,
        }
    }
}

/// How long the catch-up of `runs search` waits for another connection's write lock on a
/// SQLite file (the store's busy timeout; 5 s by default elsewhere). Only the catch-up
/// writes (reads never wait under WAL), and its writes only save a later search work: a
/// lock held longer (a long transaction of another process, a `sqlite3` shell inside
/// `BEGIN`) has the runs not held caught up derived in memory for this search instead (see
/// [`search`]), with a note, rather than the command waiting the full timeout first. Long
/// enough for the short transactions of hosts appending to the journal and of other
/// catch-ups (a run each, milliseconds) to pass.
const CATCH_UP_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Whether `err` says a SQLite lock was held past the busy timeout.
fn lock_held_too_long(err: &anyhow::Error) -> bool {
    use agent_context::DatabaseErrorKind;
    database_error_in(err, |db| db.kind() == DatabaseErrorKind::Timeout)
}

/// Whether the store's database said it cannot be written (a PostgreSQL hot standby, a
/// read-only transaction, a role with SELECT-only grants).
fn database_refuses_writes(err: &anyhow::Error) -> bool {
    database_error_in(err, agent_context::DatabaseError::refuses_writes)
}

/// Whether a context store's database error in `err`'s chain is one `what` says.
fn database_error_in(
    err: &anyhow::Error,
    what: impl Fn(&agent_context::DatabaseError) -> bool,
) -> bool {
    use agent_context::ContextError;
    use agent_host::run::history::HistoryError;
    let found = |c: &ContextError| match c {
        ContextError::Database(db) => what(db),
        _ => false,
    };
    err.chain().any(|e| {
        e.downcast_ref::<ContextError>().is_some_and(found)
            || e.downcast_ref::<HistoryError>()
                .is_some_and(|h| matches!(h, HistoryError::Context(c) if found(c)))
    })
}

/// Whether `url` names a SQLite file (whose locks [`CATCH_UP_LOCK_WAIT`] is about).
fn is_sqlite_file(url: &str) -> bool {
    url.starts_with("sqlite:") && !url.starts_with("sqlite::memory:")
}

/// Options for the history index of a SQLite file: locks held by another connection are
/// waited for [`CATCH_UP_LOCK_WAIT`].
fn index_options() -> agent_context::ContextOptions {
    agent_context::ContextOptions {
        busy_timeout: CATCH_UP_LOCK_WAIT,
        ..agent_context::ContextOptions::default()
    }
}

/// The history index at `url` for the catch-up (see [`index_options`]).
async fn open_index(url: &str) -> anyhow::Result<agent_context::ContextStore> {
    if !is_sqlite_file(url) {
        return crate::db::open_context_at(url).await;
    }
    let options = index_options();
    // The journal at the same URL opened already: what `--db` names is a database file.
    agent_context::ContextStore::open_with(url, options)
        .await
        .map_err(|err| output::with_hint(err, crate::db::DB_HINT))
}

/// The hits for `term` with the history index (the context store) at `store_url`; with
/// `earlier`, runs it holds caught up are searched there (see
/// [`agent_host::run::history::search_beside`]).
async fn search_in(
    journal: &agent_journal::Journal,
    earlier: Option<&agent_context::ContextStore>,
    store_url: &str,
    run: Option<&str>,
    term: &str,
    limit: usize,
) -> Result<agent_host::run::history::Searched, SearchFailure> {
    use agent_host::run::history::{self, HistoryError};
    let store = open_index(store_url).await.map_err(SearchFailure::Index)?;
    let searched = history::search_beside(journal, earlier, &store, run, term, limit).await;
    store.close().await;
    searched.map_err(|err| match err {
        HistoryError::Context(_) => SearchFailure::Index(err.into()),
        _ => SearchFailure::Other(err.into()),
    })
}

async fn search(
    global: &GlobalArgs,
    journal: &agent_journal::Journal,
    first: String,
    second: Option<String>,
    all: bool,
    limit: u64,
) -> anyhow::Result<ExitCode> {
    let (run, term) = match (all, second) {
        (true, None) => (None, first),
        (false, Some(term)) => (Some(first), term),
        (true, Some(_)) => {
            return Err(output::UsageError(
                "with --all, give only the term: agentctl runs search --all TERM".into(),
            )
            .into());
        }
        (false, None) => {
            return Err(output::UsageError(
                "give a run and a term (agentctl runs search RUN TERM), or --all TERM".into(),
            )
            .into());
        }
    };
    if term.is_empty() {
        return Err(output::UsageError("the search term is empty".into()).into());
    }
    let limit = usize::try_from(limit).unwrap_or(50);
    let url = global.database_url()?;
    let run = run.as_deref();
    let hits = match search_in(journal, None, &url, run, &term, limit).await {
        // The history index is derived from the journal: where the file cannot take its
        // writes (a full disk, a read-only file), the runs it holds caught up are searched
        // there, read-only, and the others derived into memory for this search. So too
        // where another connection holds the write lock longer than the catch-up waits.
        Err(SearchFailure::Index(err)) => {
            let why = match crate::db::unwritable(&url) {
                Some(why) => why,
                None if is_sqlite_file(&url) && lock_held_too_long(&err) => format!(
                    "another connection held the database's write lock for over {} ms",
                    CATCH_UP_LOCK_WAIT.as_millis()
                ),
                None if database_refuses_writes(&err) => {
                    "the database refuses writes (a read-only transaction or role)".into()
                }
                None => return Err(err),
            };
            // Only read (a store without the history tables yet is no help, and making them
            // would wait for the lock again).
            let earlier = if is_sqlite_file(&url) {
                let options = index_options().access(agent_context::Access::ReadOnlyWhenUnwritable);
                agent_context::ContextStore::open_with(&url, options)
                    .await
                    .ok()
            } else {
                crate::db::open_context_for_reading(global).await.ok()
            };
            let searched = search_in(
                journal,
                earlier.as_ref(),
                "sqlite::memory:",
                run,
                &term,
                limit,
            )
            .await;
            if let Some(earlier) = &earlier {
                earlier.close().await;
            }
            let searched = searched?;
            // Said with the hits it explains; an error (an unknown run) stands alone.
            output::note(&format!(
                "note: {why}, so the history of {} run(s) not indexed before was derived in memory for this search (not kept)",
                searched.caught_up
            ));
            searched.hits
        }
        found => found?.hits,
    };
    for hit in hits {
        if global.json {
            output::typed_line("runs.search.hit", &hit)?;
        } else {
            let what = match &hit.tool {
                Some(tool) => format!("tool {tool}"),
                None => hit.kind.to_string(),
            };
            output::line(&format!(
                "{}  step {:>3}  {:<16} {}",
                hit.run_id, hit.step, what, hit.snippet
            ))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
