//! Support shared by the workspace's integration tests: fresh PostgreSQL databases, one
//! per-backend test macro ([`backend_tests!`]), and a look at what a SQLite file holds.
//!
//! The rule every PostgreSQL test follows: the server comes from `AGENTCTL_TEST_PG_URL`;
//! without it the suite is skipped with a `SKIPPED:` line on stderr, except under
//! `CI=true`, where a missing server is a failure. Each test gets a database of its own,
//! dropped (with its connections) when the [`PgDatabase`] guard is dropped, so repeated
//! local runs leave nothing behind.

// Test support: failing loudly is the point.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

use sqlx::Connection as _;

pub mod small_disk;

/// The variable naming the PostgreSQL server for tests.
pub const PG_URL_VAR: &str = "AGENTCTL_TEST_PG_URL";

/// The PostgreSQL server URL for tests, or `None` (after saying so) when it is not set.
/// Under `CI=true` a missing URL is a failure: CI must run the PostgreSQL suite.
pub fn pg_base_url() -> Option<String> {
    match std::env::var(PG_URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true but {PG_URL_VAR} is unset: the PostgreSQL suite must run in CI");
            }
            eprintln!("SKIPPED: PostgreSQL suite ({PG_URL_VAR} unset)");
            None
        }
    }
}

/// A database created for one test; dropped when this guard is.
#[derive(Debug)]
pub struct PgDatabase {
    url: String,
    name: String,
    admin_url: String,
}

impl PgDatabase {
    /// The URL of this test's database.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// The test MCP server (`src/bin/agentctl-test-mcp-server.rs`) as `cargo test` built it:
/// beside the calling test binary's `deps` directory. A workspace test run builds it (this
/// crate's own test starts it); a run of one package's tests needs `-p agent-testkit` too.
pub fn test_mcp_server() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let server = exe
        .parent()
        .and_then(std::path::Path::parent)
        .map(|dir| dir.join("agentctl-test-mcp-server"))
        .unwrap();
    assert!(
        server.is_file(),
        "{} is missing: build it with `cargo build -p agent-testkit --bins` (a `cargo test \
         --workspace` does)",
        server.display()
    );
    server
}

/// A fresh, empty database for one test, named by its URL: a SQLite file in a temp dir, or a
/// PostgreSQL database of its own. Both go away when this guard is dropped. The fixture of
/// suites whose cases take a database URL (`backend_tests!` with `sqlite` and `postgres`).
#[derive(Debug)]
pub struct FreshDb {
    url: String,
    _dir: Option<tempfile::TempDir>,
    /// Dropped after the URL's last user: the database goes with the guard.
    _pg: Option<PgDatabase>,
}

impl FreshDb {
    /// A new SQLite file (`journal.db` in a temp dir of its own).
    pub fn sqlite() -> FreshDb {
        let dir = tempfile::tempdir().unwrap();
        FreshDb {
            url: format!("sqlite://{}", dir.path().join("journal.db").display()),
            _dir: Some(dir),
            _pg: None,
        }
    }

    /// A new PostgreSQL database `<prefix>_<uuid>`, or `None` when the suite is skipped.
    pub async fn postgres(prefix: &str) -> Option<FreshDb> {
        let pg = fresh_pg_database(prefix).await?;
        Some(FreshDb {
            url: pg.url().to_string(),
            _dir: None,
            _pg: Some(pg),
        })
    }

    /// The database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Another fresh database on the same backend (a PostgreSQL one named `sibling_<uuid>`).
    pub async fn sibling(&self) -> FreshDb {
        if self._pg.is_some() {
            // The server answered for this one, so the suite is not skipped.
            FreshDb::postgres("sibling").await.unwrap()
        } else {
            FreshDb::sqlite()
        }
    }
}

/// Creates `<prefix>_<uuid>` on the test server, or `None` when the suite is skipped.
///
/// # Cancel safety
///
/// Not cancel safe: a future dropped once `CREATE DATABASE` has been sent can leave the
/// database created on the server with no [`PgDatabase`] guard to drop it (it must then be
/// dropped by hand); dropped earlier, it leaves nothing (the admin connection just closes).
pub async fn fresh_pg_database(prefix: &str) -> Option<PgDatabase> {
    create_pg_database(prefix, "").await
}

/// [`fresh_pg_database`] with the server encoding `encoding` (`LATIN1`...) and the `C`
/// locale, from `template0`. Same cancel safety.
pub async fn fresh_pg_database_encoded(prefix: &str, encoding: &str) -> Option<PgDatabase> {
    let options = format!(" ENCODING '{encoding}' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'");
    create_pg_database(prefix, &options).await
}

async fn create_pg_database(prefix: &str, options: &str) -> Option<PgDatabase> {
    let admin_url = pg_base_url()?;
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {name}{options}"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    admin.close().await.unwrap();
    Some(PgDatabase {
        url: with_database(&admin_url, &name),
        name,
        admin_url,
    })
}

impl Drop for PgDatabase {
    /// Drops the database, ending any connection still open on it. Runs on a thread of its
    /// own (a drop cannot await); failures only leave a database behind.
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let dropper = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(mut admin) = sqlx::PgConnection::connect(&admin_url).await {
                    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
                        .execute(&mut admin)
                        .await;
                    let _ = admin.close().await;
                }
            });
        });
        let _ = dropper.join();
    }
}

/// Sets defaults of every new session of the database at `url`, as a DBA may
/// (`ALTER DATABASE <it> SET name = value`, each value written as SQL: `'1ms'`, `on`), and
/// returns the connection that did it, still open on that database.
pub async fn set_database_defaults(url: &str, settings: &[(&str, &str)]) -> sqlx::PgConnection {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    for (name, value) in settings {
        let sql = format!("ALTER DATABASE {db} SET {name} = {value}");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn
}

/// `url` with its database name replaced by `name` (any `?query` kept).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host = base[scheme_end..].split('/').next().unwrap_or_default();
    format!("{}{host}/{name}{query}", &base[..scheme_end])
}

/// The names of the tables in the SQLite file at `path`, sorted.
pub fn sqlite_tables(path: &std::path::Path) -> Vec<String> {
    rusqlite::Connection::open(path)
        .unwrap()
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// One `#[tokio::test]` per backend for each case: the workspace's one way to run a test
/// body on every database it must work on.
///
/// ```ignore
/// use crate::support; // a module in scope at the call site
///
/// agent_testkit::backend_tests!(support, [sqlite, postgres, memory]: steering_fences, overlap);
/// agent_testkit::backend_tests!(support, [sqlite, postgres]: reopen_keeps_everything);
///
/// async fn steering_fences(f: support::Fixture) { /* ... */ }
/// ```
///
/// For each `case` this generates `mod case { fn sqlite(); fn postgres(); fn memory() }`
/// (only the backends named), so tests are called `suite::case::postgres` and
/// `cargo test -- ::postgres` runs every PostgreSQL case. Each test runs on a multi-thread
/// runtime with two workers and calls the calling module's `async fn case(fixture)` with
/// the fixture made by `fixtures::<backend>()`, where `fixtures` names a module in scope at
/// the call site that provides, for the backends used:
///
/// - `async fn sqlite() -> F`: a fresh SQLite file (its temp dir kept alive by `F`);
/// - `async fn postgres() -> Option<F>`: a fresh database, usually from
///   [`fresh_pg_database`], `None` when [`PG_URL_VAR`] is unset (the test then returns
///   after the `SKIPPED:` line; under `CI=true` it fails instead, see [`pg_base_url`]);
///   `F` should hold the [`PgDatabase`] guard so the database is dropped with it;
/// - `async fn memory() -> F`: an in-process backend.
///
/// The fixture is passed by value and dropped when the case returns. Cases that need other
/// options use another fixtures module (any module with those functions), and the macro
/// may be called any number of times in one module, with different backend lists. The
/// calling crate needs `tokio` (with `macros` and `rt-multi-thread`) as a dev-dependency.
#[macro_export]
macro_rules! backend_tests {
    ($fixtures:ident, $backends:tt: $($case:ident),+ $(,)?) => {
        $( $crate::backend_tests!(@case $fixtures $backends $case); )+
    };
    (@case $fixtures:ident [$($backend:ident),+ $(,)?] $case:ident) => {
        mod $case {
            $( $crate::backend_tests!(@test $backend $fixtures $case); )+
        }
    };
    (@test sqlite $fixtures:ident $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn sqlite() {
            super::$case(super::$fixtures::sqlite().await).await;
        }
    };
    (@test memory $fixtures:ident $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn memory() {
            super::$case(super::$fixtures::memory().await).await;
        }
    };
    (@test postgres $fixtures:ident $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn postgres() {
            // `None`: skipped (said on stderr); under `CI=true` the fixture panicked instead.
            let Some(fixture) = super::$fixtures::postgres().await else {
                return;
            };
            super::$case(fixture).await;
        }
    };
    (@test $other:ident $fixtures:ident $case:ident) => {
        ::core::compile_error!(concat!(
            "backend_tests!: unknown backend `", stringify!($other),
            "` (known: sqlite, postgres, memory)"
        ));
    };
}

/// Polls `fut` up to `polls` times with a waker that does nothing, yielding to the runtime
/// between polls, then drops it: what a caller's `select!` or timeout does to a future it
/// abandons. Returns the output if the future completed within those polls.
pub async fn poll_then_drop<F: std::future::Future>(fut: F, polls: usize) -> Option<F::Output> {
    use std::task::{Context, Poll, Waker};
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..polls {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Some(out);
        }
        tokio::task::yield_now().await;
    }
    None
}

/// Writes `text` to `path` as an executable file (mode 0755) that a test can run at once.
///
/// A file this process writes is open for writing, for a moment, in every child that
/// another test thread forks meanwhile (until that child execs); running the file in that
/// moment fails with ETXTBSY, "Text file busy". Here the executable's only writer is an
/// `install` child, a process this one never forks from, gone when this returns.
pub fn write_executable(path: &std::path::Path, text: &str) {
    let mut source = path.as_os_str().to_owned();
    source.push(".source");
    let source = std::path::PathBuf::from(source);
    std::fs::write(&source, text).unwrap();
    let status = std::process::Command::new("install")
        .arg("-m")
        .arg("0755")
        .arg(&source)
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "install {}: {status}", path.display());
    std::fs::remove_file(&source).unwrap();
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn replaces_only_the_database_name() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres?sslmode=disable", "t1"),
            "postgres://u:p@h:5432/t1?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "t2"), "postgres://h/t2");
    }
}
