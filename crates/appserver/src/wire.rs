//! The wire format: one JSON-RPC message per `\n`-terminated line, no `"jsonrpc"` field.
//!
//! Parsing is lenient about extra fields (the server sends many that no schema lists) and
//! strict about shape: a line that is not JSON, or JSON that is neither a request, a
//! response nor a notification, is a [`ConnectionLost`] error, never a panic.

use serde_json::{Map, Value};

use crate::error::{ConnectionLost, excerpt};

/// A notification from the server: `{"method", "params"?, "emittedAtMs"?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// The method, e.g. `item/agentMessage/delta`.
    pub method: String,
    /// The params (`Value::Null` when absent).
    pub params: Value,
    /// The server's `emittedAtMs`, when present.
    pub emitted_at_ms: Option<u64>,
}

/// A request from the server to this client (approvals and the like).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerRequest {
    /// The server's id for it (an integer counting from 0, or a string), echoed in the reply.
    pub id: Value,
    /// The method, e.g. `item/commandExecution/requestApproval`.
    pub method: String,
    /// The params (`Value::Null` when absent).
    pub params: Value,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The JSON-RPC error code (`-32601` for a method nobody handles).
    pub code: i64,
    /// What went wrong, for people.
    pub message: String,
    /// Extra detail, as the peer sent it.
    pub data: Option<Value>,
}

/// One parsed line from the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// The answer to one of this client's calls.
    Response {
        /// The id of the call it answers.
        id: Value,
        /// The call's result, or the server's error.
        outcome: Result<Value, RpcError>,
    },
    /// The server asks this client something; it must be answered.
    Request(ServerRequest),
    /// The server reports progress; no answer.
    Notification(Notification),
}

/// Parses one line (without its newline).
pub fn parse_line(line: &[u8]) -> Result<Incoming, ConnectionLost> {
    let value: Value =
        serde_json::from_slice(line).map_err(|err| ConnectionLost::MalformedLine {
            detail: err.to_string(),
            excerpt: excerpt(line),
        })?;
    let not_rpc = || ConnectionLost::NotJsonRpc {
        excerpt: excerpt(line),
    };
    let Value::Object(mut obj) = value else {
        return Err(not_rpc());
    };
    let method = match obj.remove("method") {
        Some(Value::String(method)) => Some(method),
        Some(_) => return Err(not_rpc()),
        None => None,
    };
    let id = obj.remove("id");
    let params = obj.remove("params").unwrap_or(Value::Null);
    match (method, id) {
        (Some(method), Some(id)) => Ok(Incoming::Request(ServerRequest { id, method, params })),
        (Some(method), None) => Ok(Incoming::Notification(Notification {
            method,
            params,
            emitted_at_ms: obj.get("emittedAtMs").and_then(Value::as_u64),
        })),
        (None, Some(id)) => {
            if let Some(error) = obj.remove("error") {
                Ok(Incoming::Response {
                    id,
                    outcome: Err(parse_error(error)),
                })
            } else if let Some(result) = obj.remove("result") {
                Ok(Incoming::Response {
                    id,
                    outcome: Ok(result),
                })
            } else {
                Err(not_rpc())
            }
        }
        (None, None) => Err(not_rpc()),
    }
}

fn parse_error(error: Value) -> RpcError {
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_owned);
    let data = error.get("data").cloned();
    RpcError {
        code,
        message,
        data,
    }
}

/// Encodes a request line (with the trailing newline).
pub fn request_line(id: i64, method: &str, params: Option<Value>) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("method".into(), Value::String(method.into()));
    obj.insert("id".into(), Value::from(id));
    if let Some(params) = params {
        obj.insert("params".into(), params);
    }
    encode(Value::Object(obj))
}

/// Encodes a notification line.
pub fn notification_line(method: &str, params: Option<Value>) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("method".into(), Value::String(method.into()));
    if let Some(params) = params {
        obj.insert("params".into(), params);
    }
    encode(Value::Object(obj))
}

/// Encodes the reply to a server request.
pub fn reply_line(id: &Value, reply: &Result<Value, RpcError>) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("id".into(), id.clone());
    match reply {
        Ok(result) => {
            obj.insert("result".into(), result.clone());
        }
        Err(err) => {
            let mut e = Map::new();
            e.insert("code".into(), Value::from(err.code));
            e.insert("message".into(), Value::String(err.message.clone()));
            if let Some(data) = &err.data {
                e.insert("data".into(), data.clone());
            }
            obj.insert("error".into(), Value::Object(e));
        }
    }
    encode(Value::Object(obj))
}

fn encode(value: Value) -> Vec<u8> {
    // Serialising a `Value` cannot fail: its map keys are strings.
    let mut line = value.to_string().into_bytes();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_the_three_shapes_and_tolerates_extra_fields() {
        let n = parse_line(
            br#"{"method":"turn/started","params":{"x":1},"emittedAtMs":5,"extra":true}"#,
        )
        .unwrap();
        assert!(
            matches!(n, Incoming::Notification(Notification { ref method, emitted_at_ms: Some(5), .. }) if method == "turn/started")
        );
        let r =
            parse_line(br#"{"method":"item/commandExecution/requestApproval","id":0,"params":{}}"#)
                .unwrap();
        assert!(matches!(
            r,
            Incoming::Request(ServerRequest {
                id: Value::Number(_),
                ..
            })
        ));
        let ok = parse_line(br#"{"id":3,"result":{}}"#).unwrap();
        assert!(matches!(ok, Incoming::Response { outcome: Ok(_), .. }));
        let err =
            parse_line(br#"{"error":{"code":-32600,"message":"Not initialized"},"id":1}"#).unwrap();
        assert!(matches!(
            err,
            Incoming::Response {
                outcome: Err(RpcError { code: -32600, .. }),
                ..
            }
        ));
    }

    #[test]
    fn rejects_non_json_and_non_rpc() {
        assert!(matches!(
            parse_line(b"{oops"),
            Err(ConnectionLost::MalformedLine { .. })
        ));
        assert!(matches!(
            parse_line(b"\xff\xfe"),
            Err(ConnectionLost::MalformedLine { .. })
        ));
        assert!(matches!(
            parse_line(b"[1,2]"),
            Err(ConnectionLost::NotJsonRpc { .. })
        ));
        assert!(matches!(
            parse_line(br#"{"id":1}"#),
            Err(ConnectionLost::NotJsonRpc { .. })
        ));
        assert!(matches!(
            parse_line(br#"{"method":5}"#),
            Err(ConnectionLost::NotJsonRpc { .. })
        ));
    }

    #[test]
    fn encodes_lines() {
        let line = request_line(7, "thread/start", Some(serde_json::json!({"cwd":"/"})));
        assert_eq!(line.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"method":"thread/start","id":7,"params":{"cwd":"/"}})
        );
        let reply = reply_line(
            &Value::from(0),
            &Err(RpcError {
                code: -32601,
                message: "no".into(),
                data: None,
            }),
        );
        let v: Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id":0,"error":{"code":-32601,"message":"no"}})
        );
    }
}
