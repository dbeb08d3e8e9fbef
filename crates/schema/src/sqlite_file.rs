//! Reading a SQLite database file that cannot be written, shared by the journal and the
//! context store: both open such a file `mode=ro` first (it sees commits of writers running
//! elsewhere) and, when SQLite cannot do that (a WAL database in a directory where no
//! `-shm` file can be made: a read-only mount, an archived directory, a full disk), with
//! `immutable=1`, which is only right when the file's `-wal` holds no commits.

use std::path::Path;

/// The `file:` URI of `path` with `query` (`%`, `?` and `#` escaped, as SQLite's URI
/// rules ask). Open it with `SQLITE_OPEN_URI`.
pub fn file_uri(path: &Path, query: &str) -> String {
    let mut uri = String::from("file:");
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push('?');
    uri.push_str(query);
    uri
}

/// Whether the database at `path` has no `-wal` file with commits in it (none, or an empty
/// one): then the main file holds every commit, and `immutable=1` reads all of them.
pub fn wal_holds_nothing(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    match std::fs::metadata(Path::new(&wal)) {
        Ok(meta) => meta.len() == 0,
        Err(err) => err.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Whether `err`, from opening a database for writing, says it cannot be written (a
/// read-only file, directory or file system, or a full disk), so that reading it may still
/// work. A full disk counts: a WAL database whose `-wal` and `-shm` files went with the last
/// connection cannot be opened for writing without room for a new `-shm` file (SQLite's
/// `disk I/O error`, extended code `SQLITE_IOERR_SHMSIZE`), yet it reads read-only. A
/// corrupt file, a lock held too long or any other failure is not this.
pub fn cannot_write(err: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode as C;
    err.sqlite_error().is_some_and(|err| {
        matches!(
            err.code,
            C::ReadOnly | C::CannotOpen | C::PermissionDenied | C::DiskFull
        ) || err.extended_code == rusqlite::ffi::SQLITE_IOERR_SHMSIZE
    })
}

/// The highest version recorded in the schema table `table` (a name of this program's, never
/// input), read without taking the write lock: under WAL a plain read never waits for a
/// writer. `None` when the table does not exist yet.
pub fn recorded_version(conn: &rusqlite::Connection, table: &str) -> rusqlite::Result<Option<i64>> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
        [table],
        |row| row.get(0),
    )?;
    if !exists {
        return Ok(None);
    }
    conn.query_row(
        &format!("SELECT COALESCE(MAX(version), 0) FROM {table}"),
        [],
        |row| row.get(0),
    )
    .map(Some)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_uri_escapes_what_sqlite_reads_as_syntax() {
        assert_eq!(
            file_uri(Path::new("/tmp/a%b?c#d.db"), "mode=ro"),
            "file:/tmp/a%25b%3fc%23d.db?mode=ro"
        );
    }

    #[test]
    fn a_wal_with_bytes_holds_commits() {
        let dir = std::env::temp_dir().join(format!("sqlite-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("x.db");
        assert!(wal_holds_nothing(&db));
        std::fs::write(dir.join("x.db-wal"), b"").unwrap();
        assert!(wal_holds_nothing(&db));
        std::fs::write(dir.join("x.db-wal"), b"frames").unwrap();
        assert!(!wal_holds_nothing(&db));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
