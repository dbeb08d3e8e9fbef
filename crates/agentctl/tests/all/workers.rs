#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! The worker pool end to end: `agentctl submit` and `agentctl worker` processes over one
//! journal (PostgreSQL, and SQLite where several processes of one machine share a file),
//! the emulator over HTTP on 127.0.0.1, workers killed, stopped and terminated.

use crate::host;

use crate::workers;

use std::time::{Duration, Instant};

use agent_runtime::CancellationToken;

use host::{emulator, events};
use workers::{
    Worker, check_run, claims, spawn_denier, start_worker, story, submit, wait_all_completed,
};

/// A small deterministic generator (no dependency for one test's randomness).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

/// 3 workers, 30 submitted runs; a random worker is SIGKILLed every few hundred
/// milliseconds and a new one started, until every run completed.
async fn takeover_under_random_kills(db: FreshDb) {
    let db = db.url();
    let server = emulator(&story("0.05")).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = submit(db, &server, dir.path(), 30);
    let ids: Vec<String> = runs.iter().map(|(id, _)| id.clone()).collect();
    let stop_denier = CancellationToken::new();
    let denier = spawn_denier(db.to_string(), ids.clone(), stop_denier.clone());
    let mut all: Vec<Worker> = Vec::new();
    let mut live: Vec<usize> = Vec::new();
    for n in 0..3 {
        all.push(start_worker(
            db,
            dir.path(),
            &format!("w{n}"),
            "1",
            &["--concurrency", "4"],
        ));
        live.push(n);
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("takeover seed {seed}");
    let mut rng = Lcg(seed);
    let mut kills = 0;
    let chaos_until = Instant::now() + Duration::from_secs(45);
    while Instant::now() < chaos_until {
        tokio::time::sleep(Duration::from_millis(200 + rng.next(300))).await;
        if wait_all_completed(db, &ids, Duration::ZERO)
            .await
            .is_empty()
        {
            break;
        }
        let victim = live.remove(rng.next(live.len() as u64) as usize);
        all[victim].signal("KILL");
        let _ = all[victim].child.wait();
        kills += 1;
        let n = all.len();
        all.push(start_worker(
            db,
            dir.path(),
            &format!("w{n}"),
            "1",
            &["--concurrency", "4"],
        ));
        live.push(n);
    }
    let left = wait_all_completed(db, &ids, Duration::from_secs(120)).await;
    stop_denier.cancel();
    let denied = denier.await.unwrap();
    for &n in &live {
        all[n].signal("TERM");
    }
    for &n in &live {
        let status = all[n].child.wait().unwrap();
        assert!(status.success(), "worker w{n} exited with {status}");
    }
    assert!(left.is_empty(), "runs not completed: {left:?}");
    assert!(kills > 0);
    let claims = claims(&all);
    for (id, ws) in &runs {
        check_run(id, ws, &events(db, id).await, &claims);
    }
    eprintln!(
        "takeover: {} workers started, {kills} killed, {} claims, {denied} indeterminate calls denied",
        all.len(),
        claims.len()
    );
}

/// A worker stopped (SIGSTOP) past its lease loses the run to another; resumed (SIGCONT),
/// its next write is refused and it drops the run.
async fn zombie_is_fenced(db: FreshDb) {
    let db = db.url();
    let server = emulator(&story("2")).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = submit(db, &server, dir.path(), 1);
    let (id, ws) = &runs[0];
    let stop_denier = CancellationToken::new();
    let denier = spawn_denier(db.to_string(), vec![id.clone()], stop_denier.clone());
    let zombie = start_worker(db, dir.path(), "zombie", "1", &[]);
    zombie.wait_for("claimed", Some(id), Duration::from_secs(20));
    // Its first shell command is running (2 s): stop the worker past its lease.
    std::thread::sleep(Duration::from_millis(300));
    stop_outside_a_write(&zombie, db);
    let heir = start_worker(db, dir.path(), "heir", "1", &[]);
    let taken = heir.wait_for("claimed", Some(id), Duration::from_secs(20));
    assert_eq!(taken["epoch"], 2);
    let left = wait_all_completed(db, std::slice::from_ref(id), Duration::from_secs(60)).await;
    assert!(left.is_empty(), "the heir did not complete the run");
    let before = events(db, id).await.len();
    zombie.signal("CONT");
    let lost = zombie.wait_for("lost", Some(id), Duration::from_secs(20));
    eprintln!("zombie: {lost}");
    stop_denier.cancel();
    denier.await.unwrap();
    for w in [&zombie, &heir] {
        w.signal("TERM");
    }
    let mut all = vec![zombie, heir];
    for w in &mut all {
        assert!(
            w.child.wait().unwrap().success(),
            "worker {} failed",
            w.name
        );
    }
    let events = events(db, id).await;
    // Nothing the zombie did after the takeover reached the journal.
    assert_eq!(events.len(), before, "the zombie wrote after the takeover");
    let first_heir = events.iter().find(|e| e.epoch == Some(2)).unwrap().seq;
    assert!(
        events
            .iter()
            .all(|e| e.epoch != Some(1) || e.seq < first_heir)
    );
    check_run(id, ws, &events, &claims(&all));
}

/// A lone worker stopped (SIGSTOP) past its leases and continued keeps its runs: it
/// renews them, never claims them again. It used to claim its own expired leases (a new
/// epoch), which fenced its own live drives: `lost` ("claimed by another worker", with no
/// other worker), their running commands killed and asked again as indeterminate.
async fn a_stalled_worker_keeps_its_own_runs(db: FreshDb) {
    let db = db.url();
    let server = emulator(&story("3")).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = submit(db, &server, dir.path(), 6);
    let ids: Vec<String> = runs.iter().map(|(id, _)| id.clone()).collect();
    let stop_denier = CancellationToken::new();
    let denier = spawn_denier(db.to_string(), ids.clone(), stop_denier.clone());
    let only = start_worker(db, dir.path(), "only", "1", &["--concurrency", "8"]);
    for id in &ids {
        only.wait_for("claimed", Some(id), Duration::from_secs(20));
    }
    // Their first shell commands run (3 s each): stall the worker past its 1 s leases.
    std::thread::sleep(Duration::from_millis(300));
    stop_outside_a_write(&only, db);
    std::thread::sleep(Duration::from_secs(3));
    only.signal("CONT");
    let left = wait_all_completed(db, &ids, Duration::from_secs(90)).await;
    stop_denier.cancel();
    let denied = denier.await.unwrap();
    only.signal("TERM");
    let mut all = vec![only];
    assert!(all[0].child.wait().unwrap().success());
    let lines = all[0].lines();
    assert!(left.is_empty(), "not completed: {left:?}; {lines:?}");
    assert!(
        lines.iter().all(|l| l["type"] != "lost"),
        "the worker lost a run to itself: {lines:?}"
    );
    assert_eq!(denied, 0, "a command was cut off: {lines:?}");
    for (id, ws) in &runs {
        let claimed: Vec<_> = lines
            .iter()
            .filter(|l| l["type"] == "claimed" && l["run_id"] == id.as_str())
            .collect();
        assert_eq!(claimed.len(), 1, "{id} claimed again: {lines:?}");
        let events = events(db, id).await;
        assert!(
            events
                .iter()
                .all(|e| e.payload["reason"] != "indeterminate"),
            "{id}"
        );
        check_run(id, ws, &events, &claims(&all));
    }
    all.clear();
}

/// Stops `worker` (SIGSTOP) at a moment it holds no SQLite write lock. A process stopped
/// inside a commit keeps the file's one write lock until it is continued, so no other
/// process could claim anything: a stall of the test's making, not a zombie's (on a busy CI
/// machine a commit's fsync is long enough to be caught). So: stop, try the write lock
/// with no wait, and if it is held, continue the worker and try again a moment later.
/// PostgreSQL has no such file lock: stopped at once.
fn stop_outside_a_write(worker: &Worker, db: &str) {
    let Some(path) = db.strip_prefix("sqlite://") else {
        worker.signal("STOP");
        return;
    };
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::ZERO).unwrap();
    for _ in 0..200 {
        worker.signal("STOP");
        if conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").is_ok() {
            return;
        }
        worker.signal("CONT");
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("the worker held the write lock at every one of 200 stops");
}

/// SIGTERM: the worker gives the run back at its next step boundary and exits 0; another
/// worker continues it at once, long before the lease would have expired.
async fn sigterm_releases_the_run(db: FreshDb) {
    let db = db.url();
    let server = emulator(&story("1")).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = submit(db, &server, dir.path(), 1);
    let (id, ws) = &runs[0];
    let first = start_worker(db, dir.path(), "first", "120", &[]);
    first.wait_for("claimed", Some(id), Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(200));
    first.signal("TERM");
    let mut first = first;
    let status = first.child.wait().unwrap();
    assert!(status.success(), "the worker exited with {status}");
    let ended = first.wait_for("ended", Some(id), Duration::ZERO);
    assert_eq!(ended["status"], "released", "{ended}");
    let started = Instant::now();
    let second = start_worker(db, dir.path(), "second", "120", &[]);
    let left = wait_all_completed(db, std::slice::from_ref(id), Duration::from_secs(60)).await;
    assert!(left.is_empty());
    // Far below the 120 s lease: the run was released, not left to expire.
    assert!(started.elapsed() < Duration::from_secs(60));
    second.signal("TERM");
    let mut all = vec![first, second];
    assert!(all[1].child.wait().unwrap().success());
    let events = events(db, id).await;
    // The first worker's shell call finished before it let go: nothing was cut off.
    assert!(
        events
            .iter()
            .all(|e| e.payload["reason"] != "indeterminate")
    );
    check_run(id, ws, &events, &claims(&all));
    all.clear();
}

/// A run a worker cannot drive (its workspace was removed after submit) is paused with
/// the reason, for every reader and waiter to see, not left `queued` for no worker; once
/// the workspace is back, `resume` drives it.
async fn a_run_no_worker_can_drive_is_paused_saying_why(db: FreshDb) {
    use host::{agentctl, out, text};
    let db = db.url();
    let server = emulator(&story("0")).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = submit(db, &server, dir.path(), 1);
    let (id, ws) = &runs[0];
    std::fs::remove_dir_all(ws).unwrap();
    let worker = start_worker(db, dir.path(), "w", "30", &[]);
    let ended = worker.wait_for("ended", Some(id), Duration::from_secs(20));
    assert_eq!(ended["status"], "error", "{ended}");
    worker.signal("TERM");
    let shown = host::show(db, id);
    assert_eq!(shown["status"], "paused", "{shown}");
    let detail = shown["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("No such file"), "{shown}");
    let events = events(db, id).await;
    let paused = host::kinds_of(&events, "run.paused");
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].payload["reason"], "cannot_drive");
    // A waiter is told at once (paused: exit 3), not left waiting for a worker.
    let waited = out(agentctl(db).args(["runs", "wait", id, "--timeout", "20"]));
    assert_eq!(waited.status.code(), Some(3), "{}", text(&waited.stdout));
    std::fs::create_dir_all(ws).unwrap();
    let resumed = out(agentctl(db).args(["resume", "--base-url", &server.base_url(), id]));
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
}

/// A worker whose environment has no API key says so in the run's end, on one line with
/// the hint (it used to read `cannot reach the model: : OPENAI_API_KEY is not set`, the
/// empty text being the hint's marker).
async fn a_worker_without_the_key_says_so_on_one_line(db: FreshDb) {
    let db = db.url();
    let server = emulator(&story("0")).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = submit(db, &server, dir.path(), 1);
    let mut cmd = host::agentctl(db);
    cmd.env_remove("OPENAI_API_KEY");
    let worker = workers::start_worker_from(cmd, dir.path(), "w", "30", &[]);
    let ended = worker.wait_for("ended", Some(&runs[0].0), Duration::from_secs(20));
    worker.signal("TERM");
    assert_eq!(ended["status"], "error", "{ended}");
    let detail = ended["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("cannot reach the model: OPENAI_API_KEY is not set; set OPENAI_API_KEY"),
        "{ended}"
    );
    assert!(!detail.contains(": :"), "{ended}");
}

/// `resume` of a run still queued for the workers takes it out of their queue: a worker
/// started while it runs never claims it, and nothing is done twice.
async fn a_resumed_queued_run_is_not_claimed_by_a_worker(db: FreshDb) {
    use host::agentctl;
    let db = db.url();
    let server = emulator(&story("0.5")).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = submit(db, &server, dir.path(), 1);
    let (id, ws) = &runs[0];
    let resume = agentctl(db)
        .args(["resume", "--base-url", &server.base_url(), id])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The resume has claimed the run (its first command runs) before the worker starts.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !host::kinds_of(&events(db, id).await, "tool.started")
        .iter()
        .any(|_| true)
    {
        assert!(Instant::now() < deadline, "the resume never started a call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let worker = start_worker(db, dir.path(), "w", "1", &[]);
    let resumed = resume.wait_with_output().unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    std::thread::sleep(Duration::from_millis(500));
    worker.signal("TERM");
    assert!(
        worker.lines().iter().all(|l| l["type"] != "claimed"),
        "a worker claimed a run a live resume drove: {:?}",
        worker.lines()
    );
    let events = events(db, id).await;
    assert_eq!(host::kinds_of(&events, "run.resumed").len(), 1);
    assert_eq!(host::kinds_of(&events, "run.completed").len(), 1);
    for call in ["call_a", "call_b", "call_c"] {
        let lines = std::fs::read_to_string(ws.join(format!("{call}.txt"))).unwrap();
        assert_eq!(lines.lines().count(), 1, "{call} ran {lines:?}");
    }
}

/// `interrupt` of a run queued for the workers withdraws it: it shows `interrupted`, no
/// worker takes it, and `resume` drives it later.
async fn an_interrupt_withdraws_a_queued_run(db: FreshDb) {
    use host::{agentctl, out, text};
    let db = db.url();
    let server = emulator(&story("0")).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = submit(db, &server, dir.path(), 1);
    let (id, _) = &runs[0];
    let o = out(agentctl(db).args(["interrupt", id]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(host::show(db, id)["status"], "interrupted");
    let worker = start_worker(db, dir.path(), "w", "1", &["--poll", "0.05"]);
    std::thread::sleep(Duration::from_millis(800));
    worker.signal("TERM");
    assert!(
        worker.lines().iter().all(|l| l["type"] != "claimed"),
        "{:?}",
        worker.lines()
    );
    let o = out(agentctl(db).args(["resume", "--base-url", &server.base_url(), id]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

/// An `interrupt` outlives the worker it was asked of: asked while the worker hangs (then
/// killed), or after it was killed and before its lease expired, the interrupt is journaled
/// (the second used to be refused: "no host is driving it") and the worker that takes the
/// run over stops it (its `run.resumed` used to clear the request, and the run completed).
async fn an_interrupt_outlives_the_worker_it_was_asked_of(db: FreshDb) {
    use host::{agentctl, out, text};
    let db = db.url();
    let server = emulator(&story("2")).await;
    for hangs_first in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let runs = submit(db, &server, dir.path(), 1);
        let (id, _) = &runs[0];
        let stop_denier = CancellationToken::new();
        let denier = spawn_denier(db.to_string(), vec![id.clone()], stop_denier.clone());
        let mut first = start_worker(db, dir.path(), "first", "3", &[]);
        first.wait_for("claimed", Some(id), Duration::from_secs(20));
        // Its first shell command is running (2 s).
        std::thread::sleep(Duration::from_millis(300));
        if hangs_first {
            stop_outside_a_write(&first, db);
        } else {
            first.signal("KILL");
            let _ = first.child.wait();
        }
        let o = out(agentctl(db).args(["interrupt", id]));
        assert!(
            o.status.success(),
            "hangs first {hangs_first}: {}",
            text(&o.stderr)
        );
        if hangs_first {
            first.signal("KILL");
            let _ = first.child.wait();
        }
        let heir = start_worker(db, dir.path(), "heir", "3", &[]);
        let o = out(agentctl(db).args(["runs", "wait", id, "--timeout", "60"]));
        assert_eq!(
            o.status.code(),
            Some(130),
            "hangs first {hangs_first}: {}",
            text(&o.stdout)
        );
        assert!(heir.lines().iter().any(|l| l["type"] == "claimed"));
        let events = events(db, id).await;
        assert!(events.iter().all(|e| &*e.kind != "run.completed"));
        stop_denier.cancel();
        denier.await.unwrap();
        heir.signal("TERM");
    }
}

/// `runs wait` on runs a worker pauses says `paused`, exit 3, every time: it stopped at the
/// `run.paused` event, when the worker may still hold the lease for a moment, which the
/// lease-aware status showed as `running` (exit 1; about one run in four here).
async fn waiting_for_runs_a_worker_pauses_says_paused(db: FreshDb) {
    use host::{agentctl, text};
    let db = db.url();
    let server = emulator(&story("0")).await;
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..12)
        .map(|i| {
            let ws = dir.path().join(format!("ws{i:02}"));
            std::fs::create_dir_all(&ws).unwrap();
            let o = agentctl(db)
                .args(["submit", "--base-url", &server.base_url()])
                .args(["--approval", "auto", "--max-steps", "1", "--workspace"])
                .arg(&ws)
                .arg("do the task")
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", text(&o.stderr));
            text(&o.stdout).trim().to_string()
        })
        .collect();
    let waits: Vec<_> = ids
        .iter()
        .map(|id| {
            agentctl(db)
                .args(["runs", "wait", id, "--timeout", "60"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let worker = start_worker(db, dir.path(), "w", "10", &["--concurrency", "8"]);
    for (id, wait) in ids.iter().zip(waits) {
        let o = wait.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(3), "{id}: {}", text(&o.stdout));
        assert!(
            text(&o.stdout).contains("paused"),
            "{id}: {}",
            text(&o.stdout)
        );
    }
    worker.signal("TERM");
}

/// What no worker could use is refused at once, exit 2: a `submit` whose `--base-url` is
/// no http(s) URL (it was queued, and the worker the first to refuse it), and a
/// `--lease-ttl` too short to renew (0.0004 s was kept as 0 ms: every claim expired at once
/// and runs never moved).
#[test]
fn what_no_worker_could_use_is_refused_up_front() {
    use host::{agentctl, out, text};
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("u.db").display());
    for url in ["not a url", "ftp://x/v1"] {
        let o = out(agentctl(&db)
            .args(["submit", "--base-url", url, "--workspace"])
            .arg(dir.path())
            .arg("do the task"));
        assert_eq!(o.status.code(), Some(2), "{url}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("invalid base URL"),
            "{}",
            text(&o.stderr)
        );
    }
    let listed = out(agentctl(&db).args(["--json", "runs", "list"]));
    assert_eq!(text(&listed.stdout).trim(), "", "a run was queued");
    for ttl in ["0.0004", "0.049"] {
        // Accepted, the worker would run until stopped.
        let o = host::out_within(
            agentctl(&db).args(["worker", "--lease-ttl", ttl]),
            Duration::from_secs(30),
        );
        assert_eq!(o.status.code(), Some(2), "{ttl}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("at least 0.05"),
            "{}",
            text(&o.stderr)
        );
    }
}

/// A `--name` the journal cannot take as a lease holder (empty, over 256 bytes) is refused
/// at once, exit 2: accepted, the worker warned twice a second for good and claimed nothing.
#[test]
fn a_worker_name_the_journal_cannot_take_is_refused() {
    use host::{agentctl, out_within, text};
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("n.db").display());
    for name in [String::new(), "w".repeat(257)] {
        let o = out_within(
            agentctl(&db).args(["worker", "--name", &name]),
            Duration::from_secs(30),
        );
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}: {stderr}", name.len());
        assert!(stderr.contains("--name"), "{stderr}");
    }
}

/// A worker on a database that lives only in its own process (`memory:`,
/// `sqlite::memory:`) is refused at once, exit 2, as `submit` is: no run could ever be
/// queued where it looks, and it waited for one until stopped.
#[test]
fn a_worker_on_a_private_database_is_refused() {
    use host::{agentctl, out_within, text};
    for db in ["memory:", "sqlite::memory:"] {
        let o = out_within(agentctl(db).args(["worker"]), Duration::from_secs(30));
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{db}: {stderr}");
        assert!(stderr.contains("lives only in this process"), "{stderr}");
    }
}

/// A `submit --mock --mock-script` whose script cannot be read or is no script is refused
/// at once, exit 2, as `run` refuses it: it was queued, and the worker the first to refuse it.
#[test]
fn a_submitted_mock_script_is_checked_up_front() {
    use host::{agentctl, out, text};
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("m.db").display());
    let not_json = dir.path().join("notes.txt");
    std::fs::write(&not_json, "hello").unwrap();
    for script in [dir.path().join("missing.json"), not_json] {
        let o = out(agentctl(&db)
            .args(["submit", "--mock", "--mock-script"])
            .arg(&script)
            .arg("--workspace")
            .arg(dir.path())
            .arg("do the task"));
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}: {stderr}", script.display());
        assert!(stderr.contains("--mock-script"), "{stderr}");
    }
    let listed = out(agentctl(&db).args(["--json", "runs", "list"]));
    assert_eq!(text(&listed.stdout).trim(), "", "a run was queued");
}

/// A worker whose `--base-url` or `--mock-script` no client can use is refused at start,
/// exit 2, and the queue is left as it was: it claimed every queued run and paused each
/// (`cannot_drive`, which no worker takes again), a `--mock` one too.
#[test]
fn a_worker_with_an_endpoint_no_run_could_use_leaves_the_queue_alone() {
    use host::{agentctl, out, out_within, text};
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("e.db").display());
    let queued = out(agentctl(&db)
        .args(["submit", "--mock", "--workspace"])
        .arg(dir.path())
        .arg("do the task"));
    assert!(queued.status.success(), "{}", text(&queued.stderr));
    let missing = dir.path().join("missing.json");
    for args in [
        &["--base-url", "not a url"][..],
        &["--mock", "--mock-script", missing.to_str().unwrap()],
    ] {
        let o = out_within(
            agentctl(&db).args(["worker", "--poll", "0.05"]).args(args),
            Duration::from_secs(30),
        );
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
    }
    let listed = out(agentctl(&db).args(["--json", "runs", "list"]));
    let run: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(run["status"], "queued", "{run}");
}

/// `submit --stream-idle-timeout` is refused, exit 2, naming the worker's flag: a run does
/// not record it (the worker's own applies), so it was ignored without a word.
#[test]
fn submit_refuses_a_stream_idle_timeout_it_cannot_record() {
    use host::{agentctl, out, text};
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("t.db").display());
    let o = out(agentctl(&db)
        .env_remove("AGENTCTL_STREAM_IDLE_TIMEOUT")
        .args([
            "submit",
            "--mock",
            "--stream-idle-timeout",
            "5",
            "--workspace",
        ])
        .arg(dir.path())
        .arg("do the task"));
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("agentctl worker --stream-idle-timeout"),
        "{stderr}"
    );
    let listed = out(agentctl(&db).args(["--json", "runs", "list"]));
    assert_eq!(text(&listed.stdout).trim(), "", "a run was queued");
    // Nor does its help offer it; `run --help` does.
    let help = text(&out(agentctl(&db).args(["submit", "--help"])).stdout);
    assert!(help.contains("--max-steps"), "{help}");
    assert!(!help.contains("--stream-idle-timeout"), "{help}");
    let help = text(&out(agentctl(&db).args(["run", "--help"])).stdout);
    assert!(help.contains("--stream-idle-timeout"), "{help}");
}

/// `worker --grace` takes 0 (no grace), so a bad one is not called "not positive": the
/// message says what it takes. `--poll` has a floor.
#[test]
fn a_bad_grace_or_poll_says_what_is_taken() {
    use host::{agentctl, out_within, text};
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("g.db").display());
    for grace in ["-1", "nan"] {
        let o = out_within(
            agentctl(&db).args(["worker", "--grace", grace]),
            Duration::from_secs(30),
        );
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{grace}: {stderr}");
        assert!(
            stderr.contains("--grace must be a number of seconds, 0 or more"),
            "{stderr}"
        );
    }
    // A poll so short that a worker with room would query the database in a busy loop.
    for poll in ["1e-9", "0.001", "0", "-1"] {
        let o = out_within(
            agentctl(&db).args(["worker", "--poll", poll]),
            Duration::from_secs(30),
        );
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{poll}: {stderr}");
        assert!(
            stderr.contains("--poll must be at least 0.01 seconds"),
            "{stderr}"
        );
    }
}

/// A worker told to stop gives back at once a run that waits for a human (a step
/// boundary), however long its grace period, and says so on its `--json` stream.
async fn a_stopping_worker_gives_back_a_run_waiting_for_a_human(db: FreshDb) {
    use host::{agentctl, out, text};
    let db = db.url();
    let server = emulator(&story("0")).await;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let o = out(agentctl(db)
        .args([
            "submit",
            "--base-url",
            &server.base_url(),
            "--approval",
            "ask",
        ])
        .arg("--workspace")
        .arg(&ws)
        .arg("do the task"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = text(&o.stdout).trim().to_string();
    let mut worker = start_worker(db, dir.path(), "w", "30", &["--grace", "20"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while host::show(db, &id)["status"] != "waiting" {
        assert!(Instant::now() < deadline, "the run never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // `runs wait` stops there, exit 3 as `run` would, while the worker holds the run and
    // after it gave it back: it waited for ever (a human is needed, and nothing said so).
    let waited_for_a_decision = || {
        let o = out(agentctl(db).args(["--json", "runs", "wait", &id, "--timeout", "30"]));
        assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
        let line: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
        assert_eq!(line["status"], "waiting", "{line}");
    };
    waited_for_a_decision();
    // Held by a live worker: not claimable (it said `true`, as for a run in the queue).
    let o = out(agentctl(db).args(["--json", "runs", "list"]));
    let row: serde_json::Value = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["run_id"] == id.as_str())
        .unwrap();
    assert!(row["worker"].is_string(), "{row}");
    assert_eq!(row["claimable"], false, "{row}");
    let stopping = Instant::now();
    worker.signal("TERM");
    assert!(worker.child.wait().unwrap().success());
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "the worker waited {:?} for a human",
        stopping.elapsed()
    );
    let ended = worker.wait_for("ended", Some(&id), Duration::ZERO);
    assert_eq!(ended["status"], "released", "{ended}");
    waited_for_a_decision();
}

/// Approvals, steers and interrupts from other processes reach the worker driving a run.
async fn requests_reach_the_worker(db: FreshDb) {
    let db = db.url();
    use host::{agentctl, answer, call, last_request, out, script_by_outputs, text};
    let script = script_by_outputs(&[
        serde_json::json!([call(
            "call_a",
            "shell",
            serde_json::json!({"command": "echo a >> call_a.txt"})
        )]),
        answer(workers::FINAL),
    ]);
    let server = emulator(&script).await;
    let dir = tempfile::tempdir().unwrap();
    let submit_asking = |ws: &std::path::Path| {
        std::fs::create_dir_all(ws).unwrap();
        let o = out(agentctl(db)
            .args([
                "submit",
                "--sandbox",
                "off",
                "--base-url",
                &server.base_url(),
                "--workspace",
            ])
            .arg(ws)
            .arg("do the task"));
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout).trim().to_string()
    };
    let (ws1, ws2) = (dir.path().join("one"), dir.path().join("two"));
    let first = submit_asking(&ws1);
    let worker = start_worker(db, dir.path(), "w", "5", &[]);
    let pending = |id: &str| {
        let id = id.to_string();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let events = events(db, &id).await;
                if events.iter().any(|e| &*e.kind == "approval.requested") {
                    return;
                }
                assert!(Instant::now() < deadline, "no approval requested in {id}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    pending(&first).await;
    // A run a worker holds while it waits for a decision: one word everywhere.
    let o = out(agentctl(db).args(["--json", "runs", "show", &first]));
    let shown: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!(shown["status"], "waiting", "{shown}");
    assert_eq!(shown["pending_approvals"][0]["call_id"], "call_a");
    let o = out(agentctl(db).args(["--json", "runs", "list", "--status", "waiting"]));
    let row: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!(row["run_id"], first.as_str());
    assert_eq!(row["pending_approvals"], 1);
    let o = out(agentctl(db).args(["steer", &first, "use the staging database"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = out(agentctl(db).args(["approve", &first, "call_a"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = out(agentctl(db).args(["runs", "wait", &first, "--timeout", "30"]));
    assert!(
        o.status.success(),
        "{} {}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(ws1.join("call_a.txt")).unwrap(),
        "a\n"
    );
    let evs = events(db, &first).await;
    assert_eq!(
        evs.iter().filter(|e| &*e.kind == "steer.applied").count(),
        1
    );
    assert!(
        last_request(&server)
            .to_string()
            .contains("use the staging database")
    );

    let second = submit_asking(&ws2);
    pending(&second).await;
    let o = out(agentctl(db).args(["interrupt", &second]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let ended = worker.wait_for("ended", Some(&second), Duration::from_secs(30));
    assert_eq!(ended["status"], "interrupted", "{ended}");
    let o = out(agentctl(db).args(["runs", "wait", &second]));
    assert_eq!(o.status.code(), Some(130));
    // The runs table: the first completed, the second interrupted, neither claimable.
    let o = out(agentctl(db).args(["--json", "runs", "list"]));
    let rows: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = |id: &str| rows.iter().find(|r| r["run_id"] == id).unwrap().clone();
    assert_eq!(row(&first)["status"], "completed");
    assert_eq!(row(&second)["status"], "interrupted");
    assert!(rows.iter().all(|r| r["claimable"] == false));
    worker.signal("TERM");
    let mut worker = worker;
    assert!(worker.child.wait().unwrap().success());
}

/// The runs table is derived: dropped, it is rebuilt from the journal, and a submitted run
/// whose offer was lost (a crash between `run.created` and the offer) is claimable again.
async fn runs_table_is_rebuilt_from_the_journal(db: FreshDb) {
    let db = db.url();
    use host::text;
    let server = emulator(&story("0")).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = submit(db, &server, dir.path(), 2);
    let journal = agent_journal::Journal::open(db).await.unwrap();
    drop_leases(db).await;
    assert!(journal.leases("run:").await.unwrap().is_empty());
    let o = host::out(host::agentctl(db).args(["--json", "runs", "list"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let listed: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(
        listed
            .iter()
            .all(|r| r["status"] == "queued" && r["claimable"] == true),
        "{listed:?}"
    );
    assert_eq!(journal.leases("run:").await.unwrap().len(), 2);
    journal.close().await;
    let worker = start_worker(db, dir.path(), "w", "5", &[]);
    let ids: Vec<String> = runs.iter().map(|(id, _)| id.clone()).collect();
    assert!(
        wait_all_completed(db, &ids, Duration::from_secs(60))
            .await
            .is_empty()
    );
    worker.signal("TERM");
}

/// Deletes every lease row, as a lost table would be.
async fn drop_leases(db: &str) {
    if db.starts_with("sqlite://") {
        let path = db.trim_start_matches("sqlite://").to_string();
        tokio::task::spawn_blocking(move || {
            let conn = rusqlite::Connection::open(path).unwrap();
            conn.execute("DELETE FROM journal_leases", []).unwrap();
        })
        .await
        .unwrap();
    } else {
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(db).await.unwrap();
        sqlx::query("DELETE FROM journal_leases")
            .execute(&mut conn)
            .await
            .unwrap();
    }
}

/// A worker's `--sandbox` is a floor: a run submitted with `--sandbox off` is tightened to
/// it (journaled with the claim), so its command runs without asking and cannot write
/// outside the workspace; a worker asked for a mode this system cannot give does not start.
async fn a_worker_tightens_a_weaker_run_to_its_floor(db: FreshDb) {
    let db = db.url();
    use host::{agentctl, answer, call, out, script_by_outputs, text};
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let escaped = dir.path().join("escaped");
    let server = emulator(&script_by_outputs(&[
        serde_json::json!([call(
            "c1",
            "shell",
            serde_json::json!({"command": format!("echo in > in.txt; echo x > {}", escaped.display())})
        )]),
        answer(workers::FINAL),
    ]))
    .await;
    let o = out(agentctl(db)
        .args([
            "submit",
            "--sandbox",
            "off",
            "--base-url",
            &server.base_url(),
            "--workspace",
        ])
        .arg(&ws)
        .arg("do the task"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = text(&o.stdout).trim().to_string();

    let refused = out(agentctl(db)
        .args(["worker", "--sandbox", "read-only"])
        .env("AGENTCTL_TEST_SANDBOX_UNSUPPORTED", "1"));
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));

    let worker = start_worker(db, dir.path(), "w", "5", &["--sandbox", "workspace-write"]);
    let left = wait_all_completed(db, std::slice::from_ref(&id), Duration::from_secs(30)).await;
    assert!(left.is_empty(), "not completed: {left:?}");
    assert_eq!(std::fs::read_to_string(ws.join("in.txt")).unwrap(), "in\n");
    assert!(!escaped.exists(), "the command wrote outside the workspace");
    let evs = events(db, &id).await;
    assert!(evs.iter().all(|e| &*e.kind != "approval.requested"));
    let changed: Vec<_> = evs
        .iter()
        .filter(|e| &*e.kind == "run.sandbox_changed")
        .collect();
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].payload["from"], "off");
    assert_eq!(changed[0].payload["sandbox"]["mode"], "workspace-write");
    assert_eq!(changed[0].payload["cause"], "worker_floor");
    assert_eq!(changed[0].payload["policies"]["shell"], "auto");
    worker.signal("TERM");
    let mut worker = worker;
    assert!(worker.child.wait().unwrap().success());
}

use crate::host::fresh_db::{self, FreshDb};
agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: a_run_no_worker_can_drive_is_paused_saying_why, a_worker_without_the_key_says_so_on_one_line, a_resumed_queued_run_is_not_claimed_by_a_worker, an_interrupt_withdraws_a_queued_run, a_stopping_worker_gives_back_a_run_waiting_for_a_human, a_worker_tightens_a_weaker_run_to_its_floor, an_interrupt_outlives_the_worker_it_was_asked_of, waiting_for_runs_a_worker_pauses_says_paused, takeover_under_random_kills, zombie_is_fenced, a_stalled_worker_keeps_its_own_runs, sigterm_releases_the_run, requests_reach_the_worker, runs_table_is_rebuilt_from_the_journal);
