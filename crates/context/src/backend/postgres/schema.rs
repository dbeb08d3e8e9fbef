//! The PostgreSQL schema: the steps in `migrations/postgres/`, versions recorded in
//! `context_schema`, applied under an advisory lock so concurrent first opens apply each
//! step once.

use sqlx::PgPool;

use crate::error::Result;

const SCHEMA: &agent_schema::Steps = &[
    (
        1,
        include_str!("../../../migrations/postgres/0001_context.sql"),
    ),
    (
        2,
        include_str!("../../../migrations/postgres/0002_deferred_index.sql"),
    ),
    (
        3,
        include_str!("../../../migrations/postgres/0003_derived_through.sql"),
    ),
];
/// Advisory lock key serialising schema migrations of this crate.
const MIGRATION_LOCK: i64 = 0x0c0e_7e47;

/// Applies the steps not yet recorded, in one transaction. A schema already current is
/// found by a plain read and nothing is written: a reader on a hot standby or with
/// SELECT-only grants opens the store.
pub(super) async fn migrate(pool: &PgPool) -> Result<()> {
    let recorded: Option<i64> = sqlx::query_scalar("SELECT max(version) FROM context_schema")
        .fetch_one(pool)
        .await
        .ok()
        .flatten();
    let latest = SCHEMA.last().map_or(0, |(version, _)| *version);
    if let Some(recorded) = recorded
        && recorded >= latest
    {
        // Refuses a newer schema; there is nothing to apply otherwise.
        let _none = agent_schema::pending_steps(SCHEMA, recorded)?;
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS context_schema (version BIGINT NOT NULL)")
        .execute(&mut *tx)
        .await?;
    let current: i64 =
        sqlx::query_scalar("SELECT COALESCE(max(version), 0)::BIGINT FROM context_schema")
            .fetch_one(&mut *tx)
            .await?;
    for (version, sql) in agent_schema::pending_steps(SCHEMA, current)? {
        sqlx::raw_sql(*sql).execute(&mut *tx).await?;
        sqlx::query("INSERT INTO context_schema (version) VALUES ($1)")
            .bind(version)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}
