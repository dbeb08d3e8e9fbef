//! Opening the journal and the context store named by `--db`.
//!
//! Invariant: every command opens them here, so a failure to open carries the same one
//! hint about `--db`, attached once.

use agent_context::{Access, ContextOptions, ContextStore};
use agent_journal::Journal;

use crate::global::{GlobalArgs, database_files};
use crate::output::with_hint;

/// The hint shown when the database named by `--db` cannot be opened.
pub const DB_HINT: &str =
    "check --db / AGENTCTL_DB (sqlite://PATH, sqlite::memory:, postgres://USER:PASS@HOST/DB)";

/// The journal named by `--db`.
pub async fn open_journal(global: &GlobalArgs) -> anyhow::Result<Journal> {
    let url = global.database_url()?;
    refuse_special_file(&url)?;
    // Whatever runs this process drives, wherever their own database was recorded.
    agent_host::sandbox::hide_from_every_run(database_files(&url));
    Journal::open(&url)
        .await
        .map_err(|err| with_hint(err, db_hint(&url)))
}

/// The journal named by `--db`, for a command that only reads it: opened read-only when it
/// cannot be written (an archived file, a read-only mount), so it can still be inspected.
pub async fn open_journal_for_reading(global: &GlobalArgs) -> anyhow::Result<Journal> {
    let url = global.database_url()?;
    refuse_special_file(&url)?;
    Journal::open_for_reading(&url)
        .await
        .map_err(|err| with_hint(err, db_hint(&url)))
}

/// The context store (history and memory) named by `--db`.
pub async fn open_context(global: &GlobalArgs) -> anyhow::Result<ContextStore> {
    let url = global.database_url()?;
    open_context_at(&url).await
}

/// The context store named by `--db`, for a command that only reads it: opened read-only
/// when it cannot be written (an archived file, a read-only mount, a full disk), so it can
/// still be inspected. Its search then scans the units not yet in the index.
pub async fn open_context_for_reading(global: &GlobalArgs) -> anyhow::Result<ContextStore> {
    let url = global.database_url()?;
    let options = ContextOptions::default().access(Access::ReadOnlyWhenUnwritable);
    open_context_with(&url, options).await
}

/// The context store at `url` (a URL the command chose, such as a private in-memory store).
pub async fn open_context_at(url: &str) -> anyhow::Result<ContextStore> {
    open_context_with(url, ContextOptions::default()).await
}

async fn open_context_with(url: &str, options: ContextOptions) -> anyhow::Result<ContextStore> {
    refuse_special_file(url)?;
    ContextStore::open_with(url, options)
        .await
        .map_err(|err| match err {
            // Only a store opened read-only meets a schema it cannot apply.
            agent_context::ContextError::SchemaNotReadable { .. } => with_hint(
                err,
                "the file cannot be written here, and its history and memory tables must be made or upgraded first: run `agentctl history threads` once where it can be written",
            ),
            err => with_hint(err, db_hint(url)),
        })
}

/// Why the SQLite file named by `url` cannot take a write, when visibly so: the file exists
/// and cannot be opened for writing, or its file system has no room left. `None` for
/// PostgreSQL, `:memory:`, or a file that looks writable. A command that only reads but
/// needs to write to do so (the history index) can then work elsewhere instead of failing.
pub fn unwritable(url: &str) -> Option<String> {
    let file = database_files(url).into_iter().next()?;
    let shown = agent_redact::redact_in(&file.display().to_string(), url);
    if file.is_file()
        && let Some(err) = refuses_writes(&file)
    {
        let err = agent_redact::redact_in(&err.to_string(), url);
        return Some(format!("{shown} cannot be written ({err})"));
    }
    full_disk_hint(&file, url).map(|_| format!("the file system holding {shown} has no room left"))
}

/// Why `file`, which exists, cannot be opened for writing, if it cannot.
fn refuses_writes(file: &std::path::Path) -> Option<std::io::Error> {
    std::fs::OpenOptions::new().append(true).open(file).err()
}

/// Refuses a SQLite path that names a FIFO, a socket or a device: SQLite's open of a FIFO
/// waits for a writer forever, with nothing said.
fn refuse_special_file(url: &str) -> anyhow::Result<()> {
    let Some(file) = database_files(url).into_iter().next() else {
        return Ok(());
    };
    match std::fs::metadata(&file) {
        Ok(meta) if !meta.is_file() && !meta.is_dir() => {
            let shown = agent_redact::redact_in(&file.display().to_string(), url);
            Err(with_hint(
                crate::output::UsageError(format!(
                    "{shown} is not a regular file (a FIFO, a socket or a device)"
                )),
                "--db names a database file (sqlite://PATH) or a postgres:// URL",
            ))
        }
        _ => Ok(()),
    }
}

/// The hint for a database at `url` that did not open: what is wrong with the file, when
/// `url` names a SQLite file and something visibly is, else [`DB_HINT`].
///
/// The constant text is shown as written; the parts taken from `url` or the file system
/// (the path, an I/O error) have `url`'s passwords masked here, since the hint is printed
/// as it is.
fn db_hint(url: &str) -> String {
    let Some(file) = database_files(url).into_iter().next() else {
        return DB_HINT.into();
    };
    let shown = agent_redact::redact_in(&file.display().to_string(), url);
    match std::fs::metadata(&file) {
        Ok(meta) if meta.is_dir() => {
            format!(
                "{shown} is a directory; --db names a database file, such as {shown}/agentctl.db"
            )
        }
        Ok(meta) if meta.is_file() && !has_sqlite_header(&file) => {
            format!("{shown} is not a SQLite database; give --db a new file, or one agentctl made")
        }
        Ok(_) => missing_shm_hint(&file, &shown, can_create_beside(&file)).unwrap_or_else(|| {
            match refuses_writes(&file) {
                Some(err) => format!(
                    "{shown} cannot be written ({}); the commands that only read still read it: `runs`, `journal`, `history search|window|threads`, `memory recall|evidence`",
                    agent_redact::redact_in(&err.to_string(), url)
                ),
                None => full_disk_hint(&file, url).unwrap_or_else(|| DB_HINT.into()),
            }
        }),
        Err(_) => match file.parent() {
            Some(dir) if !dir.is_dir() => format!(
                "the directory {} does not exist; agentctl creates the database file, not its directory",
                agent_redact::redact_in(&dir.display().to_string(), url)
            ),
            _ => full_disk_hint(&file, url).unwrap_or_else(|| DB_HINT.into()),
        },
    }
}

/// The hint for a WAL database SQLite cannot read here, if that is why it did not open: its
/// `-wal` holds commits, which SQLite reads only through the `-shm` index, and `file` has
/// no `-shm` beside it and none can be made there (`can_create` is false: an archive copied
/// without it onto a read-only mount). Neither reading nor writing opens it then, so the
/// usual "the commands that only read still read it" would be wrong.
fn missing_shm_hint(file: &std::path::Path, shown: &str, can_create: bool) -> Option<String> {
    if can_create || agent_schema::sqlite_file::wal_holds_nothing(file) {
        return None;
    }
    let mut shm = file.as_os_str().to_owned();
    shm.push("-shm");
    match std::fs::symlink_metadata(std::path::Path::new(&shm)) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Some(format!(
            "{shown}-wal holds commits that SQLite reads only with {shown}-shm, which is missing and cannot be made here: copy the -shm file along with the database (and its -wal), or open the database once where it can be written, which folds the -wal into it"
        )),
        _ => None,
    }
}

/// Whether a file can be created in the directory holding `file` (where SQLite makes the
/// `-shm` file).
fn can_create_beside(file: &std::path::Path) -> bool {
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_ok()
}

/// The hint for a database whose file system has no block left for this user: SQLite
/// then fails with a bare "disk I/O error" or "database or disk is full", and `--db` is
/// not what to check.
fn full_disk_hint(file: &std::path::Path, url: &str) -> Option<String> {
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    let stat = rustix::fs::statvfs(dir).ok()?;
    (stat.f_bavail == 0).then(|| {
        format!(
            "the file system holding {} has no room left; free some space and run the command again",
            agent_redact::redact_in(&dir.display().to_string(), url)
        )
    })
}

/// Whether `file` starts like a SQLite database (an empty file is one SQLite may still
/// initialise).
fn has_sqlite_header(file: &std::path::Path) -> bool {
    use std::io::Read as _;
    let mut head = [0u8; 16];
    let Ok(mut f) = std::fs::File::open(file) else {
        return true;
    };
    match f.read(&mut head) {
        Ok(0) => true,
        Ok(n) => head[..n] == b"SQLite format 3\0"[..n],
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_hint_names_what_is_wrong_with_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "hello").unwrap();
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, "").unwrap();

        assert!(db_hint(&format!("sqlite://{d}")).ends_with(&format!("such as {d}/agentctl.db")));
        assert_eq!(
            db_hint(&format!("sqlite://{d}/notes.txt")),
            format!(
                "{d}/notes.txt is not a SQLite database; give --db a new file, or one agentctl made"
            )
        );
        assert!(
            db_hint(&format!("sqlite://{d}/no/such/x.db"))
                .starts_with(&format!("the directory {d}/no/such does not exist"))
        );
        assert_eq!(db_hint(&format!("sqlite://{d}/empty.db")), DB_HINT);
        assert_eq!(db_hint("postgres://u:p@h/db"), DB_HINT);
    }

    /// An archived WAL journal whose `-wal` holds commits, copied without its `-shm` onto a
    /// read-only mount, opens neither way; the hint said the reading commands still read
    /// it. (Root may create files anywhere, so where the `-shm` could not be made is given.)
    #[test]
    fn a_wal_with_commits_and_no_shm_that_cannot_be_made_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("j.db");
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; \
             CREATE TABLE t (x); INSERT INTO t VALUES (1);",
        )
        .unwrap();
        // Copies as an archive would hold them: the database and its -wal, no -shm.
        let archive = dir.path().join("archive");
        std::fs::create_dir(&archive).unwrap();
        let copy = archive.join("j.db");
        std::fs::copy(&db, &copy).unwrap();
        std::fs::copy(dir.path().join("j.db-wal"), archive.join("j.db-wal")).unwrap();
        drop(conn);
        let shown_copy = copy.display().to_string();

        let hint = missing_shm_hint(&copy, &shown_copy, false).unwrap();
        assert!(
            hint.contains(&format!("{shown_copy}-shm, which is missing")),
            "{hint}"
        );
        assert!(hint.contains("open the database once where it can be written"));
        // Where a -shm can be made, SQLite makes it: nothing to say.
        assert_eq!(missing_shm_hint(&copy, &shown_copy, true), None);
        // A -shm beside it, or a -wal without commits: not this.
        std::fs::write(archive.join("j.db-shm"), "").unwrap();
        assert_eq!(missing_shm_hint(&copy, &shown_copy, false), None);
        std::fs::remove_file(archive.join("j.db-shm")).unwrap();
        std::fs::write(archive.join("j.db-wal"), "").unwrap();
        assert_eq!(missing_shm_hint(&copy, &shown_copy, false), None);
    }
}
