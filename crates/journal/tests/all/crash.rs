//! Crash safety: a child process appends with `Full` durability and reports every
//! acknowledged seq; the parent kills it with SIGKILL at random points and checks that every
//! acknowledged event survived, seqs increase, and the journal opens cleanly. Relaxed events
//! (`NewEvent::relaxed`) are acknowledged once committed, before the disk has them: in even
//! rounds every producer appends them, in odd rounds half do, and a killed process must not
//! lose them either.
//!
//! The child is this same test binary, re-run with `--ignored --exact crash::crash_child` and the
//! database URL in `CRASH_CHILD_DB`.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};

use agent_journal::{Journal, NewEvent};
use rand::Rng as _;
use serde_json::json;

/// Kills per run; the issue asks for at least 50.
const KILLS: usize = 60;
/// Concurrent producers in the child, so kills land inside group commits.
const PRODUCERS: usize = 8;

#[test]
fn acknowledged_events_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("crash.db").display());
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::rng();
    let mut acked: Vec<(i64, u64, u64)> = Vec::new();
    for round in 0..KILLS {
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "crash::crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CRASH_CHILD_DB", &url)
            .env("CRASH_CHILD_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        // Kill after a random number of acknowledgements (0 = while it is still opening).
        let wait_for = rng.random_range(0..300usize);
        let mut seen = 0;
        while seen < wait_for {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some(ack) = parse_ack(&line) {
                acked.push(ack);
                seen += 1;
            }
        }
        child.kill().unwrap();
        // Anything the child printed before it died was acknowledged too.
        for line in lines.map_while(Result::ok) {
            if let Some(ack) = parse_ack(&line) {
                acked.push(ack);
            }
        }
        child.wait().unwrap();
        verify(&url, &acked, round);
    }
    assert!(
        acked.len() > KILLS,
        "the child acknowledged too little to test anything"
    );
}

/// `ACK seq producer n`
fn parse_ack(line: &str) -> Option<(i64, u64, u64)> {
    let mut parts = line.strip_prefix("ACK ")?.split(' ');
    Some((
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    ))
}

fn verify(url: &str, acked: &[(i64, u64, u64)], round: usize) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let journal = Journal::open(url)
            .await
            .unwrap_or_else(|e| panic!("round {round}: journal does not reopen: {e}"));
        let events = journal.replay("crash", 0).await.unwrap();
        assert!(
            events.windows(2).all(|w| w[0].seq < w[1].seq),
            "round {round}: seqs not increasing"
        );
        let by_seq: std::collections::HashMap<i64, &serde_json::Value> =
            events.iter().map(|e| (e.seq, &e.payload)).collect();
        for (seq, producer, n) in acked {
            let payload = by_seq
                .get(seq)
                .unwrap_or_else(|| panic!("round {round}: acknowledged seq {seq} was lost"));
            assert_eq!(
                payload["p"], *producer,
                "round {round}: seq {seq} has other content"
            );
            assert_eq!(
                payload["n"], *n,
                "round {round}: seq {seq} has other content"
            );
        }
        journal.close().await;
    });
}

#[test]
#[ignore = "child process of acknowledged_events_survive_sigkill"]
fn crash_child() {
    let Ok(url) = std::env::var("CRASH_CHILD_DB") else {
        return;
    };
    let round: u64 = std::env::var("CRASH_CHILD_ROUND")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let journal = Journal::open(&url).await.unwrap();
        let mut tasks = Vec::new();
        for p in 0..PRODUCERS as u64 {
            let journal = journal.clone();
            tasks.push(tokio::spawn(async move {
                for n in 0.. {
                    let producer = round * 100 + p;
                    let event = NewEvent::new("crash", "e", json!({ "p": producer, "n": n }));
                    // Even rounds: every batch is relaxed; odd rounds: mixed batches.
                    let relaxed = round.is_multiple_of(2) || p % 2 == 1;
                    let event = if relaxed { event.relaxed() } else { event };
                    let ack = journal.append(event).await.unwrap();
                    use std::io::Write as _;
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {} {producer} {n}", ack.seq).unwrap();
                    out.flush().unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
}
