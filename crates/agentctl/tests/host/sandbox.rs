//! The escape suite: each command tries one way out of the sandbox, on this kernel, and the
//! outcome is checked on disk and on the wire, not from the command's own word. The test
//! process stands for the host (a process outside the sandbox, of the same user: root in CI).

use std::io::Read as _;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::host::text;

/// A workspace with a `.git` and an `agentctl.toml`, a home holding a planted key and a
/// state dir, and a directory outside both.
struct Scene {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
    outside: PathBuf,
}

fn scene() -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let home = root.join("home");
    let outside = root.join("outside");
    for d in [
        &ws.join(".git/hooks"),
        &home.join(".ssh"),
        &home.join(".local/share/agentctl"),
        &outside,
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(ws.join("agentctl.toml"), "").unwrap();
    std::fs::write(ws.join("README.md"), "workspace\n").unwrap();
    std::fs::write(home.join(".ssh/id_test"), "PRIVATE KEY\n").unwrap();
    std::fs::write(home.join(".local/share/agentctl/agentctl.db"), "STATE\n").unwrap();
    std::fs::write(outside.join("file"), "outside\n").unwrap();
    Scene {
        _dir: dir,
        ws,
        home,
        outside,
    }
}

impl Scene {
    /// `agentctl sandbox [extra] -- bash -c SCRIPT` in the workspace, with this scene's home.
    fn run(&self, extra: &[&str], script: &str) -> Output {
        Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .env("HOME", &self.home)
            .env("OUTSIDE", &self.outside)
            .env("HOST_PID", std::process::id().to_string())
            .arg("sandbox")
            .arg("--workspace")
            .arg(&self.ws)
            .args(extra)
            .args(["--", "bash", "-c", script])
            .output()
            .unwrap()
    }

    fn refused(&self, extra: &[&str], script: &str) -> String {
        let o = self.run(extra, script);
        assert!(
            !o.status.success(),
            "`{script}` was allowed: {}",
            text(&o.stdout)
        );
        text(&o.stderr)
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Whether `err` is how the kernel refuses a write: Landlock (`Permission denied`), a
/// read-only mount, seccomp or a link across mounts.
pub(crate) fn refusal(err: &str) -> bool {
    [
        "Permission denied",
        "Read-only file system",
        "not permitted",
        "cross-device",
    ]
    .iter()
    .any(|m| err.contains(m))
}

#[test]
fn writes_outside_the_workspace_are_refused_on_disk() {
    let s = scene();
    std::os::unix::fs::symlink(&s.outside, s.ws.join("link")).unwrap();
    let home_file = s.home.join("planted");
    for script in [
        "echo x > \"$HOME/planted\"",
        "echo x > \"$OUTSIDE/new\"",
        "echo x >> \"$OUTSIDE/file\"",
        "echo x > /etc/agentctl-escape",
        "echo x > ../outside/new",
        "echo x > link/new",
        "ln \"$OUTSIDE/file\" hard && echo x >> hard",
        "echo y > moved && mv moved \"$OUTSIDE/moved\"",
        "mkdir \"$OUTSIDE/d\"",
    ] {
        let err = s.refused(&[], script);
        assert!(refusal(&err), "{script}: {err}");
    }
    assert!(!home_file.exists());
    assert!(!Path::new("/etc/agentctl-escape").exists());
    let mut left: Vec<String> = std::fs::read_dir(&s.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["file"], "something was written outside");
    assert_eq!(read(&s.outside.join("file")), "outside\n");
    // What `mv` could not move stayed in the workspace.
    assert_eq!(read(&s.ws.join("moved")), "y\n");
}

#[test]
fn git_and_the_workspace_config_stay_read_only() {
    let s = scene();
    for script in [
        "echo '[x]' >> .git/config",
        "echo 'curl evil' > .git/hooks/pre-commit",
        "rm .git/config",
        "echo 'sandbox = \"off\"' > agentctl.toml",
    ] {
        let err = s.refused(&[], script);
        assert!(err.contains("Read-only file system"), "{script}: {err}");
    }
    assert_eq!(read(&s.ws.join(".git/config")), "[core]\n");
    assert!(!s.ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(read(&s.ws.join("agentctl.toml")), "");
}

#[test]
fn credential_stores_and_the_host_process_are_out_of_reach() {
    let s = scene();
    for script in [
        "cat \"$HOME/.ssh/id_test\"",
        "cat \"$HOME/.local/share/agentctl/agentctl.db\"",
        "cat /proc/$HOST_PID/environ",
        "head -c 16 /proc/$HOST_PID/mem",
        "kill -9 $HOST_PID",
        "python3 -c 'import os,signal; fd=os.open(\"/proc/\"+os.environ[\"HOST_PID\"], os.O_RDONLY | os.O_DIRECTORY); signal.pidfd_send_signal(fd, signal.SIGCONT)'",
        "python3 -c 'import ctypes,os,sys; r=ctypes.CDLL(None,use_errno=True).ptrace(16,int(os.environ[\"HOST_PID\"]),0,0); sys.exit(0 if r==0 else 1)'",
    ] {
        let o = s.run(&[], script);
        assert!(!o.status.success(), "`{script}` was allowed");
        assert!(!text(&o.stdout).contains("PRIVATE KEY") && !text(&o.stdout).contains("STATE"));
    }
    // This process, the one they tried to kill and trace, is still here and untraced.
    let status = read(Path::new("/proc/self/status"));
    assert!(status.contains("TracerPid:\t0"), "{status}");
}

#[test]
fn the_network_is_off_unless_asked_for() {
    let s = scene();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let port = tcp.local_addr().unwrap().port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let uport = udp.local_addr().unwrap().port();
    for script in [
        format!("exec 3<>/dev/tcp/127.0.0.1/{port}"),
        format!("echo hi > /dev/udp/127.0.0.1/{uport}"),
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)'".into(),
        "python3 -c 'import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)'".into(),
        "python3 -c 'import socket; socket.socket(socket.AF_INET6, socket.SOCK_STREAM)'".into(),
    ] {
        s.refused(&[], &script);
    }
    assert!(tcp.accept().is_err(), "the listener saw a connection");
    let mut buf = [0u8; 16];
    assert!(udp.recv_from(&mut buf).is_err(), "a datagram arrived");
    // Local (AF_UNIX) sockets still work: a pipeline through a socketpair.
    let o = s.run(&[], "python3 -c 'import socket; a,b=socket.socketpair(); a.send(b\"ok\"); print(b.recv(2).decode())'");
    assert_eq!(text(&o.stdout).trim(), "ok", "{}", text(&o.stderr));

    let o = s.run(
        &["--network"],
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo hi >&3"),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (mut conn, _) = tcp
        .accept()
        .expect("with --network the listener sees the connection");
    conn.set_nonblocking(false).unwrap();
    let mut got = String::new();
    conn.read_to_string(&mut got).unwrap();
    assert_eq!(got, "hi\n");
}

#[test]
fn ordinary_work_still_runs() {
    let s = scene();
    let script = "set -e
        printf 'int main(void){return 7;}' > prog.c
        if command -v cc >/dev/null; then cc prog.c -o prog; ./prog || test $? -eq 7; fi
        echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"
        ls /usr/bin >/dev/null
        echo piped | tr a-z A-Z
        ( cd sub 2>/dev/null || mkdir sub; echo nested > sub/n )
        sleep 0.1 & wait
        cat README.md > /dev/null
        git --version >/dev/null 2>&1 || true
        echo done";
    let o = s.run(&[], script);
    assert!(
        o.status.success(),
        "{}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert_eq!(text(&o.stdout), "tmp\nPIPED\ndone\n");
    assert_eq!(read(&s.ws.join("sub/n")), "nested\n");
}

#[test]
fn read_only_mode_writes_nothing_but_its_temp_dir() {
    let s = scene();
    let err = s.refused(&["--mode", "read-only"], "echo x > new.txt");
    assert!(refusal(&err), "{err}");
    assert!(!s.ws.join("new.txt").exists());
    let o = s.run(
        &["--mode", "read-only"],
        "cat README.md && echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"",
    );
    assert_eq!(text(&o.stdout), "workspace\nt\n", "{}", text(&o.stderr));
}

/// A workspace the user put inside a hidden directory (the `run --mock` demo workspace lives
/// in the state dir) is reachable, through any path, while the rest of that directory stays
/// hidden and `.git` read-only; for root and, when the tests run as root, for a user without
/// privileges (whose mounts need a user namespace).
#[test]
fn a_workspace_inside_a_hidden_directory_is_reachable_and_nothing_else_there() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = base.join("agentctl");
    std::fs::copy(env!("CARGO_BIN_EXE_agentctl"), &bin).unwrap();
    let home = base.join("home");
    let state = home.join(".local/share/agentctl");
    let ws = state.join("workspaces/demo-1");
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    std::fs::create_dir_all(state.join("workspaces/other")).unwrap();
    std::fs::write(ws.join("README.md"), "workspace\n").unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(state.join("workspaces/other/secret"), "SECRET\n").unwrap();
    std::fs::write(state.join("agentctl.db"), "STATE\n").unwrap();
    let users: &[bool] = if runs::is_root() {
        &[false, true]
    } else {
        &[false]
    };
    for &as_nobody in users {
        if as_nobody {
            // The capabilities root keeps outside are dropped inside: the home is nobody's.
            for entry in walk(&home) {
                std::os::unix::fs::chown(&entry, Some(65534), Some(65534)).unwrap();
            }
        }
        for mode in ["workspace-write", "read-only"] {
            let run = |script: &str| {
                let mut cmd = if as_nobody {
                    let mut c = Command::new("setpriv");
                    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                        .arg(&bin);
                    c
                } else {
                    Command::new(&bin)
                };
                cmd.env("HOME", &home)
                    .env("STATE", &state)
                    .args(["sandbox", "--mode", mode, "--workspace"])
                    .arg(&ws)
                    .args(["--", "bash", "-c", script])
                    .output()
                    .unwrap()
            };
            let who = format!("{mode}, as nobody: {as_nobody}");
            let o = run("cat README.md && cd .. && cd demo-1 && cat README.md");
            assert_eq!(
                text(&o.stdout),
                "workspace\nworkspace\n",
                "{who}: {}",
                text(&o.stderr)
            );
            for script in [
                "cat ../other/secret",
                "cat \"$STATE/workspaces/other/secret\"",
                "cat ../../agentctl.db",
                "cat \"$STATE/agentctl.db\"",
                "echo '[x]' >> .git/config",
                "touch \"$STATE/planted\"",
                "touch ../planted",
            ] {
                let o = run(script);
                assert!(!o.status.success(), "{who}: `{script}` was allowed");
                let out = text(&o.stdout);
                assert!(
                    !out.contains("SECRET") && !out.contains("STATE"),
                    "{who}: {out}"
                );
            }
            let wrote = run("echo new > new.txt").status.success();
            assert_eq!(wrote, mode == "workspace-write", "{who}");
            let _ = std::fs::remove_file(ws.join("new.txt"));
        }
    }
    assert_eq!(read(&ws.join(".git/config")), "[core]\n");
    assert!(!state.join("planted").exists());
    assert!(!state.join("workspaces/planted").exists());
}

/// `dir` and everything beneath it.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    if dir.is_dir() {
        for entry in std::fs::read_dir(dir).unwrap() {
            out.extend(walk(&entry.unwrap().path()));
        }
    }
    out
}

#[test]
fn the_entry_point_refuses_a_bad_policy_and_runs_nothing() {
    let s = scene();
    let o = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .args(["__sandbox-exec", "{\"mode\":\"nope\"}", "--", "touch"])
        .arg(s.ws.join("ran"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("bad sandbox policy"));
    assert!(!s.ws.join("ran").exists());
}

/// Both entry points restrict the same way: the small `agentctl-sandbox` (used when it sits
/// beside `agentctl`) and `agentctl __sandbox-exec` (used when it does not); the small one
/// refuses to be run for anything else.
#[test]
fn both_entry_points_confine_and_the_small_one_runs_nothing_else() {
    let s = scene();
    let policy = serde_json::json!({
        "mode": "workspace-write", "workspace": s.ws, "network": false,
        "writable_roots": [], "deny_read": [], "tmpdir": null
    })
    .to_string();
    for binary in [
        env!("CARGO_BIN_EXE_agentctl"),
        env!("CARGO_BIN_EXE_agentctl-sandbox"),
    ] {
        let script = format!(
            "echo in > {}/in; echo out > {}/out-$$",
            s.ws.display(),
            s.outside.display()
        );
        let o = Command::new(binary)
            .args(["__sandbox-exec", &policy, "--", "bash", "-c", &script])
            .current_dir(&s.ws)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{binary}: the write outside succeeded");
        assert!(refusal(&text(&o.stderr)), "{}", text(&o.stderr));
        assert_eq!(read(&s.ws.join("in")), "in\n", "{binary}");
        std::fs::remove_file(s.ws.join("in")).unwrap();
    }
    let listed = std::fs::read_dir(&s.outside).unwrap().count();
    assert_eq!(listed, 1, "only the planted file is outside");
    let o = Command::new(env!("CARGO_BIN_EXE_agentctl-sandbox"))
        .args(["touch"])
        .arg(s.ws.join("ran"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(!s.ws.join("ran").exists());
}

// ---- Runs: the sandbox as the host applies it to the model's `shell` calls. ----

mod runs {
    use serde_json::{Value, json};

    use crate::host::*;

    fn shell(id: &str, command: &str) -> Value {
        call(id, "shell", json!({"command": command}))
    }

    fn escalate(id: &str, command: &str) -> Value {
        call(
            id,
            "shell",
            json!({"command": command, "sandbox_permissions": "require_escalated",
                   "justification": "write the report where the user asked"}),
        )
    }

    fn exec_items(db: &str, run: &str) -> Vec<Value> {
        let o = out(agentctl(db).args(["--json", "runs", "events", run]));
        text(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["item"]["type"] == "command_execution" && l["type"] == "item.completed")
            .collect()
    }

    async fn commands_run_sandboxed_without_asking_and_the_mode_is_recorded(db: FreshDb) {
        let db = db.url();
        let (_d, ws) = workspace();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("escaped");
        let server = emulator(&script_by_outputs(&[
            json!([shell(
                "c1",
                &format!("echo in > in.txt; echo out > {}", target.display())
            )]),
            answer("FINAL: done"),
        ]))
        .await;
        let o = out(&mut run_cmd(db, &server, &ws, &[]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert!(!target.exists(), "the command wrote outside the workspace");
        assert_eq!(std::fs::read_to_string(ws.join("in.txt")).unwrap(), "in\n");
        let run = only_run(db);
        let view = show(db, &run);
        assert_eq!(view["sandbox"]["mode"], "workspace-write");
        assert_eq!(view["sandbox"]["network"], false);
        let items = exec_items(db, &run);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["item"]["sandbox"], "workspace-write");
        let output = items[0]["item"]["aggregated_output"].as_str().unwrap();
        assert!(
            output.contains("Sandbox: workspace-write (network off)"),
            "{output}"
        );
        assert!(super::refusal(output), "{output}");
        let events = events(db, &run).await;
        assert!(kinds_of(&events, "approval.requested").is_empty());
    }

    async fn an_escalation_always_asks_and_runs_outside_once_when_approved(db: FreshDb) {
        let db = db.url();
        let (_d, ws) = workspace();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("report.txt");
        let server = emulator(&script_by_outputs(&[
            json!([escalate(
                "c1",
                &format!("echo report >> {}", target.display())
            )]),
            answer("FINAL: done"),
        ]))
        .await;
        // `--approval auto` does not cover leaving the sandbox.
        let o = out(&mut run_cmd(db, &server, &ws, &["--approval", "auto"]));
        assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
        assert!(!target.exists());
        let run = only_run(db);
        let view = show(db, &run);
        let pending = &view["pending_approvals"][0];
        assert_eq!(pending["reason"], "escalation");
        assert!(
            pending["arguments"]
                .as_str()
                .unwrap()
                .contains("where the user asked")
        );
        let ok = out(agentctl(db).args(["approve", &run, "c1"]));
        assert!(ok.status.success(), "{}", text(&ok.stderr));
        let o = out(&mut resume_cmd(db, &server, &run, &[]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "report\n",
            "ran once, outside"
        );
        assert_eq!(exec_items(db, &run)[0]["item"]["sandbox"], "escalated");
    }

    async fn a_denied_escalation_tells_the_model_and_the_resumed_run_stays_sandboxed(db: FreshDb) {
        let db = db.url();
        let (_d, ws) = workspace();
        let outside = tempfile::tempdir().unwrap();
        let first = outside.path().join("first");
        let second = outside.path().join("second");
        let server = emulator(&script_by_outputs(&[
            json!([escalate("c1", &format!("echo x > {}", first.display()))]),
            json!([shell("c2", &format!("echo x > {}", second.display()))]),
            answer("FINAL: done"),
        ]))
        .await;
        let o = out(&mut run_cmd(db, &server, &ws, &[]));
        assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
        let run = only_run(db);
        let no = out(agentctl(db).args(["deny", &run, "c1", "--reason", "not outside"]));
        assert!(no.status.success(), "{}", text(&no.stderr));
        let o = out(&mut resume_cmd(db, &server, &run, &[]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert!(
            !first.exists() && !second.exists(),
            "something was written outside"
        );
        // The model was told, and the next request carried it.
        let told = server.requests().iter().any(|r| {
            r.body.to_string().contains("Denied by") && r.body.to_string().contains("not outside")
        });
        assert!(told, "the model was not told of the denial");
        assert_eq!(show(db, &run)["sandbox"]["mode"], "workspace-write");
    }

    async fn approval_deny_refuses_an_escalation(db: FreshDb) {
        let db = db.url();
        let (_d, ws) = workspace();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("x");
        let server = emulator(&script_by_outputs(&[
            json!([escalate("c1", &format!("echo x > {}", target.display()))]),
            answer("FINAL: done"),
        ]))
        .await;
        let o = out(&mut run_cmd(db, &server, &ws, &["--approval", "deny"]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert!(!target.exists());
        let run = only_run(db);
        let events = events(db, &run).await;
        assert!(kinds_of(&events, "approval.requested").is_empty());
    }

    async fn a_system_without_the_sandbox_refuses_an_explicit_mode_and_falls_back_from_the_default(
        db: FreshDb,
    ) {
        let db = db.url();
        let (_d, ws) = workspace();
        let server = emulator(&script_by_outputs(&[
            json!([shell("c1", "echo ran > ran.txt")]),
            answer("FINAL: done"),
        ]))
        .await;
        let mut explicit = run_cmd(db, &server, &ws, &["--sandbox", "workspace-write"]);
        let o = out(explicit.env("AGENTCTL_TEST_SANDBOX_UNSUPPORTED", "1"));
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("--sandbox off"),
            "{}",
            text(&o.stderr)
        );
        assert!(!ws.join("ran.txt").exists());
        let listed = out(agentctl(db).args(["--json", "runs", "list"]));
        assert_eq!(text(&listed.stdout).trim(), "", "a run was created");

        let mut default = run_cmd(db, &server, &ws, &[]);
        let o = out(default.env("AGENTCTL_TEST_SANDBOX_UNSUPPORTED", "1"));
        assert_eq!(
            o.status.code(),
            Some(3),
            "the command must ask: {}",
            text(&o.stderr)
        );
        assert!(
            text(&o.stderr).contains("unsandboxed"),
            "{}",
            text(&o.stderr)
        );
        assert!(!ws.join("ran.txt").exists());
        let view = show(db, &only_run(db));
        assert_eq!(view["sandbox"]["mode"], "off");
        assert!(
            view["sandbox"]["fallback"]
                .as_str()
                .unwrap()
                .contains("test")
        );
        assert_eq!(view["pending_approvals"][0]["reason"], "policy");
    }

    /// The sandbox of every run's event `run.sandbox_changed`, in order.
    async fn sandbox_changes(db: &str, run: &str) -> Vec<Value> {
        let events = events(db, run).await;
        kinds_of(&events, "run.sandbox_changed")
            .into_iter()
            .map(|e| e.payload.clone())
            .collect()
    }

    /// A run killed (SIGKILL) right after it asked to leave the sandbox, then decided and
    /// resumed: the approved command runs outside once, and the next one is sandboxed again.
    async fn a_kill_between_the_request_and_the_decision_keeps_the_mode(db: FreshDb) {
        let db = db.url();
        let (_d, ws) = workspace();
        let outside = tempfile::tempdir().unwrap();
        let (report, escaped) = (
            outside.path().join("report.txt"),
            outside.path().join("escaped"),
        );
        let script = script_by_outputs(&[
            json!([escalate(
                "c1",
                &format!("echo report >> {}", report.display())
            )]),
            json!([shell(
                "c2",
                &format!("echo in > in.txt; echo x > {}", escaped.display())
            )]),
            answer("FINAL: done"),
        ]);
        // How many events the run has once it asked: counted on a scratch journal.
        let scratch = tempfile::tempdir().unwrap();
        let scratch_db = format!("sqlite://{}", scratch.path().join("s.db").display());
        let server = emulator(&script).await;
        let (_d2, scratch_ws) = workspace();
        let o = out(&mut run_cmd(&scratch_db, &server, &scratch_ws, &[]));
        assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
        let counted = events(&scratch_db, &only_run(&scratch_db)).await;
        let asked = counted
            .iter()
            .position(|e| &*e.kind == "approval.requested")
            .expect("the escalation asked")
            + 1;

        let server = emulator(&script).await;
        let mut first = run_cmd(db, &server, &ws, &[]);
        let o = out(first.env("AGENTCTL_TEST_CRASH_AFTER_EVENTS", asked.to_string()));
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(o.status.signal(), Some(9), "{}", text(&o.stderr));
        let run = only_run(db);
        let evs = events(db, &run).await;
        assert_eq!(&*evs.last().unwrap().kind, "approval.requested");
        let ok = out(agentctl(db).args(["approve", &run, "c1"]));
        assert!(ok.status.success(), "{}", text(&ok.stderr));
        let o = out(&mut resume_cmd(db, &server, &run, &[]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert_eq!(std::fs::read_to_string(&report).unwrap(), "report\n");
        assert_eq!(std::fs::read_to_string(ws.join("in.txt")).unwrap(), "in\n");
        assert!(
            !escaped.exists(),
            "the resumed run's next command left the sandbox"
        );
        assert_eq!(show(db, &run)["sandbox"]["mode"], "workspace-write");
        let items = exec_items(db, &run);
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["item"]["sandbox"], "escalated");
        assert_eq!(items[1]["item"]["sandbox"], "workspace-write");
        assert!(sandbox_changes(db, &run).await.is_empty());
    }

    /// A run (workspace-write) whose two steps each write a file with `shell`, paused on
    /// its step budget after the first: its workspace, emulator and id.
    async fn paused_after_one_step(
        db: &str,
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        agent_responses_mock::MockServer,
        String,
    ) {
        let (dir, ws) = workspace();
        let server = emulator(&script_by_outputs(&[
            json!([shell("c1", "echo a > a.txt")]),
            json!([shell("c2", "echo b > b.txt")]),
            answer("FINAL: done"),
        ]))
        .await;
        let o = out(&mut run_cmd(db, &server, &ws, &["--max-steps", "1"]));
        assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
        let run = only_run(db);
        (dir, ws, server, run)
    }

    /// A run paused on its step budget, resumed with `--sandbox read-only`: the change is
    /// journaled with the claim, the next command cannot write the workspace, and
    /// `write_file` is refused from then on.
    async fn resume_with_a_stricter_mode_is_journaled_and_enforced(db: FreshDb) {
        let db = db.url();
        let (_d, ws, server, run) = paused_after_one_step(db).await;
        let o = out(&mut resume_cmd(
            db,
            &server,
            &run,
            &["--max-steps", "5", "--sandbox", "read-only"],
        ));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert!(ws.join("a.txt").exists());
        assert!(
            !ws.join("b.txt").exists(),
            "read-only let the command write"
        );
        let changes = sandbox_changes(db, &run).await;
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0]["from"], "workspace-write");
        assert_eq!(changes[0]["sandbox"]["mode"], "read-only");
        assert_eq!(changes[0]["cause"], "flag");
        assert_eq!(changes[0]["policies"]["write_file"], "deny");
        assert_eq!(changes[0]["policies"]["shell"], "auto");
        // Written with the claim: right after the `run.resumed`.
        let evs = events(db, &run).await;
        let at = evs
            .iter()
            .position(|e| &*e.kind == "run.sandbox_changed")
            .unwrap();
        assert_eq!(&*evs[at - 1].kind, "run.resumed");
        let view = show(db, &run);
        assert_eq!(view["sandbox"]["mode"], "read-only");
        let items = exec_items(db, &run);
        assert_eq!(items[0]["item"]["sandbox"], "workspace-write");
        assert_eq!(items[1]["item"]["sandbox"], "read-only");
    }

    /// `resume --sandbox off` makes every command ask again; a resume without the flag keeps
    /// the mode it finds.
    async fn resume_with_sandbox_off_asks_for_every_command(db: FreshDb) {
        let db = db.url();
        let (_d, ws, server, run) = paused_after_one_step(db).await;
        let o = out(&mut resume_cmd(
            db,
            &server,
            &run,
            &["--max-steps", "5", "--sandbox", "off"],
        ));
        assert_eq!(o.status.code(), Some(3), "c2 must ask: {}", text(&o.stderr));
        assert!(!ws.join("b.txt").exists());
        let view = show(db, &run);
        assert_eq!(view["sandbox"]["mode"], "off");
        assert_eq!(view["pending_approvals"][0]["call_id"], "c2");
        assert_eq!(view["pending_approvals"][0]["reason"], "policy");
        let ok = out(agentctl(db).args(["approve", &run, "c2"]));
        assert!(ok.status.success(), "{}", text(&ok.stderr));
        let o = out(&mut resume_cmd(db, &server, &run, &[]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert!(ws.join("b.txt").exists());
        let changes = sandbox_changes(db, &run).await;
        assert_eq!(
            changes.len(),
            1,
            "the flagless resume changed it: {changes:?}"
        );
        assert_eq!(changes[0]["policies"]["shell"], "ask");
    }

    /// A resume where the recorded mode cannot be had: asked for explicitly, exit 2 and
    /// nothing written; kept from the record, `off` with every command asking, journaled.
    async fn a_resume_where_the_sandbox_cannot_be_had(db: FreshDb) {
        let db = db.url();
        let (_d, ws, server, run) = paused_after_one_step(db).await;
        let before = events(db, &run).await.len();
        let mut explicit = resume_cmd(
            db,
            &server,
            &run,
            &["--max-steps", "5", "--sandbox", "read-only"],
        );
        let o = out(explicit.env("AGENTCTL_TEST_SANDBOX_UNSUPPORTED", "1"));
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("--sandbox off"),
            "{}",
            text(&o.stderr)
        );
        assert_eq!(
            events(db, &run).await.len(),
            before,
            "the refused resume wrote"
        );

        let mut kept = resume_cmd(db, &server, &run, &["--max-steps", "5"]);
        let o = out(kept.env("AGENTCTL_TEST_SANDBOX_UNSUPPORTED", "1"));
        assert_eq!(o.status.code(), Some(3), "c2 must ask: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("unsandboxed"),
            "{}",
            text(&o.stderr)
        );
        assert!(!ws.join("b.txt").exists());
        let changes = sandbox_changes(db, &run).await;
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0]["cause"], "unsupported");
        assert_eq!(changes[0]["sandbox"]["mode"], "off");
        assert!(
            changes[0]["sandbox"]["fallback"]
                .as_str()
                .unwrap()
                .contains("test")
        );
        assert_eq!(show(db, &run)["pending_approvals"][0]["reason"], "policy");
    }

    /// The escape attempts as a model would make them: one run whose `shell` calls each try
    /// one way out, against the real host process (`$PPID` of a command is the host). The
    /// outcome is checked on disk, at a listener and in the host's survival, in each mode.
    fn escapes_through_a_run(mode: &str) {
        let scene = super::scene();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let port = tcp.local_addr().unwrap().port();
        let outside = scene.outside.display().to_string();
        let home = scene.home.display().to_string();
        let attempts = [
            format!("echo x > {home}/planted"),
            format!("echo x > {outside}/new"),
            format!("ln -s {outside} link && echo x > link/via-link"),
            format!("mv README.md {outside}/moved"),
            "echo x >> .git/config; echo x > .git/hooks/pre-commit; echo x >> agentctl.toml"
                .to_string(),
            format!("cat {home}/.ssh/id_test {home}/.local/share/agentctl/agentctl.db"),
            format!("{HOST_PID} cat /proc/$h/environ | tr '\\0' '\\n' | grep OPENAI"),
            format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo leaked >&3"),
            format!("{HOST_PID} kill -9 $h"),
        ];
        let calls: Vec<Value> = attempts
            .iter()
            .enumerate()
            .map(|(i, a)| shell(&format!("c{i}"), a))
            .collect();
        let n = calls.len();
        let mut steps = vec![Value::Array(calls)];
        steps.extend((1..n).map(|_| answer("unused")));
        steps.push(answer("FINAL: done"));
        let server = rt.block_on(emulator(&script_by_outputs(&steps)));
        let db = format!("sqlite://{}", scene.outside.join("../j.db").display());
        let o = out(run_cmd(&db, &server, &scene.ws, &["--sandbox", mode])
            .env("HOME", &scene.home)
            .env("XDG_DATA_HOME", scene.home.join(".local/share")));
        assert_eq!(
            o.status.code(),
            Some(0),
            "the host did not finish: {}",
            text(&o.stderr)
        );
        // On disk: nothing outside changed, `.git` and the config as planted.
        let entries: Vec<_> = std::fs::read_dir(&scene.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(entries, ["file"], "written outside: {entries:?}");
        assert!(!scene.home.join("planted").exists());
        assert_eq!(super::read(&scene.ws.join(".git/config")), "[core]\n");
        assert!(!scene.ws.join(".git/hooks/pre-commit").exists());
        assert_eq!(super::read(&scene.ws.join("agentctl.toml")), "");
        assert_eq!(super::read(&scene.ws.join("README.md")), "workspace\n");
        // At the listener: no connection.
        assert!(tcp.accept().is_err(), "the listener saw a connection");
        // On the wire: no secret reached the model.
        let sent: String = server
            .requests()
            .iter()
            .map(|r| r.body.to_string())
            .collect();
        for secret in ["PRIVATE KEY", "STATE", "OPENAI_API_KEY="] {
            assert!(!sent.contains(secret), "{secret} reached the model");
        }
        let items = exec_items(&db, &only_run(&db));
        assert_eq!(items.len(), n);
        for item in &items {
            assert_eq!(item["item"]["sandbox"], mode, "{item}");
            assert_ne!(item["item"]["exit_code"], 0, "an escape succeeded: {item}");
        }
    }

    #[test]
    fn escapes_through_a_run_workspace_write() {
        escapes_through_a_run("workspace-write");
    }

    #[test]
    fn escapes_through_a_run_read_only() {
        escapes_through_a_run("read-only");
    }

    /// Whether these tests run as root (CI does).
    pub(super) fn is_root() -> bool {
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|v| v.split_whitespace().next().map(|u| u == "0"))
            .unwrap_or(false)
    }

    /// The host run by a user without privileges (uid 65534 when the tests run as root, as
    /// CI does; the tests' own user otherwise): an unsandboxed command cannot read the host's
    /// environment (the host is non-dumpable), and the sandbox holds for that user too (its
    /// mount namespace then needs a user namespace).
    #[test]
    fn a_host_run_by_an_ordinary_user() {
        use std::os::unix::fs::PermissionsExt as _;
        let rt = tokio::runtime::Runtime::new().unwrap();
        let root = is_root();
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let open = |p: &std::path::Path| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap()
        };
        open(&base);
        let bin = base.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        open(&bin);
        for (from, name) in [
            (env!("CARGO_BIN_EXE_agentctl"), "agentctl"),
            (env!("CARGO_BIN_EXE_agentctl-sandbox"), "agentctl-sandbox"),
        ] {
            std::fs::copy(from, bin.join(name)).unwrap();
            open(&bin.join(name));
        }
        let (home, ws, outside, data) = (
            base.join("home"),
            base.join("ws"),
            base.join("outside"),
            base.join("data"),
        );
        for d in [&home, &ws.join(".git"), &outside, &data] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
        if root {
            for p in [
                &home,
                &ws,
                &ws.join(".git"),
                &ws.join(".git/config"),
                &outside,
                &data,
            ] {
                std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
            }
        }
        // One database per run: the tests (root) read each after its run, and a root-owned
        // WAL file would keep the next run (another user) from writing it.
        let host = |db: &str, server: &agent_responses_mock::MockServer, extra: &[&str]| {
            let mut cmd = if root {
                let mut c = std::process::Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                    .arg(bin.join("agentctl"));
                c
            } else {
                std::process::Command::new(bin.join("agentctl"))
            };
            cmd.env_remove("AGENTCTL_DB")
                .env_remove("OPENAI_BASE_URL")
                .env("OPENAI_API_KEY", agent_responses_mock::MOCK_API_KEY)
                .env("HOME", &home)
                .env("XDG_DATA_HOME", home.join(".local/share"))
                .args([
                    "--db",
                    db,
                    "run",
                    "--base-url",
                    &server.base_url(),
                    "--workspace",
                ])
                .arg(&ws)
                .args(extra)
                .arg("do the task")
                .stdin(std::process::Stdio::null());
            out(&mut cmd)
        };

        // Unsandboxed and auto-approved: the host's environment stays out of reach.
        let server = rt.block_on(emulator(&script_by_outputs(&[
            json!([shell(
                "c1",
                "cat /proc/$PPID/environ | tr '\\0' '\\n' | grep OPENAI_API_KEY"
            )]),
            answer("FINAL: done"),
        ])));
        let db = format!("sqlite://{}", data.join("off.db").display());
        let o = host(&db, &server, &["--sandbox", "off", "--approval", "auto"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let run = only_run(&db);
        let items = exec_items(&db, &run);
        let said = items[0]["item"]["aggregated_output"].as_str().unwrap();
        assert_ne!(items[0]["item"]["exit_code"], 0, "{said}");
        assert!(said.contains("Permission denied"), "{said}");
        let sent: String = server
            .requests()
            .iter()
            .map(|r| r.body.to_string())
            .collect();
        assert!(
            !sent.contains(agent_responses_mock::MOCK_API_KEY),
            "the key reached the model"
        );

        // Sandboxed, as that user: writes outside and to `.git` are refused, inside allowed.
        let escaped = outside.join("escaped");
        let server = rt.block_on(emulator(&script_by_outputs(&[
            json!([
                shell("c1", "echo in > in.txt"),
                shell("c2", &format!("echo x > {}", escaped.display())),
                shell("c3", "echo x >> .git/config")
            ]),
            answer("unused"),
            answer("unused"),
            answer("FINAL: done"),
        ])));
        let db = format!("sqlite://{}", data.join("sandboxed.db").display());
        let o = host(&db, &server, &["--sandbox", "workspace-write"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert_eq!(std::fs::read_to_string(ws.join("in.txt")).unwrap(), "in\n");
        assert!(!escaped.exists(), "wrote outside the workspace");
        assert_eq!(
            std::fs::read_to_string(ws.join(".git/config")).unwrap(),
            "[core]\n"
        );
    }

    use crate::host::fresh_db::{self, FreshDb};
    agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: commands_run_sandboxed_without_asking_and_the_mode_is_recorded, an_escalation_always_asks_and_runs_outside_once_when_approved, a_denied_escalation_tells_the_model_and_the_resumed_run_stays_sandboxed, approval_deny_refuses_an_escalation, a_system_without_the_sandbox_refuses_an_explicit_mode_and_falls_back_from_the_default, a_kill_between_the_request_and_the_decision_keeps_the_mode, resume_with_a_stricter_mode_is_journaled_and_enforced, resume_with_sandbox_off_asks_for_every_command, a_resume_where_the_sandbox_cannot_be_had);
}

/// `agentctl sandbox` gives the command the environment a run's `shell` gets: without the
/// API key or the database URLs, everything else kept; under every mode, `off` included
/// (which its help lists).
#[test]
fn the_command_gets_the_environment_a_runs_shell_gets() {
    let s = scene();
    for mode in ["workspace-write", "read-only", "off"] {
        let o = Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .env("HOME", &s.home)
            .env("OPENAI_API_KEY", "sk-test-SECRET123")
            .env("AGENTCTL_DB", "sqlite:///tmp/secret.db")
            .env("KEEP_ME", "kept")
            .args(["sandbox", "--mode", mode, "--workspace"])
            .arg(&s.ws)
            .args([
                "--",
                "sh",
                "-c",
                "echo key=${OPENAI_API_KEY:-none} db=${AGENTCTL_DB:-none} keep=$KEEP_ME",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{mode}: {}", text(&o.stderr));
        assert_eq!(text(&o.stdout), "key=none db=none keep=kept\n", "{mode}");
    }
    let help = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .args(["sandbox", "--help"])
        .output()
        .unwrap();
    assert!(
        text(&help.stdout).contains("off: no sandbox"),
        "{}",
        text(&help.stdout)
    );
    let help = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert!(
        text(&help.stdout).contains("write_file run sandboxed"),
        "{}",
        text(&help.stdout)
    );
}

/// The nice value (field 19 of `/proc/PID/stat`) and I/O priority class (`ionice -p`) of
/// process `pid`.
fn priorities_of(pid: u32) -> (String, String) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let nice = after_name.split(' ').nth(16).unwrap().to_string();
    let io = Command::new("ionice")
        .args(["-p", &pid.to_string()])
        .output()
        .unwrap();
    (nice, text(&io.stdout).trim().to_string())
}

/// Priorities are the caller's own business only: `setpriority` and `ioprio_set` naming
/// the command's process group (which `agentctl sandbox` by hand shares with the shell
/// that started it) or all of its user's processes are refused, and a process outside in
/// that group keeps its nice value and I/O class; the command's own still change.
///
/// Run by a user without privileges (uid 65534 when the tests run as root, as CI does): a
/// root process outside holds capabilities the command lacks, which already keeps the
/// kernel from lowering its priorities.
#[test]
fn priorities_of_the_process_group_and_the_user_are_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    let root = runs::is_root();
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let open = |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
    open(&base).unwrap();
    for (from, name) in [
        (env!("CARGO_BIN_EXE_agentctl"), "agentctl"),
        (env!("CARGO_BIN_EXE_agentctl-sandbox"), "agentctl-sandbox"),
    ] {
        std::fs::copy(from, base.join(name)).unwrap();
        open(&base.join(name)).unwrap();
    }
    let ws = base.join("ws");
    std::fs::create_dir(&ws).unwrap();
    if root {
        std::os::unix::fs::chown(&ws, Some(65534), Some(65534)).unwrap();
    }
    let as_user = |program: &Path| {
        if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(program);
            c
        } else {
            Command::new(program)
        }
    };
    // Stands for the user's shell: the leader of the group the command starts in.
    let mut shell = as_user(Path::new("sleep"))
        .arg("60")
        .process_group(0)
        .spawn()
        .unwrap();
    let group = shell.id();
    let before = priorities_of(group);
    let script = "nice -n 3 nice; ionice -c 3 ionice
        renice -n 7 -g 0 && echo reniced the group
        renice -n 7 -u \"$(id -u)\" && echo reniced the user
        ionice -c 3 -P 0 && echo set the I/O class of the group
        ionice -c 3 -u \"$(id -u)\" && echo set the I/O class of the user
        true";
    let o = as_user(&base.join("agentctl"))
        .env("HOME", &ws)
        .args(["sandbox", "--workspace"])
        .arg(&ws)
        .args(["--", "sh", "-c", script])
        .process_group(i32::try_from(group).unwrap())
        .output()
        .unwrap();
    let after = priorities_of(group);
    shell.kill().unwrap();
    shell.wait().unwrap();
    let said = text(&o.stderr);
    assert!(o.status.success(), "{said}");
    assert_eq!(text(&o.stdout), "3\nidle\n", "{said}");
    assert_eq!(said.matches("not permitted").count(), 4, "{said}");
    assert_eq!(after, before, "the group's leader was reniced");
}

/// The command's private `TMPDIR` is its user's only (0700), by hand and in a run, not
/// listable by other users in the system temp dir.
#[test]
fn the_commands_temp_dir_is_its_owners_only() {
    let s = scene();
    let o = s.run(&[], "stat -c %a \"$TMPDIR\"");
    assert_eq!(text(&o.stdout), "700\n", "{}", text(&o.stderr));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(super::host::emulator(&super::host::script_by_outputs(&[
        serde_json::json!([super::host::call(
            "c1",
            "shell",
            serde_json::json!({"command": "stat -c %a \"$TMPDIR\" > mode.txt"})
        )]),
        super::host::answer("FINAL: done"),
    ])));
    let db = format!("sqlite://{}", s.outside.join("j.db").display());
    let o = super::host::out(&mut super::host::run_cmd(&db, &server, &s.ws, &[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(read(&s.ws.join("mode.txt")), "700\n");
}

/// A command may create a user namespace, but not write its uid or gid map (Landlock grants
/// no write in `/proc`, where root's owner-write files such as `/proc/sysrq-trigger`
/// are): what the README's honest limits say, so tools that need a mapped one (`bwrap`,
/// `unshare --map-root-user`) fail inside.
#[test]
fn a_user_namespace_can_be_created_but_not_mapped() {
    let s = scene();
    let o = s.run(
        &[],
        "unshare --user true && echo created; unshare --user --map-root-user id -u || echo unmapped",
    );
    let said = text(&o.stderr);
    assert_eq!(text(&o.stdout), "created\nunmapped\n", "{said}");
    assert!(said.contains("uid_map"), "{said}");
}

/// With the network on, every socket family is allowed, abstract Unix sockets too (Landlock
/// scopes them only with the network off, where a host's listener stays out of reach).
#[test]
fn abstract_unix_sockets_are_reachable_only_with_the_network() {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let s = scene();
    let name = format!("agentctl-test-{}", std::process::id());
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    listener.set_nonblocking(true).unwrap();
    let script = format!(
        "python3 -c \"import socket; c = socket.socket(socket.AF_UNIX); c.connect('\\0{name}'); c.sendall(b'hi')\""
    );
    let err = s.refused(&[], &script);
    assert!(err.contains("PermissionError"), "{err}");
    assert!(
        listener.accept().is_err(),
        "a connection came without --network"
    );
    let o = s.run(&["--network"], &script);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (mut conn, _) = listener
        .accept()
        .expect("with --network the listener sees the connection");
    conn.set_nonblocking(false).unwrap();
    let mut got = String::new();
    conn.read_to_string(&mut got).unwrap();
    assert_eq!(got, "hi");
}
