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

/// Applies the steps not yet recorded, in one transaction.
pub(super) async fn migrate(pool: &PgPool) -> Result<()> {
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
