//! Commits that do not wait for the disk, for derived data (memory, the trigram index).

use rusqlite::Connection;

use crate::error::Result;

/// `PRAGMA synchronous` value of NORMAL.
const SYNCHRONOUS_NORMAL: i64 = 1;

/// Runs `work` (which commits its own transaction) with `synchronous=NORMAL`, whatever the
/// store's durability, then restores the setting.
///
/// Only for data that can be derived again: such a commit lost to a power cut must leave
/// the database as it was before it (the work comes back as pending). The WAL is
/// sequential, so the next durable commit makes this one durable too. On this machine a
/// full fsync measured 0.25 to 4 ms; this turns it into CPU time.
pub(super) fn with_relaxed_sync<T>(
    conn: &mut Connection,
    work: impl FnOnce(&mut Connection) -> Result<T>,
) -> Result<T> {
    let synchronous: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    let relax = synchronous > SYNCHRONOUS_NORMAL;
    if relax {
        conn.pragma_update(None, "synchronous", SYNCHRONOUS_NORMAL)?;
    }
    let result = work(conn);
    if relax {
        conn.pragma_update(None, "synchronous", synchronous)?;
    }
    result
}
