//! Fuzz target `appserver`: the app-server's JSONL stream (`read_line`, `parse_line`,
//! `TurnNotification::parse`).
//!
//! Properties:
//! 1. Any line (JSON-RPC shapes, JSON token soup, raw bytes, the corpus) parses to a
//!    message or a typed `ConnectionLost`, never a panic; the error's text is bounded
//!    (an excerpt, not the line); a notification types without panicking.
//! 2. What we write we read: `request_line`, `notification_line` and `reply_line` parse
//!    back to the same message.
//! 3. The line reader gives the same lines, the same `LineTooLong` and the same end
//!    however the bytes are chunked (random cuts, every single split point, one byte at a
//!    time), and never holds more than `max_line + 1` bytes of a line.
//! 4. A 16 MiB line is refused after reading `max_line + 1` bytes of it, or read and parsed
//!    whole under the default limit, in bounded time.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use agent_appserver::fuzzing::{
    Incoming, notification_line, parse_line, read_line, reply_line, request_line,
};
use agent_appserver::{ConnectionLost, RpcError, TurnNotification};
use agent_fuzzkit::{config, corpus, json_text, json_value, keep_if_failing, nasty_json, within};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::Value;
use tokio::io::{AsyncRead, BufReader, ReadBuf};

const TARGET: &str = "appserver";
const BOUND: Duration = Duration::from_secs(5);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    })
}

/// A reader that hands out the given chunks, one per read (or less, if the caller's buffer
/// is smaller), and counts what it handed out.
struct Chunked {
    chunks: VecDeque<Vec<u8>>,
    given: usize,
}

impl Chunked {
    fn new(chunks: Vec<Vec<u8>>) -> Self {
        Self {
            chunks: chunks.into(),
            given: 0,
        }
    }
}

impl AsyncRead for Chunked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        while let Some(front) = self.chunks.front_mut() {
            if front.is_empty() {
                self.chunks.pop_front();
                continue;
            }
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front[..n]);
            front.drain(..n);
            self.given += n;
            break;
        }
        Poll::Ready(Ok(()))
    }
}

/// What the reader gives: the lines, then how it ended (`None`: end of stream).
type Read = (Vec<Vec<u8>>, Option<String>);

fn read_all(chunks: Vec<Vec<u8>>, max_line: usize) -> Result<Read, TestCaseError> {
    runtime().block_on(async {
        let mut reader = BufReader::new(Chunked::new(chunks));
        let mut lines = Vec::new();
        let mut buf = Vec::new();
        loop {
            let result = read_line(&mut reader, &mut buf, max_line).await;
            prop_assert!(buf.len() <= max_line + 1, "held {} bytes", buf.len());
            match result {
                Ok(true) => lines.push(buf.clone()),
                Ok(false) => return Ok((lines, None)),
                Err(e) => return Ok((lines, Some(e.to_string()))),
            }
        }
    })
}

/// The reader's rule, written plainly: lines end at LF (a CR before it is dropped), a last
/// line may lack its LF, and a line whose bytes before the LF (its CR included) exceed
/// `max_line` ends the stream with `LineTooLong`.
fn model(stream: &[u8], max_line: usize) -> Read {
    let mut lines = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let (raw, ended, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], true, &rest[i + 1..]),
            None => (rest, false, &rest[rest.len()..]),
        };
        if raw.len() > max_line {
            let err = ConnectionLost::LineTooLong { limit: max_line }.to_string();
            return (lines, Some(err));
        }
        let line = if ended {
            raw.strip_suffix(b"\r").unwrap_or(raw)
        } else {
            raw
        };
        lines.push(line.to_vec());
        rest = next;
    }
    (lines, None)
}

fn split(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(bytes.len())).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for cut in cuts {
        out.push(bytes[start..cut].to_vec());
        start = cut;
    }
    out.push(bytes[start..].to_vec());
    out
}

fn check_reader(stream: &[u8], cuts: &[usize], max_line: usize) -> Result<(), TestCaseError> {
    let start = Instant::now();
    let expected = model(stream, max_line);
    prop_assert_eq!(
        &read_all(split(stream, cuts), max_line)?,
        &expected,
        "random cuts"
    );
    if stream.len() <= 256 {
        for i in 0..=stream.len() {
            prop_assert_eq!(
                &read_all(split(stream, &[i]), max_line)?,
                &expected,
                "split at {}",
                i
            );
        }
        let bytes: Vec<usize> = (0..stream.len()).collect();
        prop_assert_eq!(
            &read_all(split(stream, &bytes), max_line)?,
            &expected,
            "bytewise"
        );
    }
    within(start, BOUND, "reading")
}

fn check_line(line: &[u8]) -> Result<(), TestCaseError> {
    let start = Instant::now();
    match parse_line(line) {
        Ok(Incoming::Notification(note)) => {
            let _ = TurnNotification::parse(&note);
        }
        Ok(_) => {}
        Err(e @ (ConnectionLost::MalformedLine { .. } | ConnectionLost::NotJsonRpc { .. })) => {
            // An excerpt of at most 120 characters plus serde_json's short message.
            let text = e.to_string();
            prop_assert!(
                text.len() <= 1024,
                "{} bytes of error for {} of line",
                text.len(),
                line.len()
            );
        }
        Err(e) => prop_assert!(false, "unexpected error kind: {e}"),
    }
    within(start, BOUND, "parsing a line")
}

fn strip(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").unwrap()
}

fn check_round_trip(
    id: i64,
    method: &str,
    params: Option<Value>,
    reply: Result<Value, RpcError>,
    reply_id: Value,
) -> Result<(), TestCaseError> {
    let request = parse_line(strip(&request_line(id, method, params.clone())));
    let Ok(Incoming::Request(request)) = request else {
        return Err(TestCaseError::fail(format!(
            "request line read back as {request:?}"
        )));
    };
    prop_assert_eq!(&request.id, &Value::from(id));
    prop_assert_eq!(&request.method, method);
    prop_assert_eq!(&request.params, params.as_ref().unwrap_or(&Value::Null));
    let note = parse_line(strip(&notification_line(method, params.clone())));
    let Ok(Incoming::Notification(note)) = note else {
        return Err(TestCaseError::fail(format!(
            "notification line read back as {note:?}"
        )));
    };
    prop_assert_eq!(&note.method, method);
    prop_assert_eq!(&note.params, params.as_ref().unwrap_or(&Value::Null));
    let line = reply_line(&reply_id, &reply);
    prop_assert_eq!(
        parse_line(strip(&line)).ok(),
        Some(Incoming::Response {
            id: reply_id,
            outcome: reply
        })
    );
    Ok(())
}

// ---- generators ----

/// One line's content: a JSON-RPC message, JSON soup, or raw bytes.
fn line() -> impl Strategy<Value = Vec<u8>> {
    let method = prop::sample::select(vec![
        "turn/started",
        "turn/completed",
        "item/started",
        "item/completed",
        "item/agentMessage/delta",
        "item/commandExecution/requestApproval",
        "x",
    ]);
    prop_oneof![
        3 => (method, json_value(), prop::option::of(json_value())).prop_map(|(m, params, id)| {
            let mut obj = serde_json::json!({"method": m, "params": params});
            if let Some(id) = id {
                obj["id"] = id;
            }
            obj.to_string().into_bytes()
        }),
        2 => (json_value(), any::<bool>(), json_value()).prop_map(|(id, ok, v)| {
            if ok {
                serde_json::json!({"id": id, "result": v}).to_string().into_bytes()
            } else {
                serde_json::json!({"id": id, "error": v}).to_string().into_bytes()
            }
        }),
        3 => json_text().prop_map(String::into_bytes),
        2 => prop::collection::vec(any::<u8>(), 0..48),
    ]
}

/// A stream: lines with LF or CRLF endings (or a lone CR), blank lines, and sometimes an
/// unterminated last line.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    let eol = prop::sample::select(vec![&b"\n"[..], b"\r\n", b"\n", b"\r"]);
    (
        prop::collection::vec((line(), eol), 0..8),
        prop::option::weighted(0.3, line()),
    )
        .prop_map(|(lines, tail)| {
            let mut out = Vec::new();
            for (line, eol) in lines {
                out.extend_from_slice(&line);
                out.extend_from_slice(eol);
            }
            out.extend(tail.unwrap_or_default());
            out
        })
}

fn rpc_error() -> impl Strategy<Value = RpcError> {
    (
        any::<i64>(),
        agent_fuzzkit::json_string(),
        prop::option::of(json_value()),
    )
        .prop_map(|(code, message, data)| RpcError {
            code,
            message,
            data,
        })
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn any_line_parses_or_is_a_typed_error(line in line()) {
        keep_if_failing("line", "jsonl", &line, check_line(&line))?;
    }

    #[test]
    fn what_we_write_we_read(
        id in any::<i64>(),
        method in agent_fuzzkit::json_string(),
        params in prop::option::of(json_value()),
        reply in prop_oneof![json_value().prop_map(Ok), rpc_error().prop_map(Err)],
        reply_id in json_value(),
    ) {
        let input = format!("{id}\n{method}\n{params:?}\n{reply:?}\n{reply_id}");
        let result = check_round_trip(id, &method, params, reply, reply_id);
        keep_if_failing("roundtrip", "txt", input.as_bytes(), result)?;
    }

    #[test]
    fn lines_are_the_same_under_every_chunking(
        stream in stream(),
        picks in prop::collection::vec(any::<Index>(), 0..10),
        max_line in prop::sample::select(vec![4usize, 16, 64, 1 << 20]),
    ) {
        let cuts: Vec<usize> = picks.iter().map(|i| i.index(stream.len() + 1)).collect();
        keep_if_failing("reader", "jsonl", &stream, check_reader(&stream, &cuts, max_line))?;
    }
}

#[test]
fn corpus_replays() {
    for (name, stream) in corpus(TARGET, 5) {
        for line in stream.split(|&b| b == b'\n') {
            check_line(line).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let sevens: Vec<usize> = (0..stream.len()).step_by(7).collect();
        for max_line in [16, 1 << 20] {
            check_reader(&stream, &sevens, max_line).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        if name == "turn-session.jsonl" {
            let (lines, end) = read_all(vec![stream.clone()], 1 << 20).unwrap();
            assert_eq!(end, None);
            assert!(lines.iter().all(|l| parse_line(l).is_ok()), "{name}");
        }
    }
    for text in nasty_json() {
        check_line(text.as_bytes()).unwrap();
    }
}

#[test]
fn a_16_mib_line_is_refused_early_or_read_whole() {
    let mut line = br#"{"method":"big","params":""#.to_vec();
    line.resize(line.len() + (16 << 20), b'x');
    line.extend_from_slice(b"\"}\n{\"method\":\"after\"}\n");
    let chunks: Vec<Vec<u8>> = line.chunks(64 * 1024).map(<[u8]>::to_vec).collect();

    // Under a 1 MiB limit: refused after reading little more than the limit.
    let start = Instant::now();
    let max = 1 << 20;
    let (given, result, held) = runtime().block_on(async {
        let mut reader = BufReader::new(Chunked::new(chunks.clone()));
        let mut buf = Vec::new();
        let result = read_line(&mut reader, &mut buf, max).await;
        (reader.get_ref().given, result, buf.capacity())
    });
    assert!(
        matches!(result, Err(ConnectionLost::LineTooLong { .. })),
        "{result:?}"
    );
    assert!(
        given <= max + 1 + 2 * 64 * 1024,
        "read {given} bytes to refuse it"
    );
    assert!(held <= 4 * max, "held {held} bytes");

    // Under the default 64 MiB limit: read and parsed whole, then the next line.
    let (lines, end) = read_all(chunks, 64 << 20).unwrap();
    assert_eq!(end, None);
    assert_eq!(lines.len(), 2);
    assert!(
        matches!(parse_line(&lines[0]), Ok(Incoming::Notification(ref n)) if n.method == "big")
    );
    assert!(start.elapsed() < Duration::from_secs(30));
}
