//! What a SQLite failure of the disk says to the person who reads it: the latched writer's
//! error, or a refused read-write open.
//!
//! SQLite reports most failures of the file system as `disk I/O error`, also when the
//! cause is a full disk (it could not grow the `-shm` index, say, after the commit was
//! already in the WAL). The extended result code says which operation failed; the message
//! names it and, where a full disk or a file size limit is the usual cause, says so, so
//! that nobody has to rerun with `RUST_LOG=debug` to learn that the disk is full.

use agent_schema::{DatabaseError, sqlite_disk_failure};

use crate::error::JournalError;

/// `err`'s own message, followed by what failed where SQLite's extended code tells more
/// (the explanation [`DatabaseError::from_rusqlite`] gives every SQLite error).
pub(super) fn describe(err: &rusqlite::Error) -> String {
    DatabaseError::from_rusqlite(err).to_string()
}

/// `err` with the cause spelled out, when it is [`JournalError::Open`] with a SQLite
/// failure whose extended code tells more (a full disk leaves no room for the `-shm` file
/// a read-write open makes): `cannot open journal at URL: disk I/O error (SQLite could not
/// grow the database's -shm file: is the disk full?)`. Applied once opening has given up,
/// after every decision that looks at SQLite's code.
pub(crate) fn explain_open(err: JournalError) -> JournalError {
    let JournalError::Open { url, source } = err else {
        return err;
    };
    let source: Box<dyn std::error::Error + Send + Sync> =
        match source.downcast::<rusqlite::Error>() {
            Ok(sqlite)
                if sqlite
                    .sqlite_error()
                    .is_some_and(|e| sqlite_disk_failure(e.extended_code).is_some()) =>
            {
                Box::new(DatabaseError::from_rusqlite(&sqlite))
            }
            Ok(sqlite) => sqlite,
            Err(other) => other,
        };
    JournalError::Open { url, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::ffi;

    fn failure(extended_code: i32, message: &str) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(extended_code), Some(message.into()))
    }

    #[test]
    fn an_io_error_names_what_failed() {
        let said = describe(&failure(ffi::SQLITE_IOERR_SHMSIZE, "disk I/O error"));
        assert_eq!(
            said,
            "disk I/O error (SQLite could not grow the database's -shm file: is the disk full?)"
        );
        let said = describe(&failure(ffi::SQLITE_IOERR_WRITE, "disk I/O error"));
        assert!(said.contains("is the disk full"), "{said}");
        let said = describe(&failure(ffi::SQLITE_IOERR_FSYNC, "disk I/O error"));
        assert!(said.contains("fsync failed"), "{said}");
    }

    #[test]
    fn an_open_that_found_no_room_says_so() {
        let open = |source: rusqlite::Error| JournalError::Open {
            url: "sqlite://j.db".into(),
            source: Box::new(source),
        };
        let said = explain_open(open(failure(ffi::SQLITE_IOERR_SHMSIZE, "disk I/O error")));
        assert_eq!(
            said.to_string(),
            "cannot open journal at `sqlite://j.db`: disk I/O error (SQLite could not grow the database's -shm file: is the disk full?)"
        );
        // Anything else is left as it was, its SQLite error still inside.
        let said = explain_open(open(failure(ffi::SQLITE_CANTOPEN, "unable to open")));
        let JournalError::Open { source, .. } = said else {
            panic!("{said:?}");
        };
        assert!(source.downcast_ref::<rusqlite::Error>().is_some());
        assert!(matches!(
            explain_open(JournalError::Closed),
            JournalError::Closed
        ));
    }

    #[test]
    fn other_failures_keep_their_message() {
        let said = describe(&failure(ffi::SQLITE_FULL, "database or disk is full"));
        assert_eq!(said, "database or disk is full");
        let said = describe(&failure(
            ffi::SQLITE_CORRUPT,
            "database disk image is malformed",
        ));
        assert_eq!(said, "database disk image is malformed");
    }
}
