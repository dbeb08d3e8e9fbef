//! One whole Codex session for a caller such as `agentctl codex run`: the offline model
//! provider when asked for, `codex app-server` started, one turn driven and journaled, and
//! everything stopped again.
//!
//! Invariants: with the emulator as provider, the app-server (and every command Codex
//! runs) gets neither the API key nor the database URLs ([`crate::tools::HIDDEN_ENV`], as
//! `agentctl run`'s commands); the app-server child and the emulator live exactly as long as
//! [`run_codex_turn`]; the child is closed (terminated, then killed after its grace period;
//! killed at once when the interrupt signal fired twice) before the journal is closed, so
//! every event it sent is journaled first.

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use agent_appserver::{
    AppServerClient, AppServerError, ApprovalPolicy, ClientOptions, Events, ServerCommand,
    StderrTarget,
};
use agent_journal::Journal;
#[cfg(feature = "mock")]
use agent_responses_mock::Script;

use super::driver::{DriveError, GiveUp, TurnEvent, TurnReport, TurnRequest, drive_turn};
#[cfg(feature = "mock")]
use super::mock_provider::{MockProvider, MockProviderError};

/// How to start `codex app-server`.
#[derive(Debug, Clone)]
pub struct AppServerLaunch {
    /// The Codex CLI binary.
    pub codex_bin: PathBuf,
    /// The server's working directory (default: ours).
    pub cwd: Option<PathBuf>,
    /// Where the server's stderr goes (Codex logs noisily there).
    pub stderr: StderrTarget,
    /// Variables of our environment the server does not get.
    pub env_removed: Vec<OsString>,
}

impl AppServerLaunch {
    /// `codex_bin` in our working directory, its stderr discarded.
    pub fn new(codex_bin: impl Into<PathBuf>) -> Self {
        AppServerLaunch {
            codex_bin: codex_bin.into(),
            cwd: None,
            stderr: StderrTarget::Null,
            env_removed: Vec::new(),
        }
    }

    /// Starts `<codex_bin> app-server --listen stdio://` with `provider_env` added to its
    /// environment (a model provider's `CODEX_HOME` and key, such as `MockProvider::env`)
    /// and [`env_removed`](Self::env_removed) taken out, answering server requests with
    /// `policy`.
    pub fn spawn(
        &self,
        provider_env: Vec<(OsString, OsString)>,
        policy: ApprovalPolicy,
    ) -> Result<(AppServerClient, Events), AppServerError> {
        let mut command = ServerCommand::codex(&self.codex_bin);
        for key in &self.env_removed {
            command = command.env_remove(key);
        }
        for (key, value) in provider_env {
            command = command.env(key, value);
        }
        if let Some(cwd) = &self.cwd {
            command = command.current_dir(cwd);
        }
        AppServerClient::spawn(
            &command.stderr(self.stderr.clone()),
            ClientOptions::default(),
            policy,
        )
    }
}

/// One Codex turn to run from start to end.
#[derive(Debug, Clone)]
pub struct CodexTurn {
    /// How to start the server; its working directory is the turn's.
    pub launch: AppServerLaunch,
    /// Run offline: the emulator with this script is Codex's model provider.
    #[cfg(feature = "mock")]
    pub mock_script: Option<Script>,
    /// How Codex's approval requests are answered.
    pub approvals: ApprovalPolicy,
    /// The turn itself.
    pub request: TurnRequest,
}

/// Why a Codex session could not run its turn to the end. `E` is the observer's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodexTurnError<E> {
    /// The offline model provider could not be set up.
    #[cfg(feature = "mock")]
    #[error(transparent)]
    Provider(#[from] MockProviderError),
    /// `codex app-server` could not be started.
    #[error(transparent)]
    Spawn(AppServerError),
    /// The turn could not be driven to its end.
    #[error("{0}")]
    Drive(DriveError<E>),
}

/// Runs `turn`: starts the provider (if any) and the server, drives the turn with
/// [`drive_turn`] (journaled into `journal` when given; `interrupt_signal` and `observe` as
/// there), then closes the server, the journal and the provider, in that order.
///
/// # Cancel safety
/// Not resumable: dropping the future abandons the turn. The child is killed when its
/// client is dropped, the emulator stops and the temporary home is deleted; events already
/// handed to the recorder are still journaled by its task.
pub async fn run_codex_turn<S, F, O, E>(
    turn: CodexTurn,
    journal: Option<Journal>,
    interrupt_signal: S,
    observe: O,
) -> Result<TurnReport, CodexTurnError<E>>
where
    S: FnMut() -> F,
    F: Future<Output = ()>,
    O: FnMut(TurnEvent<'_>) -> Result<(), E>,
{
    #[cfg(feature = "mock")]
    let provider = match turn.mock_script {
        Some(script) => Some(MockProvider::start(script).await?),
        None => None,
    };
    #[cfg(feature = "mock")]
    let provider_env = provider.as_ref().map(MockProvider::env).unwrap_or_default();
    #[cfg_attr(not(feature = "mock"), allow(unused_mut))]
    let mut launch = turn.launch;
    // Offline: Codex and what it runs need neither our key nor our database.
    #[cfg(feature = "mock")]
    if provider.is_some() {
        launch
            .env_removed
            .extend(crate::tools::HIDDEN_ENV.iter().map(OsString::from));
    }
    #[cfg(not(feature = "mock"))]
    let provider_env = Vec::new();
    let (client, mut events) = match launch.spawn(provider_env, turn.approvals) {
        Ok(spawned) => spawned,
        Err(err) => {
            if let Some(journal) = journal {
                journal.close().await;
            }
            return Err(CodexTurnError::Spawn(err));
        }
    };
    let outcome = drive_turn(
        &client,
        &mut events,
        &turn.request,
        journal.clone(),
        interrupt_signal,
        observe,
    )
    .await;
    // Asked twice to stop: no grace period for a server that has not ended the turn.
    let now = matches!(&outcome, Ok(report) if report.given_up == Some(GiveUp::SignalledAgain));
    if now {
        client.close_within(Duration::ZERO).await;
    } else {
        client.close().await;
    }
    if let Some(journal) = journal {
        journal.close().await;
    }
    #[cfg(feature = "mock")]
    drop(provider);
    outcome.map_err(CodexTurnError::Drive)
}
