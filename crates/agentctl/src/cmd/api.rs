//! `agentctl api direct|ptc|async|compact|steer`: one story per Responses API mode.
//!
//! Against the live API (key from OPENAI_API_KEY only, base from --base-url or
//! OPENAI_BASE_URL) or, with `--mock`, against the built-in emulator running in-process with
//! the mode's fixture (`fixtures/responses/<mode>.json`): no key, no network.
//!
//! The API key (`OPENAI_API_KEY`) is never printed: the model's text is masked (`***`)
//! wherever it quotes the key, also when the `async` story streams it and a delta boundary
//! splits the key (`agent_host::tools::StreamMask`, as `run` masks its stream).

use std::sync::Arc;

use agent_host::tools::mask_key;
use agent_responses::demo::{self, Mode, ScanTool};
use agent_responses::loops::{self, LoopConfig};
use agent_responses::types::{Input, Item, MessageItem, StreamEvent};
use agent_responses::{ApiKey, Client, ClientConfig, ClientError};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer};
use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::global::GlobalArgs;
use crate::output::{self, line, typed_line, with_hint};

/// The Responses API modes, one story each.
#[derive(Debug, Subcommand)]
pub enum ApiCmd {
    /// Direct tool loop: the model calls `scan`, we answer every call, it reports the high total.
    Direct(ApiArgs),
    /// Programmatic tool calling: a model-written program calls `scan`; outputs echo the caller.
    Ptc(ApiArgs),
    /// Async tools over SSE: calls run as soon as they stream in; a follow-up explains results.
    Async(ApiArgs),
    /// Compaction: state constraints, compact the history, continue from the compacted items.
    Compact(ApiArgs),
    /// WebSocket steering: create, steer once the response exists, print the successor's answer.
    Steer(super::api_steer::SteerArgs),
}

/// Where to send requests.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// Run against the built-in emulator on 127.0.0.1 with this mode's fixture (no key, no network).
    #[arg(long, conflicts_with = "base_url")]
    pub mock: bool,
    // The URL is the `--help` text's, which shows no link markup.
    #[allow(rustdoc::bare_urls)]
    /// API base URL (default: OPENAI_BASE_URL, else https://api.openai.com/v1).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Model to use.
    #[arg(long, default_value = demo::MODEL)]
    pub model: String,
}

/// Runs one mode; prints the model's final text (or JSON lines with `--json`).
pub async fn run(global: &GlobalArgs, cmd: ApiCmd) -> anyhow::Result<std::process::ExitCode> {
    let (mode, args) = match cmd {
        ApiCmd::Direct(args) => (Mode::Direct, args),
        ApiCmd::Ptc(args) => (Mode::Ptc, args),
        ApiCmd::Async(args) => (Mode::Async, args),
        ApiCmd::Compact(args) => (Mode::Compact, args),
        ApiCmd::Steer(args) => return super::api_steer::run(global, args).await,
    };
    let (client, _emulator) = connect(mode, &args).await?;
    let config = LoopConfig::new(
        args.model.clone(),
        Some(demo::INSTRUCTIONS.to_owned()),
        demo::definition(mode),
    );
    match mode {
        Mode::Direct | Mode::Ptc => {
            let input = vec![Item::Message(MessageItem::user(demo::LOOP_PROMPT))];
            let outcome = loops::run_direct(&client, &config, input, &ScanTool)
                .await
                .map_err(explain)?;
            if global.json {
                typed_line(
                    "api.result",
                    json!({"mode": mode.name(), "response_id": outcome.response.id,
                    "turns": outcome.turns, "tool_executions": outcome.executions,
                    "text": mask_key(outcome.response.output_text())}),
                )?;
            } else {
                for text in outcome.response.message_lines() {
                    line(&mask_key(text))?;
                }
            }
        }
        Mode::Async => {
            let json = global.json;
            let mut mask =
                agent_host::tools::StreamMask::new(agent_host::tools::api_key().map(str::to_owned));
            let outcome = loops::run_async(
                &client,
                &config,
                Input::Text(demo::ASYNC_PROMPT.to_owned()),
                Arc::new(ScanTool),
                |event| {
                    if let StreamEvent::OutputTextDelta(delta) = event {
                        print_delta(json, &mask.push(&delta.delta));
                    }
                },
            )
            .await
            .map_err(explain)?;
            // The stream ended: what was held back was only the start of a key.
            print_delta(json, &mask.flush());
            if json {
                let outputs: Vec<_> = outcome
                    .outputs
                    .iter()
                    .map(|o| json!({"call_id": o.call_id, "output": mask_key(o.text())}))
                    .collect();
                typed_line(
                    "api.result",
                    json!({"mode": "async", "response_id": outcome.first.id, "tool_results": outputs,
                    "follow_up_id": outcome.follow.id, "text": mask_key(outcome.follow.output_text())}),
                )?;
            } else {
                line("")?;
                for text in outcome.follow.message_lines() {
                    line(&mask_key(text))?;
                }
            }
        }
        Mode::Compact => {
            let history = vec![Item::Message(MessageItem::user(demo::COMPACT_PROMPT))];
            let outcome = loops::run_compact(&client, &config, history, demo::COMPACT_FOLLOW_UP)
                .await
                .map_err(explain)?;
            if global.json {
                typed_line(
                    "api.result",
                    json!({"mode": "compact", "compacted_items": outcome.compacted.output.len(),
                    "response_id": outcome.follow.id, "text": mask_key(outcome.follow.output_text())}),
                )?;
            } else {
                for text in outcome.follow.message_lines() {
                    line(&mask_key(text))?;
                }
            }
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// A client for the live API, or for an in-process emulator running `mode`'s fixture.
async fn connect(mode: Mode, args: &ApiArgs) -> anyhow::Result<(Client, Option<MockServer>)> {
    if args.mock {
        let mock = MockConfig::for_mode(mode.name())?.with_api_key(MOCK_API_KEY);
        let server = MockServer::start(mock)
            .await
            .context("cannot start the emulator")?;
        let key = ApiKey::new(MOCK_API_KEY).context("mock key")?;
        let client = Client::new(ClientConfig::new(server.base_url(), key))?;
        return Ok((client, Some(server)));
    }
    let config = ClientConfig::from_env(args.base_url.as_deref()).map_err(|err| match err {
        // A usage error (exit 2), as for `run`: what the command was given is not enough.
        ClientError::MissingApiKey => with_hint(
            output::UsageError(err.to_string()),
            "set OPENAI_API_KEY in your environment (never in a file or on the command line), or add --mock to run offline against the built-in emulator",
        ),
        other => anyhow::Error::new(other),
    })?;
    Ok((Client::new(config)?, None))
}

/// Adds a hint to loop errors that have an obvious next step.
fn explain(err: loops::LoopError) -> anyhow::Error {
    let hint = match &err {
        loops::LoopError::Client(ClientError::Api(api)) if api.status == Some(401) => {
            Some("check OPENAI_API_KEY (it is read from the environment only)")
        }
        loops::LoopError::Client(ClientError::Connect(_)) => {
            Some("check --base-url / OPENAI_BASE_URL and your network")
        }
        loops::LoopError::NotAsync { .. } => {
            Some("async tools need a model and API version that support `async: true`")
        }
        _ => None,
    };
    match hint {
        Some(hint) => with_hint(err, hint),
        None => anyhow::Error::new(err),
    }
}

/// Prints a piece of the streamed text (nothing for an empty one): raw on stdout, or as an
/// `api.delta` JSON line. A closed stdout is the reader's choice; the story goes on.
fn print_delta(json: bool, text: &str) {
    if text.is_empty() {
        return;
    }
    if json {
        let _ = typed_line("api.delta", json!({"delta": text}));
    } else {
        let _ = output::stream(text);
    }
}
