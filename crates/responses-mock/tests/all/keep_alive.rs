//! Keep-alive: a request the emulator answers without its body (an unknown path, a method
//! a path does not serve) does not cost the client its next request on the same connection.

use agent_responses_mock::{MockConfig, MockServer, script::Script};
use serde_json::json;

const KEY: &str = "sk-test-key";

/// What the `serve` fuzz target found in `agentctl serve`: hyper closes a connection whose
/// request body went unread, and a keep-alive client sent its next request on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_after_an_unread_body_is_answered() {
    let script = Script::from_json_str(r#"{"rules": []}"#).unwrap();
    let server = MockServer::start(MockConfig::new(script).with_api_key(KEY))
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let base = format!("http://{}", server.addr());
    let body = vec![b'x'; 64 * 1024];
    for i in 0..200 {
        // An unknown path (two shapes of it), then a known one with a method it does not
        // serve.
        let path = if i % 2 == 0 {
            "/v1/chat/completions"
        } else {
            "/v1/responses/compact/extra"
        };
        let refused = client
            .post(format!("{base}{path}"))
            .bearer_auth(KEY)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 404);
        let wrong = client
            .put(format!("{base}/v1/responses"))
            .bearer_auth(KEY)
            .body(body.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("round {i}, after a 404: {e:?}"));
        assert_eq!(wrong.status(), 405);
        let next = client
            .post(format!("{base}/v1/responses"))
            .bearer_auth(KEY)
            .json(&json!({"model": "m", "input": "still there?"}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("round {i}, after a 405: {e:?}"));
        assert!(next.status().as_u16() < 500, "{}", next.status());
    }
}
