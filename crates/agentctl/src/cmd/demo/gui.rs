//! `agentctl demo gui`: the observe-act story on agent-runtime's observe-act loop:
//! open the filters, type "penguin", verify the app's final state, within 5 actions.

use agent_runtime::observe::filter::{DEMO_BUDGET, FilterApp, filter_goal, filter_policy};
use agent_runtime::observe::run_loop;

use crate::global::GlobalArgs;
use crate::output::{line, typed_line, with_hint};

pub async fn run(global: &GlobalArgs) -> anyhow::Result<std::process::ExitCode> {
    let mut app = FilterApp::default();
    let report = run_loop(&mut app, filter_policy, filter_goal, DEMO_BUDGET).map_err(|err| {
        with_hint(
            err,
            "the scripted policy should reach the goal; this is a bug",
        )
    })?;
    if global.json {
        typed_line(
            "demo.gui",
            serde_json::json!({
                "verified": true,
                "budget": DEMO_BUDGET,
                "actions": report.actions,
                "final_state": report.final_observation,
            }),
        )?;
    } else {
        for (i, action) in report.actions.iter().enumerate() {
            line(&format!(
                "step {i}: {}",
                serde_json::to_value(action)?.as_str().unwrap_or("?")
            ))?;
        }
        line(&format!(
            "verified: {} (after {} of {DEMO_BUDGET} actions)",
            serde_json::to_string(&report.final_observation)?,
            report.steps
        ))?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}
