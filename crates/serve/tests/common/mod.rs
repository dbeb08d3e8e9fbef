//! What the server's test binaries share: a real server on 127.0.0.1 over an in-memory
//! journal holding one submitted run.

use std::net::SocketAddr;
use std::path::Path;

use agent_serve::{Limits, ServeOptions, Token};

/// Starts a server whose token is `token` (written under `dir`, which also holds the run's
/// workspace) on a task of the current runtime; its address and the run's id.
#[allow(dead_code)] // not every test binary uses both
pub async fn start(dir: &Path, token: &str) -> (SocketAddr, String) {
    start_with(dir, token, Limits::default()).await
}

/// [`start`], with `limits` on connections.
#[allow(dead_code)] // not every test binary uses both
pub async fn start_with(dir: &Path, token: &str, limits: Limits) -> (SocketAddr, String) {
    let token_path = dir.join("token");
    std::fs::write(&token_path, token).unwrap();
    let journal = agent_journal::Journal::open("memory:").await.unwrap();
    let new = agent_host::run::NewRun::new("a run to serve", dir);
    let run = agent_host::run::submit(&journal, &agent_host::tools::ToolConfig::default(), new)
        .await
        .unwrap();
    let options = ServeOptions {
        token: Token::from_file(&token_path).unwrap(),
        allowed_hosts: Vec::new(),
        max_watchers: 4,
        submitter: None,
        context: None,
        who: "test@serve".into(),
        reopen: None,
    };
    let bound = agent_serve::bind(journal, "127.0.0.1:0".parse().unwrap(), options)
        .await
        .unwrap()
        .with_limits(limits);
    let addr = bound.local_addr();
    tokio::spawn(bound.run(std::future::pending()));
    (addr, run)
}

/// A server started by [`start`] with `token`, its base URL and run; it stops with the test's
/// runtime, and its directory goes with this value.
#[allow(dead_code)] // not every test binary uses it
pub struct Server {
    pub base: String,
    pub run: String,
    _dir: tempfile::TempDir,
}

/// [`start`] in a fresh directory.
#[allow(dead_code)] // not every test binary uses it
pub async fn server(token: &str) -> Server {
    server_with(token, Limits::default()).await
}

/// [`server`], with `limits` on connections.
#[allow(dead_code)] // not every test binary uses it
pub async fn server_with(token: &str, limits: Limits) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let (addr, run) = start_with(dir.path(), token, limits).await;
    Server {
        base: format!("http://{addr}"),
        run,
        _dir: dir,
    }
}
