//! WebSocket frames that break the protocol get a close frame with the code RFC 6455
//! gives them (1009 too big, 1007 invalid UTF-8, 1002 any other violation), never a close
//! without a code (which a client reads as 1005, a drop to reconnect after); and a stalled
//! response keeps nothing of what the client sends meanwhile.

use std::time::Duration;

use agent_responses_mock::{MockConfig, MockServer, Script};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// A raw connection after the handshake: what a misbehaving client can send.
async fn raw(server: &MockServer) -> TcpStream {
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    let request = format!(
        "GET /v1/responses HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer sk-test\r\n\r\n",
        server.addr()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        tcp.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    tcp
}

/// A client frame: `first` is the FIN bit and opcode byte; masked with a zero key unless
/// `masked` is false.
fn frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mask = if masked { 0x80 } else { 0 };
    let mut out = vec![first];
    match payload.len() {
        n if n < 126 => out.push(mask | n as u8),
        n if n < 65536 => {
            out.push(mask | 126);
            out.extend((n as u16).to_be_bytes());
        }
        n => {
            out.push(mask | 127);
            out.extend((n as u64).to_be_bytes());
        }
    }
    if masked {
        out.extend([0, 0, 0, 0]);
    }
    out.extend(payload);
    out
}

/// The code of the server's close frame (`None`: a close without a code); panics on a
/// connection that ends without one.
async fn close_code(tcp: &mut TcpStream) -> Option<u16> {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let mut head = [0u8; 2];
            tcp.read_exact(&mut head).await.expect("no close frame");
            let len = match head[1] & 0x7f {
                126 => u64::from(tcp.read_u16().await.unwrap()),
                127 => tcp.read_u64().await.unwrap(),
                n => u64::from(n),
            };
            let mut payload = vec![0u8; len as usize];
            tcp.read_exact(&mut payload).await.unwrap();
            if head[0] & 0x0f == 8 {
                return (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
            }
        }
    })
    .await
    .expect("no close frame within 10 s")
}

async fn server() -> MockServer {
    MockServer::start(MockConfig::new(Script::default()))
        .await
        .unwrap()
}

#[tokio::test]
async fn an_oversized_message_is_closed_with_1009() {
    let server = server().await;
    let mut tcp = raw(&server).await;
    // Only the header of a 3 MiB text frame: the announced size is enough.
    let mut header = vec![0x81, 0x80 | 127];
    header.extend((3u64 << 20).to_be_bytes());
    header.extend([0, 0, 0, 0]);
    header.extend([b'a'; 1000]);
    tcp.write_all(&header).await.unwrap();
    assert_eq!(close_code(&mut tcp).await, Some(1009));
}

#[tokio::test]
async fn invalid_utf8_text_is_closed_with_1007() {
    let server = server().await;
    let mut tcp = raw(&server).await;
    tcp.write_all(&frame(0x81, b"{\"a\": \"\xff\xfe\"}", true))
        .await
        .unwrap();
    assert_eq!(close_code(&mut tcp).await, Some(1007));
}

#[tokio::test]
async fn protocol_violations_are_closed_with_1002() {
    let server = server().await;
    let cases: [(&str, Vec<u8>); 3] = [
        ("an unmasked frame", frame(0x81, b"{}", false)),
        ("a reserved opcode", frame(0x83, b"{}", true)),
        ("a continuation first", frame(0x80, b"{}", true)),
    ];
    for (what, bytes) in cases {
        let mut tcp = raw(&server).await;
        tcp.write_all(&bytes).await.unwrap();
        assert_eq!(close_code(&mut tcp).await, Some(1002), "{what}");
    }
}

/// Under a `stall` the session answers nothing more; what the client sends meanwhile is
/// read and dropped (it would never be answered), so it neither piles up in the server nor
/// is handled: the client can send far more than the read-ahead bound, and closing
/// still ends the connection cleanly.
#[tokio::test]
async fn a_stalled_session_drops_what_the_client_sends() {
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    let script = Script::from_json_str(
        &json!({"rules": [{"name": "stall", "reply": {"items": [{"type": "message",
            "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]}]},
            "fault": {"after_events": 2, "kind": "stall"}}]})
        .to_string(),
    )
    .unwrap();
    let server = MockServer::start(MockConfig::new(script)).await.unwrap();
    let mut ws = crate::ws_client::connect(&server).await;
    let create = json!({"type": "response.create", "model": "m", "input": "hi"});
    ws.send(Message::text(create.to_string())).await.unwrap();
    for _ in 0..2 {
        assert!(matches!(ws.next().await, Some(Ok(Message::Text(_)))));
    }
    // 64 MB, far more than the session reads ahead (8 messages): sent in full because the
    // stalled session reads and drops it.
    let big = json!({"type": "response.create", "model": "m", "input": "z".repeat(1 << 20)});
    let sent = tokio::time::timeout(Duration::from_secs(60), async {
        for _ in 0..64 {
            ws.send(Message::text(big.to_string())).await.unwrap();
        }
    })
    .await;
    assert!(sent.is_ok(), "the stalled session stopped reading");
    // Only the first create was ever handled.
    assert_eq!(server.ws_frames().len(), 1);
    ws.close(None).await.unwrap();
}

/// A `response.create` frame whose field has the wrong type is answered as the HTTP
/// endpoint answers the same body: `invalid_type` naming the field, not "Invalid client
/// event"; a frame that is no client event still is one; the session goes on after both.
#[tokio::test]
async fn a_create_frame_with_a_field_of_the_wrong_type_names_it() {
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    let server = server().await;
    let mut ws = crate::ws_client::connect(&server).await;
    let mut answer = async |frame: serde_json::Value| {
        ws.send(Message::text(frame.to_string())).await.unwrap();
        loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
                Ok(Some(Ok(Message::Text(text)))) => {
                    break serde_json::from_str::<serde_json::Value>(&text).unwrap();
                }
                Ok(Some(Ok(_))) => continue,
                other => panic!("no event: {other:?}"),
            }
        }
    };
    let cases = [
        (
            json!({"type": "response.create", "model": 5, "input": "hi"}),
            "model",
        ),
        (
            json!({"type": "response.create", "model": "m", "input": "hi", "tools": "x"}),
            "tools",
        ),
        (
            json!({"type": "response.create", "model": "m", "input": [1]}),
            "input[0]",
        ),
    ];
    for (frame, param) in cases {
        let event = answer(frame).await;
        assert_eq!(event["type"], "error", "{event}");
        assert_eq!(event["status"], 400, "{event}");
        assert_eq!(event["error"]["code"], "invalid_type", "{event}");
        assert_eq!(event["error"]["param"], param, "{event}");
    }
    let event = answer(json!({"type": "response.cancel"})).await;
    assert_eq!(event["error"]["code"], "invalid_request", "{event}");
    let message = event["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("Invalid client event"), "{event}");
    let event = answer(json!({"type": "response.create", "model": "m", "input": "hi"})).await;
    assert_eq!(event["type"], "response.created", "{event}");
}
