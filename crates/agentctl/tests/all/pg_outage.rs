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
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn to(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let pipes: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let down: Arc<Mutex<bool>> = Arc::default();
        let accept = tokio::spawn({
            let (pipes, down) = (pipes.clone(), down.clone());
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if *down.lock().unwrap() {
                        continue;
                    }
                    let upstream = upstream.clone();
                    pipes.lock().unwrap().push(tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(&upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    }));
                }
            }
        });
        Proxy {
            port,
            pipes,
            down,
            accept,
        }
    }

    /// Drops every connection and refuses new ones for `outage`.
    async fn cut(&self, outage: Duration) {
        *self.down.lock().unwrap() = true;
        for pipe in self.pipes.lock().unwrap().drain(..) {
            pipe.abort();
        }
        tokio::time::sleep(outage).await;
        *self.down.lock().unwrap() = false;
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
    let (_server, mut host, run) = a_run_of(db, dir.path(), "sleep 5").await;
    let waiter = agentctl(&via)
        .args(["--json", "runs", "wait", &run, "--timeout", "60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    proxy.cut(Duration::from_millis(2500)).await;
    let waited = waiter.wait_with_output().unwrap();
    assert!(host.wait().unwrap().success());
    let said = String::from_utf8_lossy(&waited.stderr);
    assert_eq!(waited.status.code(), Some(0), "{said}");
    let line: Value = serde_json::from_slice(&waited.stdout).unwrap();
    assert_eq!(line["status"], "completed", "{line}");
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
