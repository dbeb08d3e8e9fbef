//! Leases on PostgreSQL: single statements through the read pool (which reconnects on its
//! own after a server restart). Times come from the server's clock, so every machine of a
//! pool agrees on expiry.
//!
//! Names are ordered `COLLATE "C"`, by their bytes, as SQLite and `memory:` order them:
//! the database's own collation may be a language's, which orders them otherwise.
//!
//! A claim picks its row `FOR UPDATE SKIP LOCKED`: concurrent claimers never wait on each
//! other or take one row twice. The epoch is checked by fenced appends `FOR SHARE` (see
//! the module docs of `lease`), so a claim also skips a row whose holder is committing an
//! append at that moment; the claimer finds it at its next look.

use sqlx::{PgPool, Row as _, postgres::PgRow};

use crate::error::JournalError;

use super::{Claim, Lease, LeaseRow, LeaseStatus, fenced, parse_info};

/// Now, in Unix milliseconds, by the server's clock.
macro_rules! now_ms {
    () => {
        "(extract(epoch from clock_timestamp()) * 1000)::bigint"
    };
}

pub(super) async fn offer(pool: &PgPool, name: &str, info: &str) -> Result<bool, JournalError> {
    let done = sqlx::query(concat!(
        "INSERT INTO journal_leases (name, status, holder, epoch, expires_at, info, updated_at) \
         VALUES ($1, 'open', NULL, 0, 0, $2, ",
        now_ms!(),
        ") ON CONFLICT (name) DO NOTHING"
    ))
    .bind(name)
    .bind(info)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub(super) async fn put(
    pool: &PgPool,
    name: &str,
    status: Option<LeaseStatus>,
    info: &str,
) -> Result<(), JournalError> {
    sqlx::query(concat!(
        "INSERT INTO journal_leases (name, status, holder, epoch, expires_at, info, updated_at) \
         VALUES ($1, COALESCE($2, 'closed'), NULL, 0, 0, $3, ",
        now_ms!(),
        ") ON CONFLICT (name) DO UPDATE \
         SET status = COALESCE($2, journal_leases.status), info = excluded.info, \
         updated_at = excluded.updated_at"
    ))
    .bind(name)
    .bind(status.map(LeaseStatus::as_str))
    .bind(info)
    .execute(pool)
    .await?;
    Ok(())
}

pub(super) async fn claim(
    pool: &PgPool,
    claim: Claim<'_>,
    holder: &str,
    ttl: i64,
) -> Result<Option<Lease>, JournalError> {
    let row = match claim {
        Claim::Any { prefix, skip } => {
            sqlx::query(concat!(
                "UPDATE journal_leases SET holder = $2, epoch = epoch + 1, \
                 expires_at = ",
                now_ms!(),
                " + $3, updated_at = ",
                now_ms!(),
                " WHERE name = (SELECT name FROM journal_leases WHERE status = 'open' \
                 AND starts_with(name, $1) AND name <> ALL($4) \
                 AND (holder IS NULL OR expires_at <= ",
                now_ms!(),
                ") ORDER BY updated_at, name COLLATE \"C\" LIMIT 1 FOR UPDATE SKIP LOCKED) \
                 RETURNING name, epoch, expires_at"
            ))
            .bind(prefix)
            .bind(holder)
            .bind(ttl)
            .bind(skip)
            .fetch_optional(pool)
            .await?
        }
        Claim::Named { name } => {
            sqlx::query(concat!(
                "UPDATE journal_leases SET holder = $2, epoch = epoch + 1, \
                 expires_at = ",
                now_ms!(),
                " + $3, updated_at = ",
                now_ms!(),
                " WHERE name = $1 AND status = 'open' AND (holder IS NULL OR holder = $2 \
                 OR expires_at <= ",
                now_ms!(),
                ") RETURNING name, epoch, expires_at"
            ))
            .bind(name)
            .bind(holder)
            .bind(ttl)
            .fetch_optional(pool)
            .await?
        }
    };
    row.map(|row| {
        Ok(Lease {
            name: row.try_get(0)?,
            holder: holder.to_string(),
            epoch: row.try_get(1)?,
            expires_at: row.try_get(2)?,
        })
    })
    .transpose()
}

async fn current_epoch(pool: &PgPool, name: &str) -> Result<Option<i64>, JournalError> {
    Ok(
        sqlx::query_scalar("SELECT epoch FROM journal_leases WHERE name = $1")
            .bind(name)
            .fetch_optional(pool)
            .await?,
    )
}

pub(super) async fn renew(
    pool: &PgPool,
    lease: &Lease,
    ttl: i64,
    info: Option<String>,
) -> Result<i64, JournalError> {
    let row: Option<i64> = sqlx::query_scalar(concat!(
        "UPDATE journal_leases SET expires_at = ",
        now_ms!(),
        " + $3, updated_at = ",
        now_ms!(),
        ", info = COALESCE($4, info) WHERE name = $1 AND epoch = $2 RETURNING expires_at"
    ))
    .bind(&lease.name)
    .bind(lease.epoch)
    .bind(ttl)
    .bind(info)
    .fetch_optional(pool)
    .await?;
    match row {
        Some(expires_at) => Ok(expires_at),
        None => Err(fenced(lease, current_epoch(pool, &lease.name).await?)),
    }
}

pub(super) async fn release(
    pool: &PgPool,
    lease: &Lease,
    status: LeaseStatus,
    info: &str,
) -> Result<(), JournalError> {
    let done = sqlx::query(concat!(
        "UPDATE journal_leases SET holder = NULL, expires_at = 0, status = $3, info = $4, \
         updated_at = ",
        now_ms!(),
        " WHERE name = $1 AND epoch = $2"
    ))
    .bind(&lease.name)
    .bind(lease.epoch)
    .bind(status.as_str())
    .bind(info)
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(fenced(lease, current_epoch(pool, &lease.name).await?));
    }
    Ok(())
}

pub(super) async fn list(pool: &PgPool, prefix: &str) -> Result<Vec<LeaseRow>, JournalError> {
    let rows = sqlx::query(
        "SELECT name, status, holder, epoch, expires_at, info, updated_at \
         FROM journal_leases WHERE starts_with(name, $1) ORDER BY name COLLATE \"C\"",
    )
    .bind(prefix)
    .fetch_all(pool)
    .await?;
    rows.iter().map(decode).collect()
}

fn decode(row: &PgRow) -> Result<LeaseRow, JournalError> {
    let status: &str = row.try_get(1)?;
    let info: &str = row.try_get(5)?;
    Ok(LeaseRow {
        name: row.try_get(0)?,
        status: LeaseStatus::parse(status),
        holder: row.try_get(2)?,
        epoch: row.try_get(3)?,
        expires_at: row.try_get(4)?,
        info: parse_info(info),
        updated_at: row.try_get(6)?,
    })
}
