//! The emulator serving the host bench's loop script (`fixtures/responses/bench-host.json`:
//! `loop=N` in the prompt makes the model call `list_dir` N times, then answer
//! `BENCH-DONE`), and a client for it.

use agent_responses::{ApiKey, Client, ClientConfig};
use agent_responses_mock::{MockConfig, MockServer, Script};

/// The emulator (keep it alive while the client is used) and a client pointed at it.
pub(crate) async fn serve() -> (MockServer, Client) {
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/responses/bench-host.json"
    ))
    .unwrap();
    serve_script(&script).await
}

/// The emulator serving `script` (the emulator's rule script, as JSON), and a client.
pub(crate) async fn serve_script(script: &str) -> (MockServer, Client) {
    let server = MockServer::start(MockConfig {
        script: Script::from_json_str(script).unwrap(),
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let client = Client::new(ClientConfig::new(
        server.base_url(),
        ApiKey::new("sk-test").unwrap(),
    ))
    .unwrap();
    (server, client)
}
