//! A fresh PostgreSQL database for one bench row, created and dropped with `psql`.
//!
//! Rows on one database are not comparable: a row that finds the tables, indexes and
//! sequences of earlier rows' runs does more work than the SQLite row beside it, which
//! always starts from an empty file. So every PostgreSQL row gets a database of its own on
//! the server named by `AGENTCTL_TEST_PG_URL`, dropped (connections included) when the
//! guard is. `psql` comes with the server's client package, as in `.ci/postgres.sh`; xtask
//! stays free of a database driver.

use std::process::Command;

use anyhow::Context as _;

/// A database created for one row; dropped when this guard is.
pub struct PgDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl PgDatabase {
    /// Creates `agentctl_bench_<pid>_<tag>` on the server of `admin_url` (a URL of any
    /// database on it the user may connect to and create databases from). `tag` is reduced
    /// to `[a-z0-9_]`, so the name needs no quoting.
    pub fn create(admin_url: &str, tag: &str) -> anyhow::Result<PgDatabase> {
        let name = database_name(std::process::id(), tag);
        psql(
            admin_url,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        )?;
        psql(admin_url, &format!("CREATE DATABASE {name}"))?;
        Ok(PgDatabase {
            url: with_database(admin_url, &name),
            admin_url: admin_url.to_owned(),
            name,
        })
    }

    /// The URL of this row's database.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for PgDatabase {
    /// Failures only leave a database behind (named for this process, so recognisable).
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(err) = psql(&self.admin_url, &sql) {
            eprintln!("xtask: cannot drop bench database {}: {err:#}", self.name);
        }
    }
}

/// `agentctl_bench_<pid>_<tag>`, `tag` lowercased with anything but `[a-z0-9_]` as `_`,
/// within PostgreSQL's 63 bytes.
fn database_name(pid: u32, tag: &str) -> String {
    let tag: String = tag
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("agentctl_bench_{pid}_{tag}");
    name.truncate(63);
    name
}

/// Runs one statement with `psql` (no `.psqlrc`, stop on error). The URL is passed as an
/// argument, never printed: it may hold a password, and `psql`'s own errors do not quote it.
fn psql(url: &str, sql: &str) -> anyhow::Result<()> {
    let out = Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
        .output()
        .context("cannot start psql (needed for the PostgreSQL rows)")?;
    anyhow::ensure!(
        out.status.success(),
        "psql -c {sql:?} failed with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// `url` with its database name replaced by `name` (any `?query` kept).
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host = base[scheme_end..].split('/').next().unwrap_or_default();
    format!("{}{host}/{name}{query}", &base[..scheme_end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_only_the_database_name() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres?sslmode=disable", "t1"),
            "postgres://u:p@h:5432/t1?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "t2"), "postgres://h/t2");
    }

    #[test]
    fn names_need_no_quoting_and_fit() {
        assert_eq!(
            database_name(42, "Resume-1000 postgres"),
            "agentctl_bench_42_resume_1000_postgres"
        );
        assert_eq!(database_name(42, &"x".repeat(100)).len(), 63);
    }

    /// Creates, uses and drops a database on the server of `AGENTCTL_TEST_PG_URL`; skipped
    /// without it (but not under `CI=true`, where the server is part of the setup).
    #[test]
    fn creates_a_fresh_database_and_drops_it() {
        let Some(admin) = std::env::var("AGENTCTL_TEST_PG_URL")
            .ok()
            .filter(|u| !u.is_empty())
        else {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI=true but AGENTCTL_TEST_PG_URL is unset"
            );
            return;
        };
        let db = PgDatabase::create(&admin, "xtask_selftest").expect("create");
        psql(db.url(), "CREATE TABLE t (x int); INSERT INTO t VALUES (1)").expect("use");
        let name = db.name.clone();
        drop(db);
        let left = Command::new("psql")
            .args(["-X", "-At", "-d", &admin, "-c"])
            .arg(format!(
                "SELECT count(*) FROM pg_database WHERE datname = '{name}'"
            ))
            .output()
            .expect("psql");
        assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "0");
    }
}
