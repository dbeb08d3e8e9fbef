//! `agentctl api steer`: the WebSocket steering story (README.md, "Responses API").
//!
//! Create the planning request, steer it with the two-day constraint as soon as the
//! response exists, print the successor's final text. Every unexpected event (a failed
//! steer, a failed response, an `error` event, `pending` in this tool-less story, an
//! incomplete response other than the steered parent, a dropped connection, the overall
//! timeout) is a one-line failure with a hint and a non-zero exit.

use std::time::Duration;

use agent_host::steer_bridge::{
    RevisionBridge, SteerError, SteerProgress, SteeredRequest, run_steered,
};
use agent_responses::ApiKey;
use agent_responses::ws::WsConfig;
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use anyhow::Context as _;
use clap::Args;
use serde_json::json;

use crate::global::GlobalArgs;
use crate::output::{line, typed_line, with_hint};

/// The story's planning prompt (Chinese, so the CJK path is exercised end to end).
pub const PROMPT: &str = "为面试练习设计一个任务管理工具，列出功能和交付计划。";
/// The story's steering input: a constraint that changes the plan.
pub const STEER: &str = "新增约束：一个人两天完成，只保留最小功能。";

/// Create a response over WebSocket, steer it once it exists, print the successor's answer.
///
/// Talks to `{base}/responses` over WebSocket (http→ws, https→wss) with the key from
/// OPENAI_API_KEY. `--mock` runs the built-in emulator instead (no key, no network).
#[derive(Debug, Clone, Args)]
pub struct SteerArgs {
    /// Run against the built-in emulator on 127.0.0.1 (no key, no network).
    #[arg(long, conflicts_with = "base_url")]
    pub mock: bool,
    // The URL is the `--help` text's, which shows no link markup.
    #[allow(rustdoc::bare_urls)]
    /// API base URL (default: OPENAI_BASE_URL, else https://api.openai.com/v1).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Model to use.
    #[arg(long, default_value = "gpt-6-astra")]
    pub model: String,
    /// Overall time limit in seconds (1 to 604800, a week); past it the steering outcome is
    /// unknown.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub timeout: u64,
    /// Tie the steer to a durable agent-runtime turn on --db: the accepted steer bumps the
    /// turn's revision, a proposal built on the superseded response is refused at commit, and
    /// the successor's answer is committed at the new revision.
    #[arg(long)]
    pub runtime: bool,
}

/// Runs the story; `Ok(0)` only when the successor completed.
pub async fn run(global: &GlobalArgs, args: SteerArgs) -> anyhow::Result<std::process::ExitCode> {
    let (config, _emulator) = connect(&args).await?;
    let mut bridge = if args.runtime {
        Some(open_bridge(global).await?)
    } else {
        None
    };
    let request = SteeredRequest {
        model: args.model.clone(),
        prompt: PROMPT.into(),
        steer: STEER.into(),
    };
    let json = global.json;
    let outcome = run_steered(config, &request, bridge.as_mut(), |progress| {
        show(json, progress)
    })
    .await;
    if let Some(bridge) = bridge {
        bridge.close().await;
    }
    let answer = outcome.map_err(explain)?;
    if json {
        typed_line(
            "completed",
            json!({"response_id": answer.response_id, "text": answer.lines.join("\n")}),
        )?;
    } else {
        for text in answer.lines {
            line(&text)?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The session's configuration (live, or an in-process emulator that the caller keeps).
async fn connect(args: &SteerArgs) -> anyhow::Result<(WsConfig, Option<MockServer>)> {
    let (mut config, emulator) = if args.mock {
        let mut mock = MockConfig::new(Script::default()).with_api_key(MOCK_API_KEY);
        mock.ws.steer_window = Some(Duration::from_secs(args.timeout));
        let server = MockServer::start(mock)
            .await
            .context("cannot start the emulator")?;
        let key = ApiKey::new(MOCK_API_KEY).context("mock key")?;
        (WsConfig::new(server.base_url(), key), Some(server))
    } else {
        let key = ApiKey::from_env().ok_or_else(|| {
            // A usage error (exit 2), as for `run` and the other `api` stories.
            with_hint(
                crate::output::UsageError("OPENAI_API_KEY is not set".into()),
                "set OPENAI_API_KEY privately in your environment, or use --mock",
            )
        })?;
        let base = args
            .base_url
            .clone()
            .or_else(|| {
                std::env::var("OPENAI_BASE_URL")
                    .ok()
                    .filter(|v| !v.trim().is_empty())
            })
            .unwrap_or_else(|| agent_responses::http::DEFAULT_BASE_URL.to_owned());
        (WsConfig::new(base, key), None)
    };
    config.request_timeout = Duration::from_secs(args.timeout);
    Ok((config, emulator))
}

/// `--runtime`: a durable runtime turn on --db whose revision follows the steer.
async fn open_bridge(global: &GlobalArgs) -> anyhow::Result<RevisionBridge> {
    let journal = crate::db::open_journal(global).await?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    Ok(RevisionBridge::start(journal, format!("api-steer-{nanos}")).await?)
}

fn show(json: bool, progress: SteerProgress<'_>) -> anyhow::Result<()> {
    match progress {
        SteerProgress::Accepted { steer_id, parent } if json => typed_line(
            "steer.accepted",
            json!({"steer_id": steer_id, "parent": parent}),
        ),
        SteerProgress::Accepted { steer_id, .. } => {
            line(&format!("queued, not yet applied {steer_id}"))
        }
        SteerProgress::RevisionBumped { revision } if json => {
            typed_line("runtime.revision", json!({"revision": revision}))
        }
        SteerProgress::RevisionBumped { revision } => {
            line(&format!("runtime turn revision bumped to {revision}"))
        }
        SteerProgress::Committed { successor } if json => {
            typed_line("steer.committed", json!({"successor": successor}))
        }
        SteerProgress::Committed { successor } => {
            line(&format!("steering committed to successor {successor}"))
        }
        SteerProgress::RuntimeCommitted {
            stale_refused,
            revision,
        } if json => typed_line(
            "runtime.commit",
            json!({"stale_refused": stale_refused.to_string(), "revision": revision}),
        ),
        SteerProgress::RuntimeCommitted {
            stale_refused,
            revision,
        } => {
            line(&format!(
                "runtime refused the superseded proposal: {stale_refused}"
            ))?;
            line(&format!(
                "runtime committed the successor at revision {revision}"
            ))
        }
    }
}

/// Adds the right hint to a failed run.
fn explain(err: SteerError<anyhow::Error>) -> anyhow::Error {
    match err {
        SteerError::Connect(err) => with_hint(err, "check --base-url and OPENAI_API_KEY"),
        err @ SteerError::Unexpected { .. } => with_hint(
            err,
            "the steering story expects accepted → steered parent → completed successor",
        ),
        err @ SteerError::TimedOut { .. } => with_hint(err, "raise --timeout, or check the server"),
        SteerError::Observer(err) => err,
        err @ (SteerError::Send(_) | SteerError::Bridge(_)) => anyhow::Error::new(err),
    }
}
