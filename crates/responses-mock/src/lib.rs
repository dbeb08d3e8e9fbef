//! `agent-responses-mock`: a local emulator of the OpenAI Responses API.
//!
//! HTTP JSON and SSE on 127.0.0.1, scripted by fixture files ([`script`]), validating
//! requests with the API's error messages ([`validate`]). The official Python SDK accepts it
//! (see `interop/openai_sdk`). Use it from tests, with the crate's own client or any other:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_responses::types::{CreateResponse, Input};
//! use agent_responses::{ApiKey, Client, ClientConfig};
//! use agent_responses_mock::{MockConfig, MockServer, Script};
//!
//! // An empty script echoes the conversation back.
//! let server = MockServer::start(MockConfig::new(Script::default())).await?;
//! let key = ApiKey::new("sk-test").ok_or("empty key")?;
//! let client = Client::new(ClientConfig::new(server.base_url(), key))?; // http://127.0.0.1:PORT/v1
//! let response = client
//!     .create(&CreateResponse::new("gpt-test", Input::Text("hello".into())))
//!     .await?;
//! assert_eq!(response.status.as_deref(), Some("completed"));
//! assert_eq!(server.requests().len(), 1);
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]
// Handlers turn `ApiFailure` into an HTTP response at once; boxing it buys nothing.
#![allow(clippy::result_large_err)]

mod bounded;
mod chain;
pub mod function_tools;
mod latency;
mod respond;
mod router;
pub mod script;
mod sealed;
pub mod sse;
pub mod text_format;
pub mod validate;
pub mod ws;

use std::net::SocketAddr;
use std::sync::Arc;

pub use router::RecordedRequest;
pub use script::{Latency, MIN_TOKENS_PER_SECOND, Script, ScriptError};

/// The bearer key `MockConfig::for_mode` expects, and the one `agentctl api --mock` sends.
pub const MOCK_API_KEY: &str = "sk-mock-agentctl";

/// The fixture scripts shipped in `fixtures/responses/`, embedded.
pub fn builtin_fixture(mode: &str) -> Option<&'static str> {
    match mode {
        "direct" => Some(include_str!("../../../fixtures/responses/direct.json")),
        "ptc" => Some(include_str!("../../../fixtures/responses/ptc.json")),
        "async" => Some(include_str!("../../../fixtures/responses/async.json")),
        "compact" => Some(include_str!("../../../fixtures/responses/compact.json")),
        "run" => Some(include_str!("../../../fixtures/responses/run.json")),
        _ => None,
    }
}

/// Emulator settings.
#[derive(Debug, Clone, Default)]
pub struct MockConfig {
    /// The rules that answer requests; an empty script echoes the conversation.
    pub script: Script,
    /// The bearer key to require; `None` accepts any non-empty key (a missing one is 401).
    pub api_key: Option<String>,
    /// Characters per streamed text delta (default 8).
    pub delta_chars: Option<usize>,
    /// How long a reply takes when neither its rule nor the script says (default: none).
    pub latency: Latency,
    /// WebSocket mode (`GET /v1/responses`) settings.
    pub ws: ws::WsOptions,
}

impl MockConfig {
    /// Settings for `script` that accept any non-empty key.
    pub fn new(script: Script) -> Self {
        Self {
            script,
            api_key: None,
            delta_chars: None,
            latency: Latency::default(),
            ws: ws::WsOptions::default(),
        }
    }
    /// Requires exactly this bearer key (others get 401).
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }
    /// The built-in fixture for `mode` (`direct`, `ptc`, `async`, `compact`, `run`).
    pub fn for_mode(mode: &str) -> Result<Self, MockError> {
        let text = builtin_fixture(mode).ok_or_else(|| MockError::UnknownMode(mode.to_owned()))?;
        Ok(Self::new(Script::from_json_str(text)?))
    }
}

/// Cannot start the emulator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MockError {
    /// The address cannot be bound (in use, or not local).
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The script is invalid.
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// [`MockConfig::latency`] cannot be used (see [`Latency::check`]).
    #[error("invalid latency: {0}")]
    Latency(String),
    /// [`MockConfig::for_mode`] got a mode without a built-in fixture.
    #[error("no built-in fixture for mode `{0}` (direct, ptc, async, compact, run)")]
    UnknownMode(String),
}

/// A running emulator. Dropping it stops the server.
pub struct MockServer {
    addr: SocketAddr,
    state: Arc<router::AppState>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MockServer {
    /// Starts on 127.0.0.1 with an ephemeral port.
    ///
    /// # Cancel safety
    ///
    /// As for [`bind`](Self::bind); the address is a literal, so the first poll completes it.
    pub async fn start(config: MockConfig) -> Result<Self, MockError> {
        Self::bind("127.0.0.1:0", config).await
    }

    /// Starts on `addr` (e.g. `127.0.0.1:8080`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the only wait is resolving `addr` (none for a literal address); the socket
    /// is bound and the server task spawned after it, so a dropped future leaves nothing bound
    /// or running.
    ///
    /// # Errors
    ///
    /// [`MockError::Latency`] or [`MockError::Script`] for a latency or a script (built in
    /// code, unchecked) that cannot be served, before anything is bound.
    pub async fn bind(addr: &str, config: MockConfig) -> Result<Self, MockError> {
        config.latency.check().map_err(MockError::Latency)?;
        config.script.check()?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| MockError::Bind {
                addr: addr.to_owned(),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| MockError::Bind {
            addr: addr.to_owned(),
            source,
        })?;
        let mut state = router::AppState::new(config.script, config.api_key);
        if let Some(n) = config.delta_chars {
            state.delta_chars = n.max(1);
        }
        state.latency = config.latency;
        state.ws = ws::WsShared::new(config.ws);
        let state = Arc::new(state);
        let app = router::router(Arc::clone(&state));
        // TCP_NODELAY: SSE events are small writes; without it Nagle plus delayed ACKs add
        // ~40 ms stalls per streamed response.
        let listener =
            axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
                if let Err(err) = tcp.set_nodelay(true) {
                    tracing::trace!(%err, "cannot set TCP_NODELAY");
                }
            });
        let task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                tracing::error!(%err, "emulator server stopped");
            }
        });
        Ok(Self {
            addr: local,
            state,
            task,
        })
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL clients use.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The authorised requests received so far (the most recent 1000, at most 32 MiB of
    /// requests together), in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        // Copied out first: the lock is not held while the bodies are parsed.
        let kept: Vec<_> = self
            .state
            .recorded
            .lock()
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default();
        kept.iter().map(|r| r.to_recorded()).collect()
    }

    /// Lets a stream waiting at a `gate` fault continue (works before or after it waits).
    pub fn open_gate(&self, name: &str) {
        self.state.gate(name).notify_one();
    }

    /// A cheap handle that opens gates from elsewhere (e.g. inside a tool executor).
    pub fn gates(&self) -> GateHandle {
        GateHandle(Arc::clone(&self.state))
    }

    /// Runs until the server task ends (for `agentctl mock serve`).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (even unpolled) drops the server, as dropping [`MockServer`] does:
    /// its task is aborted and no new connection is accepted, but connections already
    /// accepted have tasks of their own: an SSE stream being sent, or a WebSocket session,
    /// runs on.
    pub async fn wait(mut self) {
        let _ = (&mut self.task).await;
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Opens gates of a running emulator.
#[derive(Clone)]
pub struct GateHandle(Arc<router::AppState>);

impl std::fmt::Debug for GateHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateHandle").finish_non_exhaustive()
    }
}

impl GateHandle {
    /// Lets a stream waiting at gate `name` continue (before or after it waits).
    pub fn open(&self, name: &str) {
        self.0.gate(name).notify_one();
    }
}
