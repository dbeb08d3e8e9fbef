//! Leases: named claims with a holder, an expiry and a fencing epoch, kept in the
//! journal's database beside the events (the table `journal_leases`).
//!
//! A pool of processes uses them to share work: each unit of work is a lease row, a
//! process claims one, renews it while it works, and releases it when done; a row whose
//! holder stopped renewing is claimed by another process once it expires.
//!
//! Invariants (tests in `tests/leases.rs`):
//! - A claim is atomic and increments the lease's epoch: one epoch has at most one holder,
//!   and a later holder always has a higher epoch.
//! - An append through [`Journal::fenced`] is written only if its lease is still at the
//!   handle's epoch, checked inside the write transaction; a claim is never interleaved
//!   with that check (SQLite: both take the database's write lock; PostgreSQL:
//!   the append reads the lease row `FOR SHARE`, the claim updates it). So once a claim has
//!   committed, no append of an earlier holder can commit, and every append an earlier
//!   holder committed before it is visible to the new holder's first read.
//! - Renewing or releasing with an epoch that is no longer the lease's fails with
//!   [`JournalError::Fenced`] and changes nothing.
//! - Expiry only makes a lease claimable: an expired lease nobody claimed is still its
//!   holder's (a renewal succeeds). Times are Unix milliseconds from PostgreSQL's clock on
//!   PostgreSQL (one clock for every machine), from this machine's clock otherwise.

mod in_memory;
mod postgres;
mod sqlite;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgPool;

use crate::backend::in_memory::InMemoryJournal;
use crate::error::JournalError;
use crate::journal::Journal;
use crate::limits::{MAX_THREAD_BYTES, check_nul, check_thread};

/// A claim held on a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The lease's name.
    pub name: String,
    /// Who holds it (the name the claimer gave).
    pub holder: String,
    /// The fencing epoch of this claim.
    pub epoch: i64,
    /// When it expires unless renewed (Unix ms).
    pub expires_at: i64,
}

/// Whether a free or expired lease may be claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseStatus {
    /// Claimable when free or expired.
    Open,
    /// Not claimable (the work is done or waits for a person).
    Closed,
}

impl LeaseStatus {
    fn as_str(self) -> &'static str {
        match self {
            LeaseStatus::Open => "open",
            LeaseStatus::Closed => "closed",
        }
    }

    fn parse(text: &str) -> LeaseStatus {
        if text == "open" {
            LeaseStatus::Open
        } else {
            LeaseStatus::Closed
        }
    }
}

/// One row of the lease table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRow {
    /// The lease's name.
    pub name: String,
    /// Whether it may be claimed.
    pub status: LeaseStatus,
    /// Who holds it, if anyone (possibly expired).
    pub holder: Option<String>,
    /// The epoch of the latest claim (0: never claimed).
    pub epoch: i64,
    /// When the holder's claim expires (Unix ms; 0 without a holder).
    pub expires_at: i64,
    /// The summary its holder or creator keeps there.
    pub info: Value,
    /// When the row last changed (Unix ms).
    pub updated_at: i64,
}

/// The lease table's side of a backend.
pub(crate) enum Backend {
    Sqlite(Arc<Mutex<rusqlite::Connection>>),
    Postgres(PgPool),
    Memory(Arc<InMemoryJournal>),
}

/// What a claim may take.
#[derive(Debug, Clone)]
pub(crate) enum Claim<'a> {
    /// The oldest open lease whose name starts with the prefix, is free or expired, and is
    /// not one of `skip`.
    Any { prefix: &'a str, skip: &'a [String] },
    /// This open lease, if free, expired, or already held by the claimer.
    Named { name: &'a str },
}

/// The longest ttl a lease is given, in ms (some 73 million years): now plus it fits in an
/// `i64` on any clock. PostgreSQL adds the ttl to the server's time in SQL, where a sum
/// past `i64::MAX` is an error, not a saturation: a ttl of `i64::MAX` ms failed there.
const MAX_TTL_MS: i64 = i64::MAX / 4;

/// `ttl` in ms, at most [`MAX_TTL_MS`].
fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).map_or(MAX_TTL_MS, |ms| ms.min(MAX_TTL_MS))
}

fn check_name(name: &str) -> Result<(), JournalError> {
    check_thread(name).map_err(|_| {
        JournalError::invalid(
            "lease name",
            format!(
                "must be 1 to {MAX_THREAD_BYTES} bytes without NUL (the limits of a thread name)"
            ),
        )
    })
}

impl Journal {
    /// The lease table, or [`JournalError::Closed`] once the journal is closed.
    fn lease_table(&self) -> Result<&Backend, JournalError> {
        if self.inner.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(JournalError::Closed);
        }
        Ok(&self.inner.leases)
    }

    /// The lease table to write, or [`JournalError::ReadOnly`] when the journal was opened
    /// read-only (as for appends; each database refused the write with an error of its own).
    fn writable_lease_table(&self) -> Result<&Backend, JournalError> {
        let table = self.lease_table()?;
        if self.is_read_only() {
            return Err(JournalError::ReadOnly {
                url: self.url().to_string(),
            });
        }
        Ok(table)
    }

    /// Creates the open, unclaimed lease `name` with `info` unless it exists; returns
    /// whether it was created.
    ///
    /// # Cancel safety
    ///
    /// A dropped offer creates the lease or not, and the caller does not learn which
    /// ([`leases`](Self::leases) tells; offering again is harmless). On SQLite the
    /// transaction starts on the blocking pool at the first poll and runs to its end there
    /// whether or not the future is still there; on PostgreSQL the statement, once sent,
    /// runs and commits on the server. On `memory:` it completes within the first poll.
    pub async fn offer_lease(&self, name: &str, info: &Value) -> Result<bool, JournalError> {
        check_name(name)?;
        let info = encode_info(info)?;
        match self.writable_lease_table()? {
            Backend::Sqlite(conn) => sqlite::offer(conn, name, &info).await,
            Backend::Postgres(pool) => postgres::offer(pool, name, &info).await,
            Backend::Memory(memory) => in_memory::offer(memory, name, &info),
        }
    }

    /// Sets the info of lease `name`, and its status when given, creating it unclaimed if
    /// missing (closed when no status is given); its holder and epoch are kept (an index
    /// rebuilt from elsewhere uses this).
    ///
    /// # Cancel safety
    ///
    /// As for [`offer_lease`](Self::offer_lease): a dropped put is applied whole or not at
    /// all, and the caller does not learn which; putting again is harmless.
    pub async fn put_lease(
        &self,
        name: &str,
        status: Option<LeaseStatus>,
        info: &Value,
    ) -> Result<(), JournalError> {
        check_name(name)?;
        let info = encode_info(info)?;
        match self.writable_lease_table()? {
            Backend::Sqlite(conn) => sqlite::put(conn, name, status, &info).await,
            Backend::Postgres(pool) => postgres::put(pool, name, status, &info).await,
            Backend::Memory(memory) => in_memory::put(memory, name, status, &info),
        }
    }

    /// [`put_lease`](Self::put_lease) for a cache that may be refreshed later (the runs
    /// table's rows, derived from the journal): on SQLite it waits at most `wait` for
    /// another connection's write lock, not the busy timeout, and then fails as a lock
    /// held too long does. Elsewhere it is `put_lease`.
    ///
    /// # Cancel safety
    ///
    /// As for [`put_lease`](Self::put_lease).
    pub async fn put_lease_waiting_at_most(
        &self,
        name: &str,
        status: Option<LeaseStatus>,
        info: &Value,
        wait: Duration,
    ) -> Result<(), JournalError> {
        check_name(name)?;
        let info = encode_info(info)?;
        match self.writable_lease_table()? {
            Backend::Sqlite(conn) => {
                sqlite::put_waiting_at_most(conn, name, status, &info, wait).await
            }
            Backend::Postgres(pool) => postgres::put(pool, name, status, &info).await,
            Backend::Memory(memory) => in_memory::put(memory, name, status, &info),
        }
    }

    /// Claims the oldest open lease whose name starts with `prefix` and that is free or
    /// expired, for `holder`, until `ttl` from now (a `ttl` beyond some 73 million years
    /// is taken as that). `None`: nothing to claim.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: as for [`offer_lease`](Self::offer_lease), a claim under way goes on
    /// without the caller, so a dropped future can leave a lease claimed for `holder` at an
    /// epoch nobody was told. It stays taken until `ttl` runs out; [`leases`](Self::leases)
    /// shows it under `holder`, and [`reclaim_lease`](Self::reclaim_lease) by the same
    /// holder takes it back at once, with a new epoch.
    pub async fn claim_lease(
        &self,
        prefix: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, JournalError> {
        self.claim_lease_skipping(prefix, holder, ttl, &[]).await
    }

    /// [`claim_lease`](Self::claim_lease), passing over the leases named in `skip`: a
    /// process claiming work leaves alone the leases it is working under, so that a
    /// lease of its own that expired while the process stalled (or its database was
    /// away) stays with the work it drives, to be renewed, instead of being claimed again
    /// with a new epoch that fences that work. A lease held under the same holder name by
    /// an earlier process (one that died) is not in `skip`, and is claimed as any other.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe, as for [`claim_lease`](Self::claim_lease).
    pub async fn claim_lease_skipping(
        &self,
        prefix: &str,
        holder: &str,
        ttl: Duration,
        skip: &[String],
    ) -> Result<Option<Lease>, JournalError> {
        check_nul("lease prefix", prefix)?;
        self.claim(Claim::Any { prefix, skip }, holder, ttl).await
    }

    /// Claims the open lease `name` if it is free, expired, or held by `holder` already
    /// (a holder taking its own leases back after reopening the journal); the epoch moves
    /// on either way, which fences the holder's older handles too.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe, as for [`claim_lease`](Self::claim_lease): a dropped reclaim may
    /// have taken the lease and moved its epoch on (fencing `holder`'s older handles)
    /// without the caller learning the new epoch; reclaiming again takes it back.
    pub async fn reclaim_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, JournalError> {
        check_name(name)?;
        self.claim(Claim::Named { name }, holder, ttl).await
    }

    async fn claim(
        &self,
        claim: Claim<'_>,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, JournalError> {
        check_name(holder)?;
        let ttl = ttl_ms(ttl);
        match self.writable_lease_table()? {
            Backend::Sqlite(conn) => sqlite::claim(conn, claim, holder, ttl).await,
            Backend::Postgres(pool) => postgres::claim(pool, claim, holder, ttl).await,
            Backend::Memory(memory) => in_memory::claim(memory, claim, holder, ttl),
        }
    }

    /// Extends `lease` to `ttl` from now (at most some 73 million years), and replaces its
    /// info when given. Fails with [`JournalError::Fenced`] if someone claimed it since.
    ///
    /// # Cancel safety
    ///
    /// As for [`offer_lease`](Self::offer_lease): a dropped renewal is applied or not, and
    /// the caller does not learn which. A renewal never moves the epoch, so `lease` stays
    /// valid either way (only its `expires_at` may be stale): renewing again settles it.
    pub async fn renew_lease(
        &self,
        lease: &Lease,
        ttl: Duration,
        info: Option<&Value>,
    ) -> Result<Lease, JournalError> {
        check_name(&lease.name)?;
        let info = info.map(encode_info).transpose()?;
        let ttl = ttl_ms(ttl);
        let expires_at = match self.writable_lease_table()? {
            Backend::Sqlite(conn) => sqlite::renew(conn, lease, ttl, info).await?,
            Backend::Postgres(pool) => postgres::renew(pool, lease, ttl, info).await?,
            Backend::Memory(memory) => in_memory::renew(memory, lease, ttl, info)?,
        };
        Ok(Lease {
            expires_at,
            ..lease.clone()
        })
    }

    /// Gives `lease` up: no holder, the given status and info. Fails with
    /// [`JournalError::Fenced`] (changing nothing) if someone claimed it since.
    ///
    /// # Cancel safety
    ///
    /// As for [`offer_lease`](Self::offer_lease): a dropped release is applied or not, and
    /// the caller does not learn which. A release keeps the epoch, so releasing again with
    /// the same `lease` settles it (it fails with [`JournalError::Fenced`] only if someone
    /// claimed the lease in between).
    pub async fn release_lease(
        &self,
        lease: &Lease,
        status: LeaseStatus,
        info: &Value,
    ) -> Result<(), JournalError> {
        check_name(&lease.name)?;
        let info = encode_info(info)?;
        match self.writable_lease_table()? {
            Backend::Sqlite(conn) => sqlite::release(conn, lease, status, &info).await,
            Backend::Postgres(pool) => postgres::release(pool, lease, status, &info).await,
            Backend::Memory(memory) => in_memory::release(memory, lease, status, &info),
        }
    }

    /// The leases whose name starts with `prefix`, by name. A `prefix` holding NUL (no
    /// name can) is [`JournalError::InvalidInput`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads. Dropping the future discards the answer; a read already
    /// running (on the blocking pool or the database server) finishes there, unseen.
    pub async fn leases(&self, prefix: &str) -> Result<Vec<LeaseRow>, JournalError> {
        check_nul("lease prefix", prefix)?;
        match self.lease_table()? {
            Backend::Sqlite(conn) => sqlite::list(conn, prefix).await,
            Backend::Postgres(pool) => postgres::list(pool, prefix).await,
            Backend::Memory(memory) => in_memory::list(memory, prefix),
        }
    }
}

/// The error of a renew or release that matched no row: the lease's epoch moved on (or
/// the row is gone).
fn fenced(lease: &Lease, current: Option<i64>) -> JournalError {
    JournalError::Fenced {
        lease: lease.name.clone(),
        epoch: lease.epoch,
        current,
    }
}

/// `info` as stored, or [`JournalError::InvalidInput`] when no read could take it back
/// (nested deeper than [`agent_schema::json::MAX_NESTING`]: it would read back as null).
fn encode_info(info: &Value) -> Result<String, JournalError> {
    let text = info.to_string();
    crate::limits::check_nesting("lease info", &text)?;
    Ok(text)
}

/// A lease's `info` as the holder wrote it (read like payloads: `agent_schema::json`).
fn parse_info(text: &str) -> Value {
    agent_schema::json::from_str(text).unwrap_or(Value::Null)
}
