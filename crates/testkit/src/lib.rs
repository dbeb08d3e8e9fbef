//! Support shared by the workspace's integration tests: fresh PostgreSQL databases, and a
//! look at what a SQLite file holds.
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

/// Creates `<prefix>_<uuid>` on the test server, or `None` when the suite is skipped.
///
/// # Cancel safety
///
/// Not cancel safe: a future dropped once `CREATE DATABASE` has been sent can leave the
/// database created on the server with no [`PgDatabase`] guard to drop it (it must then be
/// dropped by hand); dropped earlier, it leaves nothing (the admin connection just closes).
pub async fn fresh_pg_database(prefix: &str) -> Option<PgDatabase> {
    let admin_url = pg_base_url()?;
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
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
