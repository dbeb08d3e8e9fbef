//! What a user hands a command (a prompt on stdin, a file a flag names), read with a bound:
//! an endless pipe or a huge file is refused as a usage error once it passes the bound,
//! instead of being read into memory until the machine runs out of it.

use std::io::Read;
use std::path::Path;

use crate::output::UsageError;

/// `source` whole, as UTF-8 text, when it holds at most `max` bytes; `what` names it in
/// the error ("the prompt on stdin", "--instructions-file F").
pub fn read_text(source: impl Read, max: usize, what: &str) -> Result<String, UsageError> {
    read_text_or(source, max, what, || {
        format!("{what} is over {max} bytes, more than a run can record")
    })
}

/// [`read_text`], with `over()` the error's message when `source` holds more than `max`
/// bytes.
pub fn read_text_or(
    source: impl Read,
    max: usize,
    what: &str,
    over: impl FnOnce() -> String,
) -> Result<String, UsageError> {
    let mut bytes = Vec::new();
    let bound = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    source
        .take(bound)
        .read_to_end(&mut bytes)
        .map_err(|err| UsageError(format!("cannot read {what}: {err}")))?;
    if bytes.len() > max {
        return Err(UsageError(over()));
    }
    String::from_utf8(bytes).map_err(|_| UsageError(format!("{what} is not UTF-8 text")))
}

/// The file at `path` as UTF-8 text, when it holds at most `max` bytes (see [`read_text`]).
pub fn read_file(path: &Path, max: usize, what: &str) -> Result<String, UsageError> {
    let file = std::fs::File::open(path)
        .map_err(|err| UsageError(format!("cannot read {what}: {err}")))?;
    read_text(file, max, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_within_the_bound_is_read_and_more_is_refused_unread() {
        assert_eq!(read_text(&b"hello"[..], 5, "x").unwrap(), "hello");
        let err = read_text(&b"hello!"[..], 5, "the prompt").unwrap_err();
        assert!(err.0.contains("the prompt is over 5 bytes"), "{err}");
        // An endless source stops at the bound.
        let err = read_text(std::io::repeat(b'a'), 1 << 20, "stdin").unwrap_err();
        assert!(err.0.contains("over 1048576 bytes"), "{err}");
        let err = read_text(&[0xff, 0xfe][..], 5, "the prompt").unwrap_err();
        assert!(err.0.contains("not UTF-8"), "{err}");
        let err = read_file(Path::new("/nonexistent/f"), 5, "--instructions-file F").unwrap_err();
        assert!(err.0.contains("cannot read --instructions-file F"), "{err}");
    }
}
