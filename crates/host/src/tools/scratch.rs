//! Per-call scratch directories (a sandboxed command's `TMPDIR`) in the system temp dir.
//!
//! A host killed with SIGKILL runs no destructor, so the directories of the calls it had in
//! flight stay behind. Each is named `<prefix><pid>-<random>` after the host that made it;
//! the first directory a host makes for a prefix sweeps the ones whose host is gone (no
//! `/proc/<pid>`) and whose owner is ours. A pid reused by a live process keeps its
//! directories until that process ends too: the sweep only errs toward keeping.

use std::path::Path;
use std::sync::Mutex;

/// Prefixes this process has swept for.
static SWEPT: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// A new scratch directory `<prefix><our pid>-<random>`, removed when dropped; only its
/// owner may list or enter it (0700), since what a command leaves in its `TMPDIR` is the
/// user's work and the system temp dir is everyone's.
pub(crate) fn scratch_dir(prefix: &'static str) -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new()
        .prefix(&format!("{prefix}{}-", std::process::id()))
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()?;
    let first = SWEPT.lock().map(|mut swept| {
        let first = !swept.contains(&prefix);
        if first {
            swept.push(prefix);
        }
        first
    });
    if first.unwrap_or(false) {
        sweep(prefix, dir.path());
    }
    Ok(dir)
}

/// Removes the directories of `prefix` beside `ours` left by hosts that are gone.
#[cfg(target_os = "linux")]
fn sweep(prefix: &str, ours: &Path) {
    use std::os::unix::fs::MetadataExt as _;
    let (Some(parent), Ok(own)) = (ours.parent(), std::fs::metadata(ours)) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        let gone = !Path::new("/proc").join(pid.to_string()).exists();
        if gone && meta.is_dir() && meta.uid() == own.uid() {
            let removed = std::fs::remove_dir_all(entry.path());
            tracing::debug!(dir = %entry.path().display(), ok = removed.is_ok(), "left by a host that is gone");
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn sweep(_prefix: &str, _ours: &Path) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_first_dir_sweeps_those_of_hosts_that_are_gone_and_keeps_the_rest() {
        // A prefix of this test's own, so nothing else in the temp dir is touched.
        let prefix: &'static str = Box::leak(
            format!("agentctl-scratch-test-{}-", uuid::Uuid::now_v7().simple()).into_boxed_str(),
        );
        let tmp = std::env::temp_dir();
        let mut dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        dead.wait().unwrap();
        let mut live = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let left = tmp.join(format!("{prefix}{dead_pid}-abc"));
        let running = tmp.join(format!("{prefix}{}-def", live.id()));
        let other = tmp.join(format!("{prefix}notapid-ghi"));
        for dir in [&left, &running, &other] {
            std::fs::create_dir_all(dir.join("sub")).unwrap();
            std::fs::write(dir.join("sub/f"), "x").unwrap();
        }
        let first = scratch_dir(prefix).unwrap();
        assert!(!left.exists(), "the dir of a host that is gone stays");
        assert!(running.exists() && other.exists());
        assert!(first.path().exists());
        let mode = std::fs::metadata(first.path()).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o7777,
            0o700
        );
        let name = first
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with(&format!("{prefix}{}-", std::process::id())),
            "{name}"
        );
        // Only the first dir of a prefix sweeps.
        std::fs::create_dir_all(&left).unwrap();
        let second = scratch_dir(prefix).unwrap();
        assert!(left.exists());
        live.kill().unwrap();
        live.wait().unwrap();
        for dir in [&left, &running, &other] {
            std::fs::remove_dir_all(dir).unwrap();
        }
        drop((first, second));
    }
}
