//! A host embedded in a program, with one tool written in Rust, against the emulator.
//!
//! `cargo run -p agent-host --example custom_tool` (the emulator plays the model: it calls
//! `weather`, then answers with what the tool returned).

use agent_host::run::{DriveOptions, Host, NewRun, RunReport};
use agent_host::tools::{ApprovalMode, RustTool};
use agent_responses::{ApiKey, Client, ClientConfig};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's arguments: their JSON Schema is derived and sent to the model.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Weather {
    /// The city to look up.
    city: String,
}

/// The model's part: call `weather` once, then answer with the tool's output.
const SCRIPT: &str = r#"{"rules": [
  {"when": {"tool_outputs": 0}, "reply": {"items": [{"type": "function_call", "call_id": "call_1",
     "name": "weather", "arguments": "{\"city\": \"Paris\"}"}]}},
  {"reply": {"items": [{"type": "message", "role": "assistant",
     "content": [{"type": "output_text", "text": "It is {{outputs}}."}]}]}}]}"#;

/// Runs the whole example; returns the run's report.
pub async fn run() -> Result<RunReport, Box<dyn std::error::Error>> {
    let script = Script::from_json_str(SCRIPT)?;
    let mock = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY)).await?;
    let key = ApiKey::new(MOCK_API_KEY).ok_or("no key")?;
    let client = Client::new(ClientConfig::new(mock.base_url(), key))?;
    let journal = agent_journal::Journal::open("memory:").await?;
    let workspace = tempfile::tempdir()?;

    let weather = RustTool::new(
        "weather",
        "Current weather of a city.",
        |w: Weather| async move { Ok::<_, String>(format!("21 degrees and sunny in {}", w.city)) },
    )
    .read_only(); // no side effects: retried after a crash, allowed under --approval deny

    let host = Host::new(journal, client).tool(weather);
    let run = NewRun::new("What is the weather in Paris?", workspace.path())
        .approval(ApprovalMode::Default);
    Ok(host.start(run, DriveOptions::default()).await?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let report = run().await?;
    println!(
        "{:?}: {}",
        report.end,
        report.state.final_text().unwrap_or_default()
    );
    Ok(())
}
