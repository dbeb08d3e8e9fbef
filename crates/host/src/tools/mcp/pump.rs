//! What a server writes on its stdout, on its way to rmcp: rmcp's codec drops, without a
//! word, a line it cannot parse or one over its limit, and the call it answered then waits
//! out `tool_timeout_sec` ("did not answer, effect unknown"). The pump mends or replaces
//! those lines first.
//!
//! Invariants:
//! - A line passes unchanged unless it holds a lone UTF-16 surrogate escape (`\ud83c` from
//!   a JavaScript server that cut an emoji in half), which becomes `\ufffd` (U+FFFD, as
//!   a lossy decoding shows it; the length is the same), or is over [`MAX_LINE`] bytes.
//! - A line over [`MAX_LINE`] bytes is never held whole (its first and last
//!   [`KEPT`] bytes are); when those show a response (`result` or `error`, no `method`)
//!   and its `id`, rmcp is handed a JSON-RPC error for that id instead, saying why; else the
//!   line is dropped, as rmcp would have.
//! - The server's end of output is rmcp's: the pump ends when either side does.

use std::borrow::Cow;

use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};

/// The longest line passed on (rmcp's own limit on one message).
pub(crate) const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
/// How much of each end of an oversized line is kept to find its `id`.
const KEPT: usize = 4096;
/// The JSON-RPC code of the error that replaces an oversized answer (internal error).
const TOO_LARGE: i64 = -32603;

/// Copies `from` to `to` line by line, mending and replacing as the module says, until
/// `from` ends or `to` is closed.
pub(crate) async fn pump(from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin) {
    let mut from = BufReader::with_capacity(64 * 1024, from);
    let mut line = Vec::new();
    loop {
        line.clear();
        let Some(over) = read_line(&mut from, &mut line, MAX_LINE).await else {
            break;
        };
        let out: Cow<'_, [u8]> = match over {
            None => mend_surrogates(&line),
            Some(over) => match oversized_reply(&over) {
                Some(reply) => Cow::Owned(reply.into_bytes()),
                None => {
                    tracing::warn!(target: "agent_host::mcp", bytes = over.len, "the server wrote a line over {MAX_LINE} bytes that is no answer to a request; dropped");
                    continue;
                }
            },
        };
        if to.write_all(&out).await.is_err()
            || to.write_all(b"\n").await.is_err()
            || to.flush().await.is_err()
        {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// An oversized line: its length, its first and its last [`KEPT`] bytes.
struct Oversized {
    len: usize,
    head: Vec<u8>,
    tail: Vec<u8>,
}

/// Reads one line (without its `\n` or `\r\n`) into `line`: `None` at the end of input
/// (a last line without `\n` included, as rmcp drops it too), `Some(None)` for a line of at
/// most `max` bytes, `Some(Some(_))` for a longer one (then `line` holds its head only).
async fn read_line(
    from: &mut (impl tokio::io::AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
    max: usize,
) -> Option<Option<Oversized>> {
    let mut len = 0usize;
    // Once the line is over `max`: its last bytes so far (`line` keeps its first).
    let mut tail: Option<Vec<u8>> = None;
    loop {
        let buf = from.fill_buf().await.ok()?;
        if buf.is_empty() {
            return None;
        }
        let newline = buf.iter().position(|b| *b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        len += chunk.len();
        match &mut tail {
            None => {
                line.extend_from_slice(chunk);
                if line.len() > max {
                    tail = Some(line[line.len() - KEPT..].to_vec());
                    line.truncate(KEPT);
                }
            }
            Some(tail) => {
                tail.extend_from_slice(chunk);
                if tail.len() > 2 * KEPT {
                    tail.drain(..tail.len() - KEPT);
                }
            }
        }
        let used = newline.map_or(buf.len(), |at| at + 1);
        from.consume(used);
        if newline.is_none() {
            continue;
        }
        let Some(mut tail) = tail else {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Some(None);
        };
        if tail.len() > KEPT {
            tail.drain(..tail.len() - KEPT);
        }
        if tail.last() == Some(&b'\r') {
            tail.pop();
        }
        return Some(Some(Oversized {
            len,
            head: std::mem::take(line),
            tail,
        }));
    }
}

/// `line` with every lone UTF-16 surrogate escape (`\uD800`-`\uDFFF` not in a high-low
/// pair) replaced by `\ufffd`; borrowed when there is none.
fn mend_surrogates(line: &[u8]) -> Cow<'_, [u8]> {
    let hex4 = |at: usize| -> Option<u16> {
        let digits = line.get(at..at + 4)?;
        let text = std::str::from_utf8(digits).ok()?;
        u16::from_str_radix(text, 16).ok()
    };
    // The code unit of a `\uXXXX` escape at `at`, if one starts there.
    let unit = |at: usize| -> Option<u16> {
        (line.get(at) == Some(&b'\\') && line.get(at + 1) == Some(&b'u'))
            .then(|| hex4(at + 2))
            .flatten()
    };
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < line.len() {
        if line[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(u) = unit(i) else {
            i += 2; // another escape (`\\`, `\"`, ...): its second byte is not a backslash
            continue;
        };
        let lone = match u {
            0xD800..=0xDBFF => match unit(i + 6) {
                Some(0xDC00..=0xDFFF) => {
                    i += 12; // a pair
                    continue;
                }
                _ => true,
            },
            0xDC00..=0xDFFF => true,
            _ => false,
        };
        if lone {
            let out = out.get_or_insert_with(|| line.to_vec());
            out[i + 2..i + 6].copy_from_slice(b"fffd");
        }
        i += 6;
    }
    match out {
        Some(out) => Cow::Owned(out),
        None => Cow::Borrowed(line),
    }
}

/// The JSON-RPC error that stands for an oversized answer, when its kept ends show a
/// response and its `id`.
fn oversized_reply(over: &Oversized) -> Option<String> {
    let (keys, first_complex) = top_level_head(&over.head);
    if keys.iter().any(|(k, _)| k == "method") {
        return None;
    }
    let response = matches!(first_complex.as_deref(), Some("result" | "error"))
        || keys.iter().any(|(k, _)| k == "error");
    if !response {
        return None;
    }
    let id = keys
        .into_iter()
        .find(|(k, _)| k == "id")
        .map(|(_, v)| v)
        .or_else(|| id_at_end(&over.tail))?;
    let message = format!(
        "the server's answer is {} bytes long, over the {} MiB one message may have: dropped \
         (the call ran; its result is unknown)",
        over.len,
        MAX_LINE / (1024 * 1024)
    );
    let reply = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": TOO_LARGE, "message": message}});
    Some(reply.to_string())
}

/// The top-level members of the object `head` starts, as far as their values are
/// strings, numbers, `true`, `false` or `null` (each with its value), and the key of the
/// first member whose value is an object or array (where the walk stops).
fn top_level_head(head: &[u8]) -> (Vec<(String, serde_json::Value)>, Option<String>) {
    let mut keys = Vec::new();
    let text = String::from_utf8_lossy(head);
    let mut rest = text.trim_start();
    let Some(after) = rest.strip_prefix('{') else {
        return (keys, None);
    };
    rest = after;
    loop {
        rest = rest.trim_start();
        let Some((key, after)) = json_string(rest) else {
            return (keys, None);
        };
        rest = after.trim_start();
        let Some(after) = rest.strip_prefix(':') else {
            return (keys, None);
        };
        rest = after.trim_start();
        if rest.starts_with('{') || rest.starts_with('[') {
            return (keys, Some(key));
        }
        let Some((value, after)) = simple_value(rest) else {
            return (keys, None);
        };
        keys.push((key, value));
        rest = after.trim_start();
        match rest.strip_prefix(',') {
            Some(after) => rest = after,
            None => return (keys, None),
        }
    }
}

/// A JSON string at the start of `text`, decoded, and what follows it.
fn json_string(text: &str) -> Option<(String, &str)> {
    let body = text.strip_prefix('"')?;
    let mut escaped = false;
    for (at, c) in body.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => {
                let literal = &text[..at + 2];
                let value = serde_json::from_str::<String>(literal).ok()?;
                return Some((value, &text[at + 2..]));
            }
            _ => {}
        }
    }
    None
}

/// A string, number, `true`, `false` or `null` at the start of `text`, and what follows.
fn simple_value(text: &str) -> Option<(serde_json::Value, &str)> {
    if text.starts_with('"') {
        let (s, rest) = json_string(text)?;
        return Some((serde_json::Value::String(s), rest));
    }
    let end = text
        .find(|c: char| c == ',' || c == '}' || c.is_whitespace())
        .unwrap_or(text.len());
    let value: serde_json::Value = serde_json::from_str(&text[..end]).ok()?;
    (!value.is_object() && !value.is_array()).then_some((value, &text[end..]))
}

/// The `id` of a line that ends `,"id":ID}` (a number or a string without escapes), as
/// JavaScript servers write their answers (`{"result":...,"jsonrpc":"2.0","id":7}`).
fn id_at_end(tail: &[u8]) -> Option<serde_json::Value> {
    let text = String::from_utf8_lossy(tail);
    let body = text.trim_end().strip_suffix('}')?.trim_end();
    let (value, before) = if let Some(inner) = body.strip_suffix('"') {
        let open = inner.rfind('"')?;
        let s = &inner[open + 1..];
        if s.contains('\\') {
            return None;
        }
        (serde_json::Value::String(s.to_string()), &inner[..open])
    } else {
        let start = body
            .rfind(|c: char| !(c.is_ascii_digit() || c == '-'))
            .map_or(0, |at| at + 1);
        let n: i64 = body[start..].parse().ok()?;
        (serde_json::Value::from(n), &body[..start])
    };
    let before = before.trim_end().strip_suffix(':')?.trim_end();
    let before = before.strip_suffix("\"id\"")?.trim_end();
    before.ends_with(',').then_some(value)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lone_surrogates_become_replacement_characters_and_pairs_stay() {
        let cut = br#"{"text":"status: \ud83c"}"#;
        let mended = mend_surrogates(cut);
        assert_eq!(&*mended, br#"{"text":"status: \ufffd"}"#);
        let text: serde_json::Value = serde_json::from_slice(&mended).unwrap();
        assert_eq!(text["text"], "status: \u{fffd}");
        // A pair (an emoji), an escaped backslash before `u`, a lone low one, upper case.
        let pair = br#"{"a":"\ud83c\udf89","b":"\\ud83c","c":"x\uDC00y\uD83Cz"}"#;
        let mended = mend_surrogates(pair);
        assert_eq!(
            &*mended,
            br#"{"a":"\ud83c\udf89","b":"\\ud83c","c":"x\ufffdy\ufffdz"}"#
        );
        assert!(matches!(
            mend_surrogates(b"{\"a\":\"\\u00e9\"}"),
            Cow::Borrowed(_)
        ));
    }

    fn over(head: &str, tail: &str) -> Oversized {
        Oversized {
            len: MAX_LINE + 1,
            head: head.as_bytes().to_vec(),
            tail: tail.as_bytes().to_vec(),
        }
    }

    #[test]
    fn an_oversized_answer_becomes_an_error_for_its_id() {
        let reply = |o: Oversized| {
            oversized_reply(&o).map(|r| serde_json::from_str::<serde_json::Value>(&r).unwrap())
        };
        // The id first (Rust, Python), or last (the TypeScript SDK).
        let first = reply(over(
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"#,
            "xx\"}]}}",
        ));
        assert_eq!(first.as_ref().unwrap()["id"], 7);
        assert_eq!(first.as_ref().unwrap()["error"]["code"], TOO_LARGE);
        let last = reply(over(
            r#"{"result":{"content":[{"type":"text","#,
            r#"xx"}]},"jsonrpc":"2.0","id":"a-1"}"#,
        ));
        assert_eq!(last.unwrap()["id"], "a-1");
        // A nested `id` is not the message's; a request or notification gets no answer.
        assert!(reply(over(r#"{"result":{"#, r#"{"id":3}}"#)).is_none());
        assert!(
            reply(over(
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"#,
                "}}"
            ))
            .is_none()
        );
        assert!(reply(over(r#"{"jsonrpc":"2.0","method":"x","params":{"#, "}}")).is_none());
    }

    #[tokio::test]
    async fn lines_pass_mended_and_an_oversized_one_is_replaced() {
        let (writer, mut reader) = tokio::io::duplex(1 << 20);
        let read = tokio::spawn(async move {
            let mut out = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut reader, &mut out)
                .await
                .unwrap();
            out
        });
        let input = [
            "{\"id\":1,\"result\":{}}\r\n".to_string(),
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{{\"t\":\"{}\"}}}}\r\n",
                "x".repeat(MAX_LINE)
            ),
            "{\"id\":2,\"result\":{\"t\":\"\\ud83c\"}}\n".to_string(),
            "no newline at the end".to_string(),
        ]
        .concat();
        pump(std::io::Cursor::new(input.into_bytes()), writer).await;
        let out = String::from_utf8(read.await.unwrap()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{}", &out[..out.len().min(300)]);
        assert_eq!(lines[0], "{\"id\":1,\"result\":{}}");
        let replaced: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(replaced["id"], 4);
        let message = replaced["error"]["message"].as_str().unwrap();
        assert!(message.contains("16 MiB"), "{message}");
        assert_eq!(lines[2], "{\"id\":2,\"result\":{\"t\":\"\\ufffd\"}}");
    }
}
