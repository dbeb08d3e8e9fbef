//! The lines of a file `read_file` returns, read with bounded memory.
//!
//! Invariants: memory stays within the window (`max_bytes` and one line buffer of at most
//! `max_bytes + 2` bytes) whatever the file's size or its longest line; every line is
//! counted (`total`), in `str::lines`' terms (`\n` ends a line, a `\r` before it is dropped,
//! a last line needs no `\n`); and a window always moves the reader on: a first line too
//! long for `max_bytes` is shown cut rather than not at all, so reading on from the next
//! line is possible.
//! - At most [`MAX_SCAN_BYTES`] of the file are read, to reach the window and to count
//!   what follows it: a sparse file of terabytes (one `truncate` away for a command) or
//!   one that never stops growing held a file thread, which every run of the process
//!   shares, for hours. Past it, `total` counts what was read (`total_known` is false).

use std::io::{BufRead, Read as _};

/// What one read of the window found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Window {
    /// The lines shown, each followed by `\n` (a cut line by a note of its own).
    pub(crate) text: String,
    /// How many lines `text` holds (a cut line counts).
    pub(crate) shown: u64,
    /// How many lines the file has (when `total_known`; else at least that many).
    pub(crate) total: u64,
    /// Whether the whole file was read: false when the scan stopped at [`MAX_SCAN_BYTES`].
    pub(crate) total_known: bool,
}

/// The most bytes of a file one read reads (a window and the count after it).
pub(crate) const MAX_SCAN_BYTES: u64 = 64 << 20;

/// Lines `offset..offset + limit` (1-based `offset`) of `reader`, no more than `max_bytes`
/// of them, lossily decoded as UTF-8; and how many lines `reader` has.
pub(crate) fn read_window(
    reader: impl BufRead,
    offset: u64,
    limit: u64,
    max_bytes: usize,
) -> std::io::Result<Window> {
    read_window_scanning(reader, offset, limit, max_bytes, MAX_SCAN_BYTES)
}

/// [`read_window`], reading at most `max_scan` bytes.
fn read_window_scanning(
    reader: impl BufRead,
    offset: u64,
    limit: u64,
    max_bytes: usize,
    max_scan: u64,
) -> std::io::Result<Window> {
    let mut reader = reader.take(max_scan);
    let mut text = String::new();
    let (mut shown, mut total) = (0u64, 0u64);
    let mut open = limit > 0;
    let mut line = Vec::new();
    loop {
        if !open || total + 1 < offset {
            if reader.skip_until(b'\n')? == 0 {
                break;
            }
            total += 1;
            continue;
        }
        // Two bytes past the room: a line that fits, with its `\n`, is read whole.
        let room = max_bytes.saturating_sub(text.len()) as u64;
        line.clear();
        let n = (&mut reader).take(room + 2).read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        total += 1;
        let ended = line.last() == Some(&b'\n');
        let mut over_long = false;
        if ended {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        } else if n as u64 == room + 2 {
            over_long = true;
            reader.skip_until(b'\n')?;
        }
        let decoded = String::from_utf8_lossy(&line);
        if !over_long && text.len() + decoded.len() <= max_bytes {
            text.push_str(&decoded);
            text.push('\n');
            shown += 1;
            open = shown < limit;
            continue;
        }
        open = false;
        if shown == 0 {
            let mut keep = max_bytes.min(decoded.len());
            while !decoded.is_char_boundary(keep) {
                keep -= 1;
            }
            text.push_str(&decoded[..keep]);
            text.push_str(&format!(
                "\n[line {total} is cut here, after its first {keep} bytes]\n"
            ));
            shown = 1;
        }
    }
    // The bound reached: there may be more (a file of exactly `max_scan` bytes reads so).
    let total_known = reader.limit() > 0;
    Ok(Window {
        text,
        shown,
        total,
        total_known,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `read_file` returned before it read with bounded memory: the whole file in
    /// memory, `str::lines`.
    fn whole_file(bytes: &[u8], offset: u64, limit: u64, max_bytes: usize) -> Window {
        let text = String::from_utf8_lossy(bytes);
        let total = text.lines().count() as u64;
        let mut out = String::new();
        let mut shown = 0u64;
        for line in text.lines().skip(usize::try_from(offset - 1).unwrap()) {
            if shown == limit || out.len() + line.len() > max_bytes {
                break;
            }
            out.push_str(line);
            out.push('\n');
            shown += 1;
        }
        Window {
            text: out,
            shown,
            total,
            total_known: true,
        }
    }

    fn window(bytes: &[u8], offset: u64, limit: u64, max_bytes: usize) -> Window {
        read_window(
            std::io::BufReader::with_capacity(7, bytes),
            offset,
            limit,
            max_bytes,
        )
        .unwrap()
    }

    #[test]
    fn agrees_with_reading_the_whole_file_when_the_first_line_fits() {
        let files: [&[u8]; 9] = [
            b"",
            b"one",
            b"one\n",
            b"one\ntwo\nthree\n",
            b"one\r\ntwo\r\nthree",
            b"\n\n\nx\n\n",
            b"caf\xc3\xa9\nbad \xff\xfe bytes\nhalf \xe2\x82\nend",
            b"a longer line of text\nshort\nanother longer line\nx\n",
            b"tail\r",
        ];
        for bytes in files {
            for offset in 1..=7 {
                for limit in [1, 2, 3, 100] {
                    for max_bytes in [25, 40, 1000] {
                        let want = whole_file(bytes, offset, limit, max_bytes);
                        if want.shown == 0 && offset <= want.total {
                            continue; // the first line does not fit: shown cut now
                        }
                        assert_eq!(
                            window(bytes, offset, limit, max_bytes),
                            want,
                            "{:?} offset {offset} limit {limit} max {max_bytes}",
                            String::from_utf8_lossy(bytes)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_first_line_over_the_budget_is_shown_cut_and_the_next_read_moves_on() {
        let mut bytes = "é".repeat(1000).into_bytes(); // 2,000 bytes, no `\n`
        bytes.extend_from_slice(b"\nnext\n");
        let first = window(&bytes, 1, 10, 301);
        assert_eq!((first.shown, first.total), (1, 2));
        // Cut at a char boundary at or under the budget.
        assert!(first.text.starts_with(&"é".repeat(150)));
        assert!(
            first
                .text
                .ends_with("\n[line 1 is cut here, after its first 300 bytes]\n"),
            "{}",
            first.text
        );
        let second = window(&bytes, 2, 10, 301);
        assert_eq!(second.text, "next\n");
        assert_eq!((second.shown, second.total), (1, 2));
    }

    #[test]
    fn a_later_line_over_the_budget_ends_the_window_unshown() {
        let bytes = format!("short\n{}\nafter\n", "x".repeat(500));
        let w = window(bytes.as_bytes(), 1, 10, 100);
        assert_eq!(w.text, "short\n");
        assert_eq!((w.shown, w.total), (1, 3));
    }

    #[test]
    fn counts_every_line_of_a_long_file_past_a_small_window() {
        let bytes: String = (1..=100_000).map(|i| format!("line {i}\n")).collect();
        let w = window(bytes.as_bytes(), 50_000, 2, 1000);
        assert_eq!(w.text, "line 50000\nline 50001\n");
        assert_eq!((w.shown, w.total), (2, 100_000));
    }

    /// Past the scan bound nothing more is read: a line of zeros (a sparse file) or a file
    /// that keeps growing ends the read there, and the count says it is not the whole.
    #[test]
    fn the_scan_stops_at_its_bound() {
        struct Endless(u64);
        impl std::io::Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                // A line every 10 bytes, for ever; counts what was handed out.
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = if (self.0 + i as u64) % 10 == 9 {
                        b'\n'
                    } else {
                        b'x'
                    };
                }
                self.0 += buf.len() as u64;
                Ok(buf.len())
            }
        }
        let mut endless = Endless(0);
        let w =
            read_window_scanning(std::io::BufReader::new(&mut endless), 1, 2, 1000, 1_000).unwrap();
        assert_eq!(w.text, "xxxxxxxxx\nxxxxxxxxx\n");
        assert!(!w.total_known);
        assert_eq!(w.total, 100);
        assert!(endless.0 <= 1_000 + 8192, "read {} bytes", endless.0);
        // One endless line: the same.
        let zeros = std::io::repeat(0);
        let w = read_window_scanning(std::io::BufReader::new(zeros), 1, 1, 100, 10_000).unwrap();
        assert!(!w.total_known);
        assert_eq!(w.shown, 1);
        // A file within the bound is counted whole.
        let w = window(b"a\nb\nc\n", 1, 1, 100);
        assert!(w.total_known);
        assert_eq!(w.total, 3);
    }
}
