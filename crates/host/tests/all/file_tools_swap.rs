//! The built-in file tools against a directory swapped for a symlink while they run, as a
//! sandboxed command running beside them (another call, a sub-agent, a leftover process)
//! can do: the tools write and read inside the workspace or refuse, never outside.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_host::tools::{ApprovalMode, Workspace, builtin};
use agent_runtime::{CancellationToken, JobKey, ToolContext};
use serde_json::json;

fn ctx() -> ToolContext {
    ToolContext {
        key: Arc::new(JobKey {
            thread: "t".into(),
            turn: "u".into(),
            call_id: "c".into(),
        }),
        revision: 0,
        cancel: CancellationToken::new(),
    }
}

/// Swaps `ws/realdir` between a real directory and a symlink to `outside` until `stop`,
/// leaving the real directory in place. Each swap is one atomic exchange: `realdir` always
/// exists, so a call never finds it missing (and `write_file` never makes a new one, which
/// would end the race).
fn swapper(ws: &Path, outside: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    let (real, evil) = (ws.join("realdir"), ws.join("evil"));
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("secret"), "inside").unwrap();
    std::os::unix::fs::symlink(outside, &evil).unwrap();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..2 {
                renameat_with(CWD, &real, CWD, &evil, RenameFlags::EXCHANGE).unwrap();
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_tools_never_follow_a_directory_swapped_for_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, outside) = (dir.path().join("ws"), dir.path().join("outside"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "OUTSIDE-SECRET").unwrap();
    let workspace = Workspace::new(&ws).unwrap();
    let (_, registry) = builtin(&workspace, ApprovalMode::Default);
    let (write, read) = (
        registry.get("write_file").unwrap().clone(),
        registry.get("read_file").unwrap().clone(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let swapping = swapper(&ws, &outside, Arc::clone(&stop));
    let (mut wrote, mut read_inside, mut refused) = (0, 0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < deadline {
        let args = json!({"path": "realdir/target", "content": "from the tool"});
        match write.call(args, ctx()).await {
            Ok(_) => wrote += 1,
            Err(_) => refused += 1,
        }
        match read.call(json!({"path": "realdir/secret"}), ctx()).await {
            Ok(text) => {
                let text = text.as_str().unwrap_or_default().to_owned();
                assert!(!text.contains("OUTSIDE-SECRET"), "read outside: {text}");
                read_inside += 1;
            }
            Err(err) => {
                assert!(!err.0.contains("OUTSIDE-SECRET"), "{}", err.0);
                refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapping.join().unwrap();
    assert!(
        !outside.join("target").exists(),
        "write_file wrote outside the workspace ({wrote} writes and {read_inside} reads inside, {refused} refused)"
    );
    // The same calls do reach the real directory, back in place now: what the race
    // refused, it refused for the swap (how many calls won the race depends on the load).
    let args = json!({"path": "realdir/target", "content": "after the race"});
    write.call(args, ctx()).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("realdir/target")).unwrap(),
        "after the race"
    );
    let text = read.call(json!({"path": "realdir/secret"}), ctx()).await;
    assert_eq!(text.unwrap().as_str().map(str::trim_end), Some("inside"));
    assert!(!outside.join("target").exists());
}

#[tokio::test]
async fn write_file_does_not_write_git_or_the_workspace_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".git")).unwrap();
    let workspace = Workspace::new(dir.path()).unwrap();
    let (_, registry) = builtin(&workspace, ApprovalMode::Default);
    let write = registry.get("write_file").unwrap().clone();
    for path in [
        ".git/config",
        ".git/hooks/pre-commit",
        "sub/.git/config",
        "agentctl.toml",
        "HEAD",
    ] {
        let err = write
            .call(json!({"path": path, "content": "x"}), ctx())
            .await
            .unwrap_err();
        assert!(err.0.contains("does not write `.git`"), "{path}: {}", err.0);
        assert!(!dir.path().join(path).exists(), "{path} was written");
    }
    // Other dotfiles and a nested config are ordinary files.
    for path in [".gitignore", "sub/agentctl.toml", "sub/HEAD"] {
        write
            .call(json!({"path": path, "content": "x"}), ctx())
            .await
            .unwrap();
    }
}
