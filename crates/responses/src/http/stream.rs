//! `EventStream`: typed events from an SSE response, with an idle timeout.
//!
//! Invariants: after a terminal event (`response.completed/failed/incomplete`) the stream
//! yields `None`; an `error` event becomes `Err(StreamError)` and ends the stream; the body
//! ending (or `[DONE]`) before a terminal event is `Err(StreamEndedEarly)`, never a hang;
//! no event for `idle_timeout` is `Err(StreamIdleTimeout)`; a body that is not an event
//! stream is `Err(NotEventStream)`, told by its first line ([`Sniff`]), never a cut stream.
//!
//! The idle timeout counts from the response's headers and restarts with every complete
//! event, whether or not the caller asked for its kind. SSE comments and partial frames do
//! not restart it: a proxy that sends `: keepalive` lines in front of a model that stopped
//! answering would otherwise hold the stream open for ever (Codex's client counts events
//! the same way).

use std::collections::VecDeque;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;

use crate::error::{ApiError, ClientError};
use crate::http::config::ApiKey;
use crate::sse::{Decoded, SseFrame, SseParser, decode_frame};
use crate::types::{Response, StreamEvent};

/// Bytes of the body kept to judge whether it is an event stream and to quote it.
const HEAD_BYTES: usize = 1024;
/// Characters of the body quoted in [`ClientError::NotEventStream`].
const EXCERPT_CHARS: usize = 200;
/// Characters of a `content-type` or `content-encoding` quoted in the same error.
const HEADER_CHARS: usize = 100;

/// Whether a body is an event stream, judged from its first bytes, until a frame or an
/// SSE-looking first line settles it. An event stream opens (after an optional BOM and
/// blank lines) with `data`, `event`, `id` or `retry` followed by `:` or a line end, or
/// with a `:` comment. A body that does not is a [`ClientError::NotEventStream`]: at once
/// when the response did not say `text/event-stream` (or came encoded, which this client
/// does not decode), else when the body ends with no event.
struct Sniff {
    status: u16,
    content_type: Option<String>,
    content_encoding: Option<String>,
    /// `content-type: text/event-stream` (any case and parameters) and no encoding.
    declared: bool,
    /// The first [`HEAD_BYTES`] of the body.
    head: Vec<u8>,
}

/// What the first bytes of a body say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    EventStream,
    Other,
    /// Too few bytes yet (only blank lines, or the start of a field name).
    Undecided,
}

impl Sniff {
    fn new(response: &reqwest::Response) -> Self {
        let header = |name: reqwest::header::HeaderName| {
            response
                .headers()
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let content_type = header(reqwest::header::CONTENT_TYPE);
        let content_encoding = header(reqwest::header::CONTENT_ENCODING)
            .filter(|e| !e.eq_ignore_ascii_case("identity"));
        let declared = content_encoding.is_none()
            && content_type.as_deref().is_some_and(|ct| {
                ct.split(';')
                    .next()
                    .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("text/event-stream"))
            });
        Self {
            status: response.status().as_u16(),
            content_type,
            content_encoding,
            declared,
            head: Vec::new(),
        }
    }

    fn keep(&mut self, chunk: &[u8]) {
        let room = HEAD_BYTES.saturating_sub(self.head.len());
        self.head.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// The verdict on the bytes kept; `ended` when the body is known to have no more.
    fn verdict(&self, ended: bool) -> Verdict {
        let mut rest = self.head.as_slice();
        rest = rest.strip_prefix("\u{feff}".as_bytes()).unwrap_or(rest);
        while let [b'\r' | b'\n', tail @ ..] = rest {
            rest = tail;
        }
        let more = if ended {
            Verdict::Other
        } else {
            Verdict::Undecided
        };
        match rest {
            [] => return Verdict::Undecided,
            [b':', ..] => return Verdict::EventStream,
            _ => {}
        }
        for field in [&b"data"[..], b"event", b"id", b"retry"] {
            if let Some(after) = rest.strip_prefix(field) {
                match after.first() {
                    Some(b':' | b'\r' | b'\n') => return Verdict::EventStream,
                    None => return more,
                    Some(_) => {}
                }
            } else if field.starts_with(rest) {
                return more;
            }
        }
        Verdict::Other
    }

    /// The error naming what came instead, quoting the body's start with `key` masked.
    fn error(&self, key: &ApiKey) -> ClientError {
        let text = key.mask(&String::from_utf8_lossy(&self.head));
        let mut excerpt = String::new();
        for c in text.chars().take(EXCERPT_CHARS) {
            if c.is_control() {
                excerpt.extend(c.escape_default());
            } else {
                excerpt.push(c);
            }
        }
        if text.chars().nth(EXCERPT_CHARS).is_some() {
            excerpt.push('…');
        }
        let quote = |value: &Option<String>| {
            value.as_deref().map(|v| {
                key.mask(v)
                    .chars()
                    .take(HEADER_CHARS)
                    .filter(|c| !c.is_control())
                    .collect::<String>()
            })
        };
        ClientError::NotEventStream {
            status: self.status,
            content_type: quote(&self.content_type),
            content_encoding: quote(&self.content_encoding),
            excerpt,
        }
    }
}

/// One event of a stream, not decoded (see [`EventStream::next_raw`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    kind: String,
    data: String,
}

impl RawEvent {
    /// The event's `type` (empty when it has none).
    pub fn kind(&self) -> &str {
        &self.kind
    }
    /// The event's JSON, as the frame carried it.
    pub fn data(&self) -> &str {
        &self.data
    }
    /// The typed event.
    pub fn decode(&self) -> Result<StreamEvent, ClientError> {
        serde_json::from_str(&self.data).map_err(|e| ClientError::Decode(e.to_string()))
    }
}

/// The `type` of an event's JSON, without decoding the rest when it comes first (as the
/// API writes it); `None` when the frame is not an object with a string `type`.
fn peek_type(data: &str) -> Option<std::borrow::Cow<'_, str>> {
    #[derive(serde::Deserialize)]
    struct Peek<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
    }
    // A JSON string without a backslash is its own text: with `"type"` first, the rest
    // of the event need not be parsed.
    if let Some(rest) = data.strip_prefix("{\"type\":\"")
        && let Some(end) = rest.find(['"', '\\'])
        && rest.as_bytes().get(end) == Some(&b'"')
    {
        return Some(std::borrow::Cow::Borrowed(&rest[..end]));
    }
    serde_json::from_str::<Peek<'_>>(data).ok().map(|p| p.kind)
}

/// `timeout` from now (a year for a timeout too long to add).
fn idle_deadline(timeout: Duration) -> tokio::time::Instant {
    crate::ws::deadline_after(tokio::time::Instant::now(), timeout)
}

/// A streamed response's events.
pub struct EventStream {
    body: BoxStream<'static, Result<bytes::Bytes, reqwest::Error>>,
    parser: SseParser,
    frames: VecDeque<SseFrame>,
    scratch: Vec<SseFrame>,
    idle_timeout: Duration,
    /// `idle_timeout` after the headers or the last complete event, whichever came later.
    idle_deadline: tokio::time::Instant,
    request_id: Option<String>,
    finished: bool,
    /// Non-terminal event types to decode (`None`: all of them).
    keep: Option<fn(&str) -> bool>,
    /// Until the body shows it is an event stream (`None` from then on).
    sniff: Option<Sniff>,
    /// Masks the key in the messages of `error` events and in [`Sniff`]'s excerpt.
    key: ApiKey,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("request_id", &self.request_id)
            .finish_non_exhaustive()
    }
}

impl EventStream {
    pub(crate) fn new(response: reqwest::Response, idle_timeout: Duration, key: ApiKey) -> Self {
        let sniff = Some(Sniff::new(&response));
        let request_id = response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Self {
            body: response.bytes_stream().boxed(),
            parser: SseParser::new(),
            frames: VecDeque::new(),
            scratch: Vec::new(),
            idle_timeout,
            idle_deadline: idle_deadline(idle_timeout),
            request_id,
            finished: false,
            keep: None,
            sniff,
            key,
        }
    }

    /// Yields only the events whose `type` `keep` accepts, plus the terminal ones
    /// (`completed`, `failed`, `incomplete`) and `error`, which end the stream as before. The
    /// others are not decoded: a caller that needs the text deltas and the final response
    /// skips decoding the two lifecycle events that carry the whole response and every
    /// per-item event.
    pub fn only(mut self, keep: fn(&str) -> bool) -> Self {
        self.keep = Some(keep);
        self
    }

    /// The `x-request-id` of the streaming response.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// The next event; `None` after the terminal event.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a chunk is parsed as soon as it is read, so a dropped future loses no
    /// event; parsed events stay queued and a partial SSE frame stays in the parser for the
    /// next call. The idle timeout is not restarted by a call, only by an event.
    pub async fn next(&mut self) -> Option<Result<StreamEvent, ClientError>> {
        if self.finished {
            return None;
        }
        let result = self.next_inner().await;
        match &result {
            Ok(event) if event.is_terminal() => self.finished = true,
            Ok(_) => {}
            Err(_) => self.finished = true,
        }
        Some(result)
    }

    /// The next event as its frame carries it, not decoded: for a caller that reads only
    /// a few fields of the events it wants. Ends like [`EventStream::next`]: `None` after
    /// the terminal event; an `error` event, `[DONE]` or an unreadable frame is the same
    /// `Err` (and ends the stream). An event without a `type` has an empty kind.
    ///
    /// # Cancel safety
    ///
    /// As [`EventStream::next`].
    pub async fn next_raw(&mut self) -> Option<Result<RawEvent, ClientError>> {
        if self.finished {
            return None;
        }
        let result = match self.next_frame(true).await {
            Ok((frame, Some(kind))) if kind != "error" => Ok(RawEvent {
                kind,
                data: frame.data,
            }),
            Ok((frame, _)) => self.decode(&frame).map(|_| RawEvent {
                kind: String::new(),
                data: frame.data,
            }),
            Err(err) => Err(err),
        };
        match &result {
            Ok(event) if StreamEvent::is_terminal_type(&event.kind) => self.finished = true,
            Ok(_) => {}
            Err(_) => self.finished = true,
        }
        Some(result)
    }

    async fn next_inner(&mut self) -> Result<StreamEvent, ClientError> {
        let (frame, _) = self.next_frame(false).await?;
        self.decode(&frame)
    }

    /// `frame`'s event; an `error` event or `[DONE]` is the error that ends the stream.
    fn decode(&self, frame: &SseFrame) -> Result<StreamEvent, ClientError> {
        match decode_frame(frame).map_err(|e| ClientError::Decode(e.to_string()))? {
            Decoded::Done => Err(ClientError::StreamEndedEarly),
            Decoded::Event(StreamEvent::Error(event)) => {
                let d = event.detail();
                Err(ClientError::StreamError(Box::new(ApiError {
                    status: None,
                    kind: d.kind,
                    code: d.code,
                    param: d.param,
                    message: self.key.mask(&d.message),
                    request_id: self.request_id.clone(),
                    retry_after: None,
                    retries_taken: 0,
                    should_retry: None,
                })))
            }
            Decoded::Event(event) => Ok(event),
        }
    }

    /// The next frame the filter wants, reading the body as needed, with its `type` when
    /// it has one and it was read: by the filter, or because `with_kind` asks for it.
    async fn next_frame(
        &mut self,
        with_kind: bool,
    ) -> Result<(SseFrame, Option<String>), ClientError> {
        loop {
            let Some(frame) = self.frames.pop_front() else {
                self.read_chunk().await?;
                continue;
            };
            if self.keep.is_none() && !with_kind {
                return Ok((frame, None));
            }
            let kind = peek_type(&frame.data);
            // A frame without a readable `type` (`[DONE]` is not JSON) is decoded, and ends
            // the stream, like any unreadable frame.
            let wanted = match (self.keep, &kind) {
                (Some(keep), Some(kind)) => StreamEvent::is_terminal_type(kind) || keep(kind),
                _ => true,
            };
            if wanted {
                let kind = kind.map(std::borrow::Cow::into_owned);
                return Ok((frame, kind));
            }
        }
    }

    /// Parses the next chunk of the body into frames; the body's end with no frame left
    /// is [`ClientError::StreamEndedEarly`], or [`ClientError::NotEventStream`] when what
    /// came was not an event stream ([`Sniff`]).
    async fn read_chunk(&mut self) -> Result<(), ClientError> {
        match tokio::time::timeout_at(self.idle_deadline, self.body.next()).await {
            Err(_) => Err(ClientError::StreamIdleTimeout(self.idle_timeout)),
            Ok(Some(Ok(chunk))) => {
                let verdict = match &mut self.sniff {
                    Some(sniff) => {
                        sniff.keep(&chunk);
                        match sniff.verdict(false) {
                            Verdict::Other if !sniff.declared => {
                                return Err(sniff.error(&self.key));
                            }
                            Verdict::EventStream => {
                                self.sniff = None;
                                Verdict::EventStream
                            }
                            verdict => verdict,
                        }
                    }
                    None => Verdict::EventStream,
                };
                if let Err(err) = self.parser.push(&chunk, &mut self.scratch) {
                    return Err(self.not_event_stream(verdict).unwrap_or(err.into()));
                }
                if !self.scratch.is_empty() {
                    self.sniff = None;
                    self.idle_deadline = idle_deadline(self.idle_timeout);
                }
                self.frames.extend(self.scratch.drain(..));
                Ok(())
            }
            Ok(end) => {
                // A clean end settles a body that stopped inside a field name; a broken
                // connection may have cut it there.
                let ended = end.is_none();
                let verdict = self
                    .sniff
                    .as_ref()
                    .map_or(Verdict::EventStream, |s| s.verdict(ended));
                if let Err(err) = self.parser.finish(&mut self.scratch) {
                    return Err(self.not_event_stream(verdict).unwrap_or(err.into()));
                }
                self.frames.extend(self.scratch.drain(..));
                if self.frames.is_empty() {
                    return Err(self
                        .not_event_stream(verdict)
                        .unwrap_or(ClientError::StreamEndedEarly));
                }
                self.sniff = None;
                Ok(())
            }
        }
    }

    /// [`ClientError::NotEventStream`] when no event came yet and the body is not one.
    fn not_event_stream(&self, verdict: Verdict) -> Option<ClientError> {
        match (&self.sniff, verdict) {
            (Some(sniff), Verdict::Other) => Some(sniff.error(&self.key)),
            _ => None,
        }
    }

    /// Reads to the end and returns the terminal response (completed, failed or incomplete).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the stream and its connection: the events read so far and
    /// the rest of the stream are lost. Nothing is sent to cancel the response on the server.
    pub async fn final_response(mut self) -> Result<Response, ClientError> {
        while let Some(event) = self.next().await {
            match event? {
                StreamEvent::Completed(e) | StreamEvent::Failed(e) | StreamEvent::Incomplete(e) => {
                    return Ok(e.response);
                }
                _ => {}
            }
        }
        Err(ClientError::StreamEndedEarly)
    }
}

#[cfg(test)]
mod tests {
    use super::{Sniff, Verdict, peek_type};

    fn verdict(head: &[u8], ended: bool) -> Verdict {
        let sniff = Sniff {
            status: 200,
            content_type: None,
            content_encoding: None,
            declared: false,
            head: head.to_vec(),
        };
        sniff.verdict(ended)
    }

    #[test]
    fn an_event_stream_is_told_by_its_first_line() {
        for sse in [
            &b"event: response.created\n"[..],
            b"data: {}\n\n",
            b"\xef\xbb\xbf\r\n\ndata:x",
            b": keepalive\n\n",
            b"id: 1\n",
            b"retry: 3000\r\n",
            b"data\n",
        ] {
            assert_eq!(verdict(sse, false), Verdict::EventStream, "{sse:?}");
        }
        for other in [
            &b"<html>"[..],
            b"{\"id\":1}",
            b"\x1f\x8b\x08",
            b" data: x",
            b"idx: 1\n",
            b"Data: x",
        ] {
            assert_eq!(verdict(other, false), Verdict::Other, "{other:?}");
        }
        // Too little to tell, until the body has ended.
        for short in [&b""[..], b"\n\n", b"da", b"data", b"ev"] {
            assert_eq!(verdict(short, false), Verdict::Undecided, "{short:?}");
        }
        assert_eq!(verdict(b"da", true), Verdict::Other);
        assert_eq!(verdict(b"\n", true), Verdict::Undecided, "an empty body");
    }

    #[test]
    fn peek_reads_the_type_wherever_it_is_and_only_a_string_one() {
        assert_eq!(peek_type(r#"{"type":"a.b","x":1}"#).as_deref(), Some("a.b"));
        assert_eq!(
            peek_type(r#"{"x":{"type":"no"},"type":"a"}"#).as_deref(),
            Some("a")
        );
        // An escape in the first position falls back to a full parse, which unescapes.
        assert_eq!(peek_type(r#"{"type":"a\"b"}"#).as_deref(), Some("a\"b"));
        assert_eq!(
            peek_type(r#"{"type": "spaced"}"#).as_deref(),
            Some("spaced")
        );
        assert_eq!(peek_type(r#"{"type":5}"#), None);
        assert_eq!(peek_type("[DONE]"), None);
        assert_eq!(peek_type(r#"{"x":1}"#), None);
    }
}
