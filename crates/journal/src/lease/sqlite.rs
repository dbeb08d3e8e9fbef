//! Leases on SQLite: each operation that writes is one `BEGIN IMMEDIATE` transaction on the
//! journal's write connection, so it is serialised with the writer's commits (and with every
//! other process's) by SQLite's write lock. Listing is one plain read, which takes no lock.

use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::{Connection, OptionalExtension as _, Row, params};

use crate::error::JournalError;
use crate::journal::now_ms;

use super::{Claim, Lease, LeaseRow, LeaseStatus, fenced, parse_info};

type Shared = Arc<Mutex<Connection>>;

/// Runs `f` on the connection, locked, on the blocking pool.
async fn on_conn<R: Send + 'static>(
    conn: &Shared,
    f: impl FnOnce(&Connection) -> Result<R, JournalError> + Send + 'static,
) -> Result<R, JournalError> {
    let conn = Arc::clone(conn);
    tokio::task::spawn_blocking(move || f(&conn.lock().unwrap_or_else(PoisonError::into_inner)))
        .await
        .map_err(|_| JournalError::Closed)?
}

/// Runs `f` in a write transaction on the blocking pool; rolls back on error.
async fn in_tx<R: Send + 'static>(
    conn: &Shared,
    f: impl FnOnce(&Connection) -> Result<R, JournalError> + Send + 'static,
) -> Result<R, JournalError> {
    on_conn(conn, |c| tx_on(c, f)).await
}

/// Runs `f` in a write transaction on `conn`; rolls back on error.
fn tx_on<R>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<R, JournalError>,
) -> Result<R, JournalError> {
    if !conn.is_autocommit() {
        conn.execute_batch("ROLLBACK")?;
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    match f(conn) {
        Ok(value) => {
            if let Err(err) = conn.execute_batch("COMMIT") {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(err.into());
            }
            Ok(value)
        }
        Err(err) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(err)
        }
    }
}

/// Runs `f`, which only reads, on the blocking pool, outside any transaction: one
/// statement reads one snapshot of the table, and under WAL it never waits for a writer,
/// so listing leases does not need (nor wait for) another process's write lock.
async fn read<R: Send + 'static>(
    conn: &Shared,
    f: impl FnOnce(&Connection) -> Result<R, JournalError> + Send + 'static,
) -> Result<R, JournalError> {
    on_conn(conn, |c| {
        if !c.is_autocommit() {
            c.execute_batch("ROLLBACK")?;
        }
        f(c)
    })
    .await
}

pub(super) async fn offer(conn: &Shared, name: &str, info: &str) -> Result<bool, JournalError> {
    let (name, info) = (name.to_string(), info.to_string());
    in_tx(conn, move |c| {
        let n = c.execute(
            "INSERT INTO journal_leases (name, status, holder, epoch, expires_at, info, updated_at) \
             VALUES (?1, 'open', NULL, 0, 0, ?2, ?3) ON CONFLICT (name) DO NOTHING",
            params![name, info, now_ms()],
        )?;
        Ok(n == 1)
    })
    .await
}

pub(super) async fn put(
    conn: &Shared,
    name: &str,
    status: Option<LeaseStatus>,
    info: &str,
) -> Result<(), JournalError> {
    let (name, info) = (name.to_string(), info.to_string());
    in_tx(conn, move |c| put_row(c, &name, status, &info)).await
}

/// [`put`], waiting at most `wait` (not the connection's busy timeout) for another
/// connection's write lock. The connection's own timeout is set back before anyone else
/// uses it (the connection stays locked throughout).
pub(super) async fn put_waiting_at_most(
    conn: &Shared,
    name: &str,
    status: Option<LeaseStatus>,
    info: &str,
    wait: std::time::Duration,
) -> Result<(), JournalError> {
    let (name, info) = (name.to_string(), info.to_string());
    on_conn(conn, move |c| {
        let usual: i64 = c.query_row("PRAGMA busy_timeout", [], |row| row.get(0))?;
        c.busy_timeout(wait)?;
        let put = tx_on(c, |c| put_row(c, &name, status, &info));
        let usual = std::time::Duration::from_millis(u64::try_from(usual).unwrap_or(0));
        c.busy_timeout(usual)?;
        put
    })
    .await
}

fn put_row(
    c: &Connection,
    name: &str,
    status: Option<LeaseStatus>,
    info: &str,
) -> Result<(), JournalError> {
    c.execute(
        "INSERT INTO journal_leases (name, status, holder, epoch, expires_at, info, updated_at) \
         VALUES (?1, COALESCE(?2, 'closed'), NULL, 0, 0, ?3, ?4) ON CONFLICT (name) DO UPDATE \
         SET status = COALESCE(?2, status), info = excluded.info, \
         updated_at = excluded.updated_at",
        params![name, status.map(LeaseStatus::as_str), info, now_ms()],
    )?;
    Ok(())
}

pub(super) async fn claim(
    conn: &Shared,
    claim: Claim<'_>,
    holder: &str,
    ttl: i64,
) -> Result<Option<Lease>, JournalError> {
    let holder = holder.to_string();
    let (prefix, skip, named) = match claim {
        Claim::Any { prefix, skip } => (prefix.to_string(), skip_list(skip)?, None),
        Claim::Named { name } => (String::new(), String::from("[]"), Some(name.to_string())),
    };
    in_tx(conn, move |c| {
        let now = now_ms();
        let found: Option<String> = match &named {
            None => c
                .query_row(
                    "SELECT name FROM journal_leases WHERE status = 'open' \
                     AND substr(name, 1, length(?1)) = ?1 \
                     AND name NOT IN (SELECT value FROM json_each(?3)) \
                     AND (holder IS NULL OR expires_at <= ?2) \
                     ORDER BY updated_at, name LIMIT 1",
                    params![prefix, now, skip],
                    |row| row.get(0),
                )
                .optional()?,
            Some(name) => c
                .query_row(
                    "SELECT name FROM journal_leases WHERE name = ?1 AND status = 'open' \
                     AND (holder IS NULL OR expires_at <= ?2 OR holder = ?3)",
                    params![name, now, holder],
                    |row| row.get(0),
                )
                .optional()?,
        };
        let Some(name) = found else { return Ok(None) };
        let expires_at = now.saturating_add(ttl);
        let epoch: i64 = c.query_row(
            "UPDATE journal_leases SET holder = ?2, epoch = epoch + 1, expires_at = ?3, \
             updated_at = ?4 WHERE name = ?1 RETURNING epoch",
            params![name, holder, expires_at, now],
            |row| row.get(0),
        )?;
        Ok(Some(Lease {
            name,
            holder,
            epoch,
            expires_at,
        }))
    })
    .await
}

/// The names a claim passes over, as the JSON array `json_each` reads.
fn skip_list(skip: &[String]) -> Result<String, JournalError> {
    serde_json::to_string(skip)
        .map_err(|err| JournalError::invalid("lease names to skip", err.to_string()))
}

fn current_epoch(c: &Connection, name: &str) -> Result<Option<i64>, JournalError> {
    Ok(c.query_row(
        "SELECT epoch FROM journal_leases WHERE name = ?1",
        [name],
        |row| row.get(0),
    )
    .optional()?)
}

pub(super) async fn renew(
    conn: &Shared,
    lease: &Lease,
    ttl: i64,
    info: Option<String>,
) -> Result<i64, JournalError> {
    let lease = lease.clone();
    in_tx(conn, move |c| {
        let now = now_ms();
        let expires_at = now.saturating_add(ttl);
        let n = c.execute(
            "UPDATE journal_leases SET expires_at = ?3, updated_at = ?4, \
             info = COALESCE(?5, info) WHERE name = ?1 AND epoch = ?2",
            params![lease.name, lease.epoch, expires_at, now, info],
        )?;
        if n == 0 {
            return Err(fenced(&lease, current_epoch(c, &lease.name)?));
        }
        Ok(expires_at)
    })
    .await
}

pub(super) async fn release(
    conn: &Shared,
    lease: &Lease,
    status: LeaseStatus,
    info: &str,
) -> Result<(), JournalError> {
    let (lease, info) = (lease.clone(), info.to_string());
    in_tx(conn, move |c| {
        let n = c.execute(
            "UPDATE journal_leases SET holder = NULL, expires_at = 0, status = ?3, info = ?4, \
             updated_at = ?5 WHERE name = ?1 AND epoch = ?2",
            params![lease.name, lease.epoch, status.as_str(), info, now_ms()],
        )?;
        if n == 0 {
            return Err(fenced(&lease, current_epoch(c, &lease.name)?));
        }
        Ok(())
    })
    .await
}

pub(super) async fn list(conn: &Shared, prefix: &str) -> Result<Vec<LeaseRow>, JournalError> {
    let prefix = prefix.to_string();
    read(conn, move |c| {
        let mut stmt = c.prepare_cached(
            "SELECT name, status, holder, epoch, expires_at, info, updated_at \
             FROM journal_leases WHERE substr(name, 1, length(?1)) = ?1 ORDER BY name",
        )?;
        let rows = stmt.query_map([prefix], decode)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    })
    .await
}

fn decode(row: &Row<'_>) -> rusqlite::Result<LeaseRow> {
    let status: String = row.get(1)?;
    let info: String = row.get(5)?;
    Ok(LeaseRow {
        name: row.get(0)?,
        status: LeaseStatus::parse(&status),
        holder: row.get(2)?,
        epoch: row.get(3)?,
        expires_at: row.get(4)?,
        info: parse_info(&info),
        updated_at: row.get(6)?,
    })
}
