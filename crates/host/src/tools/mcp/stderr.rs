//! A server's stderr to the log, line by line, in bounded memory.
//!
//! Invariants:
//! - At most [`MAX_LINE`] bytes of a line are held: a longer line (a progress bar that
//!   redraws with `\r` and never ends its line) is logged cut at that length, at once,
//!   and the rest of it up to its newline is only counted, then noted in one more line.
//! - What is not UTF-8 is logged lossily (U+FFFD).

use tokio::io::{AsyncRead, AsyncReadExt as _};

/// Bytes of one stderr line logged at most.
pub(crate) const MAX_LINE: usize = 8 * 1024;

/// Reads `stderr` to its end, handing each line (without its newline) to `log`.
pub(crate) async fn drain(mut stderr: impl AsyncRead + Unpin, mut log: impl FnMut(&str)) {
    let mut chunk = vec![0u8; 8 * 1024];
    let mut line: Vec<u8> = Vec::with_capacity(256);
    // Bytes of the current line dropped after its cut (`Some`: it was cut).
    let mut dropped: Option<usize> = None;
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut rest = chunk.get(..n).unwrap_or_default();
        while !rest.is_empty() {
            let newline = rest.iter().position(|&b| b == b'\n');
            let (segment, after) = match newline {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &[][..]),
            };
            if let Some(count) = dropped.as_mut() {
                *count += segment.len();
            } else {
                let room = MAX_LINE - line.len();
                if segment.len() <= room {
                    line.extend_from_slice(segment);
                } else {
                    line.extend_from_slice(&segment[..room]);
                    log(&format!(
                        "{} [line cut at {MAX_LINE} bytes]",
                        String::from_utf8_lossy(&line)
                    ));
                    line.clear();
                    dropped = Some(segment.len() - room);
                }
            }
            if newline.is_some() {
                end_line(&mut line, &mut dropped, &mut log);
            }
            rest = after;
        }
    }
    if !line.is_empty() || dropped.is_some() {
        end_line(&mut line, &mut dropped, &mut log);
    }
}

/// Logs the line ended (or the note of what was dropped of a cut one) and starts anew.
fn end_line(line: &mut Vec<u8>, dropped: &mut Option<usize>, log: &mut impl FnMut(&str)) {
    match dropped.take() {
        Some(count) => log(&format!("[... {count} more bytes of that line dropped]")),
        None => log(&String::from_utf8_lossy(line)),
    }
    line.clear();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn logged(input: impl AsyncRead + Unpin) -> Vec<String> {
        let mut lines = Vec::new();
        drain(input, |l| lines.push(l.to_string())).await;
        lines
    }

    #[tokio::test]
    async fn an_endless_line_is_cut_and_the_next_one_kept() {
        // 64 MiB of a progress bar that never ends its line, then an ordinary line.
        let bar = tokio::io::repeat(b'\r').take(64 << 20);
        let lines = logged(bar.chain(&b"\ndone\nlast"[..])).await;
        assert!(
            lines.iter().all(|l| l.len() <= MAX_LINE + 64),
            "a line of {} bytes was held",
            lines.iter().map(String::len).max().unwrap_or(0)
        );
        assert_eq!(
            lines.len(),
            4,
            "{:?}",
            lines.iter().map(|l| l.len()).collect::<Vec<_>>()
        );
        assert!(lines[0].ends_with(&format!("[line cut at {MAX_LINE} bytes]")));
        assert_eq!(
            lines[1],
            format!(
                "[... {} more bytes of that line dropped]",
                (64 << 20) - MAX_LINE
            )
        );
        assert_eq!(lines[2..], ["done", "last"]);
    }

    #[tokio::test]
    async fn short_lines_are_logged_as_they_are() {
        let lines = logged(&b"a\n\nb\xffc\n"[..]).await;
        assert_eq!(lines, ["a", "", "b\u{fffd}c"]);
    }
}
