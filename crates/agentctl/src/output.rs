//! Printing results and errors: the only module that writes to stdout or stderr.
//!
//! Invariants: stdout carries results only; with `--json` each result is one JSON object on
//! one line whose first key is a string `type` naming its shape (`docs/cli-json.md`), with
//! snake_case keys of our own (payloads relayed verbatim, such as Codex notifications or
//! Responses API items, keep their own keys). Progress, notes and errors go to stderr.

// The crate root denies printing everywhere else; this module is where it happens.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write as _;
use std::process::ExitCode;

use serde::Serialize;
use serde_json::{Map, Value};

/// Print one JSON value as a single line on stdout.
pub fn json_line<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// `value` as a JSON object whose first key is `"type": kind`. An object keeps its keys (a
/// `type` of its own is replaced); anything else is put under `value`.
pub fn typed(kind: &str, value: impl Serialize) -> anyhow::Result<Value> {
    let mut object = Map::new();
    object.insert("type".into(), Value::from(kind));
    match serde_json::to_value(value)? {
        Value::Object(fields) => {
            for (key, field) in fields {
                if key != "type" {
                    object.insert(key, field);
                }
            }
        }
        other => {
            object.insert("value".into(), other);
        }
    }
    Ok(Value::Object(object))
}

/// Print `value` as one JSON line of shape `kind` (see [`typed`]).
pub fn typed_line(kind: &str, value: impl Serialize) -> anyhow::Result<()> {
    json_line(&typed(kind, value)?)
}

/// Print a line of text on stdout.
pub fn line(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// Print a line of text on stderr (progress and next steps; stdout keeps the results).
/// A closed stderr is ignored: there is nobody to tell.
pub fn note(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.write_all(b"\n");
    let _ = err.flush();
}

/// Print text on stderr without a newline (a question whose answer is typed after it).
pub fn ask(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Print a piece of streamed text on stdout as it arrives (no newline added).
pub fn stream(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// A usage error found after parsing (an empty prompt, a workspace that is not a
/// directory, an unknown status): exit status 2, like clap's own usage errors.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A hint attached to an error with [`with_hint`]; printed after the error line.
#[derive(Debug)]
pub struct Hint(pub String);

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Hint {}

/// Wrap `err` so that the CLI prints `hint` below the error line.
pub fn with_hint(err: impl Into<anyhow::Error>, hint: impl Into<String>) -> anyhow::Error {
    err.into().context(HintedContext(hint.into()))
}

/// Context marker carrying a hint; it does not change the error's message.
#[derive(Debug)]
struct HintedContext(String);

impl std::fmt::Display for HintedContext {
    fn fmt(&self, _f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }
}

/// True when the error is stdout's reader closing the pipe (also when it reached us
/// wrapped in a JSON serialisation error).
fn reader_went_away(err: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .is_some_and(|json| json.io_error_kind() == Some(BrokenPipe))
    })
}

/// Print `error: ...` (causes joined on one line) and a hint, and return a failure status.
pub fn report_error(err: &anyhow::Error) -> ExitCode {
    report_error_masking(err, None)
}

/// [`report_error`], with every password of the database URL `db` masked in what is printed.
pub fn report_error_masking(err: &anyhow::Error, db: Option<&str>) -> ExitCode {
    if reader_went_away(err) {
        // `agentctl ... | head`: the reader has what it wanted; nothing failed.
        return ExitCode::SUCCESS;
    }
    let hint = err
        .downcast_ref::<HintedContext>()
        .map(|h| h.0.clone())
        .or_else(|| {
            err.chain()
                .find_map(|e| e.downcast_ref::<Hint>().map(|h| h.0.clone()))
        })
        .unwrap_or_else(|| "run with --help for usage, or RUST_LOG=debug for details".into());
    // No error of any command prints the API key, whoever quoted it (a server's message).
    let message = agent_host::tools::mask_key(agent_schema::one_line(err.as_ref()));
    // The message quotes whatever a driver or server said: the database's passwords are
    // masked in it. A hint is our own text, constant (`postgres://USER:PASS@HOST/DB` must
    // read as written whatever the password is) or built from parts already masked where
    // it was made (`db.rs`); a quotation of the URL is still shown redacted, which changes
    // no constant text.
    let (message, hint) = match db {
        Some(url) if !url.is_empty() => (
            agent_redact::redact_in(&message, url),
            hint.replace(url, &agent_redact::redact_url(url)),
        ),
        _ => (message, hint),
    };
    eprintln!("error: {message}");
    eprintln!("hint: {hint}");
    let usage = |e: &(dyn std::error::Error + 'static)| {
        e.downcast_ref::<UsageError>().is_some()
            || e.downcast_ref::<agent_host::HostError>()
                .is_some_and(agent_host::HostError::is_usage)
            // Transparent: the host's error is not a cause of it but the error itself.
            || e.downcast_ref::<agent_host::run::history::HistoryError>()
                .is_some_and(|h| {
                    matches!(h, agent_host::run::history::HistoryError::Host(h) if h.is_usage())
                })
    };
    if err.chain().any(usage) {
        crate::exit::Exit::Usage.into()
    } else {
        crate::exit::Exit::Failed.into()
    }
}
