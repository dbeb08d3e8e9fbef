//! `EventStream`: typed events from an SSE response, with an idle timeout.
//!
//! Invariants: after a terminal event (`response.completed/failed/incomplete`) the stream
//! yields `None`; an `error` event becomes `Err(StreamError)` and ends the stream; the body
//! ending (or `[DONE]`) before a terminal event is `Err(StreamEndedEarly)`, never a hang;
//! no chunk for `idle_timeout` is `Err(StreamIdleTimeout)`.

use std::collections::VecDeque;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;

use crate::error::{ApiError, ClientError};
use crate::sse::{Decoded, SseFrame, SseParser, decode_frame};
use crate::types::{Response, StreamEvent};

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

/// A streamed response's events.
pub struct EventStream {
    body: BoxStream<'static, Result<bytes::Bytes, reqwest::Error>>,
    parser: SseParser,
    frames: VecDeque<SseFrame>,
    scratch: Vec<SseFrame>,
    idle_timeout: Duration,
    request_id: Option<String>,
    finished: bool,
    /// Non-terminal event types to decode (`None`: all of them).
    keep: Option<fn(&str) -> bool>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("request_id", &self.request_id)
            .finish_non_exhaustive()
    }
}

impl EventStream {
    pub(crate) fn new(response: reqwest::Response, idle_timeout: Duration) -> Self {
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
            request_id,
            finished: false,
            keep: None,
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
    /// next call. The idle timeout restarts with each call.
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
                    message: d.message,
                    request_id: self.request_id.clone(),
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
    /// is [`ClientError::StreamEndedEarly`].
    async fn read_chunk(&mut self) -> Result<(), ClientError> {
        match tokio::time::timeout(self.idle_timeout, self.body.next()).await {
            Err(_) => Err(ClientError::StreamIdleTimeout(self.idle_timeout)),
            Ok(Some(Ok(chunk))) => {
                self.parser.push(&chunk, &mut self.scratch)?;
                self.frames.extend(self.scratch.drain(..));
                Ok(())
            }
            Ok(Some(Err(_))) | Ok(None) => {
                self.parser.finish(&mut self.scratch)?;
                self.frames.extend(self.scratch.drain(..));
                if self.frames.is_empty() {
                    return Err(ClientError::StreamEndedEarly);
                }
                Ok(())
            }
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
    use super::peek_type;

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
