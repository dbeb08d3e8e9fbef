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
pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
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
