//! How much of a tool's result the model is shown: MCP tools and Rust tools alike (the
//! built-ins cap their own output, `shell` keeping its head and tail).

/// Bytes of a result the model sees at most.
pub const RESULT_CAP: usize = 256 * 1024;

/// `text` cut to [`RESULT_CAP`] bytes (on a character boundary), with a note of how much was
/// dropped.
pub(crate) fn cap(mut text: String) -> String {
    if text.len() <= RESULT_CAP {
        return text;
    }
    let mut cut = RESULT_CAP;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let dropped = text.len() - cut;
    text.truncate(cut);
    text.push_str(&format!(
        "\n[... {dropped} bytes of the result truncated ...]"
    ));
    text
}
