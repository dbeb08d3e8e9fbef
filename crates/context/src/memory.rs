//! Evidence and the memory materialised from it.

use serde::Serialize;

use crate::error::{ContextError, MAX_FUTURE_SKEW_SECS, Result};
use crate::limits;

/// One observation that may become memory once consolidated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewEvidence {
    /// Unique id of the observation (e.g. the rollout that produced it); provenance.
    pub source: String,
    /// The project the fact belongs to (memory is scoped per project).
    pub project: String,
    /// The fact's name within the project.
    pub key: String,
    /// The fact.
    pub value: String,
    /// When it was observed, in Unix seconds (the unit of `recall`'s `now`): from 0 (1970)
    /// to a day past this machine's clock ([`MAX_FUTURE_SKEW_SECS`]); other times are
    /// refused with [`ContextError::ObservedOutOfRange`].
    ///
    /// [`MAX_FUTURE_SKEW_SECS`]: crate::MAX_FUTURE_SKEW_SECS
    pub observed: i64,
    /// Only confirmed evidence can become memory.
    pub confirmed: bool,
}

/// A stored evidence row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// Unique id of the observation; provenance.
    pub source: String,
    /// The project the fact belongs to (memory is scoped per project).
    pub project: String,
    /// The fact's name within the project.
    pub key: String,
    /// The fact.
    pub value: String,
    /// When it was observed, in Unix seconds.
    pub observed: i64,
    /// Whether it was confirmed (only confirmed evidence becomes memory).
    pub confirmed: bool,
    /// Whether it was revoked (revoked evidence never becomes memory).
    pub revoked: bool,
}

/// One remembered fact with its provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryEntry {
    /// The project the fact belongs to (memory is scoped per project).
    pub project: String,
    /// The fact's name within the project.
    pub key: String,
    /// The fact.
    pub value: String,
    /// The evidence source this value comes from.
    pub source: String,
    /// When that evidence was observed, in Unix seconds.
    pub observed: i64,
    /// `now - observed > max_age`.
    pub needs_refresh: bool,
}

/// Result of [`revoke`](crate::ContextStore::revoke).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Revocation {
    /// The revoked source.
    pub source: String,
    /// Its project.
    pub project: String,
    /// Its key (the pair recomputed at the next consolidation).
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

/// Checks one piece of evidence against the limits and against `now` (Unix seconds).
pub(crate) fn check(evidence: &NewEvidence, now: i64) -> Result<()> {
    limits::name("evidence source", &evidence.source)?;
    limits::name("project", &evidence.project)?;
    limits::name("key", &evidence.key)?;
    limits::text("value", &evidence.value, limits::MAX_VALUE_BYTES)?;
    check_observed(evidence.observed, now)
}

/// The newest observation wins for good, so a time in the far future (a typo, a clock in
/// milliseconds) would pin its value forever; a day of clock skew is allowed. Times before
/// 1970 are no Unix time a machine produces.
pub(crate) fn check_observed(observed: i64, now: i64) -> Result<()> {
    if observed < 0 || observed > now.saturating_add(MAX_FUTURE_SKEW_SECS) {
        return Err(ContextError::ObservedOutOfRange { observed, now });
    }
    Ok(())
}

/// This machine's clock in Unix seconds (0 if it is set before 1970).
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observed_times_from_1970_to_a_day_ahead_are_accepted() {
        let now = 1_700_000_000;
        for observed in [0, 1, now - 1, now, now + MAX_FUTURE_SKEW_SECS] {
            assert!(check_observed(observed, now).is_ok(), "{observed}");
        }
        for observed in [-1, i64::MIN, now + MAX_FUTURE_SKEW_SECS + 1, i64::MAX] {
            assert!(
                matches!(
                    check_observed(observed, now),
                    Err(ContextError::ObservedOutOfRange { observed: o, now: n }) if o == observed && n == now
                ),
                "{observed}"
            );
        }
        // A clock at the end of time does not overflow.
        assert!(check_observed(i64::MAX, i64::MAX).is_ok());
    }
}
