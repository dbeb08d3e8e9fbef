//! A full disk on the real kernel, for the full-disk tests: a scenario runs in a child
//! process (the test binary, re-run for one ignored test) inside a mount namespace of its
//! own, where its directory is a small tmpfs that [`fill`] fills up, so the code under test
//! gets `ENOSPC` from the kernel exactly where a full disk gives it.
//!
//! The namespace needs root, or unprivileged user namespaces (CI runs as root): without it
//! [`on_small_disk`] says `SKIPPED:` on stderr, and fails under `CI=true`, as the PostgreSQL
//! suites do without a server.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The child's directory (a tmpfs mount point), set by [`on_small_disk`].
const CHILD_DIR: &str = "AGENT_TESTKIT_SMALL_DISK_DIR";
/// Exit code of the child's shell when the tmpfs cannot be mounted.
const NO_MOUNT: i32 = 97;

/// Runs the ignored test `test` (its full path, `module::name`) of this test binary in a
/// private mount namespace where the directory [`child_dir`] gives it is a tmpfs of `size`
/// (`mount -o size=`), and fails if it fails. Without the privileges to set that up:
/// skipped, or a failure under `CI=true`.
pub fn on_small_disk(test: &str, size: &str) {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    // As root, a mount namespace; otherwise (or where that is refused) a user namespace
    // with one, where an unprivileged user may mount a tmpfs too.
    let mut why = String::new();
    for namespaces in [&["--mount"][..], &["--user", "--map-root-user", "--mount"]] {
        let spawned = Command::new("unshare")
            .args(namespaces)
            .args(["--propagation", "private", "--", "sh", "-c"])
            .arg(format!(
                r#"mount -t tmpfs -o size="$1" tmpfs "$2" || exit {NO_MOUNT}; shift 2; exec "$@""#
            ))
            .args(["sh", size])
            .arg(dir.path())
            .arg(&exe)
            .args([
                "--ignored",
                "--exact",
                test,
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR, dir.path())
            .status();
        match spawned {
            Err(err) => why = format!("cannot run unshare: {err}"),
            Ok(status) if status.success() => return,
            // `unshare` exits 1 when the kernel refuses the namespace; the shell exits
            // NO_MOUNT when the mount is refused. Anything else is the test's own failure.
            Ok(status) if matches!(status.code(), Some(1 | NO_MOUNT)) => {
                why = format!("unshare {} or mount failed: {status}", namespaces.join(" "));
            }
            Ok(status) => panic!("{test} failed on a full disk: {status}"),
        }
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but a full disk cannot be set up ({why}): CI runs as root");
    }
    eprintln!("SKIPPED: {test} needs a mount namespace ({why}; run as root)");
}

/// The child's directory, or `None` when the ignored test was run by hand (not as a child
/// of [`on_small_disk`]): it then does nothing.
pub fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD_DIR).map(PathBuf::from)
}

/// Remounts the child's tmpfs at `dir` with `mode` (`ro` or `rw`): a read-only file
/// system (for root too) under the code, then a writable one again.
pub fn remount(dir: &Path, mode: &str) {
    let options = format!("remount,{mode}");
    let status = Command::new("mount")
        .args(["-o", &options])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success(), "mount -o {options}");
}

/// Fills the file system of `dir` with a file `filler` until the kernel says `ENOSPC`, down
/// to the last bytes a partly used page still takes; removing the file gives the space back.
pub fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xa5u8; 64 << 10];
    loop {
        if let Err(err) = file.write_all(&chunk) {
            assert_eq!(err.raw_os_error(), Some(28), "{err}"); // ENOSPC
            break;
        }
    }
    while file.write_all(&[0xa5]).is_ok() {}
    path
}
