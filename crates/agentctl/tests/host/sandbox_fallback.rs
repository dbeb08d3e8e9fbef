//! The sandbox where no mount namespace can be had (a user other than root on a system
//! without unprivileged user namespaces), and the home directory when `HOME` is unset.
//!
//! The first is reproduced as root: `agentctl` runs as uid 65534 in a chroot (a recursive
//! bind of `/`), where the kernel refuses that user `unshare(CLONE_NEWUSER)`. Landlock
//! ignores the chroot (its rules hold inodes, and a check walks up to the real root), so the
//! chroot lies inside the hidden `~/.ssh`, which no rule grants: the rules made inside it
//! then rule alone, as they would on such a system.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::host::text;

/// Whether these tests run as root; when not, whether they may be skipped (only outside CI,
/// which runs them as root: there a test that cannot run fails).
pub(crate) fn as_root(test: &str) -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next().map(|u| u == "0"))
        .unwrap_or(false);
    if !root {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test} needs root (a chroot, a bind mount), and CI runs the tests as root"
        );
        eprintln!("{test}: not run, it needs root");
    }
    root
}

/// Binaries, a home with a planted key (and the chroot inside its `.ssh`), a workspace, a
/// directory outside both and one for databases; all but the binaries owned by uid 65534.
struct Jail {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    home: PathBuf,
    ws: PathBuf,
    outside: PathBuf,
    data: PathBuf,
    croot: PathBuf,
}

fn jail() -> Jail {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let open = |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
    open(&base).unwrap();
    let bin = base.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    open(&bin).unwrap();
    for (from, name) in [
        (env!("CARGO_BIN_EXE_agentctl"), "agentctl"),
        (env!("CARGO_BIN_EXE_agentctl-sandbox"), "agentctl-sandbox"),
    ] {
        std::fs::copy(from, bin.join(name)).unwrap();
        open(&bin.join(name)).unwrap();
    }
    let (home, ws, outside, data) = (
        base.join("home"),
        base.join("ws"),
        base.join("outside"),
        base.join("data"),
    );
    let croot = home.join(".ssh/croot");
    for d in [&croot, &ws, &outside, &data] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(home.join(".ssh/id_test"), "PRIVATE KEY\n").unwrap();
    std::fs::write(ws.join("README.md"), "workspace\n").unwrap();
    for p in [
        &home,
        &home.join(".ssh"),
        &home.join(".ssh/id_test"),
        &ws,
        &ws.join("README.md"),
        &outside,
        &data,
    ] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    Jail {
        _dir: dir,
        bin,
        home,
        ws,
        outside,
        data,
        croot,
    }
}

impl Jail {
    /// `agentctl ARGS` as uid 65534 in the chroot, with this jail's home and nothing else of
    /// the test's environment.
    fn agentctl(&self, args: &[&str]) -> Output {
        let o = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --rbind / "$0" && exec chroot --userspec=65534:65534 "$0" "$@""#)
            .arg(&self.croot)
            .args(["env", "-i", "PATH=/usr/bin:/bin", "OPENAI_API_KEY=sk-test"])
            .arg(format!("HOME={}", self.home.display()))
            .arg(self.bin.join("agentctl"))
            .args(args)
            .output()
            .unwrap();
        // The harness itself must have worked: the chroot entered, the binary run.
        assert!(
            !text(&o.stderr).contains("chroot:") && !text(&o.stderr).contains("mount:"),
            "{}",
            text(&o.stderr)
        );
        o
    }

    /// `agentctl sandbox --workspace WS [extra] -- sh -c SCRIPT` in the chroot.
    fn sandbox(&self, ws: &Path, extra: &[&str], script: &str) -> Output {
        let mut args = vec!["sandbox", "--workspace", ws.to_str().unwrap()];
        args.extend(extra);
        args.extend(["--", "sh", "-c", script]);
        self.agentctl(&args)
    }
}

/// Without a mount namespace Landlock alone hides, and its rules add up: a hidden path
/// beneath a path the command may reach (the home as the workspace, a writable root, the
/// run's database in the workspace) would be readable and writable. Such a policy is
/// refused before anything runs, saying which path and why; one without such a path runs
/// under Landlock alone (writes outside refused, the key unreadable, SysV IPC refused as
/// only this fallback does).
#[test]
fn without_a_mount_namespace_a_hidden_path_under_a_reachable_one_refuses_the_sandbox() {
    if !as_root("without_a_mount_namespace_a_hidden_path_under_a_reachable_one") {
        return;
    }
    let j = jail();
    let ssh = j.home.join(".ssh");
    let ran = j.outside.join("ran");
    let script = format!(
        "touch {}; cat .ssh/id_test; echo x >> .ssh/id_test",
        ran.display()
    );

    // The home as the workspace.
    let o = j.sandbox(&j.home, &[], &script);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "");
    let want = format!(
        "`{}` is inside the workspace and must be hidden, which needs a mount namespace, and \
         this system does not allow this user one",
        ssh.display()
    );
    assert!(text(&o.stderr).contains(&want), "{}", text(&o.stderr));
    // The home as a writable root, and under `read-only` (reads add up the same way).
    let home = j.home.to_str().unwrap();
    for extra in [&["--writable-root", home][..], &["--mode", "read-only"]] {
        let ws = if extra[0] == "--mode" { &j.home } else { &j.ws };
        let o = j.sandbox(ws, extra, &script);
        assert_eq!(o.status.code(), Some(125), "{extra:?}: {}", text(&o.stderr));
        let said = text(&o.stderr);
        assert!(
            said.contains(&format!("`{}` is inside", ssh.display())),
            "{said}"
        );
    }
    assert!(!ran.exists(), "the command ran");
    assert_eq!(
        std::fs::read_to_string(ssh.join("id_test")).unwrap(),
        "PRIVATE KEY\n"
    );

    // A run whose database is in its workspace: refused at the start (exit 2), the
    // database named, and how to run without the sandbox said once.
    let db = j.ws.join("j.db");
    let url = format!("sqlite://{}", db.display());
    let ws = j.ws.to_str().unwrap();
    let run = [
        "--db",
        &url,
        "run",
        "--sandbox",
        "workspace-write",
        "--base-url",
        "http://127.0.0.1:9",
        "--workspace",
        ws,
        "do the task",
    ];
    let o = j.agentctl(&run);
    let said = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("`{}` is inside the workspace", db.display())),
        "{said}"
    );
    assert_eq!(said.matches("--sandbox off").count(), 1, "{said}");

    // The same with the database elsewhere but a `.git` in the workspace: the `.git` is
    // what needs the namespace, said once.
    std::fs::create_dir(j.ws.join(".git")).unwrap();
    let elsewhere = format!("sqlite://{}", j.data.join("j.db").display());
    let mut run = run;
    run[1] = &elsewhere;
    let o = j.agentctl(&run);
    let said = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{said}");
    let git = j.ws.join(".git");
    assert!(
        said.contains(&format!(
            "`{}` is in the workspace and must stay read-only, which needs a mount namespace",
            git.display()
        )),
        "{said}"
    );
    assert_eq!(said.matches("--sandbox off").count(), 1, "{said}");
    assert!(
        !said.contains("this system cannot sandbox commands"),
        "{said}"
    );
    std::fs::remove_dir(&git).unwrap();

    // Nothing hidden beneath the workspace: the fallback runs the command, confined.
    let o = j.sandbox(
        &j.ws,
        &[],
        &format!(
            "echo in > in.txt; cat {key} && echo read-the-key; echo x > {out}/new \
             && echo wrote-outside; ipcmk -M 4096 && echo made-ipc; true",
            key = ssh.join("id_test").display(),
            out = j.outside.display()
        ),
    );
    let said = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{said}");
    assert_eq!(text(&o.stdout), "", "{said}");
    assert!(said.contains("Permission denied"), "{said}");
    assert!(said.contains("not permitted"), "SysV IPC: {said}");
    assert_eq!(
        std::fs::read_to_string(j.ws.join("in.txt")).unwrap(),
        "in\n"
    );
    assert!(!j.outside.join("new").exists());
}

/// In the fallback the command has no PID namespace, so the host and every process of the
/// user have pids it can name: their scheduling (policy, affinity) stays theirs. The
/// command's own, by pid 0 (`chrt` and `taskset` starting a program), still changes.
#[test]
fn without_a_pid_namespace_the_scheduling_of_other_processes_is_refused() {
    if !as_root("without_a_pid_namespace_the_scheduling_of_other_processes_is_refused") {
        return;
    }
    let j = jail();
    // `$PPID` is the sandbox's entry point, a process outside the command.
    let script = "before=$(chrt -p $PPID; taskset -p $PPID)
        chrt -i -p 0 $PPID && echo set-the-policy
        taskset -p 1 $PPID >/dev/null && echo set-the-affinity
        after=$(chrt -p $PPID; taskset -p $PPID)
        [ \"$before\" = \"$after\" ] || echo changed: $after
        chrt -i 0 true && taskset -c 0 true && echo own";
    let o = j.sandbox(&j.ws, &[], script);
    let said = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{said}");
    assert_eq!(text(&o.stdout), "own\n", "{said}");
    assert_eq!(said.matches("not permitted").count(), 2, "{said}");
}

/// With `HOME` unset (or empty), the home whose credential stores are hidden is the one
/// agentctl itself uses: the password database's. Here root's entry is pointed at a home of
/// the test's own (a bind mount over `/etc/passwd` in a mount namespace of the test's), so
/// that the real `/root` is not touched.
#[test]
fn with_home_unset_the_password_databases_home_is_hidden() {
    if !as_root("with_home_unset_the_password_databases_home_is_hidden") {
        return;
    }
    let j = jail();
    let passwd: String = std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("root:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let passwd = format!("root:x:0:0:root:{}:/bin/sh\n{passwd}", j.home.display());
    let file = j.data.join("passwd");
    std::fs::write(&file, passwd).unwrap();
    let key = j.home.join(".ssh/id_test");
    for home in [None, Some("")] {
        let mut cmd = Command::new("unshare");
        cmd.args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/passwd && exec "$@""#)
            .arg(&file)
            .arg(env!("CARGO_BIN_EXE_agentctl"))
            .args(["sandbox", "--workspace"])
            .arg(&j.ws)
            .args(["--", "cat"])
            .arg(&key)
            .env_remove("HOME")
            .env_remove("XDG_DATA_HOME");
        if let Some(home) = home {
            cmd.env("HOME", home);
        }
        let o = cmd.output().unwrap();
        let said = text(&o.stderr);
        assert!(!said.contains("mount:"), "{said}");
        assert!(!o.status.success(), "HOME={home:?}: the key was read");
        assert_eq!(text(&o.stdout), "", "HOME={home:?}");
        assert!(said.contains("Permission denied"), "HOME={home:?}: {said}");
    }
}
