//! What every handler shares: the journal, the token, the allowed hosts, the watcher
//! bound, and the hooks the CLI gives (submitting a run, the context store for search).

use std::sync::Arc;

use agent_journal::Journal;
use futures::future::BoxFuture;
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::error::ApiError;
use crate::token::Token;

/// The body of `POST /runs`: what `agentctl submit` takes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The task.
    pub prompt: String,
    /// The workspace directory (absolute).
    pub workspace: String,
    /// The model (default: the CLI's).
    #[serde(default)]
    pub model: Option<String>,
    /// Instructions (system prompt).
    #[serde(default)]
    pub instructions: Option<String>,
    /// The step budget.
    #[serde(default)]
    pub max_steps: Option<u64>,
    /// The token budget.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// `default`, `ask`, `auto` or `deny`.
    #[serde(default)]
    pub approval: Option<String>,
    /// `workspace-write`, `read-only` or `off`.
    #[serde(default)]
    pub sandbox: Option<String>,
}

/// Creates submitted runs (the CLI's `submit`, with its configuration and endpoint).
pub trait Submitter: Send + Sync {
    /// Submits the run `request` describes into `journal` (the server's, as it stands for
    /// this request); returns its id.
    fn submit<'a>(
        &'a self,
        journal: &'a Journal,
        request: SubmitRequest,
    ) -> BoxFuture<'a, Result<String, ApiError>>;
}

/// The server's shared state.
pub struct App {
    pub(crate) journal: crate::journal_slot::JournalSlot,
    pub(crate) token: Token,
    /// `Host` header values accepted (and `http://` + each, as `Origin`).
    pub(crate) hosts: Vec<String>,
    /// The console's cookie name (`agentctl_token_PORT`).
    pub(crate) cookie: String,
    pub(crate) watchers: Arc<Semaphore>,
    pub(crate) max_watchers: usize,
    /// Converters readers of events left, for the next page or resumed stream.
    pub(crate) converters: Arc<crate::events::Converters>,
    /// The runs table's folds of the runs it refreshed last, for the next listing.
    pub(crate) row_folds: agent_host::run::table::RowFolds,
    pub(crate) submitter: Option<Arc<dyn Submitter>>,
    pub(crate) context: Option<agent_context::ContextStore>,
    /// Who decides, steers and interrupts through this server (`serve@host`).
    pub(crate) who: String,
    /// One-time sign-in codes ([`crate::Bound::one_time_link`]).
    pub(crate) once: crate::once::OnceCodes,
}

impl App {
    /// Whether `host` (a `Host` header) names this server.
    pub(crate) fn allows_host(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    /// Whether `origin` (an `Origin` header) is this server's own.
    pub(crate) fn allows_origin(&self, origin: &str) -> bool {
        origin
            .strip_prefix("http://")
            .is_some_and(|host| self.allows_host(host))
    }
}
