//! `agentctl demo orchestrate`: the orchestration story on agent-runtime's
//! fan-out: scan three modules concurrently, validate every output row, report partial.

use agent_runtime::demo::demo_scan;
use agent_runtime::fanout::{FindingShape, fan_out};
use serde_json::Value;

use crate::global::GlobalArgs;
use crate::output::{line, typed_line};

pub async fn run(global: &GlobalArgs) -> anyhow::Result<std::process::ExitCode> {
    let inputs: Vec<String> = ["api", "ui", "unknown"].map(String::from).to_vec();
    let high = |row: &Value| row.get("severity").and_then(Value::as_str) == Some("high");
    let report = fan_out(&inputs, demo_scan, &FindingShape::default(), high).await;
    let value = serde_json::to_value(&report)?;
    if global.json {
        typed_line("demo.orchestrate", &value)?;
    } else {
        line(&serde_json::to_string_pretty(&value)?)?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}
