//! `agentctl trust`: trust a workspace's `agentctl.toml` as it reads now, so that what it
//! asks that lowers a run's protections (MCP servers, the sandbox off or weaker, the
//! network, writable paths, tools that stop asking) is used.
//!
//! Invariant: the store lives in the user's configuration directory (`AGENTCTL_CONFIG_DIR`,
//! default `~/.config/agentctl`), which sandboxed commands cannot read or write, so a
//! command a model runs cannot trust a file for the user.

use std::path::PathBuf;
use std::process::ExitCode;

use agent_host::tools::{ToolConfig, TrustStore, USER_FILE};
use serde_json::json;

use crate::global::GlobalArgs;
use crate::output::{self, UsageError};

#[derive(Debug, clap::Args)]
pub struct TrustArgs {
    /// The workspace directory whose agentctl.toml to trust (default: the current
    /// directory). Read the file first: what it asks is printed. With --forget, also the
    /// file's path as --list shows it.
    pub workspace: Option<PathBuf>,
    /// Forget the workspace's file instead: runs there refuse what it asks again.
    #[arg(long, conflicts_with = "list")]
    pub forget: bool,
    /// List the trusted files (digest and path) instead.
    #[arg(long, conflicts_with = "workspace")]
    pub list: bool,
}

/// The user's configuration directory: `AGENTCTL_CONFIG_DIR` when set (a relative path is
/// taken from the current directory), else `~/.config/agentctl`.
pub fn config_dir() -> Option<PathBuf> {
    agent_host::sandbox::moved_config_dir()
        .or_else(|| dirs::home_dir().map(|h| h.join(".config").join("agentctl")))
}

/// The trust store of this user.
pub fn store() -> anyhow::Result<TrustStore> {
    let dir = config_dir().ok_or_else(|| {
        UsageError(
            "no home directory to keep trusted workspaces in; set AGENTCTL_CONFIG_DIR".into(),
        )
    })?;
    Ok(TrustStore::in_dir(&dir))
}

pub fn trust(global: &GlobalArgs, args: TrustArgs) -> anyhow::Result<ExitCode> {
    let store = store()?;
    if args.list {
        for (digest, file) in store.list()? {
            if global.json {
                output::json_line(&json!({"type": "trusted", "file": file, "sha256": digest}))?;
            } else {
                output::line(&format!("{digest}  {}", file.display()))?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let workspace = match args.workspace {
        Some(dir) => dir,
        None => std::env::current_dir()?,
    };
    if args.forget {
        let forgot = store
            .forget(&workspace)
            .map_err(|err| UsageError(err.to_string()))?;
        if global.json {
            output::json_line(
                &json!({"type": "forgotten", "workspace": workspace, "was_trusted": forgot}),
            )?;
        } else if forgot {
            output::line(&format!("forgot {}", workspace.display()))?;
        } else {
            output::note(&format!("{} was not trusted", workspace.display()));
        }
        return Ok(ExitCode::SUCCESS);
    }
    // The argument is the workspace, not its file (`--forget` takes the file as `--list`
    // shows it too).
    if workspace.is_file() {
        let dir = workspace
            .parent()
            .filter(|dir| !dir.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        return Err(UsageError(format!(
            "{} is a file: `agentctl trust` takes the workspace directory whose agentctl.toml to trust (here: `{}`)",
            workspace.display(),
            global.suggest(&["trust", &dir.display().to_string()])
        ))
        .into());
    }
    // What the file asks is judged over the user's own file, as a run judges it; one that
    // cannot be read counts as none (every loosening is then listed).
    let user = config_dir()
        .and_then(|dir| ToolConfig::read(&dir.join(USER_FILE)).ok().flatten())
        .unwrap_or_default();
    let trusted = store
        .trust(&workspace, &user)
        .map_err(|err| UsageError(err.to_string()))?;
    if global.json {
        output::json_line(&json!({
            "type": "trusted",
            "file": trusted.file,
            "sha256": trusted.digest,
            "asks": trusted.asks,
        }))?;
    } else {
        output::line(&format!(
            "trusted {} as it reads now",
            trusted.file.display()
        ))?;
        if trusted.asks.is_empty() {
            output::line("  it asks for nothing that needs trust")?;
        }
        for ask in &trusted.asks {
            output::line(&format!("  it may {ask}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
