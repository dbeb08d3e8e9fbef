//! Evidence and the memory materialised from it.

use serde::Serialize;

use crate::error::{ContextError, Result};
use crate::limits;

/// One observation that may become memory once consolidated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewEvidence {
    /// Unique id of the observation (e.g. the rollout that produced it); provenance.
    pub source: String,
    pub project: String,
    pub key: String,
    pub value: String,
    /// When it was observed, in the caller's time unit (the same unit as `recall`'s `now`).
    pub observed: i64,
    /// Only confirmed evidence can become memory.
    pub confirmed: bool,
}

/// A stored evidence row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evidence {
    pub source: String,
    pub project: String,
    pub key: String,
    pub value: String,
    pub observed: i64,
    pub confirmed: bool,
    pub revoked: bool,
}

/// One remembered fact with its provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryEntry {
    pub project: String,
    pub key: String,
    pub value: String,
    /// The evidence source this value comes from.
    pub source: String,
    pub observed: i64,
    /// `now - observed > max_age`.
    pub needs_refresh: bool,
}

/// Result of [`revoke`](crate::ContextStore::revoke).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Revocation {
    pub source: String,
    pub project: String,
    pub key: String,
    /// False when the source was already revoked (revoking is idempotent).
    pub newly_revoked: bool,
}

/// Result of [`consolidate`](crate::ContextStore::consolidate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Consolidation {
    /// (project, key) pairs whose evidence changed since the last consolidation and were
    /// recomputed; nothing else was touched.
    pub recomputed: u64,
    /// Memory entries written (a pair with no usable evidence left gets none).
    pub written: u64,
}

pub(crate) fn check(evidence: &NewEvidence) -> Result<()> {
    limits::name("evidence source", &evidence.source)?;
    limits::name("project", &evidence.project)?;
    limits::name("key", &evidence.key)?;
    limits::text("value", &evidence.value, limits::MAX_VALUE_BYTES)
}

pub(crate) fn needs_refresh(now: i64, observed: i64, max_age: i64) -> bool {
    now.saturating_sub(observed) > max_age
}

pub(crate) fn check_max_age(max_age: i64) -> Result<()> {
    if max_age < 0 {
        return Err(ContextError::NegativeMaxAge(max_age));
    }
    Ok(())
}
