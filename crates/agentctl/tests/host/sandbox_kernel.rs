//! The escape suite, part two: what Landlock does not govern and the sandbox must close by
//! other means (read-only mounts, seccomp argument filters, PID and IPC namespaces, moving
//! aside what a command may not create). Each attempt is checked where it would land: on
//! the file, on the other process, in the kernel's tables, in the terminal's input queue.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::json;

use super::host::*;
use super::sandbox::refusal;

/// A workspace with no `.git` nor `agentctl.toml`, a home, and a file outside both.
struct Bare {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
    victim: PathBuf,
}

fn bare() -> Bare {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (ws, home) = (root.join("ws"), root.join("home"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let victim = root.join("victim");
    std::fs::write(&victim, "victim\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    Bare {
        _dir: dir,
        ws,
        home,
        victim,
    }
}

impl Bare {
    /// `agentctl sandbox [extra] -- bash -c SCRIPT` in the workspace; `$VICTIM` names the
    /// file outside.
    fn run(&self, extra: &[&str], script: &str) -> Output {
        Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .env("HOME", &self.home)
            .env("VICTIM", &self.victim)
            .current_dir(&self.ws)
            .args(["sandbox", "--workspace"])
            .arg(&self.ws)
            .args(extra)
            .args(["--", "bash", "-c", script])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `python3 -c SCRIPT AGENTCTL WORKSPACE`: a script that holds a terminal of the host's
    /// around `agentctl sandbox`.
    fn python(&self, script: &str) -> Output {
        Command::new("python3")
            .args(["-c", script, env!("CARGO_BIN_EXE_agentctl")])
            .arg(&self.ws)
            .env("HOME", &self.home)
            .output()
            .unwrap()
    }
}

/// Mode, owner, change time and modification time of `path`, and its extended attributes'
/// names (read outside the sandbox).
fn metadata_of(path: &Path) -> (u32, u32, i64, i64, String) {
    let m = std::fs::metadata(path).unwrap();
    let xattrs = Command::new("python3")
        .args(["-c", "import os,sys; print(os.listxattr(sys.argv[1]))"])
        .arg(path)
        .output()
        .unwrap();
    (
        m.mode(),
        m.uid(),
        m.ctime(),
        m.mtime(),
        text(&xattrs.stdout),
    )
}

#[test]
fn metadata_outside_the_writable_paths_does_not_change() {
    let b = bare();
    let before = metadata_of(&b.victim);
    for mode in ["read-only", "workspace-write"] {
        for script in [
            "chmod 600 \"$VICTIM\"",
            "chmod 4755 \"$VICTIM\"",
            "touch -d 2030-01-01 \"$VICTIM\"",
            "chown 1:1 \"$VICTIM\"",
            "python3 -c 'import os; os.setxattr(os.environ[\"VICTIM\"], \"user.x\", b\"1\")'",
        ] {
            let o = b.run(&["--mode", mode], script);
            assert!(!o.status.success(), "{mode}: `{script}` was allowed");
            assert!(
                refusal(&text(&o.stderr)),
                "{mode}: {script}: {}",
                text(&o.stderr)
            );
        }
    }
    assert_eq!(metadata_of(&b.victim), before);
    // Inside the workspace the mode is the command's to change.
    let o = b.run(&[], "echo 'echo ran' > t.sh && chmod +x t.sh && ./t.sh");
    assert_eq!(text(&o.stdout), "ran\n", "{}", text(&o.stderr));
}

#[test]
fn no_setuid_or_setgid_bit_is_set_even_in_the_workspace() {
    let b = bare();
    for script in [
        "cp /bin/true suid; chmod 4755 suid",
        "cp /bin/true sgid; chmod g+s sgid",
        "cp /bin/true u2; chmod u+s u2",
        "python3 -c 'import os; os.close(os.open(\"created\", os.O_CREAT | os.O_WRONLY, 0o4755))'",
        "install -m 6755 /bin/true installed",
    ] {
        let o = b.run(&[], script);
        assert!(!o.status.success(), "`{script}` was allowed");
        assert!(
            text(&o.stderr).contains("not permitted"),
            "{script}: {}",
            text(&o.stderr)
        );
    }
    let mut seen = 0;
    for entry in std::fs::read_dir(&b.ws).unwrap() {
        let mode = entry.unwrap().metadata().unwrap().mode();
        assert_eq!(mode & 0o6000, 0, "a set-id bit was set: {mode:o}");
        seen += 1;
    }
    assert!(seen >= 3, "the copies were made ({seen})");
}

#[test]
fn other_processes_keep_their_limits_and_priority() {
    let b = bare();
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = victim.id();
    let limits = || std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let nice = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after_name = stat.rsplit_once(')').unwrap().1.to_string();
        after_name.split_whitespace().nth(16).unwrap().to_string()
    };
    let (limits_before, nice_before) = (limits(), nice());
    for script in [
        format!(
            "python3 -c 'import resource; resource.prlimit({pid}, resource.RLIMIT_CPU, (1, 1))'"
        ),
        format!(
            "python3 -c 'import resource; resource.prlimit({pid}, resource.RLIMIT_NOFILE, (0, 0))'"
        ),
        format!("python3 -c 'import os; os.setpriority(os.PRIO_PROCESS, {pid}, 19)'"),
    ] {
        let o = b.run(&["--mode", "read-only"], &script);
        assert!(!o.status.success(), "`{script}` was allowed");
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the other process was killed"
    );
    assert_eq!(limits(), limits_before);
    assert_eq!(nice(), nice_before);
    victim.kill().unwrap();
    victim.wait().unwrap();
    // The command's own limits are still its to set.
    let o = b.run(&[], "ulimit -n 64 && ulimit -n");
    assert_eq!(text(&o.stdout), "64\n", "{}", text(&o.stderr));
}

/// Python that adds a key to the user's keyring (every process of the user reaches it) and
/// prints its id, reads it by its description, or invalidates it.
const KEYS: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
USER_KEYRING = -4
if sys.argv[1] == "add":
    key = libc.syscall(248, b"user", b"agentctl-sandbox-test", b"KEYRING-SECRET", 14, USER_KEYRING)
    print(key if key > 0 else "errno %d" % ctypes.get_errno())
elif sys.argv[1] == "drop":
    libc.syscall(250, 21, int(sys.argv[2]))  # KEYCTL_INVALIDATE
else:
    key = libc.syscall(249, b"user", b"agentctl-sandbox-test", None, 0)  # request_key
    if key < 0:
        print("errno %d" % ctypes.get_errno())
    else:
        buf = ctypes.create_string_buffer(64)
        n = libc.syscall(250, 11, key, buf, 64)  # KEYCTL_READ
        print(buf.raw[:max(n, 0)].decode())
"#;

#[test]
fn the_keyrings_and_sysv_ipc_of_the_host_are_out_of_reach() {
    let b = bare();
    let keys = |arg: &str| {
        let o = Command::new("python3")
            .args(["-c", KEYS, arg])
            .output()
            .unwrap();
        text(&o.stdout).trim().to_string()
    };
    let key = keys("add");
    assert!(
        key.parse::<i64>().is_ok(),
        "the host could not add a key: {key}"
    );
    // Outside, the key reads back; inside, the keyring cannot be used at all.
    assert_eq!(keys("read"), "KEYRING-SECRET");
    assert!(!KEYS.contains('\''));
    let script = format!("python3 -c '{KEYS}' read");
    let o = b.run(&["--mode", "read-only"], &script);
    keys_drop(&key);
    let said = text(&o.stdout);
    assert_eq!(said.trim(), "errno 1", "{said}{}", text(&o.stderr));

    // A SysV segment made inside belongs to the command's own IPC namespace.
    const SHM_KEY: i64 = 0x5a6e_7401;
    let made = b.run(
        &["--mode", "read-only"],
        &format!(
            "python3 -c 'import ctypes; print(ctypes.CDLL(None).shmget({SHM_KEY}, 4096, 0o1600))'"
        ),
    );
    assert!(made.status.success(), "{}", text(&made.stderr));
    let table = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    let leaked = table
        .lines()
        .any(|l| l.split_whitespace().next() == Some(&SHM_KEY.to_string()));
    assert!(
        !leaked,
        "the segment outlived the command in the host's namespace"
    );

    fn keys_drop(key: &str) {
        let _ = Command::new("python3")
            .args(["-c", KEYS, "drop", key])
            .output();
    }
}

/// Python outside the sandbox: a terminal whose slave is the sandboxed command's stdin; the
/// command tries to push a command line into it; prints what the command said and what the
/// terminal's input queue then holds.
const TERMINAL: &str = r#"
import os, pty, subprocess, sys
master, slave = pty.openpty()
inner = "import fcntl, termios\ntry:\n  fcntl.ioctl(0, termios.TIOCSTI, b'X')\n  print('pushed')\nexcept OSError as e:\n  print('refused', e.errno)"
p = subprocess.run([sys.argv[1], "sandbox", "--workspace", sys.argv[2], "--", "python3", "-c", inner],
                   stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=sys.argv[2])
os.set_blocking(slave, False)
try:
    queued = os.read(slave, 64)
except BlockingIOError:
    queued = b""
print(p.stdout.decode().strip(), repr(queued), p.stderr.decode().strip())
"#;

#[test]
fn a_terminal_takes_no_input_from_a_sandboxed_command() {
    let b = bare();
    let o = b.python(TERMINAL);
    let said = text(&o.stdout);
    assert!(
        said.starts_with("refused 1 b''"),
        "{said}{}",
        text(&o.stderr)
    );
}

/// Holds a terminal of the host's (`HOST`) while a sandboxed command, that terminal as its
/// input, lists `/dev/pts`, tries to write to the host's terminal by its path (not there:
/// ENOENT), and opens
/// and uses a pseudo-terminal of its own; prints what the command said, then what reached
/// the host's terminal.
const PTYS: &str = r#"
import os, pty, subprocess, sys
master, slave = pty.openpty()
host = os.ttyname(slave)
inner = f"""
import os, pty
print('listed', sorted(os.listdir('/dev/pts')))
try:
    fd = os.open('{host}', os.O_WRONLY)
    os.write(fd, b'leak')
    print('wrote to the host terminal')
except OSError as e:
    print('host terminal refused', e.errno)
m, s = pty.openpty()
os.write(s, b'ping\\n')
print('own', os.ttyname(s), os.read(m, 16), 'stdin is a tty', os.isatty(0))
"""
p = subprocess.run([sys.argv[1], "sandbox", "--workspace", sys.argv[2], "--", "python3", "-c", inner],
                   stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=sys.argv[2])
os.set_blocking(master, False)
try:
    reached = os.read(master, 64)
except BlockingIOError:
    reached = b""
print(p.stdout.decode() + 'reached ' + repr(reached) + ' ' + p.stderr.decode().strip())
"#;

#[test]
fn pseudo_terminals_of_its_own_and_none_of_the_hosts() {
    let b = bare();
    let o = b.python(PTYS);
    let said = text(&o.stdout);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines,
        [
            "listed ['ptmx']",
            "host terminal refused 2",
            "own /dev/pts/0 b'ping\\r\\n' stdin is a tty True",
            "reached b'' ",
        ],
        "{said}{}",
        text(&o.stderr)
    );
}

#[test]
fn nothing_a_command_started_outlives_it() {
    let b = bare();
    let o = b.run(
        &[],
        "setsid bash -c 'sleep 1; echo late > late' </dev/null >/dev/null 2>&1 & echo started",
    );
    assert_eq!(text(&o.stdout), "started\n", "{}", text(&o.stderr));
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!b.ws.join("late").exists(), "a daemon outlived its command");
    // While the command runs, what it starts runs too.
    let o = b.run(&[], "(sleep 0.2; echo early > early) & wait");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(b.ws.join("early")).unwrap(),
        "early\n"
    );
}

#[test]
fn a_git_or_config_a_command_creates_is_moved_aside() {
    let b = bare();
    let o = b.run(
        &[],
        "git init -q . && git config core.fsmonitor 'touch pwned; false' && \
         printf '[sandbox]\\nmode = \"off\"\\n' > agentctl.toml && echo made",
    );
    assert_eq!(text(&o.stdout), "made\n", "{}", text(&o.stderr));
    let said = text(&o.stderr);
    assert!(
        said.contains("created .git") && said.contains("moved to .git.sandbox-refused"),
        "{said}"
    );
    assert!(
        said.contains("moved to agentctl.toml.sandbox-refused"),
        "{said}"
    );
    assert!(!b.ws.join(".git").exists() && !b.ws.join("agentctl.toml").exists());
    assert!(b.ws.join(".git.sandbox-refused/config").is_file());
    assert!(b.ws.join("agentctl.toml.sandbox-refused").is_file());
    // Nothing there runs the planted hook now.
    let _ = Command::new("git")
        .args(["status"])
        .current_dir(&b.ws)
        .output();
    assert!(!b.ws.join("pwned").exists());
    // The layout of a repository written straight into the workspace (git would take the
    // workspace for a bare repository): its `HEAD` is moved aside, so git does not.
    let o = b.run(
        &[],
        "mkdir -p objects refs/heads && echo 'ref: refs/heads/main' > HEAD && \
         printf '[core]\n\tfsmonitor = \"touch pwned2; false\"\n' > config && echo made",
    );
    assert_eq!(text(&o.stdout), "made\n", "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("moved to HEAD.sandbox-refused"),
        "{}",
        text(&o.stderr)
    );
    let _ = Command::new("git")
        .args(["status"])
        .current_dir(&b.ws)
        .env("GIT_CEILING_DIRECTORIES", b.ws.parent().unwrap())
        .output();
    assert!(!b.ws.join("pwned2").exists());
    // Under read-only nothing can be created, and nothing is moved.
    let o = b.run(&["--mode", "read-only"], "git init -q .");
    assert!(!o.status.success());
    assert!(!text(&o.stderr).contains("moved to"), "{}", text(&o.stderr));
}

/// With the home directory as the workspace, a hidden path's parent cannot be renamed away
/// (the cover would move with it and the next command read the contents under the new
/// name); what else is in that parent stays writable.
#[test]
fn a_hidden_paths_parent_in_the_workspace_cannot_be_renamed() {
    let b = bare();
    let gcloud = b.home.join(".config/gcloud");
    std::fs::create_dir_all(&gcloud).unwrap();
    std::fs::write(gcloud.join("credentials.db"), "SECRET").unwrap();
    let run = |script: &str| {
        Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .env("HOME", &b.home)
            .current_dir(&b.home)
            .args(["sandbox", "--workspace"])
            .arg(&b.home)
            .args(["--", "bash", "-c", script])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = run("mv .config .config.moved; echo x > .config/mine; cat .config/mine");
    assert!(text(&o.stderr).contains("busy"), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), "x", "{}", text(&o.stderr));
    assert!(b.home.join(".config/gcloud/credentials.db").exists());
    let o = run("cat .config.moved/gcloud/credentials.db .config/gcloud/credentials.db");
    assert!(!text(&o.stdout).contains("SECRET"), "{}", text(&o.stdout));
}

/// Through a run: a command that leaves a daemon behind to write the workspace's config once
/// the command is over. The run ends, no config appears, and the next run's tools are as the
/// user configured them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_leaves_no_daemon_to_write_the_config_later() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let command = "setsid bash -c 'sleep 1; printf \"[sandbox]\\nmode = \\\"off\\\"\\n\" > agentctl.toml' \
                   </dev/null >/dev/null 2>&1 & echo started";
    let server = emulator(&script_by_outputs(&[
        json!([call("c1", "shell", json!({ "command": command }))]),
        answer("FINAL: done"),
    ]))
    .await;
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let o = out(run_cmd(&db, &server, &ws, &[]).env("HOME", dir.path()));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !ws.join("agentctl.toml").exists(),
        "the daemon wrote the config"
    );
}

/// Through a run: the command's first process itself leaves the process group (`exec
/// setsid`) and outlives the call's timeout; killing the first process of the command's PID
/// namespace, not the group, ends it, so it writes nothing afterwards. Before it, a command
/// finds its stdin to be a pipe, not a file of the host's (whose mode it could change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_leaves_its_group_ends_with_its_call() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let stdin = "test -p /dev/stdin && stat -L -c %F /dev/stdin > stdin-kind";
    let command = "exec setsid bash -c 'sleep 2; echo late > late' </dev/null >/dev/null 2>&1";
    let server = emulator(&script_by_outputs(&[
        json!([call("c0", "shell", json!({ "command": stdin }))]),
        json!([call(
            "c1",
            "shell",
            json!({ "command": command, "timeout_ms": 1000 })
        )]),
        answer("FINAL: done"),
    ]))
    .await;
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let o = out(run_cmd(&db, &server, &ws, &[]).env("HOME", dir.path()));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let kind = std::fs::read_to_string(ws.join("stdin-kind")).unwrap_or_default();
    assert_eq!(kind.trim(), "fifo", "{}", text(&o.stderr));
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(!ws.join("late").exists(), "the command outlived its call");
}

/// The database a run is journaled in is hidden from its commands wherever `--db` puts it,
/// even inside the workspace, and through a symlink (SQLite keeps its `-wal` beside the
/// file the link names): its bytes do not reach the model, and it cannot be removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_is_hidden_from_commands_wherever_it_lives() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(ws.join("linked.db"), &link).unwrap();
    for (given, db_file) in [
        (
            dir.path().join("elsewhere.db"),
            dir.path().join("elsewhere.db"),
        ),
        (ws.join("inside.db"), ws.join("inside.db")),
        (link, ws.join("linked.db")),
    ] {
        let path = db_file.display().to_string();
        let server = emulator(&script_by_outputs(&[
            json!([
                call(
                    "c_read",
                    "shell",
                    json!({ "command": format!("echo BYTES=$(cat {path} {path}-wal | wc -c)") })
                ),
                call(
                    "c_rm",
                    "shell",
                    json!({ "command": format!("rm -f {path} {path}-wal && echo GONE-$((40+2))") })
                ),
            ]),
            answer("unused"),
            answer("FINAL: done"),
        ]))
        .await;
        let db = format!("sqlite://{}", given.display());
        let o = out(run_cmd(&db, &server, &ws, &[]).env("HOME", dir.path()));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let sent: String = server
            .requests()
            .iter()
            .map(|r| r.body.to_string())
            .collect();
        assert!(sent.contains("c_read"), "the calls' outputs were sent");
        assert!(
            sent.contains("BYTES=0"),
            "{given:?}: the database could be read"
        );
        assert!(
            !sent.contains("GONE-42"),
            "{given:?}: the database was removed"
        );
        assert!(db_file.is_file());
        let run = only_run(&db);
        assert_eq!(show(&db, &run)["status"], "completed");
    }
}

/// A workspace that is a file or not UTF-8 is a usage error (exit 2) that names it; hiding
/// `/` is a policy the sandbox refuses (exit 125); nothing runs in either case. A program
/// that cannot be run is 127 sandboxed or not.
#[test]
fn odd_workspaces_and_policies_are_refused_and_nothing_runs() {
    use std::os::unix::ffi::OsStringExt as _;
    let b = bare();
    let file = b.ws.join("f.txt");
    std::fs::write(&file, "x").unwrap();
    let not_utf8 =
        b.ws.join(std::ffi::OsString::from_vec(b"bad\xffdir".to_vec()));
    std::fs::create_dir(&not_utf8).unwrap();
    let agentctl = |args: &[&std::ffi::OsStr]| {
        Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .env("HOME", &b.home)
            .current_dir(&b.ws)
            .arg("sandbox")
            .args(args)
            .args(["--", "touch", "ran"])
            .output()
            .unwrap()
    };
    let o = agentctl(&["--workspace".as_ref(), file.as_os_str()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("is not a directory"),
        "{}",
        text(&o.stderr)
    );
    let o = agentctl(&["--workspace".as_ref(), not_utf8.as_os_str()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("is not UTF-8"),
        "{}",
        text(&o.stderr)
    );
    let o = agentctl(&["--deny-read".as_ref(), "/".as_ref()]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("whole file system"),
        "{}",
        text(&o.stderr)
    );
    assert!(!b.ws.join("ran").exists() && !not_utf8.join("ran").exists());
    // A program that does not exist: 127 under every mode, as a shell says it.
    for mode in ["off", "read-only", "workspace-write"] {
        let o = Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .env("HOME", &b.home)
            .current_dir(&b.ws)
            .args(["sandbox", "--mode", mode, "--", "/nonexistent/program"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(127), "{mode}: {}", text(&o.stderr));
    }
}

/// A Unix socket the command may reach by path (Landlock does not govern `connect` on one)
/// refuses it once hidden: how the container engines' sockets (root-equivalent) are kept
/// out of reach by default. The listener stands for such an engine.
#[test]
fn a_hidden_socket_refuses_connections() {
    let b = bare();
    let path = b.ws.join("engine.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let script = format!(
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{}\"); print(\"connected\")'",
        path.display()
    );
    let open = b.run(&[], &script);
    assert_eq!(text(&open.stdout), "connected\n", "{}", text(&open.stderr));
    assert!(
        listener.accept().is_ok(),
        "the listener saw the first connection"
    );
    let hidden = b.run(&["--deny-read", &path.display().to_string()], &script);
    assert!(!hidden.status.success(), "{}", text(&hidden.stdout));
    assert!(
        text(&hidden.stderr).contains("Connection refused"),
        "{}",
        text(&hidden.stderr)
    );
    assert!(listener.accept().is_err(), "the listener saw a connection");
}

/// Without the network, the host's Unix sockets are out of reach wherever they are (a
/// database's, a desktop bus, a terminal multiplexer's: Landlock does not govern `connect`
/// on one), and the command's own in the workspace are not; with `--network` the host's are
/// reachable again. Each attempt is checked on the listener too: it saw the connections
/// that were allowed and no other.
#[test]
fn the_hosts_unix_sockets_are_out_of_reach_without_the_network() {
    let b = bare();
    let outside = tempfile::tempdir().unwrap();
    let host_path = outside.path().canonicalize().unwrap().join("daemon.sock");
    let host = std::os::unix::net::UnixListener::bind(&host_path).unwrap();
    host.set_nonblocking(true).unwrap();
    let own_path = b.ws.join("own.sock");
    let own = std::os::unix::net::UnixListener::bind(&own_path).unwrap();
    own.set_nonblocking(true).unwrap();
    let connect = |path: &Path| {
        format!(
            "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{}\"); print(\"connected\")'",
            path.display()
        )
    };
    let refused = b.run(&[], &connect(&host_path));
    assert!(!refused.status.success(), "{}", text(&refused.stdout));
    assert!(
        text(&refused.stderr).contains("Connection refused"),
        "{}",
        text(&refused.stderr)
    );
    assert!(
        host.accept().is_err(),
        "the host's listener saw a connection"
    );
    let kept = b.run(&[], &connect(&own_path));
    assert_eq!(text(&kept.stdout), "connected\n", "{}", text(&kept.stderr));
    assert!(own.accept().is_ok(), "the workspace's listener saw nothing");
    let networked = b.run(&["--network"], &connect(&host_path));
    assert_eq!(
        text(&networked.stdout),
        "connected\n",
        "{}",
        text(&networked.stderr)
    );
    assert!(host.accept().is_ok(), "the host's listener saw nothing");
}

/// A hidden file inside the workspace is covered by a bind of the host's `/dev/null`: the
/// command reads it empty, and cannot change the mode, owner or times of what covers it
/// (they would be those of the host's `/dev/null`).
#[test]
fn a_hidden_files_cover_is_read_only() {
    let b = bare();
    let secret = b.ws.join("secret.txt");
    std::fs::write(&secret, "SECRET\n").unwrap();
    let null = Path::new("/dev/null");
    let before = metadata_of(null);
    let hidden = ["--deny-read", secret.to_str().unwrap()];
    let o = b.run(&hidden, "cat secret.txt; echo read");
    assert_eq!(text(&o.stdout), "read\n", "{}", text(&o.stderr));
    for script in [
        "touch -d '2001-02-03 04:05:06' secret.txt",
        "chown 0:0 secret.txt",
        "chmod 666 secret.txt",
    ] {
        let o = b.run(&hidden, script);
        assert!(!o.status.success(), "`{script}` was allowed");
        assert!(
            text(&o.stderr).contains("Read-only file system"),
            "{script}: {}",
            text(&o.stderr)
        );
    }
    assert_eq!(metadata_of(null), before);
    // Writes to it go nowhere, as to `/dev/null`.
    let o = b.run(&hidden, "echo more > secret.txt && echo wrote");
    assert_eq!(text(&o.stdout), "wrote\n", "{}", text(&o.stderr));
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "SECRET\n");
}

/// A descriptor the caller of `agentctl` left open (a shell's `exec 7<>FILE`) does not reach
/// the command: a descriptor opened outside the sandbox is not checked again, so writing
/// through it would reach a file outside the writable paths.
#[test]
fn descriptors_the_caller_left_open_do_not_reach_the_command() {
    let b = bare();
    let o = Command::new("bash")
        .arg("-c")
        .arg(
            "exec 7<>\"$VICTIM\"; exec \"$AGENTCTL\" sandbox --workspace \"$WS\" -- \
             bash -c 'echo WRITTEN >&7; ls /proc/self/fd'",
        )
        .env("AGENTCTL", env!("CARGO_BIN_EXE_agentctl"))
        .env("VICTIM", &b.victim)
        .env("WS", &b.ws)
        .env("HOME", &b.home)
        .current_dir(&b.ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        text(&o.stderr).contains("Bad file descriptor"),
        "{}",
        text(&o.stderr)
    );
    // `ls`'s own listing is its fourth descriptor.
    assert_eq!(text(&o.stdout), "0\n1\n2\n3\n", "{}", text(&o.stderr));
    assert_eq!(std::fs::read_to_string(&b.victim).unwrap(), "victim\n");
}

/// Through a run: a command that creates `.git` with a `core.fsmonitor` and outlives its
/// timeout is killed with its entry point, before that could move `.git` aside; the host
/// moves it aside instead, and says so in the call's output. The user's next `git status`
/// runs nothing the command planted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_made_by_a_command_that_timed_out_is_moved_aside_by_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let command = "git init -q . && git config core.fsmonitor 'touch pwned; false' && sleep 30";
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c1",
            "shell",
            json!({ "command": command, "timeout_ms": 1500 })
        )]),
        answer("FINAL: done"),
    ]))
    .await;
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let o = out(run_cmd(&db, &server, &ws, &[]).env("HOME", dir.path()));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!ws.join(".git").exists(), "the command's .git was left");
    assert!(ws.join(".git.sandbox-refused/config").is_file());
    let sent: String = server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(sent.contains("Timed out after 1500 ms"), "{sent}");
    assert!(sent.contains("moved to .git.sandbox-refused"), "{sent}");
    let _ = Command::new("git")
        .args(["status"])
        .current_dir(&ws)
        .output();
    assert!(!ws.join("pwned").exists());
}

/// A command tied to its entry point (`dies_with_entry`, what MCP servers get) does not
/// outlive it when the entry point alone is killed, not even a daemon that left every
/// group; and it cannot untie itself: seccomp refuses a parent-death signal but `SIGKILL`.
#[test]
fn a_command_tied_to_its_entry_point_dies_with_it() {
    let b = bare();
    let mut policy =
        agent_sandbox::Policy::new(agent_sandbox::Mode::WorkspaceWrite, &b.ws, Some(&b.home));
    policy.dies_with_entry = true;
    let entry = |program: &str, args: &[&str]| {
        let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentctl"));
        cmd.args(agent_sandbox::entry_args(&policy, program.as_ref(), &args).unwrap())
            .current_dir(&b.ws)
            .env("HOME", &b.home)
            .stdin(Stdio::null());
        cmd
    };
    let mut running = entry(
        "bash",
        &[
            "-c",
            "setsid bash -c 'sleep 1.5; echo late > late' </dev/null >/dev/null 2>&1 & \
             echo started > started; sleep 30",
        ],
    )
    .spawn()
    .unwrap();
    for _ in 0..500 {
        if b.ws.join("started").exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(b.ws.join("started").exists(), "the command did not start");
    running.kill().unwrap();
    running.wait().unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        !b.ws.join("late").exists(),
        "the command outlived its entry point"
    );
    let o = entry(
        "python3",
        &[
            "-c",
            "import ctypes; l = ctypes.CDLL(None, use_errno=True); \
             print(l.prctl(1, 0, 0, 0, 0), ctypes.get_errno(), l.prctl(1, 9, 0, 0, 0))",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(text(&o.stdout), "-1 1 0\n", "{}", text(&o.stderr));
}

/// The configuration directory of the process that drives a run is hidden from its
/// commands, also when another process recorded the run (a `resume` or a worker with its
/// own `AGENTCTL_CONFIG_DIR`): the user's `config.toml` may hold MCP servers' tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driving_processs_config_dir_is_hidden_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let (first, second) = (dir.path().join("cfg-first"), dir.path().join("cfg-second"));
    for cfg in [&first, &second] {
        std::fs::create_dir_all(cfg).unwrap();
        std::fs::write(
            cfg.join("config.toml"),
            "# API_TOKEN = \"TOKEN-OF-THE-CONFIG\"\n[tools.read_file]\napproval = \"auto\"\n",
        )
        .unwrap();
    }
    let server = emulator(&script_by_outputs(&[
        json!([call("c_one", "shell", json!({"command": "true"}))]),
        json!([call(
            "c_cat",
            "shell",
            json!({"command": format!("cat {}/config.toml; echo READ-DONE", second.display())})
        )]),
        answer("FINAL: done"),
    ]))
    .await;
    let db = format!("sqlite://{}", dir.path().join("cfg.db").display());
    let paused = out(run_cmd(&db, &server, &ws, &["--max-steps", "1"])
        .env("HOME", dir.path())
        .env("AGENTCTL_CONFIG_DIR", &first));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    let run = only_run(&db);
    let done = out(resume_cmd(&db, &server, &run, &["--max-steps", "5"])
        .env("HOME", dir.path())
        .env("AGENTCTL_CONFIG_DIR", &second));
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    let sent: String = server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(sent.contains("READ-DONE"), "the command ran");
    assert!(
        !sent.contains("TOKEN-OF-THE-CONFIG"),
        "the resuming process's config.toml was read by the command"
    );
}
