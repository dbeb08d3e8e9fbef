//! `agentctl` where the system refuses it threads (`ulimit -u`, a container's `pids.max`):
//! an error that says so and exit 1, never a panic's backtrace (exit 101) nor a process that
//! hangs for ever on its half-started runtime.
//!
//! The limit binds only a user other than root (root passes it), so `agentctl` runs as uid
//! 65534, which needs root.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn too_few_threads_is_an_error_not_a_panic_or_a_hang() {
    if !crate::sandbox_fallback::as_root("too_few_threads_is_an_error_not_a_panic_or_a_hang") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
    let bin = base.join("agentctl");
    std::fs::copy(env!("CARGO_BIN_EXE_agentctl"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // From the runtime's start (one thread: the process itself) to the journal's first
    // blocking task: each limit fails at another place.
    for limit in 1..=6 {
        let script = format!(
            "ulimit -u {limit} && exec env HOME={home} {bin} --db sqlite://{db} runs list",
            home = base.display(),
            bin = bin.display(),
            db = base.join("j.db").display(),
        );
        let started = Instant::now();
        let mut child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["bash", "-c", &script])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(60) {
                child.kill().unwrap();
                panic!("ulimit -u {limit}: agentctl hung");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert!(!stderr.contains("panicked"), "ulimit -u {limit}: {stderr}");
        assert!(
            status.code() == Some(1) || status.success(),
            "ulimit -u {limit}: {status:?} {stderr}"
        );
        if !status.success() {
            assert!(stderr.contains("error: "), "ulimit -u {limit}: {stderr}");
        }
    }
}
