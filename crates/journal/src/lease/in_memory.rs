//! Leases of the `memory:` journal: rows in its state, under the same lock as its appends.

use crate::backend::in_memory::InMemoryJournal;
use crate::error::JournalError;
use crate::journal::now_ms;

use super::{Claim, Lease, LeaseRow, LeaseStatus, fenced, parse_info};

pub(super) fn offer(
    memory: &InMemoryJournal,
    name: &str,
    info: &str,
) -> Result<bool, JournalError> {
    memory.with_state(|state| {
        if state.leases.contains_key(name) {
            return false;
        }
        state
            .leases
            .insert(name.to_string(), fresh(name, LeaseStatus::Open, info));
        true
    })
}

pub(super) fn put(
    memory: &InMemoryJournal,
    name: &str,
    status: Option<LeaseStatus>,
    info: &str,
) -> Result<(), JournalError> {
    memory.with_state(|state| {
        let row = state
            .leases
            .entry(name.to_string())
            .or_insert_with(|| fresh(name, LeaseStatus::Closed, info));
        if let Some(status) = status {
            row.status = status;
        }
        row.info = parse_info(info);
        row.updated_at = now_ms();
    })
}

fn fresh(name: &str, status: LeaseStatus, info: &str) -> LeaseRow {
    LeaseRow {
        name: name.to_string(),
        status,
        holder: None,
        epoch: 0,
        expires_at: 0,
        info: parse_info(info),
        updated_at: now_ms(),
    }
}

pub(super) fn claim(
    memory: &InMemoryJournal,
    claim: Claim<'_>,
    holder: &str,
    ttl: i64,
) -> Result<Option<Lease>, JournalError> {
    let now = now_ms();
    memory.with_state(|state| {
        let free = |row: &LeaseRow| row.holder.is_none() || row.expires_at <= now;
        let row = match claim {
            Claim::Any { prefix, skip } => state
                .leases
                .values_mut()
                .filter(|row| {
                    row.name.starts_with(prefix)
                        && row.status == LeaseStatus::Open
                        && free(row)
                        && !skip.contains(&row.name)
                })
                .min_by_key(|row| row.updated_at),
            Claim::Named { name } => state.leases.get_mut(name).filter(|row| {
                row.status == LeaseStatus::Open
                    && (free(row) || row.holder.as_deref() == Some(holder))
            }),
        }?;
        row.holder = Some(holder.to_string());
        row.epoch += 1;
        row.expires_at = now.saturating_add(ttl);
        row.updated_at = now;
        Some(Lease {
            name: row.name.clone(),
            holder: holder.to_string(),
            epoch: row.epoch,
            expires_at: row.expires_at,
        })
    })
}

pub(super) fn renew(
    memory: &InMemoryJournal,
    lease: &Lease,
    ttl: i64,
    info: Option<String>,
) -> Result<i64, JournalError> {
    let now = now_ms();
    memory.with_state(|state| match state.leases.get_mut(&lease.name) {
        Some(row) if row.epoch == lease.epoch => {
            row.expires_at = now.saturating_add(ttl);
            row.updated_at = now;
            if let Some(info) = info {
                row.info = parse_info(&info);
            }
            Ok(row.expires_at)
        }
        row => Err(fenced(lease, row.map(|r| r.epoch))),
    })?
}

pub(super) fn release(
    memory: &InMemoryJournal,
    lease: &Lease,
    status: LeaseStatus,
    info: &str,
) -> Result<(), JournalError> {
    memory.with_state(|state| match state.leases.get_mut(&lease.name) {
        Some(row) if row.epoch == lease.epoch => {
            row.holder = None;
            row.expires_at = 0;
            row.status = status;
            row.info = parse_info(info);
            row.updated_at = now_ms();
            Ok(())
        }
        row => Err(fenced(lease, row.map(|r| r.epoch))),
    })?
}

pub(super) fn list(memory: &InMemoryJournal, prefix: &str) -> Result<Vec<LeaseRow>, JournalError> {
    memory.with_state(|state| {
        state
            .leases
            .values()
            .filter(|row| row.name.starts_with(prefix))
            .cloned()
            .collect()
    })
}
