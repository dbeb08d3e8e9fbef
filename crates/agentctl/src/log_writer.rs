//! Where the tracing log goes: stderr, each line with the API key masked and control
//! characters shown escaped.
//!
//! Invariant: no log line carries the key or a terminal control sequence, whatever a field
//! quotes (a server's error body, a tool's output, a file name): libraries log errors as
//! they get them, and masking at each call site would miss the next one. The log is
//! written without colours for the same reason: escapes of our own would be escaped too.

/// A [`tracing_subscriber::fmt::MakeWriter`] of [`SafeLine`]s on stderr.
pub struct SafeStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for SafeStderr {
    type Writer = SafeLine;

    fn make_writer(&'a self) -> SafeLine {
        SafeLine
    }
}

/// One log event's text (the formatter writes an event in one call), cleaned and passed to
/// stderr.
pub struct SafeLine;

impl std::io::Write for SafeLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = agent_host::tools::mask_key(String::from_utf8_lossy(buf).into_owned());
        std::io::stderr().write_all(crate::output::display(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
