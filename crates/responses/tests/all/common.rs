#![allow(dead_code)]

use std::time::Duration;

use agent_responses::{ApiKey, Client, ClientConfig};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};

/// An emulator with `script` (JSON) requiring the mock key, and a client with fast backoff.
pub async fn start(script: serde_json::Value) -> (MockServer, Client) {
    let script: Script = serde_json::from_value(script).expect("script");
    start_with(MockConfig::new(script).with_api_key(MOCK_API_KEY)).await
}

pub async fn start_with(config: MockConfig) -> (MockServer, Client) {
    let server = MockServer::start(config).await.expect("start emulator");
    let client = client_for(&server.base_url(), MOCK_API_KEY);
    (server, client)
}

pub fn client_for(base: &str, key: &str) -> Client {
    Client::new(config_for(base, key)).expect("client")
}

/// The config [`client_for`] uses: the SDK defaults with fast backoff.
pub fn config_for(base: &str, key: &str) -> ClientConfig {
    let mut config = ClientConfig::new(base, ApiKey::new(key).expect("key"));
    config.retry.initial_delay = Duration::from_millis(1);
    config
}

/// The bodies of the recorded `POST /v1/responses` requests.
pub fn response_bodies(server: &MockServer) -> Vec<serde_json::Value> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/responses")
        .map(|r| r.body)
        .collect()
}
