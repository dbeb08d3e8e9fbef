//! Opening a database the journal did not write, or that a newer build wrote: a one-line
//! typed error, and nothing of a failed schema step left behind.

use agent_journal::{Journal, JournalError};
use sqlx::Connection as _;

fn sqlite_url(dir: &tempfile::TempDir) -> (std::path::PathBuf, String) {
    let path = dir.path().join("j.db");
    let url = format!("sqlite://{}", path.display());
    (path, url)
}

fn one_line(err: &JournalError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    assert!(!text.contains('\n'), "more than one line: {text}");
    text
}

fn newer_schema(err: &JournalError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(JournalError::SchemaTooNew { found: 999, .. }) = e.downcast_ref() {
            return true;
        }
        cause = e.source();
    }
    false
}

#[tokio::test]
async fn sqlite_refuses_a_schema_newer_than_this_build() {
    let dir = tempfile::tempdir().unwrap();
    let (path, url) = sqlite_url(&dir);
    Journal::open(&url).await.unwrap().close().await;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("INSERT INTO journal_schema (version) VALUES (999)")
        .unwrap();
    let err = Journal::open(&url).await.err().unwrap();
    assert!(newer_schema(&err), "{err:?}");
    assert!(one_line(&err).contains("journal schema version 999 is newer"));
}

#[tokio::test]
async fn sqlite_with_foreign_tables_of_the_same_name_fails_on_one_line_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (path, url) = sqlite_url(&dir);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE journal_events (x TEXT)")
        .unwrap();
    let err = Journal::open(&url).await.err().unwrap();
    let text = one_line(&err);
    assert!(
        text.contains("cannot apply journal schema step 1"),
        "{text}"
    );
    let tables = agent_testkit::sqlite_tables(&path);
    assert_eq!(tables, ["journal_events"]);
}

#[tokio::test]
async fn postgres_refuses_a_schema_newer_than_this_build() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_schema_test").await else {
        return;
    };
    Journal::open(db.url()).await.unwrap().close().await;
    let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
    sqlx::query("INSERT INTO journal_schema (version) VALUES (999)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let err = Journal::open(db.url()).await.err().unwrap();
    assert!(newer_schema(&err), "{err:?}");
    assert!(one_line(&err).contains("journal schema version 999 is newer"));
}

/// Processes opening one new file at once, per round (issue 37, item 2).
const OPENERS: usize = 12;
/// Rounds, each on a new file: the race is in creating and migrating a new database.
const OPEN_ROUNDS: usize = 40;

/// Issue 37, item 2: several processes opening (creating, switching to WAL, migrating) one
/// new SQLite file at the same moment all open it; none fails with "database is locked".
/// The children are this test binary re-run as `open_child`; each waits for its stdin to
/// close, so all of a round's children start opening together.
#[test]
fn processes_opening_one_new_file_at_once_all_open_it() {
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().unwrap();
    for round in 0..OPEN_ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        let (_, url) = sqlite_url(&dir);
        let mut children: Vec<_> = (0..OPENERS)
            .map(|_| {
                Command::new(&exe)
                    .args([
                        "--ignored",
                        "--exact",
                        "schema::open_child",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env("OPEN_CHILD_DB", &url)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // Every child is running and blocked on its stdin: release them together.
        for child in &mut children {
            drop(child.stdin.take());
        }
        for child in children {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && stdout.contains("OPENED"),
                "round {round}: a process could not open the new file: {stdout}\n{stderr}"
            );
        }
        let appended = tokio::runtime::Runtime::new().unwrap().block_on(async {
            let journal = Journal::open(&url).await.unwrap();
            journal.replay("opened", 0).await.unwrap()
        });
        assert_eq!(appended.len(), OPENERS, "round {round}");
    }
}

#[test]
#[ignore = "child process of processes_opening_one_new_file_at_once_all_open_it"]
fn open_child() {
    use std::io::Read as _;
    let Ok(url) = std::env::var("OPEN_CHILD_DB") else {
        return;
    };
    // The parent closes stdin when every child of the round is running.
    let mut sink = Vec::new();
    std::io::stdin().read_to_end(&mut sink).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let journal = match Journal::open(&url).await {
            Ok(journal) => journal,
            Err(err) => panic!("cannot open: {}", one_line(&err)),
        };
        journal
            .append(agent_journal::NewEvent::new(
                "opened",
                "e",
                serde_json::json!({}),
            ))
            .await
            .unwrap();
        journal.close().await;
        println!("OPENED");
    });
}

/// The uid of this process (the owner of `/proc/self`).
fn uid() -> u32 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").unwrap().uid()
}

/// A journal with three events on thread `t`, closed, then archived: file mode 444 in a
/// directory of mode 555. Returns the directory (to restore its mode) and the URL.
async fn archived_journal() -> (tempfile::TempDir, std::path::PathBuf, String) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let (path, url) = sqlite_url(&dir);
    let journal = Journal::open(&url).await.unwrap();
    for n in 0..3 {
        journal
            .append(agent_journal::NewEvent::new(
                "t",
                "e",
                serde_json::json!({ "n": n }),
            ))
            .await
            .unwrap();
    }
    journal.close().await;
    drop(journal);
    // The last connection to close checkpoints the WAL into the file and removes it; that
    // can land after `close` returns. An archive is a file no one still writes: wait for it.
    let wal = path.with_extension("db-wal");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while wal.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    (dir, path, url)
}

/// Gives `dir` its write bit back, so that it can be removed.
fn unarchive(dir: &tempfile::TempDir) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Issue 37, item 14: an archived journal (444 in a 555 directory) can be read. File modes
/// stop writes only for a process that is not root, and tests run as root here: so the
/// checks run in a child (this binary re-run as `read_only_child`) under uid 65534
/// (`nobody`) when this process is root, and in a child as this user otherwise. The child
/// first proves that it cannot open the journal for writing, so the test means something
/// whoever runs it.
#[tokio::test]
async fn an_archived_sqlite_journal_opens_read_only_for_a_user_who_cannot_write_it() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    let (dir, _, url) = archived_journal().await;
    // A copy of this test binary that `nobody` can reach, wherever the checkout lives.
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("schema-test");
    std::fs::copy(std::env::current_exe().unwrap(), &bin).unwrap();
    let mut child = std::process::Command::new(&bin);
    child
        .args([
            "--ignored",
            "--exact",
            "schema::read_only_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("READ_ONLY_CHILD_DB", &url);
    if uid() == 0 {
        child.uid(65534).gid(65534);
    }
    let out = child.output().unwrap();
    unarchive(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("READ-ONLY OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
#[ignore = "child process of an_archived_sqlite_journal_opens_read_only_for_a_user_who_cannot_write_it"]
async fn read_only_child() {
    let Ok(url) = std::env::var("READ_ONLY_CHILD_DB") else {
        return;
    };
    assert_ne!(
        uid(),
        0,
        "the child must not be root: file modes would not apply"
    );
    // What `runs list` met: opening for writing fails on this file.
    let err = Journal::open(&url).await.expect_err("the file is writable");
    println!("read-write open: {}", one_line(&err));
    // Read-only: every read answers, appends are refused with a typed error.
    let journal = Journal::open_read_only(&url).await.unwrap();
    assert!(journal.is_read_only());
    assert_eq!(journal.threads().await.unwrap(), ["t"]);
    assert_eq!(journal.replay("t", 0).await.unwrap().len(), 3);
    assert_eq!(journal.last_seq("t").await.unwrap(), Some(3));
    let refused = journal
        .append(agent_journal::NewEvent::new(
            "t",
            "e",
            serde_json::json!({}),
        ))
        .await;
    assert!(
        matches!(refused, Err(JournalError::ReadOnly { .. })),
        "{refused:?}"
    );
    let lease = journal.offer_lease("l", &serde_json::json!({})).await;
    assert!(lease.is_err(), "a read-only journal wrote a lease");
    assert!(journal.leases("").await.unwrap().is_empty());
    journal.close().await;
    // The open a read-only command uses falls back to reading.
    let journal = Journal::open_for_reading(&url).await.unwrap();
    assert!(journal.is_read_only());
    assert_eq!(journal.replay("t", 0).await.unwrap().len(), 3);
    println!("READ-ONLY OK");
}

/// Read-only opening writes nothing to the file (checked here as root, where it could).
#[tokio::test]
async fn a_read_only_open_writes_nothing_to_the_file() {
    let (dir, path, url) = archived_journal().await;
    let before = std::fs::read(&path).unwrap();
    let journal = Journal::open_read_only(&url).await.unwrap();
    assert_eq!(journal.replay("t", 0).await.unwrap().len(), 3);
    journal.close().await;
    drop(journal);
    assert_eq!(std::fs::read(&path).unwrap(), before);
    unarchive(&dir);
}

/// A command that only reads still creates a missing journal (read-write when it can), and
/// a read-only open of a file that is no journal, or of `memory:`, fails on one line.
#[tokio::test]
async fn open_for_reading_writes_when_it_can_and_read_only_refuses_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let (path, url) = sqlite_url(&dir);
    let err = Journal::open_read_only(&url).await.err().unwrap();
    assert!(one_line(&err).contains("cannot open journal"), "{err}");
    assert!(!path.exists(), "a read-only open created the file");
    let journal = Journal::open_for_reading(&url).await.unwrap();
    assert!(!journal.is_read_only());
    journal.close().await;
    let err = Journal::open_read_only(agent_journal::MEMORY_URL)
        .await
        .err()
        .unwrap();
    assert!(matches!(err, JournalError::InvalidUrl { .. }), "{err}");
    let err = Journal::open_read_only("sqlite::memory:")
        .await
        .err()
        .unwrap();
    assert!(matches!(err, JournalError::InvalidUrl { .. }), "{err}");
}

/// PostgreSQL read-only: reads answer, appends are refused, and the session cannot write
/// (a lease is not taken).
#[tokio::test]
async fn postgres_opens_read_only() {
    let Some(db) = agent_testkit::fresh_pg_database("journal_read_only_test").await else {
        return;
    };
    let writer = Journal::open(db.url()).await.unwrap();
    writer
        .append(agent_journal::NewEvent::new(
            "t",
            "e",
            serde_json::json!({}),
        ))
        .await
        .unwrap();
    writer.close().await;
    let journal = Journal::open_read_only(db.url()).await.unwrap();
    assert!(journal.is_read_only());
    assert_eq!(journal.replay("t", 0).await.unwrap().len(), 1);
    let refused = journal
        .append(agent_journal::NewEvent::new(
            "t",
            "e",
            serde_json::json!({}),
        ))
        .await;
    assert!(
        matches!(refused, Err(JournalError::ReadOnly { .. })),
        "{refused:?}"
    );
    let lease = journal.offer_lease("l", &serde_json::json!({})).await;
    assert!(lease.is_err(), "a read-only journal wrote a lease");
    journal.close().await;
}
