//! Where a run's model calls go: the live API (key from the environment only), a base URL,
//! or the emulator in-process (`--mock`).

use std::path::PathBuf;

use agent_responses::{ApiKey, Client, ClientConfig, ClientError};
use agent_responses_mock::{MOCK_API_KEY, MockConfig, MockServer, Script};
use anyhow::Context as _;
use clap::Args;

use crate::output::with_hint;

/// The model endpoint options of `run` and `resume`.
#[derive(Debug, Clone, Args)]
pub struct Endpoint {
    /// The Responses API base URL (default: OPENAI_BASE_URL, else the public API). The key
    /// is read from OPENAI_API_KEY only.
    #[arg(long, value_name = "URL", conflicts_with = "mock")]
    pub base_url: Option<String>,
    /// Run offline against the built-in emulator, in this process (no key needed). Without
    /// --mock-script it plays a story that uses every built-in tool.
    #[arg(long)]
    pub mock: bool,
    /// An emulator script for --mock (format: fixtures/responses/README.md).
    #[arg(long, value_name = "FILE", requires = "mock")]
    pub mock_script: Option<PathBuf>,
}

impl Endpoint {
    /// What `run.created` records about the endpoint (never a key).
    pub fn recorded(&self) -> Option<String> {
        match (&self.mock, &self.mock_script, &self.base_url) {
            (true, Some(path), _) => Some(format!(
                "mock:{}",
                path.canonicalize()
                    .unwrap_or_else(|_| path.clone())
                    .display()
            )),
            (true, None, _) => Some("mock".into()),
            // Credentials in a URL are never journaled; such a run needs --base-url on resume.
            (false, _, Some(url)) => Some(agent_redact::redact_url(url)),
            (false, _, None) => None,
        }
    }

    /// A client for these options; when none is given, for `recorded` (what the run was
    /// started with). The emulator, if any, runs until the returned server is dropped.
    pub async fn connect(
        &self,
        recorded: Option<&str>,
    ) -> anyhow::Result<(Client, Option<MockServer>)> {
        let explicit = self.mock || self.base_url.is_some();
        let (mock, script, base_url) = if explicit {
            (self.mock, self.mock_script.clone(), self.base_url.clone())
        } else {
            match recorded {
                Some("mock") => (true, None, None),
                Some(r) if r.starts_with("mock:") => (true, Some(PathBuf::from(&r[5..])), None),
                Some(url) if url.contains(agent_redact::MASK) => anyhow::bail!(
                    "the run was started with a base URL that carried a password (journaled masked); give it again with --base-url"
                ),
                // The endpoint the run was started with: its history goes nowhere else.
                Some(url) => (false, None, Some(url.to_string())),
                None => (false, None, None),
            }
        };
        if mock {
            let script = match &script {
                Some(path) => Script::load(path)?,
                None => Script::from_json_str(
                    agent_responses_mock::builtin_fixture("run")
                        .context("the built-in run story")?,
                )?,
            };
            let server = MockServer::start(MockConfig::new(script).with_api_key(MOCK_API_KEY))
                .await
                .context("cannot start the emulator")?;
            let key = ApiKey::new(MOCK_API_KEY).context("mock key")?;
            let client = Client::new(ClientConfig::new(server.base_url(), key))?;
            return Ok((client, Some(server)));
        }
        let config = ClientConfig::from_env(base_url.as_deref()).map_err(|err| match err {
            ClientError::MissingApiKey => with_hint(
                err,
                "set OPENAI_API_KEY in your environment (never in a file or on the command line), or add --mock to run offline against the built-in emulator",
            ),
            other => anyhow::Error::new(other),
        })?;
        Ok((Client::new(config)?, None))
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
