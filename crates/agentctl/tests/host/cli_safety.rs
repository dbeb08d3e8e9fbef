//! What the CLI prints for people: exit statuses of mistaken ids, commands that are safe to
//! paste, and text from the model or a tool that cannot drive the terminal.

use serde_json::json;

use crate::host::*;

fn sqlite_db(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("safety.db").display())
}

/// A run paused on `call_id` (a `shell` call under `--sandbox off`); returns the run's
/// output and id.
async fn paused_on(db: &str, call_id: &str) -> (std::process::Output, String) {
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call(call_id, "shell", json!({"command": "echo hi"}))]),
        answer("FINAL"),
    ]))
    .await;
    let paused = out(&mut run_cmd(db, &server, &ws, &["--sandbox", "off"]));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    (paused, only_run(db))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_on_an_unknown_call_is_a_usage_error_naming_the_pending_ones() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let (_, run) = paused_on(&db, "call_real").await;
    for verb in ["approve", "deny"] {
        let o = out(agentctl(&db).args([verb, &run, "call_9"]));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{verb}: {err}");
        assert!(err.contains("no call call_9"), "{err}");
        assert!(
            err.contains("call_real"),
            "the pending call is named: {err}"
        );
    }
    // The real one is still pending and decidable.
    let ok = out(agentctl(&db).args(["deny", &run, "call_real"]));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
}

#[test]
fn a_run_id_too_long_for_the_journal_is_an_unknown_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let long = "r".repeat(300);
    for args in [
        vec!["runs", "show", &long],
        vec!["runs", "wait", &long],
        vec!["runs", "events", &long],
        vec!["runs", "search", &long, "term"],
        vec!["approve", &long, "c1"],
        vec!["deny", &long, "c1"],
        vec!["steer", &long, "hi"],
        vec!["interrupt", &long],
        vec!["resume", &long],
    ] {
        let o = out(agentctl(&db).args(&args));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{:?}: {err}", &args[..2]);
        assert!(err.contains(&format!("no run {long}")), "{err}");
        assert!(!err.contains("invalid thread"), "{err}");
    }
    // An unknown id of ordinary length searched for is the same usage error.
    let o = out(agentctl(&db).args(["runs", "search", "nosuch", "term"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

/// `agentctl` with the database in `AGENTCTL_DB` rather than `--db`.
fn agentctl_env_db(db: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_agentctl"));
    cmd.env("AGENTCTL_DB", db)
        .env_remove("OPENAI_BASE_URL")
        .env("OPENAI_API_KEY", agent_responses_mock::MOCK_API_KEY)
        .stdin(std::process::Stdio::null());
    cmd
}

/// The lines of `printed` that suggest an `agentctl` command.
fn suggested(printed: &str) -> Vec<&str> {
    printed
        .lines()
        .filter(|l| l.contains("agentctl ") && (l.contains(" approve ") || l.contains(" resume ")))
        .collect()
}

/// A database from `AGENTCTL_DB` is left to the environment in the commands printed: with a
/// masked password in them, pasting would fail to authenticate.
async fn suggested_commands_leave_an_env_database_to_the_environment(db: &str) {
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call("call_e", "shell", json!({"command": "echo hi"}))]),
        answer("FINAL"),
    ]))
    .await;
    let paused = out(agentctl_env_db(db)
        .args(["run", "--base-url", &server.base_url(), "--workspace"])
        .arg(&ws)
        .args(["--sandbox", "off", "do the task"]));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    let run = only_run(db);
    let shown = out(agentctl_env_db(db).args(["runs", "show", &run]));
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    for printed in [text(&paused.stderr), text(&shown.stdout)] {
        let lines = suggested(&printed);
        assert!(!lines.is_empty(), "{printed}");
        for line in lines {
            assert!(!line.contains("--db"), "{line}");
            assert!(!line.contains("***"), "{line}");
        }
        assert!(!printed.contains("masked"), "{printed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suggested_commands_leave_an_env_sqlite_database_to_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    suggested_commands_leave_an_env_database_to_the_environment(&sqlite_db(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suggested_commands_leave_an_env_postgres_database_to_the_environment() {
    let Some(db) = crate::host::fresh_db::postgres().await else {
        return;
    };
    suggested_commands_leave_an_env_database_to_the_environment(db.url()).await;
}

/// A password given with `--db` on the command line stays masked in the commands printed,
/// and one note says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masked_command_line_password_is_said_once() {
    let Some(db) = crate::host::fresh_db::postgres().await else {
        return;
    };
    let db = db.url();
    // `postgres://user:password@host/...`
    let password = db
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(user_info, _)| user_info.split_once(':'))
        .map(|(_, password)| password.to_string())
        .filter(|p| !p.is_empty());
    let Some(password) = password else {
        return;
    };
    let (paused, run) = paused_on(db, "call_m").await;
    let shown = out(agentctl(db).args(["runs", "show", &run]));
    for (stdout, stderr) in [
        (String::new(), text(&paused.stderr)),
        (text(&shown.stdout), text(&shown.stderr)),
    ] {
        let all = format!("{stdout}{stderr}");
        assert!(!all.contains(&format!(":{password}@")), "{all}");
        let lines = suggested(&all);
        assert!(!lines.is_empty(), "{all}");
        assert!(lines.iter().all(|l| l.contains("--db")), "{all}");
        assert_eq!(
            stderr.matches("--db password is masked").count(),
            1,
            "{stderr}"
        );
        assert!(stderr.trim_end().ends_with("leave --db out"), "{stderr}");
    }
}

/// A call id the model chose is one quoted word in every command printed for it: pasting
/// `agentctl approve RUN 'c1 $(touch ...)' ...` decides the call and runs nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_id_from_the_model_cannot_inject_into_a_pasted_command() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let pwned = dir.path().join("PWNED");
    let call_id = format!("c1 $(touch {})", pwned.display());
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call(&call_id, "shell", json!({"command": "echo hi"}))]),
        answer("FINAL"),
    ]))
    .await;
    let paused = out(&mut run_cmd(&db, &server, &ws, &["--sandbox", "off"]));
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    let run = only_run(&db);
    let shown = out(agentctl(&db).args(["runs", "show", &run]));
    let paused_err = text(&paused.stderr);
    let shown_out = text(&shown.stdout);
    let command = |printed: &str, verb: &str| {
        printed
            .lines()
            .find_map(|l| {
                let at = l.find("agentctl ")?;
                l[at..].contains(verb).then(|| l[at..].trim().to_string())
            })
            .unwrap_or_else(|| panic!("{printed}"))
    };
    let from_run = command(&paused_err, " approve ");
    let from_show = command(&shown_out, " approve ");
    assert_eq!(from_run, from_show);
    assert!(from_run.contains(&format!("'{call_id}'")), "{from_run}");
    let deny = command(&paused_err, " deny ");
    assert!(deny.contains(&format!("'{call_id}'")), "{deny}");
    // Pasted into a shell as printed (the binary for `agentctl`): it approves the call.
    let pasted = format!(
        "{}{}",
        env!("CARGO_BIN_EXE_agentctl"),
        from_run.strip_prefix("agentctl").unwrap()
    );
    let approved = out(std::process::Command::new("bash")
        .args(["-c", &pasted])
        .env_remove("AGENTCTL_DB"));
    assert!(
        approved.status.success(),
        "{pasted}: {}",
        text(&approved.stderr)
    );
    assert!(!pwned.exists(), "pasting ran the model's command: {pasted}");
    let done = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    assert!(!pwned.exists());
}

/// Whether `bytes` hold a control character a terminal acts on (C0 but newline and tab,
/// DEL, C1).
fn has_raw_control(bytes: &[u8]) -> bool {
    String::from_utf8_lossy(bytes)
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
}

/// Text from the model, a tool or a prompt reaches the terminal with its control characters
/// written out (`\x1b`, `\r`): an escape sequence cannot set the title, clear the screen or
/// hide a line. `--json` keeps them as JSON escapes, unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_from_the_model_a_tool_or_the_prompt_are_shown_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let (_g, ws) = workspace();
    let call_id = "call_esc\u{1b}[31m";
    let server = emulator(&script_by_outputs(&[
        json!([call(
            call_id,
            "shell",
            json!({"command": "printf 'out \\033]0;TOOL\\007\\033[2J\\r\\302\\233 done\\n'"})
        )]),
        answer("FINAL \u{1b}]0;PWNED2\u{7}\u{1b}[31mred\r\u{9b}2J"),
    ]))
    .await;
    let prompt = "title \u{1b}]0;HACKED\u{7}\u{1b}[2J end";
    let mut cmd = agentctl(&db);
    cmd.args(["run", "--base-url", &server.base_url(), "--workspace"])
        .arg(&ws)
        .args(["--sandbox", "off", "--approval", "ask", prompt]);
    // Paused on the call: its id, name and arguments in the note and commands.
    let paused = out(&mut cmd);
    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused.stderr));
    let run = only_run(&db);
    let approve = out(agentctl(&db).args(["approve", &run, call_id]));
    assert!(approve.status.success(), "{}", text(&approve.stderr));
    let done = out(&mut resume_cmd(&db, &server, &run, &[]));
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    let human = [
        ("run", paused),
        ("approve", approve),
        ("resume", done),
        ("runs list", out(agentctl(&db).args(["runs", "list"]))),
        ("runs show", out(agentctl(&db).args(["runs", "show", &run]))),
        ("runs wait", out(agentctl(&db).args(["runs", "wait", &run]))),
        (
            "journal replay",
            out(agentctl(&db).args(["journal", "replay", "--thread", &format!("run:{run}")])),
        ),
        (
            "runs search",
            out(agentctl(&db).args(["runs", "search", &run, "FINAL"])),
        ),
    ];
    for (what, o) in &human {
        assert!(o.status.success() || o.status.code() == Some(3), "{what}");
        for (stream, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
            assert!(
                !has_raw_control(bytes),
                "{what} {stream}: {:?}",
                text(bytes)
            );
        }
    }
    let printed = |what: &str| {
        let (_, o) = human.iter().find(|(w, _)| *w == what).unwrap();
        format!("{}{}", text(&o.stdout), text(&o.stderr))
    };
    assert!(
        printed("run").contains("call_esc\\x1b[31m"),
        "{}",
        printed("run")
    );
    // The commands printed for the call paste back to the same id (bash's `$'...'`).
    assert!(
        printed("run").contains("$'call_esc\\x1b[31m'"),
        "{}",
        printed("run")
    );
    // The tool's output as the journal holds it: JSON, escaped as JSON escapes.
    assert!(
        printed("journal replay").contains("\\u009b done"),
        "{}",
        printed("journal replay")
    );
    assert!(
        printed("resume").contains("FINAL \\x1b]0;PWNED2\\x07\\x1b[31mred\\r\\u{9b}2J"),
        "{}",
        printed("resume")
    );
    for what in ["runs list", "runs show"] {
        assert!(
            printed(what).contains("title \\x1b]0;HACKED\\x07\\x1b[2J end"),
            "{what}: {}",
            printed(what)
        );
    }
    assert!(printed("runs show").contains("final     FINAL \\x1b]0;PWNED2"));
    assert!(printed("runs wait").contains("FINAL \\x1b]0;PWNED2"));
    // JSON keeps the text exact, as JSON escapes.
    let shown = show(&db, &run);
    assert_eq!(shown["title"], prompt, "{shown}");
    assert_eq!(
        shown["final_text"], "FINAL \u{1b}]0;PWNED2\u{7}\u{1b}[31mred\r\u{9b}2J",
        "{shown}"
    );
}

/// An `OPENAI_BASE_URL` that is not text is refused, naming it: it read as unset, and the
/// run's requests (with the key) went to the public API instead of the server it names. A
/// `--base-url` (as `--mock` gives) still wins over it.
#[test]
fn an_openai_base_url_that_is_not_text_is_refused() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("u.db").display());
    let (_g, ws) = workspace();
    let not_text = std::ffi::OsStr::from_bytes(b"http://127.0.0.1:9/\xff");
    let o = out(agentctl(&db)
        .env("OPENAI_BASE_URL", not_text)
        .args(["run", "--workspace"])
        .arg(&ws)
        .arg("hi"));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("OPENAI_BASE_URL is not UTF-8"), "{err}");
    let o = out(agentctl(&db)
        .env("OPENAI_BASE_URL", not_text)
        .args(["run", "--mock", "--workspace"])
        .arg(&ws)
        .arg("hi"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}
