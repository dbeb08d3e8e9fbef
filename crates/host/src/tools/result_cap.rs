//! How much of a tool's result the model is shown: MCP tools and Rust tools alike (the
//! built-ins cap their own output, `shell` keeping its head and tail).

/// Bytes of a result the model sees at most.
pub const RESULT_CAP: usize = 256 * 1024;

/// `text` cut to [`RESULT_CAP`] bytes (on a character boundary), with a note of how much was
/// dropped.
pub(crate) fn cap(mut text: String) -> String {
    if let Some(dropped) = truncate(&mut text, RESULT_CAP) {
        text.push_str(&format!(
            "\n[... {dropped} bytes of the result truncated ...]"
        ));
    }
    text
}

/// Cuts `text` to at most `max` bytes, on a character boundary; how many bytes were
/// dropped, or `None` when it was short enough.
pub(crate) fn truncate(text: &mut String, max: usize) -> Option<usize> {
    if text.len() <= max {
        return None;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let dropped = text.len() - end;
    text.truncate(end);
    Some(dropped)
}
