//! PostgreSQL backend: one pool; per-thread positions come from a row lock on the thread
//! (an upsert on `context_threads`), consolidation holds an EXCLUSIVE lock on the dirty set
//! so concurrent evidence writes wait for it instead of racing it.
//!
//! One file per domain, mirroring the SQLite backend: `units`, `memory`, `schema`.

mod index;
mod memory;
mod schema;
mod units;

use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use crate::backend::StoreBackend;
use crate::error::{ContextError, Result};
use crate::options::ContextOptions;

/// A PostgreSQL store: its connection pool and its index fold task.
#[derive(Clone)]
pub(crate) struct PgBackend {
    pool: PgPool,
    fold: Arc<index::Folder>,
    /// [`ContextOptions::index_tail_bytes`].
    tail_bound: i64,
}

/// How long opening waits for the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl PgBackend {
    pub(crate) async fn open(url: &str, options: &ContextOptions) -> Result<Self> {
        // Every statement of the store has one right plan whatever its values (a key range,
        // or the index where the caller chose it, see `units::trigram_searchable`): planned
        // once per connection, not on each of its first executions, which is every
        // execution of a short-lived command.
        //
        // Every session reads committed data statement by statement, whatever the database's
        // default (as the journal's): under REPEATABLE READ or SERIALIZABLE, concurrent
        // appends to one thread failed with serialization errors (37 of 80 here).
        let connect = PgConnectOptions::from_str(url)
            .map_err(|err| ContextError::InvalidUrl {
                url: agent_redact::redact_url(url),
                reason: agent_redact::redact_in(&err.to_string(), url),
            })?
            .options([
                ("plan_cache_mode", "force_generic_plan"),
                ("default_transaction_isolation", "read committed"),
            ]);
        // One direct connection first: a refused or failing connect is reported as itself at
        // once, where the pool would retry it until its acquire timeout and then say only
        // that it timed out.
        let mut first = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&connect))
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??;
        check_encoding(&mut first).await?;
        first.close().await?;
        let pool = PgPoolOptions::new()
            .max_connections(options.connections.max(2))
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_with(connect)
            .await?;
        schema::migrate(&pool).await?;
        Ok(PgBackend {
            fold: Arc::new(index::Folder::start(pool.clone())),
            pool,
            tail_bound: i64::try_from(options.index_tail_bytes).unwrap_or(i64::MAX),
        })
    }
}

impl StoreBackend for PgBackend {
    async fn close(&self) {
        self.pool.close().await;
    }
}

/// [`ContextError::Unsuitable`] unless the database can store every character: its
/// encoding is UTF8, or SQL_ASCII (which stores bytes as they come). In a LATIN1 database
/// the first unit with CJK text failed with the driver's error.
async fn check_encoding(conn: &mut PgConnection) -> Result<()> {
    let encoding: String = sqlx::query_scalar("SELECT current_setting('server_encoding')")
        .fetch_one(conn)
        .await?;
    if matches!(encoding.as_str(), "UTF8" | "SQL_ASCII") {
        return Ok(());
    }
    Err(ContextError::Unsuitable(format!(
        "its encoding is {encoding}, which cannot hold every character a unit may carry; \
         the store needs a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')"
    )))
}

/// `($k, ..., $k+width-1)` for row `row` of a multi-row VALUES list (`k = row * width + 1`).
fn row_placeholders(row: usize, width: usize) -> String {
    let first = row * width + 1;
    let params: Vec<String> = (first..first + width).map(|n| format!("${n}")).collect();
    format!("({})", params.join(", "))
}

#[cfg(test)]
mod tests {
    use super::row_placeholders;

    #[test]
    fn placeholders_number_rows_consecutively() {
        assert_eq!(row_placeholders(0, 2), "($1, $2)");
        assert_eq!(row_placeholders(2, 3), "($7, $8, $9)");
    }
}
