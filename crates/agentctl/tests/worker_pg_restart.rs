#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! Workers survive PostgreSQL restarts: the server is restarted twice while a pool drives
//! runs; every run completes, no effect happens twice, and no worker exits.
//!
//! A test binary of its own: restarting the server cuts every connection to it, so no
//! other test may run beside it (cargo runs test binaries one after another).

#[path = "host/mod.rs"]
mod host;

#[path = "workers/mod.rs"]
mod workers;

use std::time::Duration;

use agent_runtime::CancellationToken;

use host::{emulator, events};
use workers::{check_run, claims, spawn_denier, start_worker, story, submit, wait_all_completed};

/// `pg_ctlcluster VERSION CLUSTER restart` for the cluster on port 5432, if this machine
/// manages PostgreSQL with Debian's cluster tools.
fn restart_command() -> Option<Vec<String>> {
    let out = std::process::Command::new("pg_lsclusters")
        .arg("-h")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some("5432"))?;
    let mut fields = line.split_whitespace();
    let (version, cluster) = (fields.next()?, fields.next()?);
    Some(vec![version.into(), cluster.into(), "restart".into()])
}

fn restart_postgres(args: &[String]) {
    let status = std::process::Command::new("pg_ctlcluster")
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "pg_ctlcluster {args:?} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_survive_postgres_restarts() {
    let Some(pg) = agent_testkit::fresh_pg_database("workers_restart").await else {
        return;
    };
    let Some(restart) = restart_command() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must be able to restart PostgreSQL with pg_ctlcluster"
        );
        eprintln!("SKIPPED: no pg_ctlcluster on this machine (the test restarts PostgreSQL)");
        return;
    };
    let db = pg.url();
    let server = emulator(&story("1")).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = submit(db, &server, dir.path(), 16);
    let ids: Vec<String> = runs.iter().map(|(id, _)| id.clone()).collect();
    let stop_denier = CancellationToken::new();
    let denier = spawn_denier(db.to_string(), ids.clone(), stop_denier.clone());
    let mut pool = vec![
        start_worker(db, dir.path(), "a", "3", &["--concurrency", "4"]),
        start_worker(db, dir.path(), "b", "3", &["--concurrency", "4"]),
    ];
    // Twice, and again (at most six times in all) while no restart has cut a write yet: a
    // connection dropped while idle is made again without a reopening, so two fixed
    // restarts sometimes both missed every write (the runs ended 0.6 s after the second).
    for (n, pause) in [1500, 1000, 600, 600, 600, 600].into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        restart_postgres(&restart);
        if n >= 1 && reopenings(&pool) >= 1 {
            break;
        }
    }
    let started = std::time::Instant::now();
    let left = wait_all_completed(db, &ids, Duration::from_secs(180)).await;
    eprintln!("completed {:?} after the last restart", started.elapsed());
    if std::env::var_os("DEBUG_WORKERS").is_some() {
        for w in &pool {
            eprintln!(
                "--- {}\n{}",
                w.name,
                std::fs::read_to_string(&w.log).unwrap()
            );
            eprintln!(
                "{}",
                std::fs::read_to_string(w.log.with_extension("err")).unwrap()
            );
        }
    }
    stop_denier.cancel();
    let denied = denier.await.unwrap();
    for w in &mut pool {
        assert!(
            w.child.try_wait().unwrap().is_none(),
            "worker {} exited during the restarts",
            w.name
        );
    }
    for w in &pool {
        w.signal("TERM");
    }
    for w in &mut pool {
        assert!(
            w.child.wait().unwrap().success(),
            "worker {} failed",
            w.name
        );
    }
    assert!(left.is_empty(), "runs not completed: {left:?}");
    let reopened = reopenings(&pool);
    // A restart that cut a drive while it wrote was seen and survived: one cut write is
    // what keeps the test from passing vacuously.
    assert!(
        reopened >= 1,
        "no journal reopening: no restart cut a write"
    );
    let claims = claims(&pool);
    for (id, ws) in &runs {
        check_run(id, ws, &events(db, id).await, &claims);
    }
    eprintln!(
        "postgres restarts: {reopened} journal reopenings, {denied} indeterminate calls denied"
    );
}

/// The journal reopenings the workers of `pool` have reported so far.
fn reopenings(pool: &[workers::Worker]) -> usize {
    pool.iter()
        .map(|w| {
            w.lines()
                .iter()
                .filter(|l| l["type"] == "journal_back")
                .count()
        })
        .sum()
}
