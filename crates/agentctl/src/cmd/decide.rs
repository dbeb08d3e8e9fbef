//! `agentctl approve|deny|interrupt`: requests to a run from any process. They are plain
//! journal appends; the driving host (if any) acts on them when its journal tail shows them.

use std::process::ExitCode;

use agent_host::HostError;
use agent_host::run::{self, Decision, DecisionRequest};
use clap::Args;
use serde_json::json;

use crate::global::GlobalArgs;
use crate::output;

/// `approve` / `deny`.
#[derive(Debug, Args)]
pub struct DecideArgs {
    /// The run id.
    pub run: String,
    /// The call waiting for approval (shown by the run, and by `runs show`).
    pub call_id: String,
    /// Why (kept in the journal; a denial's reason is told to the model).
    #[arg(long)]
    pub reason: Option<String>,
    /// Refuse unless the pending call's arguments have this sha256 (printed with the
    /// pending call), so that you decide on exactly what you read.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Decide only this approval round of the call (printed with the pending call): a
    /// call cut off by a crash is asked again with the same arguments, and a decision
    /// meant for the first question must not answer the second.
    #[arg(long, value_name = "N")]
    pub round: Option<u32>,
}

/// `approve` only: approve this tool for the rest of the run too.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub decide: DecideArgs,
    /// Approve every other call of this tool in this run as well: those waiting now and
    /// every later one (not a command asking to leave the sandbox, which always asks).
    #[arg(long)]
    pub always: bool,
}

/// `steer`.
#[derive(Debug, Args)]
pub struct SteerArgs {
    /// The run id.
    pub run: String,
    /// What to tell the model (it reads it as a user message before its next step).
    pub text: String,
    /// An id for the steer; sending the same id again is the same steer (safe to retry).
    /// 1 to 128 characters, none of them control characters.
    #[arg(long, value_parser = steer_id)]
    pub id: Option<String>,
    /// Wait until the steer is applied or dropped; exit 1 when dropped.
    #[arg(long)]
    pub wait: bool,
}

/// A steer `--id` the host takes, refused by clap so that the message names the flag.
fn steer_id(s: &str) -> Result<String, String> {
    if !agent_host::run::steer_id_is_valid(s) {
        return Err(format!(
            "a steer id is 1 to {} characters, none of them control characters",
            agent_host::run::MAX_STEER_ID_CHARS
        ));
    }
    Ok(s.to_string())
}

/// `interrupt`.
#[derive(Debug, Args)]
pub struct InterruptArgs {
    /// The run id.
    pub run: String,
}

/// Who decides: `$USER@host`, as the host records it.
pub fn who() -> String {
    agent_host::run::Owner::user_at_host()
}

pub async fn decide(
    global: &GlobalArgs,
    args: DecideArgs,
    approve: bool,
    always: bool,
) -> anyhow::Result<ExitCode> {
    let journal = crate::db::open_journal(global).await?;
    let request = DecisionRequest {
        call_id: args.call_id.clone(),
        decision: Decision {
            approve,
            reason: args.reason,
            by: Some(who()),
            scope: always.then_some(agent_host::run::events::DecisionScope::Run),
        },
        args_sha256: args.sha256,
        round: args.round,
    };
    let result = run::decide(&journal, &args.run, request).await;
    journal.close().await;
    let verb = if approve { "approved" } else { "denied" };
    // The first decision wins. Deciding the same again (a retry, or two people agreeing)
    // is done, and says by whom; a different decision, or `--always` on top of a plain
    // approval, is a state the command cannot act on.
    let first_by = match result {
        Ok(()) => None,
        Err(HostError::AlreadyDecided {
            decision,
            by,
            always: first_always,
            ..
        }) if decision == verb && (first_always || !always) => Some(by),
        Err(err @ HostError::AlreadyDecided { .. }) => {
            return Err(output::with_hint(
                output::UsageError(err.to_string()),
                format!(
                    "the first decision stands; `agentctl runs show {}` shows it",
                    args.run
                ),
            ));
        }
        Err(err) => return Err(err.into()),
    };
    if global.json {
        let mut line = json!({"type": "approval.decided", "run_id": args.run,
            "call_id": args.call_id, "decision": if approve { "approve" } else { "deny" }});
        if let Some(by) = &first_by {
            line["already_decided_by"] = json!(by);
        }
        output::json_line(&line)?;
    } else if let Some(by) = &first_by {
        output::line(&format!(
            "{} of run {} was already {verb} by {by}",
            args.call_id, args.run
        ))?;
    } else {
        output::line(&format!("{verb} {} of run {}", args.call_id, args.run))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn steer(global: &GlobalArgs, args: SteerArgs) -> anyhow::Result<ExitCode> {
    let journal = crate::db::open_journal(global).await?;
    let result = async {
        let id = run::request_steer(&journal, &args.run, &args.text, args.id.clone()).await?;
        let outcome = run::steer_outcome(&journal, &args.run, &id, args.wait).await?;
        Ok::<_, agent_host::HostError>((id, outcome))
    }
    .await;
    journal.close().await;
    let (id, outcome) = result?;
    let (line, code) = match &outcome {
        None => (
            json!({"type": "steer.requested", "run_id": args.run, "id": id}),
            ExitCode::SUCCESS,
        ),
        Some(Ok(step)) => (
            json!({"type": "steer.applied", "run_id": args.run, "id": id, "step": step}),
            ExitCode::SUCCESS,
        ),
        Some(Err(reason)) => (
            json!({"type": "steer.dropped", "run_id": args.run, "id": id, "reason": reason}),
            ExitCode::FAILURE,
        ),
    };
    if global.json {
        output::json_line(&line)?;
    } else {
        output::line(&match outcome {
            None => format!(
                "{id} requested (applied before the run's next step, or during the response streaming now on the WebSocket transport)"
            ),
            Some(Ok(step)) => format!("{id} applied before step {step}"),
            Some(Err(reason)) => format!("{id} dropped: {reason}"),
        })?;
    }
    Ok(code)
}

pub async fn interrupt(global: &GlobalArgs, args: InterruptArgs) -> anyhow::Result<ExitCode> {
    let journal = crate::db::open_journal(global).await?;
    let result = run::request_interrupt(&journal, &args.run, &who()).await;
    journal.close().await;
    let seq = result?;
    if global.json {
        output::json_line(&json!({"type": "interrupt.requested", "run_id": args.run, "seq": seq}))?;
    } else {
        output::line(&format!(
            "interrupt of run {} requested (the driving host stops as soon as it sees it: a running tool or a streaming response too)",
            args.run
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
