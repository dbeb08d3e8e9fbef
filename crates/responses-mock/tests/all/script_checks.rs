//! What a script may say: one JSON object, error replies that are HTTP errors with headers
//! that can be sent. Anything else is refused at load, not served as something else.

use agent_responses_mock::{MockConfig, MockServer, Script, ScriptError};
use serde_json::json;

fn error_script(error: serde_json::Value) -> String {
    json!({"rules": [{"name": "boom", "reply": {"error": error}}]}).to_string()
}

#[test]
fn a_json_array_is_not_a_script() {
    for text in [
        "[]",
        r#"["a description", []]"#,
        r#"["", [], null]"#,
        "5",
        "null",
    ] {
        match Script::from_json_str(text) {
            Err(ScriptError::Parse(err)) => {
                assert!(err.to_string().contains("script object"), "{text}: {err}");
            }
            other => panic!("{text}: expected a parse error, got {other:?}"),
        }
    }
    // Objects load as before; trailing text is still refused.
    assert_eq!(Script::from_json_str("{}").unwrap(), Script::default());
    assert!(Script::from_json_str(r#"{"rules": []}"#).is_ok());
    assert!(Script::from_json_str(r#"{"rules": []} []"#).is_err());
    assert!(Script::from_json_str(r#"{"rulez": []}"#).is_err());
}

#[test]
fn an_error_reply_must_have_an_error_status() {
    for status in [0, 99, 200, 204, 399, 600, 1000] {
        let text = error_script(json!({"status": status, "message": "scripted"}));
        match Script::from_json_str(&text) {
            Err(ScriptError::Invalid(why)) => {
                assert!(why.contains("boom") && why.contains("400-599"), "{why}");
            }
            other => panic!("status {status}: expected an invalid script, got {other:?}"),
        }
    }
    for status in [400, 429, 500, 599] {
        let text = error_script(json!({"status": status, "message": "scripted"}));
        assert!(Script::from_json_str(&text).is_ok(), "{status}");
    }
}

#[test]
fn error_headers_that_cannot_be_sent_are_refused() {
    for headers in [
        json!({"bad name": "1"}),
        json!({"": "1"}),
        json!({"x-ok": "line\nbreak"}),
    ] {
        let text = error_script(json!({"status": 429, "message": "m", "headers": headers}));
        assert!(
            matches!(Script::from_json_str(&text), Err(ScriptError::Invalid(why)) if why.contains("reply.error.headers")),
            "{headers}"
        );
    }
    // Headers the server sets itself (a scripted one dropped the connection), named.
    for name in [
        "content-length",
        "Transfer-Encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
        "host",
    ] {
        let text = error_script(json!({"status": 429, "message": "m", "headers": {name: "1"}}));
        match Script::from_json_str(&text) {
            Err(ScriptError::Invalid(why)) => assert!(
                why.contains("reply.error.headers")
                    && why.contains(&format!("`{}`", name.to_lowercase())),
                "{why}"
            ),
            other => panic!("{name}: expected an invalid script, got {other:?}"),
        }
    }
    let good = error_script(
        json!({"status": 429, "message": "m", "headers": {"Retry-After": 1, "x-should-retry": "true"}}),
    );
    assert!(Script::from_json_str(&good).is_ok());
}

/// A script built in code skips `from_json_str`: the server checks it before serving.
#[tokio::test]
async fn the_server_refuses_an_unchecked_script_with_a_success_status() {
    let script = Script {
        rules: serde_json::from_value(json!([
            {"reply": {"error": {"status": 200, "message": "not an error"}}}
        ]))
        .unwrap(),
        ..Script::default()
    };
    let refused = MockServer::start(MockConfig::new(script))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("400-599"), "{refused}");
}

/// A valid scripted error is served with its status and headers.
#[tokio::test]
async fn a_scripted_error_is_served_with_its_status_and_headers() {
    let text = error_script(json!({"status": 429, "message": "slow down",
        "headers": {"Retry-After": 2}}));
    let server = MockServer::start(MockConfig::new(Script::from_json_str(&text).unwrap()))
        .await
        .unwrap();
    let response = reqwest::Client::new()
        .post(format!("{}/responses", server.base_url()))
        .bearer_auth("sk-test")
        .json(&json!({"model": "m", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "2");
}
