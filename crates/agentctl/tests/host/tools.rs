//! The built-in tools as a model sees them: confinement, shell timeouts, output caps, the
//! environment.

use serde_json::{Value, json};

use crate::host::fresh_db::{self, FreshDb};
use crate::host::*;

/// What the model was told for `call_id` (the terminal event's value or error).
fn told<'a>(events: &'a [agent_journal::Event], call_id: &str) -> (&'a str, String) {
    let e = events
        .iter()
        .find(|e| {
            call_id_of(e) == call_id
                && (e.kind.starts_with("tool.")
                    && !matches!(&*e.kind, "tool.scheduled" | "tool.started"))
        })
        .unwrap_or_else(|| panic!("no outcome for {call_id}"));
    let text = e
        .payload
        .get("value")
        .or_else(|| e.payload.get("error"))
        .or_else(|| e.payload.get("message"));
    (
        &e.kind,
        text.and_then(Value::as_str).unwrap_or("").to_string(),
    )
}

async fn confinement(db: FreshDb) {
    let db = db.url();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "SECRET").unwrap();
    let (_g, ws) = workspace();
    std::os::unix::fs::symlink(outside.path(), ws.join("link")).unwrap();
    std::fs::write(ws.join("inside.txt"), "hello inside").unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(ws.join("fifo"))
            .status()
            .unwrap()
            .success()
    );
    let escape = format!("{}/secret.txt", outside.path().display());
    let server = emulator(&script_by_outputs(&[
        json!([
            call("c_dotdot", "read_file", json!({"path": "../secret.txt"})),
            call("c_abs", "read_file", json!({"path": escape})),
            call("c_link", "read_file", json!({"path": "link/secret.txt"})),
            call(
                "c_write",
                "write_file",
                json!({"path": "link/new.txt", "content": "x"})
            ),
            call("c_list", "list_dir", json!({"path": ".."})),
            call("c_ok", "read_file", json!({"path": "inside.txt"})),
            call("c_bad", "read_file", json!({"nope": 1})),
            call("c_unknown", "rm_rf", json!({})),
            call("c_fifo", "read_file", json!({"path": "fifo"})),
        ]),
        json!([]),
        json!([]),
        json!([]),
        json!([]),
        json!([]),
        json!([]),
        json!([]),
        json!([]),
        answer("FINAL: confined"),
    ]))
    .await;
    let o = out(&mut run_cmd(db, &server, &ws, &["--approval", "auto"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = only_run(db);
    let events = events(db, &run).await;
    check_invariants(&events);
    for call in ["c_dotdot", "c_abs", "c_link", "c_write", "c_list"] {
        let (kind, msg) = told(&events, call);
        assert_eq!(kind, "tool.failed", "{call}: {msg}");
        assert!(msg.contains("outside the workspace"), "{call}: {msg}");
        assert!(!msg.contains("SECRET"));
    }
    assert!(
        !outside.path().join("new.txt").exists(),
        "nothing written outside"
    );
    assert_eq!(
        told(&events, "c_ok"),
        ("tool.completed", "hello inside\n".to_string())
    );
    let (kind, msg) = told(&events, "c_bad");
    assert_eq!(kind, "tool.refused");
    assert!(msg.contains("missing `path`"), "{msg}");
    let (kind, msg) = told(&events, "c_unknown");
    assert_eq!(kind, "tool.refused");
    assert!(msg.contains("unknown tool `rm_rf`"), "{msg}");
    // The model got every refusal as a tool output, and the run went on.
    let last = last_request(&server);
    let outputs: Vec<&Value> = last["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    assert_eq!(outputs.len(), 9);
    let (kind, msg) = told(&events, "c_fifo");
    assert_eq!(kind, "tool.failed");
    assert!(msg.contains("not a regular file"), "{msg}");
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: confinement);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_timeout_kills_the_group_caps_output_and_hides_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("s.db").display());
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c_sleep",
            "shell",
            json!({"command": "(exec sleep 60) & wait", "timeout_ms": 300})
        )]),
        json!([call(
            "c_big",
            "shell",
            json!({"command": "head -c 200000 /dev/zero | tr '\\0' x; echo; echo END"})
        )]),
        json!([call(
            "c_env",
            "shell",
            json!({"command": "echo key=${OPENAI_API_KEY:-none}; exit 7"})
        )]),
        json!([call(
            "c_parent",
            "shell",
            json!({"command": format!("{HOST_PID} tr '\\0' '\\n' < /proc/$h/environ | grep ^OPENAI_API_KEY=")})
        )]),
        json!([call(
            "c_bg",
            "shell",
            json!({"command": "sleep 300 & echo started server", "timeout_ms": 30000})
        )]),
        answer("FINAL: shell"),
    ]))
    .await;
    let o = out(&mut run_cmd(&db, &server, &ws, &["--approval", "auto"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = only_run(&db);
    let events = events(&db, &run).await;
    let (kind, msg) = told(&events, "c_sleep");
    assert_eq!(kind, "tool.failed");
    assert!(msg.contains("Timed out after 300 ms"), "{msg}");
    // No `sleep` of any call is left in the workspace: not the timed-out call's grandchild,
    // nor the one `c_bg` left behind when its command ended.
    let left = processes_in(&ws.canonicalize().unwrap());
    assert!(left.is_empty(), "outlived their calls: {left:?}");
    let (kind, msg) = told(&events, "c_big");
    assert_eq!(kind, "tool.completed");
    assert!(msg.contains("bytes of output truncated"), "{}", &msg[..200]);
    assert!(msg.trim_end().ends_with("END"));
    assert!(msg.len() < 40_000, "{}", msg.len());
    let (kind, msg) = told(&events, "c_env");
    assert_eq!(kind, "tool.failed", "a non-zero exit is a failure");
    assert!(
        msg.contains("Exit code: 7") && msg.contains("key=none"),
        "{msg}"
    );
    // The host's own environment is out of a sandboxed command's reach (and the key would
    // be masked in what the model, the journal and the screen get if it were not).
    let (kind, msg) = told(&events, "c_parent");
    assert_eq!(kind, "tool.failed", "{msg}");
    assert!(msg.contains("Permission denied"), "{msg}");
    assert!(!msg.contains(agent_responses_mock::MOCK_API_KEY), "{msg}");
    // A background job holding the pipes does not turn a finished command into a timeout.
    let (kind, msg) = told(&events, "c_bg");
    assert_eq!(kind, "tool.completed", "{msg}");
    assert!(msg.contains("started server"), "{msg}");
}

/// Bytes of every file of the SQLite database at `db` (its `-wal` and `-shm` too).
fn database_bytes(db: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let name = db.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::read_dir(db.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&name))
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect()
}

/// A workspace file holding the API key: `read_file` gives the model, the screen and the
/// journal `***` for it, as `shell`'s output does (`cat .env`), in human and `--json`
/// output alike.
#[test]
fn read_file_masks_the_api_key_as_shell_does() {
    const KEY: &str = "sk-test-SECRET123";
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("leak.db");
    let db = format!("sqlite://{}", db_path.display());
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join(".env"), format!("OPENAI_API_KEY={KEY}\n")).unwrap();
    let script = dir.path().join("leak.json");
    std::fs::write(
        &script,
        script_by_outputs(&[
            json!([call("c_read", "read_file", json!({"path": ".env"}))]),
            json!([call("c_cat", "shell", json!({"command": "cat .env"}))]),
            answer("FINAL: read"),
        ]),
    )
    .unwrap();
    for json_output in [false, true] {
        let mut cmd = agentctl(&db);
        cmd.env("OPENAI_API_KEY", KEY);
        if json_output {
            cmd.arg("--json");
        }
        cmd.args(["run", "--mock", "--mock-script"])
            .arg(&script)
            .args(["--approval", "auto", "--sandbox", "off", "--workspace"])
            .arg(&ws)
            .arg("read the env file");
        let o = out(&mut cmd);
        let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{stderr}");
        assert!(!stdout.contains(KEY), "the key on stdout: {stdout}");
        assert!(!stderr.contains(KEY), "the key on stderr: {stderr}");
        assert!(stdout.contains("OPENAI_API_KEY=***"), "{stdout}");
    }
    for (file, bytes) in database_bytes(&db_path) {
        assert!(
            !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "the key is in {file}"
        );
    }
}

/// NUL, which the journal cannot store (PostgreSQL's jsonb), never stops a run: arguments
/// holding one are refused before anything is asked or scheduled, binary output reaches
/// the model with U+FFFD in its place, and so does an answer that holds one.
async fn nul_characters(db: FreshDb) {
    let db = db.url();
    let (_g, ws) = workspace();
    std::fs::write(ws.join("nul.bin"), b"a\0b").unwrap();
    let server = emulator(&script_by_outputs(&[
        json!([call("c_args", "read_file", json!({"path": "a\u{0}b"}))]),
        json!([call(
            "c_shell",
            "shell",
            json!({"command": "printf 'x\\0y'"})
        )]),
        json!([call("c_file", "read_file", json!({"path": "nul.bin"}))]),
        answer("FINAL: done \u{0} nul"),
    ]))
    .await;
    let o = out(&mut run_cmd(db, &server, &ws, &["--sandbox", "off"]));
    // Asked about the shell call off a terminal: the run pauses; the refusal came first.
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let run = only_run(db);
    let paused = events(db, &run).await;
    let (kind, msg) = told(&paused, "c_args");
    assert_eq!(kind, "tool.refused");
    assert!(msg.contains("NUL character"), "{msg}");
    assert!(
        kinds_of(&paused, "approval.requested")
            .iter()
            .all(|e| call_id_of(e) != "c_args"),
        "nobody is asked about a call that cannot run"
    );
    let o = out(agentctl(db).args(["approve", &run, "c_shell"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = out(&mut resume_cmd(db, &server, &run, &[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let events = events(db, &run).await;
    check_invariants(&events);
    let (kind, msg) = told(&events, "c_shell");
    assert_eq!(kind, "tool.completed");
    assert!(msg.ends_with("Output:\nx\u{FFFD}y"), "{msg}");
    let (kind, msg) = told(&events, "c_file");
    assert_eq!(kind, "tool.completed");
    assert!(msg.contains("a\u{FFFD}b"), "{msg}");
    let completed = kinds_of(&events, "run.completed");
    assert_eq!(completed.len(), 1);
    assert!(
        completed[0]
            .payload
            .to_string()
            .contains("done \u{FFFD} nul"),
        "{}",
        completed[0].payload
    );
}

agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: nul_characters);

/// Arguments too long to record (a long `read_file` path, a `spawn_agents` call with a long
/// prompt) are refused back to the model, which then goes on; at 2-4 MB they made the call's
/// `tool.scheduled` exceed the journal's event limit, failing the run on every resume.
/// (1.1 MB here: the emulator, like axum, reads request bodies of at most 2 MiB.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_too_long_to_record_are_refused_to_the_model() {
    let long = "x".repeat(1_100_000);
    for (id, tool, args) in [
        ("c_path", "read_file", json!({"path": long})),
        (
            "c_spawn",
            "spawn_agents",
            json!({"agents": [{"prompt": long}]}),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("a.db").display());
        let (_g, ws) = workspace();
        let server = emulator(&script_by_outputs(&[
            json!([call(id, tool, args)]),
            answer("FINAL: gave up on the long one"),
        ]))
        .await;
        let o = out(&mut run_cmd(&db, &server, &ws, &["--max-children", "2"]));
        assert_eq!(o.status.code(), Some(0), "{tool}: {}", text(&o.stderr));
        let events = events(&db, &only_run(&db)).await;
        check_invariants(&events);
        let (kind, msg) = told(&events, id);
        assert_eq!(kind, "tool.refused", "{tool}");
        assert!(
            msg.contains("bytes, over the 1048576 a call may have"),
            "{tool}: {msg}"
        );
        assert!(kinds_of(&events, "tool.scheduled").is_empty(), "{tool}");
    }
}

/// At 3 MB the call used to end the run with the journal's "invalid payload" on every
/// resume; now it is refused and journaled, and the next request (carrying the 3 MB call
/// in its history) is the emulator's to refuse (413, its 2 MiB body limit): the run pauses,
/// resumable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_the_journals_event_limit_is_refused_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("a.db").display());
    let (_g, ws) = workspace();
    let long = "x".repeat(3_000_000);
    let server = emulator(&script_by_outputs(&[
        json!([call("c_path", "read_file", json!({"path": long}))]),
        answer("FINAL: never reached"),
    ]))
    .await;
    let o = out(&mut run_cmd(&db, &server, &ws, &[]));
    // A 4xx pauses the run with exit status 1.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("paused (model_rejected)"),
        "{}",
        text(&o.stderr)
    );
    let events = events(&db, &only_run(&db)).await;
    let (kind, _) = told(&events, "c_path");
    assert_eq!(kind, "tool.refused");
}

/// Calls a person could approve as something else than what runs are refused to the model
/// before anyone is asked: arguments naming `command` twice (a tool takes the last one, the
/// prompt and the console's card show the first one first, the second a screen further
/// down), and a call id no URL path can name (the console's approval route for `..`
/// resolves to another path). Under `--approval ask` off a terminal either call, had it been
/// put to a human, would have paused the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_a_person_could_misread_are_refused_before_anyone_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("a.db").display());
    let (_g, ws) = workspace();
    let twice = json!({
        "type": "function_call",
        "call_id": "c_twice",
        "name": "shell",
        "arguments": format!(
            "{{\"command\": \"echo looks-safe\",{}\"command\": \"touch SECOND-RAN\"}}",
            "\n".repeat(80)
        ),
    });
    let dots = call("..", "shell", json!({"command": "touch DOTS-RAN"}));
    let server = emulator(&script_by_outputs(&[
        json!([twice, dots]),
        answer("FINAL: asked nothing"),
    ]))
    .await;
    let o = out(&mut run_cmd(&db, &server, &ws, &["--approval", "ask"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let events = events(&db, &only_run(&db)).await;
    check_invariants(&events);
    assert!(kinds_of(&events, "approval.requested").is_empty());
    assert!(kinds_of(&events, "tool.scheduled").is_empty());
    let (kind, msg) = told(&events, "c_twice");
    assert_eq!(kind, "tool.refused");
    assert!(msg.contains("the key \"command\" twice"), "{msg}");
    let (kind, msg) = told(&events, "..");
    assert_eq!(kind, "tool.refused");
    assert!(msg.contains("call id \"..\""), "{msg}");
    assert!(!ws.join("SECOND-RAN").exists() && !ws.join("DOTS-RAN").exists());
}

/// A built-in tool's call with a key it does not take is refused, and nothing runs: beside
/// the `command` that would run, a lookalike key (`"cоmmand"`, Cyrillic `о`) read as the
/// command to a person approving it in the console, which the tool ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_a_built_in_tool_does_not_take_refuses_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("a.db").display());
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c_look",
            "shell",
            json!({"command": "touch REAL-RAN", "c\u{43e}mmand": "ls -la"})
        )]),
        answer("FINAL: refused"),
    ]))
    .await;
    let o = out(&mut run_cmd(&db, &server, &ws, &["--approval", "auto"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let events = events(&db, &only_run(&db)).await;
    check_invariants(&events);
    let (kind, msg) = told(&events, "c_look");
    assert_eq!(kind, "tool.refused");
    assert!(msg.contains("unknown argument \"c\\u{43e}mmand\""), "{msg}");
    assert!(!ws.join("REAL-RAN").exists());
}

/// A model's arguments that spell the API key with JSON escapes (`\u0073\u006b...`) are
/// masked as the key itself is: nothing the run journals, prints or writes holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_spelled_with_escapes_in_arguments_is_masked() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("escaped-key.db").display());
    let (_g, ws) = workspace();
    let key = agent_responses_mock::MOCK_API_KEY;
    let escaped: String = key
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let arguments = format!("{{\"path\": \"{escaped}.txt\", \"content\": \"{escaped}\"}}");
    let server = emulator(&script_by_outputs(&[
        json!([{"type": "function_call", "call_id": "c_w", "name": "write_file", "arguments": arguments}]),
        answer("FINAL: written"),
    ]))
    .await;
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &["--approval", "auto", "--json"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        !text(&o.stdout).contains(key),
        "stdout: {}",
        text(&o.stdout)
    );
    assert!(
        !text(&o.stderr).contains(key),
        "stderr: {}",
        text(&o.stderr)
    );
    let run = only_run(&db);
    for e in events(&db, &run).await {
        assert!(
            !e.payload.to_string().contains(key),
            "{}: {}",
            e.kind,
            e.payload
        );
    }
    let written: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(written.contains(&"***.txt".to_string()), "{written:?}");
    assert_eq!(std::fs::read_to_string(ws.join("***.txt")).unwrap(), "***");
}

/// The file tools run in the host, outside the sandbox: with the workspace at the home
/// directory they read `~/.ssh` and wrote `~/.config/agentctl/config.toml` (an MCP server
/// the next run started unsandboxed). They refuse the sandbox's hidden paths now; and under
/// `read-only`, `--approval auto` does not make `write_file` write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_tools_hide_what_the_sandbox_hides() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("hidden.db").display());
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(home.join(".config/agentctl")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "PRIVATE-KEY").unwrap();
    std::fs::write(home.join(".config/agentctl/config.toml"), "# mine\n").unwrap();
    let server = emulator(&script_by_outputs(&[
        json!([
            call("c_key", "read_file", json!({"path": ".ssh/id_rsa"})),
            call("c_cfg", "write_file", json!({"path": ".config/agentctl/config.toml", "content": "[mcp_servers.x]\ncommand = \"true\"\n"})),
            call("c_ls", "list_dir", json!({"path": ".ssh"})),
        ]),
        json!([]),
        json!([]),
        answer("FINAL: done"),
    ]))
    .await;
    let o = out(run_cmd(&db, &server, &home, &["--approval", "auto"])
        .env("HOME", &home)
        .env_remove("AGENTCTL_CONFIG_DIR"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = only_run(&db);
    let recorded = events(&db, &run).await;
    for call in ["c_key", "c_cfg", "c_ls"] {
        let (kind, said) = told(&recorded, call);
        assert_eq!(kind, "tool.failed", "{call}: {said}");
        assert!(
            said.contains("hidden from the run's tools"),
            "{call}: {said}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(home.join(".config/agentctl/config.toml")).unwrap(),
        "# mine\n"
    );
    let sent: String = server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(!sent.contains("PRIVATE-KEY"));

    // Read-only: `--approval auto` leaves write_file refused.
    let (_g, ws) = workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c_w",
            "write_file",
            json!({"path": "x.txt", "content": "x"})
        )]),
        answer("FINAL: done"),
    ]))
    .await;
    let db2 = format!("sqlite://{}", dir.path().join("ro.db").display());
    let o = out(&mut run_cmd(
        &db2,
        &server,
        &ws,
        &["--approval", "auto", "--sandbox", "read-only"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!ws.join("x.txt").exists());
    let run = only_run(&db2);
    let recorded = events(&db2, &run).await;
    let (kind, said) = told(&recorded, "c_w");
    assert_eq!(kind, "tool.refused", "{said}");
}

/// `list_dir` of a directory past its 1000 entries shows the first 1000 by name (it cut in
/// the file system's order, then sorted: a random 1000), and a name holding a line break
/// reads as one entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_listing_is_cut_in_name_order_and_odd_names_stay_one_entry() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("ls.db").display());
    let (_g, ws) = workspace();
    std::fs::create_dir(ws.join("many")).unwrap();
    for i in 0..1100 {
        std::fs::write(ws.join(format!("many/f{i:04}")), "").unwrap();
    }
    std::fs::write(ws.join("many/a\nb"), "").unwrap();
    let server = emulator(&script_by_outputs(&[
        json!([call("c_ls", "list_dir", json!({"path": "many"}))]),
        answer("FINAL: listed"),
    ]))
    .await;
    let o = out(&mut run_cmd(&db, &server, &ws, &["--approval", "auto"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = only_run(&db);
    let recorded = events(&db, &run).await;
    let (kind, listing) = told(&recorded, "c_ls");
    assert_eq!(kind, "tool.completed", "{listing}");
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines[0], "\"a\\nb\"");
    assert_eq!(lines[1], "f0000");
    assert_eq!(lines[999], "f0998");
    assert_eq!(lines[1000], "[the first 1000 of 1101 entries, by name]");
}
