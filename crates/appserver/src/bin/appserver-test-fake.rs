//! A scripted stand-in for `codex app-server --listen stdio://`, for tests.
//!
//! It speaks the same framing (one JSON message per line, no `"jsonrpc"`), requires the
//! handshake like Codex does, and runs turns from a script chosen by the prompt text:
//! - default: an agent message `hello world` in two deltas, then `turn/completed` completed;
//! - prompt contains `exec`: a `commandExecution` item and an
//!   `item/commandExecution/requestApproval` request; the item ends `declined` unless the
//!   reply is `accept`, and the agent message says `decision: <reply>`;
//! - prompt contains `hold`: one delta `partial`, then the turn waits for `turn/steer`
//!   (agent message `steered: <text>`, completed) or `turn/interrupt` (interrupted).
//!
//! Extra methods make the error paths reachable:
//! `fake/crash` (exit 3 without answering), `fake/ignore` (never answered),
//! `fake/malformed` (a line that is not JSON), `fake/oversized {bytes}` (one long line),
//! `fake/flood {count}` (`count` notifications `fake/seq {n}`, then the answer),
//! `fake/ask {method}` (a server request; answered with the client's reply),
//! `fake/echo` (the params back).
//! Arguments are ignored, so `--codex-bin` can point at this binary.

use std::io::{BufRead, Write};

use serde_json::{Value, json};

struct Turn {
    id: String,
    thread: String,
}

/// What a reply from the client continues.
enum Awaiting {
    Approval { call: i64, turn: Turn },
    Ask { call: Value },
}

struct Fake {
    out: std::io::Stdout,
    initialized: bool,
    next_server_id: i64,
    next_turn: u64,
    active: Option<Turn>,
    awaiting: Vec<(i64, Awaiting)>,
}

fn main() -> std::io::Result<()> {
    let mut fake = Fake {
        out: std::io::stdout(),
        initialized: false,
        next_server_id: 0,
        next_turn: 1,
        active: None,
        awaiting: Vec::new(),
    };
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            eprintln!("fake: cannot parse {line}");
            continue;
        };
        fake.handle(msg)?;
    }
    Ok(())
}

impl Fake {
    fn send(&mut self, msg: &Value) -> std::io::Result<()> {
        let mut out = self.out.lock();
        writeln!(out, "{msg}")?;
        out.flush()
    }

    fn notify(&mut self, method: &str, params: Value) -> std::io::Result<()> {
        self.send(
            &json!({"method": method, "params": params, "emittedAtMs": 1, "extraTopLevel": true}),
        )
    }

    fn reply(&mut self, id: &Value, result: Value) -> std::io::Result<()> {
        self.send(&json!({"id": id, "result": result}))
    }

    fn error(&mut self, id: &Value, code: i64, message: &str) -> std::io::Result<()> {
        self.send(&json!({"error": {"code": code, "message": message}, "id": id}))
    }

    fn handle(&mut self, msg: Value) -> std::io::Result<()> {
        let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
        let id = msg.get("id").cloned();
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        match (method, id) {
            (Some(method), Some(id)) => self.request(&method, &id, &params),
            (Some(_notification), None) => Ok(()),
            (None, Some(id)) => self.client_reply(&id, &msg),
            (None, None) => Ok(()),
        }
    }

    fn client_reply(&mut self, id: &Value, msg: &Value) -> std::io::Result<()> {
        let Some(pos) = self
            .awaiting
            .iter()
            .position(|(sid, _)| Some(*sid) == id.as_i64())
        else {
            return Ok(());
        };
        let (_, awaiting) = self.awaiting.remove(pos);
        self.notify("serverRequest/resolved", json!({"requestId": id}))?;
        match awaiting {
            Awaiting::Ask { call } => self.reply(&call, json!({"reply": msg})),
            Awaiting::Approval { call, turn } => {
                let decision = msg.pointer("/result/decision").map_or_else(
                    || "error".to_owned(),
                    |d| d.as_str().map_or_else(|| d.to_string(), str::to_owned),
                );
                let status = if decision == "accept" {
                    "completed"
                } else {
                    "declined"
                };
                self.notify(
                    "item/completed",
                    json!({"threadId": turn.thread, "turnId": turn.id,
                           "item": {"type": "commandExecution", "id": format!("call_{call}"), "command": "touch marker", "status": status}}),
                )?;
                self.agent_message(&turn, &[&format!("decision: {decision}")])?;
                self.complete(&turn, "completed")
            }
        }
    }

    fn request(&mut self, method: &str, id: &Value, params: &Value) -> std::io::Result<()> {
        if method == "initialize" {
            if self.initialized {
                return self.error(id, -32600, "Already initialized");
            }
            self.initialized = true;
            self.reply(
                id,
                json!({"userAgent": "fake/0.0.0", "codexHome": "/nonexistent", "platformFamily": "unix", "platformOs": "linux"}),
            )?;
            return self.notify(
                "configWarning",
                json!({"summary": "fake server", "details": null}),
            );
        }
        if !self.initialized {
            return self.error(id, -32600, "Not initialized");
        }
        match method {
            "thread/start" => {
                self.reply(id, json!({"thread": {"id": "thread-1", "preview": "", "novelField": [1]}, "model": "fake-model", "modelProvider": "fake"}))?;
                self.notify("thread/started", json!({"thread": {"id": "thread-1"}}))
            }
            "turn/start" => self.turn_start(id, params),
            "turn/steer" => self.turn_steer(id, params),
            "turn/interrupt" => {
                let Some(turn) = self.active.take() else {
                    return self.error(id, -32600, "no active turn to interrupt");
                };
                self.reply(id, json!({}))?;
                self.complete(&turn, "interrupted")
            }
            "fake/echo" => self.reply(id, params.clone()),
            "fake/crash" => std::process::exit(3),
            "fake/ignore" => Ok(()),
            "fake/malformed" => {
                let mut out = self.out.lock();
                writeln!(out, "{{this is not json")?;
                out.flush()
            }
            "fake/oversized" => {
                let bytes = params
                    .get("bytes")
                    .and_then(Value::as_u64)
                    .unwrap_or(1 << 20);
                let filler = "x".repeat(usize::try_from(bytes).unwrap_or(1 << 20));
                self.reply(id, json!({"filler": filler}))
            }
            "fake/flood" => {
                let count = params.get("count").and_then(Value::as_u64).unwrap_or(1000);
                for n in 0..count {
                    self.notify("fake/seq", json!({"n": n}))?;
                }
                self.reply(id, json!({"count": count}))
            }
            "fake/ask" => {
                let asked = params
                    .get("method")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown/method")
                    .to_owned();
                let sid = self.server_id();
                self.awaiting
                    .push((sid, Awaiting::Ask { call: id.clone() }));
                self.send(&json!({"method": asked, "id": sid, "params": {"threadId": "thread-1", "turnId": "turn-0", "itemId": "x"}}))
            }
            other => self.error(
                id,
                -32600,
                &format!("Invalid request: unknown variant `{other}`"),
            ),
        }
    }

    fn server_id(&mut self) -> i64 {
        let sid = self.next_server_id;
        self.next_server_id += 1;
        sid
    }

    fn turn_start(&mut self, id: &Value, params: &Value) -> std::io::Result<()> {
        let thread = params
            .get("threadId")
            .and_then(Value::as_str)
            .unwrap_or("thread-1")
            .to_owned();
        let text = params
            .pointer("/input/0/text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let turn = Turn {
            id: format!("turn-{}", self.next_turn),
            thread,
        };
        self.next_turn += 1;
        let turn_json = json!({"id": turn.id, "items": [], "status": "inProgress", "error": null});
        self.reply(id, json!({"turn": turn_json}))?;
        self.notify(
            "turn/started",
            json!({"threadId": turn.thread, "turn": turn_json}),
        )?;
        self.user_message(&turn, &text)?;
        if text.contains("exec") {
            let sid = self.server_id();
            self.notify(
                "item/started",
                json!({"threadId": turn.thread, "turnId": turn.id,
                       "item": {"type": "commandExecution", "id": format!("call_{sid}"), "command": "touch marker", "status": "inProgress"}}),
            )?;
            self.send(&json!({"method": "item/commandExecution/requestApproval", "id": sid,
                "params": {"kind": "command", "threadId": turn.thread, "turnId": turn.id, "itemId": format!("call_{sid}"), "command": "touch marker"}}))?;
            self.awaiting
                .push((sid, Awaiting::Approval { call: sid, turn }));
            Ok(())
        } else if text.contains("hold") {
            self.notify("item/started", json!({"threadId": turn.thread, "turnId": turn.id, "item": {"type": "agentMessage", "id": "msg_partial", "text": ""}}))?;
            self.notify("item/agentMessage/delta", json!({"threadId": turn.thread, "turnId": turn.id, "itemId": "msg_partial", "delta": "partial"}))?;
            self.active = Some(turn);
            Ok(())
        } else {
            self.agent_message(&turn, &["hello", " world"])?;
            self.complete(&turn, "completed")
        }
    }

    fn turn_steer(&mut self, id: &Value, params: &Value) -> std::io::Result<()> {
        let expected = params
            .get("expectedTurnId")
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some(turn) = self.active.take() else {
            return self.error(id, -32600, "no active turn to steer");
        };
        if turn.id != expected {
            let message = format!(
                "expected active turn id `{expected}` but found `{}`",
                turn.id
            );
            self.active = Some(turn);
            return self.error(id, -32600, &message);
        }
        let text = params
            .pointer("/input/0/text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        self.reply(id, json!({"turnId": turn.id}))?;
        self.user_message(&turn, &text)?;
        self.agent_message(&turn, &["steered: ", &text])?;
        self.complete(&turn, "completed")
    }

    fn user_message(&mut self, turn: &Turn, text: &str) -> std::io::Result<()> {
        let item = json!({"type": "userMessage", "id": format!("user-{}", turn.id), "content": [{"type": "text", "text": text, "text_elements": []}]});
        self.notify(
            "item/started",
            json!({"threadId": turn.thread, "turnId": turn.id, "item": item}),
        )?;
        self.notify(
            "item/completed",
            json!({"threadId": turn.thread, "turnId": turn.id, "item": item}),
        )
    }

    fn agent_message(&mut self, turn: &Turn, deltas: &[&str]) -> std::io::Result<()> {
        let item_id = format!("msg-{}-{}", turn.id, self.next_server_id);
        self.notify("item/started", json!({"threadId": turn.thread, "turnId": turn.id, "item": {"type": "agentMessage", "id": item_id, "text": ""}}))?;
        for delta in deltas {
            self.notify("item/agentMessage/delta", json!({"threadId": turn.thread, "turnId": turn.id, "itemId": item_id, "delta": delta}))?;
        }
        let text: String = deltas.concat();
        self.notify("item/completed", json!({"threadId": turn.thread, "turnId": turn.id, "item": {"type": "agentMessage", "id": item_id, "text": text}}))
    }

    fn complete(&mut self, turn: &Turn, status: &str) -> std::io::Result<()> {
        self.notify(
            "turn/completed",
            json!({"threadId": turn.thread, "turn": {"id": turn.id, "items": [], "status": status, "error": null, "durationMs": 1}}),
        )
    }
}
