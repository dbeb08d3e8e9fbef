//! The Responses emulator as Codex's model provider, for offline Codex turns.
//!
//! Invariants:
//! - The emulator runs in this process on 127.0.0.1 (ephemeral port) and the temporary
//!   `CODEX_HOME` holds a `config.toml` whose provider points at it; both live exactly as
//!   long as the [`MockProvider`] (dropping it stops the emulator and deletes the home).
//! - A Codex child configured with [`MockProvider::env`] uses
//!   the emulator and the emulator's key only: no network, no real key (`run_codex_turn`
//!   also removes [`HIDDEN_ENV`](crate::tools::HIDDEN_ENV), our real key and database
//!   URLs, from its environment).

use std::ffi::OsString;
use std::path::Path;

use agent_appserver::codex_home;
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockError, MockServer, Script};

/// Why the mock provider could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MockProviderError {
    /// The emulator did not start.
    #[error("cannot start the Responses emulator")]
    Emulator(#[source] MockError),
    /// The temporary home directory could not be created.
    #[error("cannot create a temporary CODEX_HOME")]
    Home(#[source] std::io::Error),
    /// Its `config.toml` could not be written.
    #[error("cannot write the temporary CODEX_HOME/config.toml")]
    Config(#[source] std::io::Error),
}

/// The emulator, running in-process, and the temporary `CODEX_HOME` pointing Codex at it.
#[derive(Debug)]
pub struct MockProvider {
    server: MockServer,
    home: tempfile::TempDir,
}

impl MockProvider {
    /// Starts the emulator with `script` and writes a temporary home under the system's
    /// temporary directory.
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future stops whatever it had started.
    pub async fn start(script: Script) -> Result<Self, MockProviderError> {
        Self::start_with(script, None).await
    }

    /// Like [`start`](Self::start), with the home created inside `parent` (Codex refuses to
    /// create its helper aliases under `/tmp`; harmless, but noisy).
    ///
    /// # Cancel safety
    /// Cancel-safe, as [`start`](Self::start).
    pub async fn start_with_home_in(
        script: Script,
        parent: &Path,
    ) -> Result<Self, MockProviderError> {
        Self::start_with(script, Some(parent)).await
    }

    async fn start_with(script: Script, parent: Option<&Path>) -> Result<Self, MockProviderError> {
        let server = MockServer::start(MockConfig::new(script))
            .await
            .map_err(MockProviderError::Emulator)?;
        let mut builder = tempfile::Builder::new();
        builder.prefix("agentctl-codex-home-");
        let home = match parent {
            Some(parent) => builder.tempdir_in(parent),
            None => builder.tempdir(),
        }
        .map_err(MockProviderError::Home)?;
        codex_home::write_provider_config(home.path(), &server.base_url())
            .map_err(MockProviderError::Config)?;
        tracing::info!(base_url = %server.base_url(), codex_home = %home.path().display(), "emulator started");
        Ok(MockProvider { server, home })
    }

    /// The running emulator (its URL, the requests it received).
    pub fn emulator(&self) -> &MockServer {
        &self.server
    }

    /// The temporary `CODEX_HOME`.
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// Environment for the Codex child: its home and the provider's key.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        tracing::debug!(addr = %self.server.addr(), "codex uses the emulator");
        vec![
            ("CODEX_HOME".into(), self.home.path().into()),
            (codex_home::PROVIDER_KEY_ENV.into(), MOCK_API_KEY.into()),
        ]
    }
}
