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

/// Print one JSON value as a single line on stdout, safe on a terminal ([`TerminalSafe`]).
pub fn json_line<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    write_terminal_safe(&mut out, value)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// `value` as compact JSON on `out`, with [`TerminalSafe`]'s escapes.
fn write_terminal_safe<W: std::io::Write, T: Serialize + ?Sized>(
    out: W,
    value: &T,
) -> serde_json::Result<()> {
    value.serialize(&mut serde_json::Serializer::with_formatter(
        out,
        TerminalSafe,
    ))
}

/// Compact JSON whose strings hold no character a terminal acts on: the encoder escapes C0
/// only, so DEL, C1 (U+009B starts a control sequence on some terminals), the bidirectional
/// overrides and isolates, and the line and paragraph separators are written as `\uXXXX`
/// escapes too. The value read back is the same.
struct TerminalSafe;

impl serde_json::ser::Formatter for TerminalSafe {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (at, c) in fragment.char_indices() {
            if terminal_acts_on(c) {
                writer.write_all(&fragment.as_bytes()[start..at])?;
                write!(writer, "\\u{:04x}", u32::from(c))?;
                start = at + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

/// Whether a terminal may act on `c` rather than show it: controls but newline and tab,
/// the bidirectional overrides and isolates, the line and paragraph separators.
fn terminal_acts_on(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
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

/// `text` safe to show on a terminal: every control character but newline and tab (C0,
/// DEL, C1; ESC above all) written out visibly (`\x1b`, `\r`, `\u{9b}`), so that text
/// from a model, a tool, a prompt or a journal cannot move the cursor, clear the screen,
/// set the window title or overwrite what was printed before it. So are the bidirectional
/// overrides and isolates (U+202A-202E, U+2066-2069), which reorder how the rest of a line
/// reads (a prompt could show as another), and the line and paragraph separators; the
/// plain direction marks of right-to-left text stay.
///
/// Every human (non-JSON) line goes through here ([`line()`], [`note`], [`ask`], [`stream`],
/// the error line); JSON output ([`json_line`], [`json_text`]) writes the same characters
/// as JSON escapes instead.
pub fn display(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(terminal_acts_on) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\r' => shown.push_str("\\r"),
            c if terminal_acts_on(c) && u32::from(c) < 0x80 => {
                shown.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if terminal_acts_on(c) => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => shown.push(c),
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// `text` as one field of a human line (a name listed one per line, or before a tab):
/// line breaks and tabs written out (`\n`, `\t`), and a backslash doubled so that a name
/// holding those two characters reads apart from one holding a break. The rest as
/// [`display`] shows it when the line is printed.
pub fn field(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(['\n', '\t', '\\']) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => shown.push_str("\\n"),
            '\t' => shown.push_str("\\t"),
            '\\' => shown.push_str("\\\\"),
            c => shown.push(c),
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// `value` as compact JSON text with no control character in it at all: the encoder
/// escapes C0 but leaves DEL and C1 as they are, which [`display`] would then write in a
/// form JSON does not read; here they are JSON escapes (`\u009b`), the same value. For JSON
/// printed in human output ([`line()`]), such as a run's parsed answer piped to `jq`.
pub fn json_text<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::new();
    write_terminal_safe(&mut out, value)?;
    // The encoder writes UTF-8 only; the lossy form never changes it.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Print a line of text on stdout (control characters shown escaped: [`display`]).
pub fn line(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(display(text).as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// Print a line of text on stderr (progress and next steps; stdout keeps the results).
/// A closed stderr is ignored: there is nobody to tell. Control characters are shown
/// escaped ([`display`]).
pub fn note(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(display(text).as_bytes());
    let _ = err.write_all(b"\n");
    let _ = err.flush();
}

/// Print text on stderr without a newline (a question whose answer is typed after it;
/// control characters shown escaped: [`display`]).
pub fn ask(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(display(text).as_bytes());
    let _ = err.flush();
}

/// Print a piece of streamed text on stdout as it arrives (no newline added; control
/// characters shown escaped: [`display`]).
pub fn stream(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(display(text).as_bytes())?;
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

/// A failure to listen on `addr` (`error`, said as `what`), with a hint naming `flag` when
/// another process holds the address.
pub fn listen_error(
    error: impl std::error::Error + Send + Sync + 'static,
    in_use: bool,
    what: String,
    addr: impl std::fmt::Display,
    flag: &str,
) -> anyhow::Error {
    let err = anyhow::Error::new(error).context(what);
    if in_use {
        with_hint(
            err,
            format!(
                "another process listens on {addr}: give {flag} another port, or port 0 for a free one"
            ),
        )
    } else {
        err
    }
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

/// The hint `err` carries ([`with_hint`], or a [`Hint`] among its causes), if any.
fn hint_of(err: &anyhow::Error) -> Option<String> {
    err.downcast_ref::<HintedContext>()
        .map(|h| h.0.clone())
        .or_else(|| {
            err.chain()
                .find_map(|e| e.downcast_ref::<Hint>().map(|h| h.0.clone()))
        })
}

/// `err` on one line for a record that has no room for a separate hint (a worker's
/// `ended` detail, an HTTP error): causes joined by `: ` and the hint, if any, after `; `.
pub fn error_line(err: &anyhow::Error) -> String {
    let message = agent_schema::one_line(err.as_ref());
    match hint_of(err) {
        Some(hint) => format!("{message}; {hint}"),
        None => message,
    }
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
    let usage = |e: &(dyn std::error::Error + 'static)| {
        e.downcast_ref::<UsageError>().is_some()
            // `--db` names nothing the journal understands.
            || e.downcast_ref::<agent_journal::JournalError>()
                .is_some_and(|j| matches!(j, agent_journal::JournalError::InvalidUrl { .. }))
            // Nor `--base-url` / `OPENAI_BASE_URL` anything a client can use.
            || e.downcast_ref::<agent_responses::ClientError>()
                .is_some_and(|c| matches!(c, agent_responses::ClientError::InvalidBaseUrl(_)))
            || e.downcast_ref::<agent_responses::ws::WsError>()
                .is_some_and(|w| matches!(w, agent_responses::ws::WsError::InvalidBaseUrl(_)))
            || e.downcast_ref::<agent_host::HostError>()
                .is_some_and(agent_host::HostError::is_usage)
            // What `history` and `memory` were given (a name, a term, items, a time).
            || e.downcast_ref::<agent_context::ContextError>()
                .is_some_and(agent_context::ContextError::is_input_refused)
            // Transparent: the host's error is not a cause of it but the error itself.
            || e.downcast_ref::<agent_host::run::history::HistoryError>()
                .is_some_and(|h| {
                    use agent_host::run::history::HistoryError;
                    match h {
                        HistoryError::Host(h) => h.is_usage(),
                        // `runs search`'s term, refused by the store as `history search`'s is.
                        HistoryError::Context(c) => c.is_input_refused(),
                        _ => false,
                    }
                })
    };
    let is_usage = err.chain().any(usage);
    // `--help` only for what the command line got wrong: a journal or network failure is
    // not a usage question.
    // The host's journal errors are transparent: not causes, so looked for by type.
    let writer_failed = err.chain().any(|e| {
        use agent_journal::JournalError::WriterFailed;
        e.downcast_ref::<agent_journal::JournalError>()
            .is_some_and(|j| matches!(j, WriterFailed(_)))
            || e.downcast_ref::<agent_host::HostError>()
                .is_some_and(|h| matches!(h, agent_host::HostError::Journal(WriterFailed(_))))
    });
    let hint = hint_of(err).unwrap_or_else(|| {
        if writer_failed {
            // Nothing after the failed write was journaled (the journal's contract).
            "the database refused a write and took nothing after it; once it accepts writes again (a full disk freed), run the command again".into()
        } else if is_usage {
            "run with --help for usage, or RUST_LOG=debug for details".into()
        } else {
            "RUST_LOG=debug shows details".into()
        }
    });
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
    // Not `eprintln!`, which panics (exit 101) when stderr is a closed pipe (`2>&1 | true`):
    // the exit code below is what a script sees either way.
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "error: {}", display(&message));
    let _ = writeln!(stderr, "hint: {}", display(&hint));
    if is_usage {
        crate::exit::Exit::Usage.into()
    } else {
        crate::exit::Exit::Failed.into()
    }
}

#[cfg(test)]
mod tests {
    use super::{display, field};

    /// A thread named `a<newline>b` listed one per line read as two threads, and a tab in
    /// it moved the `units` column of `history threads`.
    #[test]
    fn a_field_keeps_to_its_line_and_column() {
        assert_eq!(field("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(field("a\\nb"), "a\\\\nb");
        assert_ne!(field("a\nb"), field("a\\nb"));
        assert!(matches!(field("run:é ✓"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn control_characters_are_shown_escaped_but_newlines_and_tabs_kept() {
        assert_eq!(display("plain é ✓\tcol\nnext"), "plain é ✓\tcol\nnext");
        assert!(matches!(display("plain"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(
            display("\u{1b}]0;HACKED\u{7}\u{1b}[2J"),
            "\\x1b]0;HACKED\\x07\\x1b[2J"
        );
        assert_eq!(display("a\rb\u{8}\u{0}\u{7f}"), "a\\rb\\x08\\x00\\x7f");
        // C1: CSI and OSC on their own, as some terminals read them.
        assert_eq!(display("\u{9b}2J\u{9d}0;t"), "\\u{9b}2J\\u{9d}0;t");
        // Bidirectional overrides and isolates, line separators; a direction mark stays.
        assert_eq!(
            display("a\u{202e}cba\u{2066}x\u{2069}\u{2028}\u{200f}"),
            "a\\u{202e}cba\\u{2066}x\\u{2069}\\u{2028}\u{200f}"
        );
    }

    #[test]
    fn json_text_has_no_control_character_and_reads_back_the_same() {
        let value = serde_json::json!({
            "a\u{9b}": "x\u{7f}\u{1b}[2J\u{85}\n\u{202e}evil\u{2069}\u{2028}é数", "n": 1});
        let text = super::json_text(&value).unwrap();
        assert!(!text.chars().any(super::terminal_acts_on), "{text}");
        assert!(text.contains(r"\u202e") && text.contains(r"\u009b") && text.contains("é数"));
        assert_eq!(display(&text), text);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            value
        );
    }
}
