//! The SQLite schema: the steps in `migrations/sqlite/`, versions recorded in
//! `context_schema`. Files written by the earlier sqlx-based backend have the same schema
//! and open unchanged.

use rusqlite::{Connection, TransactionBehavior, params};

use crate::error::{ContextError, Result};

const SCHEMA: &agent_schema::Steps = &[
    (
        1,
        include_str!("../../../migrations/sqlite/0001_context.sql"),
    ),
    (
        2,
        include_str!("../../../migrations/sqlite/0002_deferred_index.sql"),
    ),
    (
        3,
        include_str!("../../../migrations/sqlite/0003_index_without_positions.sql"),
    ),
    (
        4,
        include_str!("../../../migrations/sqlite/0004_index_automerge.sql"),
    ),
    (
        5,
        include_str!("../../../migrations/sqlite/0005_derived_through.sql"),
    ),
];

/// Applies the steps not yet recorded, in one immediate transaction (several processes may
/// open the same file at once): a step that fails leaves the database as it was.
///
/// The write lock is taken only when [`steps_pending`] finds a step to apply, and the
/// version is read again under it: opening a current store never waits for another
/// connection's write (a command that only reads works while a host holds the lock).
pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
    if !steps_pending(conn)? {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS context_schema (version INTEGER NOT NULL)")?;
    let current: i64 = tx.query_row(
        "SELECT COALESCE(max(version), 0) FROM context_schema",
        [],
        |r| r.get(0),
    )?;
    for (version, sql) in agent_schema::pending_steps(SCHEMA, current)? {
        tx.execute_batch(sql).map_err(|err| {
            // SQLite's message without the statement it quotes (the whole step).
            ContextError::Migration(match err {
                rusqlite::Error::SqlInputError { msg, .. } => msg,
                other => other.to_string(),
            })
        })?;
        tx.execute(
            "INSERT INTO context_schema (version) VALUES (?1)",
            params![version],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// Whether a schema step is not recorded yet (or the version table is missing), read
/// without a lock. Under WAL a plain read never waits for a writer. A stale answer is
/// harmless: `context_schema` only ever gains rows, so a store seen current stays current,
/// and one seen behind is read again under the write lock.
fn steps_pending(conn: &Connection) -> Result<bool> {
    let Some(current) = agent_schema::sqlite_file::recorded_version(conn, "context_schema")? else {
        return Ok(true);
    };
    Ok(agent_schema::pending_steps(SCHEMA, current)?
        .next()
        .is_some())
}

/// For a store opened read-only: `Ok` when the file holds this build's schema exactly, as
/// nothing can be applied to it.
pub(super) fn check_readable(conn: &Connection) -> Result<()> {
    let supported = SCHEMA.last().map_or(0, |(version, _)| *version);
    let recorded: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'context_schema')",
        [],
        |r| r.get(0),
    )?;
    let found: Option<i64> = if recorded {
        conn.query_row("SELECT max(version) FROM context_schema", [], |r| r.get(0))?
    } else {
        None
    };
    match found {
        Some(found) if found == supported => Ok(()),
        Some(found) if found > supported => Err(ContextError::SchemaTooNew { found, supported }),
        Some(found) => Err(ContextError::SchemaNotReadable {
            found: format!("version {found}"),
            supported,
        }),
        None => Err(ContextError::SchemaNotReadable {
            found: "missing".into(),
            supported,
        }),
    }
}
