//! `agentctl api steer`: the seed's `ws_steer.mjs` story over WebSocket mode.
//!
//! Create the planning request, steer it with the two-day constraint as soon as the
//! response exists, print the successor's final text. Every unexpected event (a failed
//! steer, a failed response, an `error` event, `pending` in this tool-less story, an
//! incomplete response other than the steered parent, a dropped connection, the overall
//! timeout) is a one-line failure with a hint and a non-zero exit.

use std::time::Duration;

use agent_responses::ApiKey;
use agent_responses::types::{CreateResponse, Input, StreamEvent};
use agent_responses::ws::steering::is_steered_incomplete;
use agent_responses::ws::{
    ResponseCreate, ServerEvent, SessionEvent, SteerInput, SteerTracker, SteerUpdate, WsConfig,
    WsSession,
};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use anyhow::Context as _;
use clap::Args;
use serde_json::json;

use crate::global::GlobalArgs;
use crate::output::{json_line, line, with_hint};

/// The seed's planning prompt.
pub const PROMPT: &str = "为面试练习设计一个任务管理工具，列出功能和交付计划。";
/// The seed's steering input.
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

/// The runtime side of a steered turn (see `--runtime`).
struct Bridge {
    journal: agent_journal::Journal,
    runtime: agent_runtime::Runtime,
    thread: String,
    turn: String,
    /// The revision the parent response was created under.
    parent_revision: u64,
    revision: u64,
}

impl Bridge {
    async fn open(global: &GlobalArgs) -> anyhow::Result<Self> {
        let url = global.database_url()?;
        let journal = agent_journal::Journal::open(&url).await.map_err(|err| {
            with_hint(
                err,
                "check --db / AGENTCTL_DB (sqlite://PATH, sqlite::memory: or postgres://...)",
            )
        })?;
        let runtime = agent_runtime::Runtime::recover(
            journal.clone(),
            agent_runtime::RuntimeOptions::default(),
        )
        .await?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let thread = format!("api-steer-{nanos}");
        let turn = runtime.start(&thread).await?;
        Ok(Self {
            journal,
            runtime,
            thread,
            turn,
            parent_revision: 0,
            revision: 0,
        })
    }

    /// An accepted steer is a revision bump for the turn.
    async fn steer_accepted(&mut self, text: &str) -> anyhow::Result<u64> {
        self.revision = self.runtime.steer(&self.thread, &self.turn, text).await?;
        Ok(self.revision)
    }

    /// At the successor's completion: the parent's proposal must be refused, the
    /// successor's committed at the current revision. Returns the refusal text.
    async fn commit(&self, parent: &str, successor: &str, text: &str) -> anyhow::Result<String> {
        let stale = self
            .runtime
            .commit(
                &self.thread,
                &self.turn,
                self.parent_revision,
                json!({"response_id": parent}),
            )
            .await;
        let refusal = match stale {
            Err(err) => err.to_string(),
            Ok(_) => anyhow::bail!(
                "the runtime accepted a proposal from the superseded response {parent}"
            ),
        };
        self.runtime
            .commit(
                &self.thread,
                &self.turn,
                self.revision,
                json!({"response_id": successor, "text": text}),
            )
            .await?;
        self.runtime.finish(&self.thread, &self.turn).await?;
        Ok(refusal)
    }

    async fn close(self) {
        self.runtime.close().await;
        self.journal.close().await;
    }
}

/// Runs the story; `Ok(0)` only when the successor completed.
pub async fn run(global: &GlobalArgs, args: SteerArgs) -> anyhow::Result<std::process::ExitCode> {
    let mut _emulator: Option<MockServer> = None;
    let mut config = if args.mock {
        let mut mock = MockConfig::new(Script::default()).with_api_key(MOCK_API_KEY);
        mock.ws.steer_window = Some(Duration::from_secs(args.timeout));
        let server = MockServer::start(mock)
            .await
            .context("cannot start the emulator")?;
        let key = ApiKey::new(MOCK_API_KEY).context("mock key")?;
        let config = WsConfig::new(server.base_url(), key);
        _emulator = Some(server);
        config
    } else {
        let key = ApiKey::from_env().ok_or_else(|| {
            with_hint(
                anyhow::anyhow!("OPENAI_API_KEY is not set"),
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
        WsConfig::new(base, key)
    };
    config.request_timeout = Duration::from_secs(args.timeout);
    let overall = config.request_timeout;
    let mut bridge = if args.runtime {
        Some(Bridge::open(global).await?)
    } else {
        None
    };
    let outcome =
        tokio::time::timeout(overall, story(global, config, &args.model, bridge.as_mut())).await;
    if let Some(bridge) = bridge {
        bridge.close().await;
    }
    match outcome {
        Ok(result) => result.map(|()| std::process::ExitCode::SUCCESS),
        Err(_) => Err(with_hint(
            anyhow::anyhow!("timed out after {overall:?}; acceptance outcome may be unknown"),
            "raise --timeout, or check the server",
        )),
    }
}

fn fail(reason: impl Into<String>) -> anyhow::Error {
    with_hint(
        anyhow::anyhow!(reason.into()),
        "the steering story expects accepted → steered parent → completed successor",
    )
}

async fn story(
    global: &GlobalArgs,
    config: WsConfig,
    model: &str,
    mut bridge: Option<&mut Bridge>,
) -> anyhow::Result<()> {
    let mut session = WsSession::connect(config)
        .await
        .map_err(|e| with_hint(e, "check --base-url and OPENAI_API_KEY"))?;
    let mut tracker = SteerTracker::new();
    let request = CreateResponse::new(model, Input::Text(PROMPT.into()));
    session
        .create(ResponseCreate {
            request,
            stream_id: None,
            generate: None,
        })
        .await?;
    let mut parent: Option<String> = None;
    let mut successor: Option<String> = None;
    loop {
        let event = match session.next_event().await {
            Ok(Some(event)) => event,
            Ok(None) => return Err(fail("Connection ended before successor completion")),
            Err(err) => return Err(fail(err.to_string())),
        };
        for update in tracker.observe(&event) {
            match update {
                SteerUpdate::Accepted { steer_id, parent } => {
                    // Runtime hook: an accepted steer is a revision bump for the turn.
                    tracing::info!(%steer_id, %parent, "steer accepted: revision bump point");
                    if global.json {
                        json_line(
                            &json!({"event": "steer.accepted", "steer_id": steer_id, "parent": parent}),
                        )?;
                    } else {
                        line(&format!("queued, not yet applied {steer_id}"))?;
                    }
                    if let Some(bridge) = bridge.as_deref_mut() {
                        let revision = bridge.steer_accepted(STEER).await?;
                        if global.json {
                            json_line(&json!({"event": "runtime.revision", "revision": revision}))?;
                        } else {
                            line(&format!("runtime turn revision bumped to {revision}"))?;
                        }
                    }
                }
                SteerUpdate::Committed { successor: id, .. } => {
                    if global.json {
                        json_line(&json!({"event": "steer.committed", "successor": id}))?;
                    } else {
                        line(&format!("steering committed to successor {id}"))?;
                    }
                    successor = Some(id);
                }
                SteerUpdate::Failed { code, message, .. } => {
                    return Err(fail(format!("response.steer.failed: {code}: {message}")));
                }
                SteerUpdate::Pending { .. } => {
                    return Err(fail(
                        "Unexpected pending in no-tool demo; a tool-enabled client must fill required_input using saved results",
                    ));
                }
                SteerUpdate::OutcomeUnknown { .. } => {
                    return Err(fail(
                        "Connection ended before successor completion; steering outcome unknown",
                    ));
                }
                SteerUpdate::ParentSteered { .. } | SteerUpdate::ParentCompleted { .. } => {}
            }
        }
        let server = match event {
            SessionEvent::Server(server) => server,
            SessionEvent::Disconnected { code, reason, .. } => {
                return Err(fail(format!(
                    "Connection ended before successor completion (close code {}: {reason}); steering outcome unknown",
                    code.map_or_else(|| "none".to_owned(), |c| c.to_string())
                )));
            }
            SessionEvent::Reconnected { .. } => continue,
        };
        match &server {
            ServerEvent::Stream(StreamEvent::Created(e)) if parent.is_none() => {
                let id = e.response.id.clone();
                let steer = session
                    .steer(&id, SteerInput::Text(STEER.into()))
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                tracker.sent(steer);
                parent = Some(id);
            }
            ServerEvent::Stream(StreamEvent::Failed(_) | StreamEvent::Error(_)) => {
                return Err(fail(
                    server
                        .to_json()
                        .unwrap_or_else(|_| "response failed".into()),
                ));
            }
            ServerEvent::Stream(StreamEvent::Incomplete(e))
                if !(Some(&e.response.id) == parent.as_ref() && is_steered_incomplete(&server)) =>
            {
                return Err(fail(format!(
                    "Unexpected incomplete response {}",
                    e.response.id
                )));
            }
            ServerEvent::Stream(StreamEvent::Completed(e))
                if successor.as_ref() == Some(&e.response.id) =>
            {
                let lines = e.response.message_lines();
                if let (Some(bridge), Some(parent)) = (bridge.as_deref_mut(), parent.as_deref()) {
                    let refusal = bridge
                        .commit(parent, &e.response.id, &lines.join("\n"))
                        .await?;
                    if global.json {
                        json_line(&json!({"event": "runtime.commit", "stale_refused": refusal,
                            "revision": bridge.revision}))?;
                    } else {
                        line(&format!(
                            "runtime refused the superseded proposal: {refusal}"
                        ))?;
                        line(&format!(
                            "runtime committed the successor at revision {}",
                            bridge.revision
                        ))?;
                    }
                }
                if global.json {
                    json_line(
                        &json!({"event": "completed", "response_id": e.response.id, "text": lines.join("\n")}),
                    )?;
                } else {
                    for text in lines {
                        line(&text)?;
                    }
                }
                session.close().await;
                return Ok(());
            }
            _ => {}
        }
    }
}
