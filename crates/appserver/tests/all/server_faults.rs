//! Servers that misbehave in ways the in-tree fake does not: one that exits while a process
//! it started keeps its output open, and ones that answer ids this client never used.
//! Each server is a small `sh` script (real child processes and pipes).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_appserver::{
    AppServerClient, AppServerError, AppServerEvent, ApprovalPolicy, ClientOptions, ConnectionLost,
    ServerCommand, StderrTarget, UnknownAnswers,
};

/// Guards against a hang turning into a stuck test run; not a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn sh(script: &str, args: &[&str]) -> ServerCommand {
    ServerCommand::new("sh")
        .args(["-c", script])
        .args(args.iter().copied())
        .stderr(StderrTarget::Null)
}

/// Kills, when dropped (also when a test fails), the process whose pid is in the file,
/// once the file exists: the `sleep` the fake server leaves behind.
struct KillOnDrop(PathBuf);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        }
    }
}

/// Every tracing event of this thread, as `LEVEL field=value ...`.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<String>>>);

impl Logs {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl tracing::Subscriber for Logs {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = event.metadata().level().to_string();
        event.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                let _ = write!(line, " {}={value:?}", field.name());
            },
        );
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

// A current-thread runtime: the reader task runs on this thread, under the subscriber.
#[tokio::test]
async fn answers_with_ids_never_asked_are_logged_and_named_in_the_timeout() {
    let logs = Logs::default();
    let _guard = tracing::subscriber::set_default(logs.clone());
    // Two answers with ids never used (ours is 1, a number), then silence.
    let server = sh(
        r#"read -r _; echo '{"id":999,"result":{}}'; echo '{"id":"1","result":{}}'; while read -r _; do :; done"#,
        &[],
    );
    let (client, _events) =
        AppServerClient::spawn(&server, ClientOptions::default(), ApprovalPolicy::default())
            .unwrap();
    let err = client
        .call_with_timeout("initialize", None, Duration::from_secs(1))
        .await
        .unwrap_err();
    let AppServerError::TimeoutWithUnknownAnswers {
        ref method,
        after,
        ref unknown,
    } = err
    else {
        panic!("expected a timeout naming the unknown answers, got {err:?}");
    };
    assert_eq!(method, "initialize");
    assert_eq!(after, Duration::from_secs(1));
    assert_eq!(
        unknown,
        &UnknownAnswers {
            count: 2,
            ids: vec!["999".into(), "\"1\"".into()]
        }
    );
    assert_eq!(
        err.to_string(),
        "`initialize` got no response within 1s (the server sent 2 answers with ids that were never asked: 999, \"1\")"
    );
    let warned: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("WARN") && l.contains("never used"))
        .collect();
    assert_eq!(warned.len(), 2, "{:?}", logs.lines());
    assert!(warned[0].contains("id=999"), "{warned:?}");
    assert!(warned[1].contains(r#"id="1""#), "{warned:?}");
    client.close().await;
}

#[tokio::test]
async fn a_late_answer_is_not_an_unknown_one() {
    let logs = Logs::default();
    let _guard = tracing::subscriber::set_default(logs.clone());
    // Answers the first call only once the second one came: the first has given up by then.
    let server = sh(
        r#"read -r _; read -r _; echo '{"id":1,"result":{}}'; echo '{"id":2,"result":{"n":2}}'; while read -r _; do :; done"#,
        &[],
    );
    let (client, _events) =
        AppServerClient::spawn(&server, ClientOptions::default(), ApprovalPolicy::default())
            .unwrap();
    let first = client
        .call_with_timeout("first", None, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(first, AppServerError::Timeout { .. }), "{first:?}");
    let second = client.call("second", None).await.unwrap();
    assert_eq!(second["n"], 2);
    let third = client
        .call_with_timeout("third", None, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(third, AppServerError::Timeout { .. }), "{third:?}");
    assert!(
        !logs.lines().iter().any(|l| l.starts_with("WARN")),
        "{:?}",
        logs.lines()
    );
    client.close().await;
}

#[tokio::test]
async fn a_server_that_exits_while_its_child_keeps_the_output_open_ends_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("child.pid");
    let _leftover = KillOnDrop(pid_file.clone());
    // At the first request: start a process that inherits stdout, say goodbye, exit 5.
    let server = sh(
        r#"read -r _; sleep 300 & echo $! > "$0"; echo '{"method":"bye","params":{}}'; exit 5"#,
        &[pid_file.to_str().unwrap()],
    );
    let (client, mut events) =
        AppServerClient::spawn(&server, ClientOptions::default(), ApprovalPolicy::default())
            .unwrap();
    // The default timeout (15 s) would end the call too, as a timeout: the exit must come first.
    let err = tokio::time::timeout(HANG_GUARD, client.call("x", None))
        .await
        .expect("hang guard")
        .unwrap_err();
    let AppServerError::ConnectionLost(ConnectionLost::ServerExited { status }) = &err else {
        panic!("expected the server's exit, got {err:?}");
    };
    assert_eq!(status.and_then(|s| s.code()), Some(5));
    assert!(err.to_string().contains("exit status: 5"), "{err}");
    // What the server wrote before exiting is delivered, then the queue ends.
    assert!(
        matches!(events.recv().await, Some(AppServerEvent::Notification(n)) if n.method == "bye")
    );
    assert!(events.recv().await.is_none());
    assert!(matches!(
        events.end_reason(),
        Some(ConnectionLost::ServerExited { .. })
    ));
    let later = client.call("y", None).await.unwrap_err();
    assert!(
        matches!(
            later,
            AppServerError::ConnectionLost(ConnectionLost::ServerExited { .. })
        ),
        "{later:?}"
    );
    let outcome = client.close().await;
    assert_eq!(outcome.status.and_then(|s| s.code()), Some(5));
}

#[tokio::test]
async fn close_within_zero_kills_at_once() {
    // SIGTERM is ignored; the configured grace period would outlast the hang guard.
    let server = ServerCommand::new("sh").args([
        "-c",
        r#"trap '' TERM; echo '{"method":"ready"}'; exec sleep 1000"#,
    ]);
    let options = ClientOptions {
        close_grace: Duration::from_secs(600),
        ..ClientOptions::default()
    };
    let (client, mut events) =
        AppServerClient::spawn(&server, options, ApprovalPolicy::default()).unwrap();
    assert!(
        matches!(events.recv().await, Some(AppServerEvent::Notification(n)) if n.method == "ready")
    );
    let outcome = tokio::time::timeout(HANG_GUARD, client.close_within(Duration::ZERO))
        .await
        .expect("hang guard");
    assert!(outcome.killed);
}
