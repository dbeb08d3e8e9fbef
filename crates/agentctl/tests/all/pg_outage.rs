//! Commands that wait on a run, through a PostgreSQL connection that drops for a moment: a
//! TCP proxy of the test's own between them and the server cuts every connection and
//! refuses new ones for a while, then lets them through again. What they wait for did not
//! change meanwhile, so they must not answer with the error.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::host::{
    agentctl, answer, call, emulator, fresh_db, only_run, out, run_cmd, script_by_outputs, show,
    text,
};

/// A proxy from a port of its own to PostgreSQL's, whose connections [`Proxy::cut`] drops.
struct Proxy {
    port: u16,
    /// The tasks piping each connection, aborted by a cut.
    pipes: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// While set, a new connection is closed at once.
    down: Arc<Mutex<bool>>,
    /// Once set, nothing passes either way and nothing is closed (a network partition):
    /// every connection, old or new, hangs.
    frozen: tokio::sync::watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn to(upstream: String) -> Proxy {
        Proxy::on(0, upstream).await
    }

    /// A proxy to `upstream` listening on `port` (0: any free one).
    async fn on(port: u16, upstream: String) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let pipes: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let down: Arc<Mutex<bool>> = Arc::default();
        let (frozen, _) = tokio::sync::watch::channel(false);
        let accept = tokio::spawn({
            let (pipes, down, frozen) = (pipes.clone(), down.clone(), frozen.clone());
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if *down.lock().unwrap() {
                        continue;
                    }
                    let upstream = upstream.clone();
                    let mut frozen = frozen.subscribe();
                    pipes.lock().unwrap().push(tokio::spawn(async move {
                        if *frozen.borrow() {
                            // Held open, never answered (until the proxy is dropped).
                            let _held = &client;
                            std::future::pending::<()>().await;
                        }
                        if let Ok(mut server) = TcpStream::connect(&upstream).await {
                            let froze = tokio::select! {
                                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
                                _ = frozen.wait_for(|f| *f) => true,
                            };
                            if froze {
                                let _held = (&client, &server);
                                std::future::pending::<()>().await;
                            }
                        }
                    }));
                }
            }
        });
        Proxy {
            port,
            pipes,
            down,
            frozen,
            accept,
        }
    }

    /// Drops every connection and refuses new ones for `outage`.
    async fn cut(&self, outage: Duration) {
        self.go_down();
        tokio::time::sleep(outage).await;
        self.come_up();
    }

    /// Drops every connection and refuses new ones until [`come_up`](Self::come_up).
    fn go_down(&self) {
        *self.down.lock().unwrap() = true;
        for pipe in self.pipes.lock().unwrap().drain(..) {
            pipe.abort();
        }
    }

    fn come_up(&self) {
        *self.down.lock().unwrap() = false;
    }
}

impl Proxy {
    /// Partitions: from now on nothing passes, and no connection is closed.
    fn freeze(&self) {
        self.frozen.send_replace(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        for pipe in self.pipes.lock().unwrap().drain(..) {
            pipe.abort();
        }
    }
}

/// The `host:port` of `db` (`postgres://user:pass@host:port/name`), and `db` with them
/// replaced by the proxy's at `port`.
fn through(db: &str, port: u16) -> (String, String) {
    let (head, rest) = db.split_once('@').unwrap();
    let (address, tail) = rest.split_once('/').unwrap();
    let upstream = if address.contains(':') {
        address.to_string()
    } else {
        format!("{address}:5432")
    };
    (upstream, format!("{head}@127.0.0.1:{port}/{tail}"))
}

/// `db` behind a proxy of the test's own: the proxy and the URL that goes through it.
async fn behind_a_proxy(db: &str) -> (Proxy, String) {
    let (upstream, _) = through(db, 0);
    let proxy = Proxy::to(upstream).await;
    let (_, via) = through(db, proxy.port);
    (proxy, via)
}

/// An `agentctl run` on `db` itself (not through the proxy) whose model's first reply is
/// a `shell` call of `command`, then `FINAL: done`: the emulator, the host and the run's
/// id, once the model was asked.
async fn a_run_of(
    db: &str,
    ws: &std::path::Path,
    command: &str,
) -> (
    agent_responses_mock::MockServer,
    std::process::Child,
    String,
) {
    let server = emulator(&script_by_outputs(&[
        json!([call("c1", "shell", json!({ "command": command }))]),
        answer("FINAL: done"),
    ]))
    .await;
    let host = run_cmd(db, &server, ws, &["--approval", "auto"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.requests().is_empty() {
        assert!(Instant::now() < deadline, "the run never asked the model");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let run = only_run(db);
    (server, host, run)
}

/// `runs wait` on a run a host drives, through an outage of 2.5 s (its check of the
/// driver, once a second, fails meanwhile): it ends when the run completes, exit 0. It
/// ended at the first failed check with exit 1, which says the run failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_wait_waits_through_a_dropped_connection() {
    let Some(db) = fresh_db::postgres().await else {
        return;
    };
    let db = db.url();
    let (proxy, via) = behind_a_proxy(db).await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, host, run) = a_run_of(db, dir.path(), "sleep 5").await;
    let waiter = agentctl(&via)
        .args(["--json", "runs", "wait", &run, "--timeout", "60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    proxy.cut(Duration::from_millis(2500)).await;
    waited_to_completion(waiter, host);
}

/// `run --wait`, waiting for a decision from another process, through an outage of its
/// connection: it goes on once the call is approved and completes, exit 0. It ended at the
/// cut with exit 1 and the run left `waiting`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_wait_waits_for_a_decision_through_a_dropped_connection() {
    let Some(db) = fresh_db::postgres().await else {
        return;
    };
    let db = db.url();
    let (proxy, via) = behind_a_proxy(db).await;
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c1",
            "shell",
            json!({"command": "echo ran > ran.txt"})
        )]),
        answer("FINAL: decided"),
    ]))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let host = run_cmd(&via, &server, dir.path(), &["--sandbox", "off", "--wait"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let run = loop {
        assert!(Instant::now() < deadline, "the run never waited");
        tokio::time::sleep(Duration::from_millis(50)).await;
        if server.requests().is_empty() {
            continue;
        }
        let run = only_run(db);
        if show(db, &run)["status"] == "waiting" {
            break run;
        }
    };
    proxy.cut(Duration::from_millis(2500)).await;
    let o = out(agentctl(db).args(["approve", &run, "c1"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let ran = host.wait_with_output().unwrap();
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert_eq!(show(db, &run)["final_text"], "FINAL: decided");
    assert!(dir.path().join("ran.txt").exists());
}

/// `steer --wait` through an outage of its connection: it reports the steer applied, exit
/// 0. It ended at the cut with exit 1 ("dropped") while the run applied the steer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_wait_waits_through_a_dropped_connection() {
    let Some(db) = fresh_db::postgres().await else {
        return;
    };
    let db = db.url();
    let (proxy, via) = behind_a_proxy(db).await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, mut host, run) = a_run_of(db, dir.path(), "sleep 4").await;
    let steer = agentctl(&via)
        .args(["--json", "steer", "--wait", &run, "use staging"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.cut(Duration::from_millis(2500)).await;
    let steered = steer.wait_with_output().unwrap();
    assert!(host.wait().unwrap().success());
    assert_eq!(steered.status.code(), Some(0), "{}", text(&steered.stderr));
    assert!(
        text(&steered.stdout).contains("applied"),
        "{}",
        text(&steered.stdout)
    );
}

/// Whether process `pid` still runs (a zombie has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// A worker partitioned from PostgreSQL (its connections hang) while it runs a command
/// stops that command before its lease expires, so before another worker can claim the
/// run and ask for the command again: never two copies at once. It went on running it
/// (its renewals hung, their failure only logged) after the other worker took the run
/// over, and approving the call there ran the command a second time beside the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_worker_stops_its_command_before_another_takes_the_run() {
    use crate::workers::start_worker;
    let Some(db) = fresh_db::postgres().await else {
        return;
    };
    let db = db.url();
    let (proxy, via) = behind_a_proxy(db).await;
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c1",
            "shell",
            json!({
                "command": "sleep 40 & echo $! > sleep.pid; echo start >> lines.txt; wait; \
                            echo end >> lines.txt",
                "timeout_ms": 120_000
            })
        )]),
        answer("FINAL: done"),
    ]))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // Unsandboxed: the pid the command writes is this machine's, not its namespace's.
    let o = agentctl(db)
        .args(["submit", "--base-url", &server.base_url()])
        .args(["--approval", "auto", "--sandbox", "off", "--workspace"])
        .arg(&ws)
        .arg("do the task")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = &text(&o.stdout).trim().to_string();
    let a = start_worker(&via, dir.path(), "a", "4", &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let pid = loop {
        let read = std::fs::read_to_string(ws.join("sleep.pid")).unwrap_or_default();
        if let Ok(pid) = read.trim().parse::<u32>() {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "the command never started: {:?}",
            a.lines()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let b = start_worker(db, dir.path(), "b", "4", &[]);
    proxy.freeze();
    b.wait_for("claimed", Some(id), Duration::from_secs(60));
    let ran_on = alive(pid);
    let lost = a.lines();
    b.signal("TERM");
    assert!(
        !ran_on,
        "A's command still ran when B claimed the run: {lost:?}, B: {:?}, A's log: {}",
        b.lines(),
        std::fs::read_to_string(dir.path().join("a.err")).unwrap_or_default()
    );
    let lost = a.wait_for("lost", Some(id), Duration::from_secs(30));
    assert!(
        lost["reason"]
            .as_str()
            .unwrap()
            .contains("expired without renewal"),
        "{lost}"
    );
    let lines = std::fs::read_to_string(ws.join("lines.txt")).unwrap();
    assert_eq!(lines, "start\n");
}

/// A port nothing listens on (a moment ago).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `runs wait` started while its database refuses connections (the server restarting):
/// it waits for the database, then for the run, and ends with the run's end, exit 0. It
/// ended at once with "cannot open journal ... Connection refused", exit 1 (which says the
/// run failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_wait_started_while_the_database_is_away_waits_for_it() {
    let Some(db) = fresh_db::postgres().await else {
        return;
    };
    let db = db.url();
    let dir = tempfile::tempdir().unwrap();
    let (_server, host, run) = a_run_of(db, dir.path(), "sleep 4").await;
    let port = free_port();
    let (upstream, via) = through(db, port);
    let waiter = agentctl(&via)
        .args(["--json", "runs", "wait", &run, "--timeout", "60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let _proxy = Proxy::on(port, upstream).await;
    waited_to_completion(waiter, host);
}

/// `runs wait --timeout` on a database that stays out of reach: exit 124 (timed out),
/// saying so, not 1 (which says the run failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_wait_on_a_database_out_of_reach_times_out() {
    let Some(db) = fresh_db::postgres().await else {
        return;
    };
    let (_, via) = through(db.url(), free_port());
    let o = out(agentctl(&via).args(["runs", "wait", "some-run", "--timeout", "1.5"]));
    let said = text(&o.stderr);
    assert_eq!(o.status.code(), Some(124), "{said}");
    assert!(said.contains("within the timeout"), "{said}");
}

/// A wait whose first read of the run fails (the journal opened, then the database away
/// for a moment) reads again: it ends with the run's end. It failed at once with the
/// read's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_whose_first_read_fails_reads_again() {
    use agent_host::run::wait::{StopAt, WaitEnd, wait_until};
    let Some(db) = fresh_db::postgres().await else {
        return;
    };
    let db = db.url();
    let (proxy, via) = behind_a_proxy(db).await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, mut host, run) = a_run_of(db, dir.path(), "sleep 3").await;
    let journal = agent_journal::Journal::open_for_reading(&via)
        .await
        .unwrap();
    proxy.go_down();
    let waiting = tokio::spawn({
        let journal = journal.clone();
        async move {
            wait_until(
                &journal,
                &run,
                Some(Duration::from_secs(60)),
                StopAt::StoppedOrWaiting,
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy.come_up();
    let end = waiting.await.unwrap().unwrap();
    assert!(host.wait().unwrap().success());
    let WaitEnd::Stopped(state) = end else {
        panic!("the wait did not see the run's end: {end:?}");
    };
    assert_eq!(state.status(), agent_host::run::RunStatus::Completed);
}

/// `waiter` (a `runs wait --json`) and `host` (the run's driver) both end well: the wait
/// exits 0 and prints the run completed.
fn waited_to_completion(waiter: std::process::Child, mut host: std::process::Child) {
    let waited = waiter.wait_with_output().unwrap();
    assert!(host.wait().unwrap().success());
    let said = String::from_utf8_lossy(&waited.stderr);
    assert_eq!(waited.status.code(), Some(0), "{said}");
    let line: Value = serde_json::from_slice(&waited.stdout).unwrap();
    assert_eq!(line["status"], "completed", "{line}");
}
