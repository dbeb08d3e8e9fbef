//! What a failed SQLite write says to the person who reads the latched writer's error.
//!
//! SQLite reports most failures of the file system as `disk I/O error`, also when the
//! cause is a full disk (it could not grow the `-shm` index, say, after the commit was
//! already in the WAL). The extended result code says which operation failed; the message
//! names it and, where a full disk or a file size limit is the usual cause, says so, so
//! that nobody has to rerun with `RUST_LOG=debug` to learn that the disk is full.

use rusqlite::ffi;

/// `err`'s own message, followed by what failed where SQLite's extended code tells more.
pub(super) fn describe(err: &rusqlite::Error) -> String {
    let message = err.to_string();
    match err.sqlite_error().and_then(|e| explain(e.extended_code)) {
        Some(explanation) => format!("{message} ({explanation})"),
        None => message,
    }
}

/// The cause behind an extended result code, for the codes a failing disk gives.
fn explain(extended_code: i32) -> Option<&'static str> {
    Some(match extended_code {
        ffi::SQLITE_FULL => return None, // "database or disk is full" says it already
        ffi::SQLITE_IOERR_WRITE => {
            "a write to the database's files failed: is the disk full, or a file size limit reached?"
        }
        ffi::SQLITE_IOERR_SHMSIZE => {
            "SQLite could not grow the database's -shm file: is the disk full?"
        }
        ffi::SQLITE_IOERR_TRUNCATE => "SQLite could not resize a database file",
        ffi::SQLITE_IOERR_FSYNC | ffi::SQLITE_IOERR_DIR_FSYNC => {
            "the disk did not confirm a write (fsync failed)"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
