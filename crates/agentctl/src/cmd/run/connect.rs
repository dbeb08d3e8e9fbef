//! Where a run's model calls go: the live API (key from the environment only), a base URL,
//! or the emulator in-process (`--mock`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use agent_host::run::Endpoint as RunEndpoint;
use agent_responses::{ApiKey, Client, ClientConfig, ClientError};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use anyhow::Context as _;
use clap::Args;

use crate::output::{UsageError, with_hint};

/// The model endpoint options of `run` and `resume`.
#[derive(Debug, Clone, Args)]
pub struct EndpointArgs {
    /// The Responses API base URL (default: OPENAI_BASE_URL, else the public API). The key
    /// is read from OPENAI_API_KEY only.
    #[arg(long, value_name = "URL", conflicts_with = "mock")]
    pub base_url: Option<String>,
    /// Run offline against the built-in emulator (no key needed), started in the process
    /// that drives the run: this one, or for `submit` the worker. Without --mock-script it
    /// plays a story that uses every built-in tool.
    #[arg(long)]
    pub mock: bool,
    /// An emulator script for --mock (format: fixtures/responses/README.md).
    #[arg(long, value_name = "FILE", requires = "mock")]
    pub mock_script: Option<PathBuf>,
    /// Give up on a model response after this many seconds without an event from it (SSE
    /// keep-alive comments and WebSocket pings do not count; a long answer that keeps
    /// streaming is never cut). The step then retries like a cut stream, and after its
    /// retries the run pauses (`model_error`, exit status 3) and `resume` asks again.
    /// Default: 600, the official SDK's read timeout.
    #[arg(
        long,
        value_name = "SECS",
        env = "AGENTCTL_STREAM_IDLE_TIMEOUT",
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub stream_idle_timeout: Option<u64>,
}

impl EndpointArgs {
    /// The endpoint these options name, if any, checked as a client would check it: a
    /// `submit` records it for a worker, which would otherwise be the first to refuse it.
    pub fn checked(&self) -> anyhow::Result<Option<RunEndpoint>> {
        if let Some(url) = &self.base_url {
            agent_responses::http::check_base_url(url).map_err(setup_error)?;
        }
        if let (true, Some(path)) = (self.mock, &self.mock_script) {
            Script::load(path)
                .map_err(|err| UsageError(format!("--mock-script {}: {err}", path.display())))?;
        }
        Ok(self.given())
    }

    /// The endpoint these options name, if any.
    pub fn given(&self) -> Option<RunEndpoint> {
        match (self.mock, &self.mock_script, &self.base_url) {
            (true, Some(path), _) => Some(RunEndpoint::MockScript(path.clone())),
            (true, None, _) => Some(RunEndpoint::Mock),
            (false, _, Some(url)) => Some(RunEndpoint::Url(url.clone())),
            (false, _, None) => None,
        }
    }

    /// [`connect`](Self::connect), sharing one client per API address through `clients`
    /// (a worker's runs then share a connection pool, and the system's root certificates
    /// are read once, not for every run); an emulator is started per call as before.
    pub async fn connect_shared(
        &self,
        recorded: Option<&RunEndpoint>,
        clients: &ApiClients,
    ) -> anyhow::Result<(Client, Option<MockServer>)> {
        self.connect_with(recorded, Some(clients)).await
    }

    /// A client for these options; when none is given, for `recorded` (what the run was
    /// started with). The emulator, if any, runs until the returned server is dropped.
    pub async fn connect(
        &self,
        recorded: Option<&RunEndpoint>,
    ) -> anyhow::Result<(Client, Option<MockServer>)> {
        self.connect_with(recorded, None).await
    }

    async fn connect_with(
        &self,
        recorded: Option<&RunEndpoint>,
        shared: Option<&ApiClients>,
    ) -> anyhow::Result<(Client, Option<MockServer>)> {
        let endpoint = RunEndpoint::for_resume(self.given(), recorded)?;
        let base_url = match endpoint {
            Some(RunEndpoint::Mock) => return self.start_mock(None).await,
            Some(RunEndpoint::MockScript(path)) => return self.start_mock(Some(&path)).await,
            Some(RunEndpoint::Url(url)) => Some(url),
            None => None,
        };
        let Some(shared) = shared else {
            return Ok((self.api_client(base_url.as_deref())?, None));
        };
        let mut clients = shared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = clients.get(&base_url) {
            return Ok((client.clone(), None));
        }
        let client = self.api_client(base_url.as_deref())?;
        clients.insert(base_url, client.clone());
        Ok((client, None))
    }

    /// A client of the API at `base_url` (default: the environment's), keyed from the
    /// environment.
    fn api_client(&self, base_url: Option<&str>) -> anyhow::Result<Client> {
        let config = ClientConfig::from_env(base_url).map_err(setup_error)?;
        Client::new(self.configured(config)).map_err(setup_error)
    }

    /// `config` with these options' timeouts.
    fn configured(&self, mut config: ClientConfig) -> ClientConfig {
        if let Some(secs) = self.stream_idle_timeout {
            config.stream_idle_timeout = std::time::Duration::from_secs(secs);
        }
        config
    }

    /// The emulator in this process, playing `script` (the built-in run story without
    /// one), and a client for it.
    async fn start_mock(
        &self,
        script: Option<&Path>,
    ) -> anyhow::Result<(Client, Option<MockServer>)> {
        let script = match script {
            Some(path) => Script::load(path)
                .map_err(|err| UsageError(format!("--mock-script {}: {err}", path.display())))?,
            None => Script::from_json_str(
                agent_responses_mock::builtin_fixture("run").context("the built-in run story")?,
            )?,
        };
        let server = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
            .await
            .context("cannot start the emulator")?;
        let key = ApiKey::new(MOCK_API_KEY).context("mock key")?;
        let client = Client::new(self.configured(ClientConfig::new(server.base_url(), key)))?;
        Ok((client, Some(server)))
    }
}

/// API clients by base URL (`None`: the environment's), shared by the runs of a worker.
pub type ApiClients = Mutex<HashMap<Option<String>, Client>>;

/// A client that cannot be set up from what the user gave is a usage error, with a hint.
fn setup_error(err: ClientError) -> anyhow::Error {
    match err {
        ClientError::MissingApiKey => with_hint(
            UsageError(err.to_string()),
            "set OPENAI_API_KEY in your environment (never in a file or on the command line), or add --mock to run offline against the built-in emulator",
        ),
        ClientError::InvalidBaseUrl(_) => with_hint(
            UsageError(err.to_string()),
            "give --base-url as http(s)://HOST[:PORT]/v1 (or set OPENAI_BASE_URL)",
        ),
        other => anyhow::Error::new(other),
    }
}

/// A fresh workspace for the built-in story, under the data directory, with a README to read.
pub fn demo_workspace() -> anyhow::Result<PathBuf> {
    let base = crate::global::default_db_path()?
        .parent()
        .map(|p| p.join("workspaces"))
        .context("no data directory")?;
    let dir = base.join(format!("demo-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the demo workspace {}", dir.display()))?;
    std::fs::write(
        dir.join("README.md"),
        "# Demo workspace\n\nCreated by `agentctl run --mock` for its built-in story.\nThe agent lists this folder, reads this file, runs a command and writes SUMMARY.md.\n",
    )
    .context("cannot write the demo README")?;
    Ok(dir)
}
