//! A run whose final answer must be JSON matching a schema, from the library.
//!
//! `cargo run -p agent-host --example structured_output` (the emulator plays the model: its
//! first answer misses a field, so the host sends the errors back and it answers again).

use agent_host::run::{DriveOptions, Host, NewRun, OutputSchema, RunReport};
use agent_responses::{ApiKey, Client, ClientConfig};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use serde_json::json;

/// The model's part: a wrong answer first, the right one once told what is wrong.
const SCRIPT: &str = r#"{"rules": [
  {"when": {"last_user_contains": "does not match"}, "reply": {"json": {"title": "Fix the parser", "priority": 1}}},
  {"reply": {"json": {"title": "Fix the parser"}}}]}"#;

/// Runs the whole example; returns the run's report.
pub async fn run() -> Result<RunReport, Box<dyn std::error::Error>> {
    let script = Script::from_json_str(SCRIPT)?;
    let mock = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY)).await?;
    let key = ApiKey::new(MOCK_API_KEY).ok_or("no key")?;
    let client = Client::new(ClientConfig::new(mock.base_url(), key))?;
    let journal = agent_journal::Journal::open("memory:").await?;
    let workspace = tempfile::tempdir()?;

    // Closed and fully required: sent to the model with `strict: true`.
    let schema = OutputSchema::new(json!({
        "type": "object", "additionalProperties": false, "required": ["title", "priority"],
        "properties": {"title": {"type": "string"}, "priority": {"type": "integer", "minimum": 1}}
    }))?
    .name("ticket")?
    .retries(2);

    let run = NewRun::new("File a ticket for the parser crash", workspace.path())
        .output_schema(Some(schema));
    Ok(Host::new(journal, client)
        .start(run, DriveOptions::default())
        .await?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let report = run().await?;
    match report.output() {
        Some(ticket) => println!("{}", ticket.get()),
        None => println!("no structured answer: {:?}", report.end),
    }
    Ok(())
}
