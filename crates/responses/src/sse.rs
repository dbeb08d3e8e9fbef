//! Incremental Server-Sent Events parsing (WHATWG framing) and Responses event decoding.
//!
//! Invariants: the parser's output does not depend on how the byte stream is split into
//! chunks (a CR at the end of one chunk and an LF at the start of the next form one line
//! ending); lines may end in LF, CRLF or CR; `:` lines are comments; several `data:` lines
//! join with `\n`; a frame is dispatched on a blank line, and a frame without data is
//! dropped; one UTF-8 byte order mark at the very start of the stream is skipped (also when
//! it is split across chunks). Memory is bounded by [`SseParser::with_max_frame`]: a line
//! or a frame's data longer than the bound is an error however the stream is chunked.
//!
//! `tests/all/sse_differential.rs` checks this parser against the `eventsource-stream` crate
//! on random byte streams and documents where (and why) the two differ.

use crate::types::{ErrorDetail, StreamEvent};

/// The UTF-8 encoding of U+FEFF, skipped once at the start of a stream.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Default bound on one line or one frame's data (16 MiB, above the API's 10 MiB outputs).
pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;

/// One dispatched SSE frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    /// The `event:` field, when present.
    pub event: Option<String>,
    /// The joined `data:` lines.
    pub data: String,
    /// The `id:` field, when present.
    pub id: Option<String>,
}

/// Malformed SSE input: a byte stream that breaks the framing rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    #[error("SSE line is not valid UTF-8")]
    /// A line is not UTF-8 (the framing requires it).
    InvalidUtf8,
    #[error("SSE frame exceeds {limit} bytes")]
    /// A line or a frame's data grew past the parser's bound.
    FrameTooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
}

/// Incremental SSE parser: feed bytes with [`push`](Self::push), collect frames.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    skip_lf: bool,
    data: String,
    has_data: bool,
    event: Option<String>,
    id: Option<String>,
    max_frame: usize,
    /// `Some(n)`: the stream has so far been the first `n` bytes of [`BOM`] (held back,
    /// not yet parsed); `None` once the start of the stream is decided.
    bom_prefix: Option<usize>,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with the default frame bound.
    pub fn new() -> Self {
        Self::with_max_frame(DEFAULT_MAX_FRAME)
    }

    /// A parser that rejects lines or frames larger than `max_frame` bytes.
    pub fn with_max_frame(max_frame: usize) -> Self {
        Self {
            line: Vec::new(),
            skip_lf: false,
            data: String::new(),
            has_data: false,
            event: None,
            id: None,
            max_frame,
            bom_prefix: Some(0),
        }
    }

    /// Feed a chunk; complete frames are appended to `out`.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut Vec<SseFrame>) -> Result<(), SseError> {
        if chunk.is_empty() {
            return Ok(());
        }
        if let Some(seen) = self.bom_prefix {
            let wanted = &BOM[seen..];
            let n = wanted.len().min(chunk.len());
            if chunk[..n] == wanted[..n] {
                if seen + n < BOM.len() {
                    self.bom_prefix = Some(seen + n);
                    return Ok(());
                }
                self.bom_prefix = None;
                chunk = &chunk[n..];
            } else {
                // Not a BOM: the bytes held back are ordinary input.
                self.bom_prefix = None;
                self.push_bytes(&BOM[..seen], out)?;
            }
        }
        self.push_bytes(chunk, out)
    }

    fn push_bytes(&mut self, mut chunk: &[u8], out: &mut Vec<SseFrame>) -> Result<(), SseError> {
        if chunk.is_empty() {
            return Ok(());
        }
        if self.skip_lf {
            self.skip_lf = false;
            if let Some((&b'\n', rest)) = chunk.split_first() {
                chunk = rest;
            }
        }
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(pos) => {
                    let ending = chunk[pos];
                    if self.line.is_empty() {
                        if pos > self.max_frame {
                            return Err(SseError::FrameTooLarge {
                                limit: self.max_frame,
                            });
                        }
                        self.process_line(&chunk[..pos], out)?;
                    } else {
                        self.extend_line(&chunk[..pos])?;
                        let line = std::mem::take(&mut self.line);
                        let result = self.process_line(&line, out);
                        self.line = line;
                        self.line.clear();
                        result?;
                    }
                    chunk = &chunk[pos + 1..];
                    if ending == b'\r' {
                        match chunk.first() {
                            Some(b'\n') => chunk = &chunk[1..],
                            Some(_) => {}
                            None => self.skip_lf = true,
                        }
                    }
                }
                None => {
                    self.extend_line(chunk)?;
                    break;
                }
            }
        }
        Ok(())
    }

    /// End of input: a final unterminated line is processed; a frame without its blank line
    /// is not dispatched (the WHATWG rule), so a cut stream never yields a half event.
    pub fn finish(&mut self, out: &mut Vec<SseFrame>) -> Result<(), SseError> {
        if let Some(seen) = self.bom_prefix.take() {
            // A stream that ended inside what could have been a BOM: those bytes were input.
            self.extend_line(&BOM[..seen])?;
        }
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out)?;
        }
        self.reset_frame();
        Ok(())
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > self.max_frame {
            return Err(SseError::FrameTooLarge {
                limit: self.max_frame,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn reset_frame(&mut self) {
        self.data.clear();
        self.has_data = false;
        self.event = None;
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseFrame>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                out.push(SseFrame {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                    id: self.id.clone(),
                });
            }
            self.reset_frame();
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                let text = std::str::from_utf8(value).map_err(|_| SseError::InvalidUtf8)?;
                if self.data.len() + text.len() + 1 > self.max_frame {
                    return Err(SseError::FrameTooLarge {
                        limit: self.max_frame,
                    });
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(text);
                self.has_data = true;
            }
            b"event" => {
                let text = std::str::from_utf8(value).map_err(|_| SseError::InvalidUtf8)?;
                self.event = Some(text.to_owned());
            }
            b"id" if !value.contains(&0) => {
                let text = std::str::from_utf8(value).map_err(|_| SseError::InvalidUtf8)?;
                self.id = Some(text.to_owned());
            }
            // `retry:` and unknown fields are ignored, as the spec says.
            _ => {}
        }
        Ok(())
    }
}

/// What one SSE frame means for a Responses stream.
#[allow(clippy::large_enum_variant)] // decoded frames are consumed at once, never stored in bulk
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A stream event.
    Event(StreamEvent),
    /// `data: [DONE]`: the end marker (Chat Completions style; tolerated here).
    Done,
}

/// A frame that is not a valid Responses event.
#[derive(Debug, thiserror::Error)]
#[error("invalid stream event JSON: {0}")]
pub struct DecodeError(#[from] pub serde_json::Error);

/// Decode one frame's data. Both `error` shapes decode to [`StreamEvent::Error`]; use
/// [`error_detail`] to read them uniformly.
pub fn decode_frame(frame: &SseFrame) -> Result<Decoded, DecodeError> {
    if frame.data.starts_with("[DONE]") {
        return Ok(Decoded::Done);
    }
    Ok(Decoded::Event(serde_json::from_str(&frame.data)?))
}

/// The error carried by an `error` event (flat or nested shape).
pub fn error_detail(event: &StreamEvent) -> Option<ErrorDetail> {
    match event {
        StreamEvent::Error(e) => Some(e.detail()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseFrame> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut out).unwrap();
        }
        parser.finish(&mut out).unwrap();
        out
    }

    const WIRE: &[u8] = b": keepalive\r\nevent: demo\r\ndata: {\"type\":\r\ndata: \"demo\"}\r\n\r\ndata: line1\rdata:line2\r\rid: 7\ndata: x\n\ndata: [DONE]\r\n\r\n";

    #[test]
    fn comments_crlf_multiline_cr_and_done() {
        let frames = parse_all(&[WIRE]);
        assert_eq!(frames.len(), 4);
        assert_eq!(frames[0].event.as_deref(), Some("demo"));
        assert_eq!(frames[0].data, "{\"type\":\n\"demo\"}");
        assert_eq!(frames[1].data, "line1\nline2");
        assert_eq!(frames[2].id.as_deref(), Some("7"));
        assert_eq!(decode_frame(&frames[3]).unwrap(), Decoded::Done);
    }

    #[test]
    fn every_split_point_gives_the_same_frames() {
        let whole = parse_all(&[WIRE]);
        for i in 0..=WIRE.len() {
            assert_eq!(parse_all(&[&WIRE[..i], &WIRE[i..]]), whole, "split at {i}");
            for j in i..=WIRE.len() {
                assert_eq!(
                    parse_all(&[&WIRE[..i], &WIRE[i..j], &WIRE[j..]]),
                    whole,
                    "split at {i},{j}"
                );
            }
        }
        let bytes: Vec<&[u8]> = WIRE.chunks(1).collect();
        assert_eq!(parse_all(&bytes), whole);
    }

    #[test]
    fn utf8_split_inside_a_character() {
        let wire = "data: 数据全是教学\n\n".as_bytes();
        for i in 0..=wire.len() {
            let frames = parse_all(&[&wire[..i], &wire[i..]]);
            assert_eq!(frames[0].data, "数据全是教学");
        }
    }

    #[test]
    fn unterminated_frame_is_dropped_and_oversize_rejected() {
        assert!(parse_all(&[b"data: {\"type\":\"x\"}\n"]).is_empty());
        let mut parser = SseParser::with_max_frame(8);
        let mut out = Vec::new();
        assert_eq!(
            parser.push(b"data: 0123456789", &mut out),
            Err(SseError::FrameTooLarge { limit: 8 })
        );
        let mut parser = SseParser::new();
        assert_eq!(
            parser.push(b"data: \xff\n", &mut out),
            Err(SseError::InvalidUtf8)
        );
    }

    #[test]
    fn a_leading_bom_is_skipped_once_however_it_is_split() {
        let wire = b"\xEF\xBB\xBFdata: a\n\n\xEF\xBB\xBFdata: b\n\n";
        let expected = vec![SseFrame {
            event: None,
            data: "a".into(),
            id: None,
        }];
        for i in 0..=wire.len() {
            assert_eq!(
                parse_all(&[&wire[..i], &wire[i..]]),
                expected,
                "split at {i}"
            );
        }
        let bytes: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(parse_all(&bytes), expected);
        // A stream cut inside a would-be BOM, and bytes that only start like one.
        assert!(parse_all(&[b"\xEF\xBB"]).is_empty());
        assert_eq!(parse_all(&[b"\xEF", b"data: x\n\n"]), Vec::new());
        assert_eq!(parse_all(&[b"d", b"ata: x\n\n"])[0].data, "x");
    }

    #[test]
    fn an_overlong_line_is_rejected_in_one_chunk_as_when_split() {
        for wire in [
            &b": 0123456789\n"[..],
            b"event: 0123456789\n",
            b"id: 0123456789\n",
        ] {
            for i in 0..=wire.len() {
                let mut parser = SseParser::with_max_frame(8);
                let mut out = Vec::new();
                let result = parser
                    .push(&wire[..i], &mut out)
                    .and_then(|()| parser.push(&wire[i..], &mut out));
                assert_eq!(
                    result,
                    Err(SseError::FrameTooLarge { limit: 8 }),
                    "split at {i}"
                );
            }
        }
    }

    #[test]
    fn both_error_shapes_decode() {
        let flat = SseFrame {
            event: None,
            data:
                r#"{"type":"error","code":"ERR","message":"boom","param":null,"sequence_number":1}"#
                    .into(),
            id: None,
        };
        let nested = SseFrame {
            event: None,
            data: r#"{"type":"error","sequence_number":2,"error":{"type":"too_many_requests","code":"too_many_requests","message":"Too Many Requests","param":null}}"#.into(),
            id: None,
        };
        let Decoded::Event(flat) = decode_frame(&flat).unwrap() else {
            panic!()
        };
        let Decoded::Event(nested) = decode_frame(&nested).unwrap() else {
            panic!()
        };
        assert_eq!(error_detail(&flat).unwrap().message, "boom");
        assert_eq!(error_detail(&flat).unwrap().code.as_deref(), Some("ERR"));
        let n = error_detail(&nested).unwrap();
        assert_eq!(
            (n.message.as_str(), n.kind.as_deref()),
            ("Too Many Requests", Some("too_many_requests"))
        );
    }
}
