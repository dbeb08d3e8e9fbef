//! `agentctl`: a thin CLI that composes the workspace crates.
//!
//! Invariants: stdout carries results only (with `--json`, one JSON value per line), logs
//! and diagnostics go to stderr, and every failure is one line of error plus a hint with a
//! non-zero exit status. No domain logic lives here.

// Everything printed goes through `output` (which allows it), so stdout stays parseable.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod capped;
mod cmd;
mod db;
mod exit;
mod global;
mod log_writer;
mod output;

use clap::{Parser, Subcommand};

use crate::global::GlobalArgs;

/// Journals and replays allocate many small values freed on other threads; jemalloc keeps
/// that cheap where glibc's per-thread arenas trim and re-fault memory on every long replay.
/// Its options are built in (`.cargo/config.toml`): one arena per CPU, and freed pages
/// returned to the OS within a second, which is what bounds many concurrent runs' memory.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Run agent turns durably against the OpenAI Responses API and the Codex app-server.
#[derive(Debug, Parser)]
#[command(name = "agentctl", version, long_about = None, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an agent on the Responses API: durable, approvable, resumable after a crash.
    /// Exit status: 0 completed, 1 failed (also a request the API refused, 400, 401, 403,
    /// 404 or 422: the run is paused and `resume` asks again once something changed), 2
    /// usage, 3 paused (also a model call that failed after its retries: a connection,
    /// 408, 409, 429, 5xx), 130 interrupted.
    Run(cmd::run::RunArgs),
    /// Continue a paused, interrupted or crashed run from its journal.
    Resume(cmd::run::ResumeArgs),
    /// Queue a run for a worker (`agentctl worker`) and print its id; no model call here.
    Submit(cmd::run::SubmitArgs),
    /// Drive queued runs, and runs whose worker died, until SIGINT/SIGTERM. Many workers,
    /// on many machines, share one PostgreSQL (--db); each run is leased to one at a time.
    Worker(cmd::run::worker::WorkerArgs),
    /// Approve a call a run is waiting on (from any terminal).
    Approve(cmd::decide::ApproveArgs),
    /// Deny a call a run is waiting on; the model is told why.
    Deny(cmd::decide::DecideArgs),
    /// Steer a run from any terminal: the model reads TEXT before its next step (on the WebSocket transport, in the response streaming now when the server takes it).
    Steer(cmd::decide::SteerArgs),
    /// Ask the host driving a run to interrupt it (as soon as it sees the request: a running tool or a streaming response is stopped then); a run queued for the workers is withdrawn from their queue (`resume` takes it up later).
    Interrupt(cmd::decide::InterruptArgs),
    /// List runs, show one, print its events, wait for one, search their history.
    #[command(subcommand)]
    Runs(cmd::runs::RunsCmd),
    /// Inspect the durable event journal: list threads, replay or follow one.
    #[command(subcommand)]
    Journal(cmd::journal::JournalCmd),
    /// Conversation history kept in whole units: append, window, search (agent-context).
    #[command(subcommand)]
    History(cmd::history::HistoryCmd),
    /// Long-term memory with provenance: recall, add evidence, revoke a source, consolidate.
    #[command(subcommand)]
    Memory(cmd::memory::MemoryCmd),
    /// Runnable stories that show what the crates guarantee (`demo memory`, ...).
    #[command(subcommand)]
    Demo(cmd::demo::DemoCmd),
    /// Check that an external agent server starts and speaks our protocol (`probe codex`).
    #[command(subcommand)]
    Probe(cmd::probe::ProbeCmd),
    /// Drive the Codex CLI through `codex app-server`: run one whole turn.
    #[command(subcommand)]
    Codex(cmd::codex::CodexCmd),
    /// The OpenAI Responses API stories: `api direct|ptc|async|compact|steer [--mock]`.
    #[command(subcommand)]
    Api(cmd::api::ApiCmd),
    /// The local Responses API emulator: `mock serve [--addr] [--script FILE]`.
    #[command(subcommand)]
    Mock(cmd::mock::MockCmd),
    /// The HTTP API and web console over --db: runs live, approvals, steers, interrupts and
    /// submits from a browser or any language (docs/http-api.md). Prints a sign-in link.
    Serve(cmd::serve::ServeArgs),
    /// Trust a workspace's agentctl.toml as it reads now: until then, what it asks that
    /// lowers a run's protections (MCP servers, the sandbox off, the network, writable
    /// paths, tools that stop asking) is refused. `--list`, `--forget`.
    Trust(cmd::trust::TrustArgs),
    /// Run one command under the sandbox a run's `shell` uses, to see what it allows:
    /// `agentctl sandbox [--mode M] [--network] -- CMD ARGS...`. Exit status: the
    /// command's; 125 when the sandbox could not be applied (nothing ran).
    Sandbox(cmd::sandbox::SandboxArgs),
}

/// The runtime every command runs on, once a panic for want of a thread ends the process.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    exit_when_threads_are_refused();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// Tokio panics where the system refuses it a thread (a process limit: `ulimit -u`, a
/// container's `pids.max`), starting the runtime or a blocking task (opening a SQLite
/// journal), and unwinding from the runtime's start waits for ever on its half-started
/// workers. Such a panic ends the process at once, exit 1, with an error that says why;
/// every other panic is reported as before.
fn exit_when_threads_are_refused() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let said = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if !said.starts_with("OS can't spawn") {
            return previous(info);
        }
        output::note(&format!(
            "error: the system refuses agentctl a thread ({said}); a process limit \
             (`ulimit -u`, a container's pids.max) leaves it too few"
        ));
        std::process::exit(1);
    }));
}

fn main() -> std::process::ExitCode {
    // A sandboxed command's entry point: before anything else, and while this process is
    // still single-threaded (a user namespace cannot be entered otherwise).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == agent_sandbox::ENTRY) {
        return cmd::sandbox::entry(&args[2..]);
    }
    if args.get(1).is_some_and(|a| a == agent_sandbox::INIT) {
        return std::process::ExitCode::from(agent_sandbox::init_main(&args[2..]));
    }
    // jemalloc returns freed pages from background threads, not from the threads that free
    // them (a 100k-event replay: ~40 ms instead of ~65). Started only now: the entry above
    // must run single-threaded.
    if let Err(err) = tikv_jemalloc_ctl::background_thread::write(true) {
        output::note(&format!(
            "warning: cannot start jemalloc's background threads: {err}"
        ));
    }
    // This process may start commands (a run's `shell`, MCP servers): keep its /proc files
    // (its environment holds the API key) out of their reach even unsandboxed.
    if let Err(err) = agent_sandbox::hide_this_process() {
        output::note(&format!(
            "warning: cannot mark agentctl non-dumpable: {err}"
        ));
    }
    let cli = parse();
    init_tracing();
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(err) => return output::report_error(&anyhow::Error::new(err)),
    };
    // A file size limit (`ulimit -f`) is met as an error (EFBIG: "... a file size limit
    // reached?") instead of a kill by SIGXFSZ in the middle of a commit. A handler, not
    // SIG_IGN: the commands this process starts get the default back when they exec.
    {
        let _in_runtime = runtime.enter();
        let xfsz =
            tokio::signal::unix::SignalKind::from_raw(rustix::process::Signal::XFSZ.as_raw());
        if let Err(err) = tokio::signal::unix::signal(xfsz) {
            tracing::debug!(%err, "cannot handle SIGXFSZ");
        }
    }
    // Libraries mask the passwords they show; the error line masks them again, since a
    // message built anywhere (a driver, a dependency) may quote `--db`.
    let db = cli.global.db.clone();
    let result = runtime.block_on(run(cli));
    // A tool stuck in a blocking read (a FIFO, a hung mount) must not keep the process
    // from exiting once the command is done.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    global::note_masked_password();
    match result {
        Ok(code) => code,
        Err(err) => output::report_error_masking(&err, db.as_deref()),
    }
}

/// The command line, as `Cli::parse` reads it, knowing also whether `--db` came from
/// `AGENTCTL_DB` (printed commands then leave it to the environment).
fn parse() -> Cli {
    use clap::{CommandFactory as _, FromArgMatches as _};
    // `submit` records no stream idle timeout (the worker's own applies; `submit` refuses
    // the flag), so its help does not offer it.
    let command = negative_values(Cli::command()).mut_subcommand("submit", |submit| {
        submit.mut_arg("stream_idle_timeout", |arg| arg.hide(true))
    });
    let matches = command.get_matches();
    let mut cli = Cli::from_arg_matches(&matches)
        .unwrap_or_else(|err| err.format(&mut Cli::command()).exit());
    cli.global.db_from_env =
        matches.value_source("db") == Some(clap::parser::ValueSource::EnvVariable);
    cli
}

/// `cmd` with every `--flag VALUE` taking a value that reads as a negative number, so that
/// `--max-age -1` is refused for its value, naming the flag and what it takes, rather than
/// as "unexpected argument '-1' found".
fn negative_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| {
        if arg.get_long().is_some() && arg.get_action().takes_values() {
            arg.allow_negative_numbers(true)
        } else {
            arg
        }
    })
    .mut_subcommands(negative_values)
}

async fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    match cli.command {
        Command::Run(args) => cmd::run::run(&cli.global, args).await,
        // Boxed: a resume future carries the run's whole fold.
        Command::Resume(args) => Box::pin(cmd::run::resume(&cli.global, args)).await,
        Command::Submit(args) => cmd::run::submit(&cli.global, args).await,
        Command::Worker(args) => cmd::run::worker::worker(&cli.global, args).await,
        Command::Approve(args) => {
            cmd::decide::decide(&cli.global, args.decide, true, args.always).await
        }
        Command::Deny(args) => cmd::decide::decide(&cli.global, args, false, false).await,
        Command::Steer(args) => cmd::decide::steer(&cli.global, args).await,
        Command::Interrupt(args) => cmd::decide::interrupt(&cli.global, args).await,
        Command::Runs(cmd) => cmd::runs::run(&cli.global, cmd).await,
        Command::Journal(cmd) => cmd::journal::run(&cli.global, cmd).await,
        Command::History(cmd) => cmd::history::run(&cli.global, cmd).await,
        Command::Memory(cmd) => cmd::memory::run(&cli.global, cmd).await,
        Command::Demo(cmd) => cmd::demo::run(&cli.global, cmd).await,
        Command::Probe(cmd) => cmd::probe::run(&cli.global, cmd).await,
        Command::Codex(cmd) => cmd::codex::run(&cli.global, cmd).await,
        Command::Api(cmd) => cmd::api::run(&cli.global, cmd).await,
        Command::Mock(cmd) => cmd::mock::run(&cli.global, cmd).await,
        Command::Sandbox(args) => cmd::sandbox::sandbox(args),
        Command::Serve(args) => cmd::serve::serve(&cli.global, args).await,
        Command::Trust(args) => cmd::trust::trust(&cli.global, args),
    }
}

/// Logs go to stderr at `RUST_LOG`'s levels (default `warn`), through two filters that must
/// both let an event pass: what `RUST_LOG` asks for, and a cap that can only take events away.
///
/// The cap exists because tungstenite traces each WebSocket handshake request verbatim,
/// `authorization: Bearer` header included, so nothing below `debug` from its handshake
/// module may pass at any `RUST_LOG`. It is a separate filter, not a directive added to the
/// `RUST_LOG` one: a directive would set that target's level (raising it above the default
/// `warn`), where the cap only lowers it.
fn init_tracing() {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::filter::{EnvFilter, FilterExt as _, LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let requested = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let key_safe = Targets::new()
        .with_default(LevelFilter::TRACE)
        .with_target("tungstenite::handshake", LevelFilter::DEBUG);
    let stderr_log = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(log_writer::SafeStderr)
        .with_filter(requested.and(key_safe));
    tracing_subscriber::registry().with(stderr_log).init();
}
