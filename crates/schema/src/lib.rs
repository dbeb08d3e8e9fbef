//! `agent-schema`: the pure part of a small versioned migration. A crate that owns tables
//! numbers its schema steps (SQL text, applied in order inside one transaction) and records
//! the versions it applied in a table of its own; this crate says which steps a database at
//! a given version still needs, and refuses a database that a newer build wrote.
//!
//! Invariant: steps are applied in ascending version order, each at most once; a database
//! whose recorded version is past the last step known to this build is never touched.
//!
//! ```
//! use agent_schema::{Steps, pending_steps};
//!
//! const STEPS: &Steps = &[(1, "CREATE TABLE a (x INTEGER)"), (2, "CREATE TABLE b (y INTEGER)")];
//! let todo: Vec<i64> = pending_steps(STEPS, 1).unwrap().map(|(v, _)| *v).collect();
//! assert_eq!(todo, vec![2]);
//! assert_eq!(pending_steps(STEPS, 2).unwrap().count(), 0);
//! let too_new = pending_steps(STEPS, 3).err().unwrap();
//! assert_eq!((too_new.found, too_new.supported), (3, 2));
//! ```
//!
//! Also shared: [`DatabaseError`], the opaque form in which both crates report a database
//! driver's failure, so the drivers' types stay out of their APIs; and [`json`], how both
//! read the JSON text they store back into values; and [`sqlite_file`], how both open a
//! SQLite file they cannot write.
//!
//! No sibling crates: the journal and the context store both use it without knowing each
//! other. The drivers are dependencies only to classify their errors.

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod database_error;
pub mod json;
pub mod sqlite_file;

pub use database_error::{DatabaseError, DatabaseErrorKind, one_line, sqlite_disk_failure};

/// A schema: numbered steps of SQL, in ascending version order.
pub type Steps = [(i64, &'static str)];

/// The database was written by a newer build: its recorded version is past the last step
/// this build knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaTooNew {
    /// The version recorded in the database.
    pub found: i64,
    /// The last version this build knows.
    pub supported: i64,
}

impl std::fmt::Display for SchemaTooNew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "schema version {} is newer than this build supports ({})",
            self.found, self.supported
        )
    }
}

impl std::error::Error for SchemaTooNew {}

/// The steps of `steps` a database at version `current` still needs (0: a new database),
/// in order; a database past the last step is refused.
pub fn pending_steps(
    steps: &'static Steps,
    current: i64,
) -> Result<impl Iterator<Item = &'static (i64, &'static str)>, SchemaTooNew> {
    let supported = steps.last().map_or(0, |(v, _)| *v);
    if current > supported {
        return Err(SchemaTooNew {
            found: current,
            supported,
        });
    }
    Ok(steps.iter().filter(move |(v, _)| *v > current))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEPS: &Steps = &[(1, "a"), (2, "b"), (3, "c")];

    #[test]
    fn a_new_database_needs_every_step_in_order() {
        let versions: Vec<i64> = pending_steps(STEPS, 0).unwrap().map(|(v, _)| *v).collect();
        assert_eq!(versions, vec![1, 2, 3]);
    }

    #[test]
    fn a_current_database_needs_nothing_and_a_newer_one_is_refused() {
        assert_eq!(pending_steps(STEPS, 3).unwrap().count(), 0);
        assert_eq!(
            pending_steps(STEPS, 4).err(),
            Some(SchemaTooNew {
                found: 4,
                supported: 3
            })
        );
    }
}
