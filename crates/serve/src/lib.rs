//! `agentctl serve`: one process that is both an HTTP API and a web console over the journal
//! the hosts and workers write (see `docs/http-api.md` for every route and shape).
//!
//! It reads and decides through the library calls the CLI uses (`agent_host::run::decide`,
//! `request_steer`, `request_interrupt`, the runs table, the `--json` converter), so hosts
//! and workers in other processes, on other machines over PostgreSQL, see its decisions as
//! they see the CLI's, and it sees their events live through journal tails.
//!
//! Invariants:
//! - Every request passes the guard first (`guard`): Host allow-list, then the token, then
//!   the Origin rule for `POST`; nothing of a run is answered before all three.
//! - The token is never logged, journaled or printed by `Debug`; decisions are recorded as
//!   by `serve@HOST`.
//! - Every error is the API's JSON shape with a status that says what went wrong; no input
//!   makes a handler panic.
//! - An event stream resumes after `Last-Event-ID` (a journal seq), so a client that
//!   reconnects, to this process or a restarted one, misses and repeats nothing.

mod app;
mod body;
mod error;
mod events;
mod guard;
mod headers;
mod journal_slot;
mod json_errors;
mod once;
mod routes;
mod token;

use std::net::SocketAddr;
use std::sync::Arc;

use agent_journal::Journal;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

pub use agent_http::server::Limits;
pub use app::{SubmitRequest, Submitter};
pub use body::MAX_BODY;
pub use error::ApiError;
pub use events::ApiEvent;
pub use journal_slot::{RETRY as REOPEN_RETRY, Reopen};
pub use once::CODE_TTL;
pub use token::{COOKIE_PREFIX, MIN_LEN as MIN_TOKEN_LEN, Token, TokenError, cookie_name};

/// How a server is set up.
pub struct ServeOptions {
    /// The token every request needs.
    pub token: Token,
    /// More `Host` values to accept (`name` or `name:port`), besides the listen address.
    pub allowed_hosts: Vec<String>,
    /// Most SSE streams open at once.
    pub max_watchers: usize,
    /// Creates submitted runs (`POST /runs`); without it that route answers 501.
    pub submitter: Option<Arc<dyn Submitter>>,
    /// The context store `GET /search` reads; without it that route answers 501.
    pub context: Option<agent_context::ContextStore>,
    /// Who decisions, steers and interrupts are recorded as.
    pub who: String,
    /// Opens the journal again once its writer has failed (a full disk, a lost database
    /// connection); without it the server answers writes 503 until it is restarted.
    pub reopen: Option<Reopen>,
}

/// A server bound to its address, not serving yet.
pub struct Bound {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    router: Router,
    link: String,
    limits: Limits,
    app: Arc<app::App>,
}

impl Bound {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The console's sign-in link (it holds the token: print it once, to the user; it
    /// signs a browser in as often as it is opened while this server runs).
    pub fn console_link(&self) -> &str {
        &self.link
    }

    /// A link that signs one browser in once, within [`CODE_TTL`], then is worthless: for
    /// handing to programs whose arguments other local users can read (`xdg-open`, a
    /// browser), where the token itself must not go.
    pub fn one_time_link(&self) -> String {
        format!(
            "http://{}/?code={}",
            link_addr(self.addr),
            self.app.once.issue()
        )
    }

    /// Other bounds on connections than [`Limits::default`] (most at once, idle time).
    pub fn with_limits(mut self, limits: Limits) -> Bound {
        self.limits = limits;
        self
    }

    /// Serves until `shutdown` completes; open event streams end then (see
    /// [`agent_http::server`] for how connections are bounded and closed).
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        agent_http::server::serve(self.listener, self.router, self.limits, shutdown).await
    }
}

/// Binds `listen` and builds the server over `journal`.
pub async fn bind(
    journal: Journal,
    listen: SocketAddr,
    options: ServeOptions,
) -> std::io::Result<Bound> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let hosts = allowed_hosts(addr, &options.allowed_hosts);
    let link = format!(
        "http://{}/?token={}",
        link_addr(addr),
        options.token.reveal()
    );
    let app = Arc::new(app::App {
        journal: journal_slot::JournalSlot::new(journal, options.reopen),
        token: options.token,
        hosts,
        cookie: token::cookie_name(addr.port()),
        watchers: Arc::new(tokio::sync::Semaphore::new(options.max_watchers)),
        max_watchers: options.max_watchers,
        converters: Arc::default(),
        row_folds: agent_host::run::table::RowFolds::default(),
        submitter: options.submitter,
        context: options.context,
        who: options.who,
        once: once::OnceCodes::default(),
    });
    // Room for every watcher the server admits, and as many other connections besides.
    let limits = Limits {
        max_connections: options.max_watchers.saturating_add(Limits::MAX_CONNECTIONS),
        ..Limits::default()
    };
    Ok(Bound {
        listener,
        addr,
        router: router(Arc::clone(&app)),
        link,
        limits,
        app,
    })
}

/// The `Host` values that name a server on `addr`: the address itself and, when the server
/// listens on loopback (an unspecified address, `0.0.0.0` or `[::]`, listens there too), the
/// loopback names a local browser or script reaches it by.
fn allowed_hosts(addr: SocketAddr, extra: &[String]) -> Vec<String> {
    let port = addr.port();
    let mut hosts = vec![addr.to_string()];
    if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        hosts.extend([
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ]);
    }
    for h in extra {
        let h = h.trim();
        if h.is_empty() {
            continue;
        }
        hosts.push(h.to_string());
        if !h.ends_with(']') && !h.contains(':') {
            hosts.push(format!("{h}:{port}"));
        }
    }
    hosts.dedup();
    hosts
}

fn router(app: Arc<app::App>) -> Router {
    use routes::{actions, console, runs};
    let api = Router::new()
        .route("/runs", get(runs::list).post(actions::submit))
        .route("/runs/{id}", get(runs::show))
        .route("/runs/{id}/events", get(runs::events))
        .route("/runs/{id}/events/stream", get(runs::stream))
        .route("/runs/{id}/approvals/{call_id}", post(actions::decide))
        .route("/runs/{id}/steer", post(actions::steer))
        .route("/runs/{id}/interrupt", post(actions::interrupt))
        .route("/runs/{id}/resume", post(actions::resume))
        .route("/search", get(runs::search));
    Router::new()
        .nest("/api/v1", api)
        .route("/", get(console::index).post(console::sign_in))
        .route("/assets/{file}", get(console::asset))
        .fallback(console::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            guard::guard,
        ))
        .layer(axum::middleware::from_fn(json_errors::json_errors))
        .layer(axum::middleware::from_fn(headers::every_answer))
        .layer(axum::middleware::from_fn(agent_http::close_if_unread))
        .with_state(app)
}

/// The address a link names for a server listening on `addr`: an address every interface
/// is (`0.0.0.0`, `::`) is no address a browser can open, so its loopback one stands in
/// (the server listens there too, and the `Host` check accepts it).
fn link_addr(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_names_loopback_for_a_server_on_every_interface() {
        for (listen, named) in [
            ("0.0.0.0:4000", "127.0.0.1:4000"),
            ("[::]:4000", "[::1]:4000"),
            ("127.0.0.1:4000", "127.0.0.1:4000"),
            ("192.0.2.7:4000", "192.0.2.7:4000"),
        ] {
            let addr: SocketAddr = listen.parse().unwrap();
            assert_eq!(link_addr(addr).to_string(), named, "{listen}");
        }
    }

    #[test]
    fn a_server_on_every_interface_is_named_by_the_loopback_names_too() {
        for listen in ["0.0.0.0:4000", "[::]:4000", "127.0.0.1:4000"] {
            let addr: SocketAddr = listen.parse().unwrap();
            let hosts = allowed_hosts(addr, &[]);
            for name in ["127.0.0.1:4000", "localhost:4000", "[::1]:4000", listen] {
                assert!(
                    hosts.iter().any(|h| h == name),
                    "{listen}: {name} in {hosts:?}"
                );
            }
        }
        let addr: SocketAddr = "192.0.2.7:4000".parse().unwrap();
        let hosts = allowed_hosts(addr, &["box".to_string()]);
        assert_eq!(hosts, ["192.0.2.7:4000", "box", "box:4000"]);
    }
}
