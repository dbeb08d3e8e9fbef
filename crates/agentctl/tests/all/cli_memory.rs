//! `agentctl demo memory`, `history` and `memory` end to end, on a temp SQLite file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support;

use assert_cmd::Command;

use support::{agentctl, json_lines, stdout_ok, temp_db};

#[test]
fn demo_memory_json_tells_the_seed_story() {
    let (_dir, db) = temp_db("demo.db");
    let out = stdout_ok(agentctl(&db).args(["demo", "memory", "--json"]));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "one JSON object");
    let r = &lines[0];
    // Window: goal + last 2 units, the call kept with its output.
    assert_eq!(r["window"]["pinned_goal"], "只读诊断");
    let units = r["window"]["recent_units"].as_array().unwrap();
    assert_eq!(units.len(), 2);
    assert_eq!(units[0]["items"].as_array().unwrap().len(), 2);
    assert!(r["refused_unpaired"].as_str().unwrap().contains("c2"));
    // Search recalls E42 from the CJK message.
    let hits = r["search_hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1);
    assert!(
        hits[0]["items"][0]["text"]
            .as_str()
            .unwrap()
            .contains("E42")
    );
    // Memory: jdk=17 from rollout-2, then jdk=8 from rollout-1.
    let prefix = r["thread"]
        .as_str()
        .unwrap()
        .strip_suffix('a')
        .unwrap()
        .to_string();
    assert_eq!(r["memory"][0]["key"], "jdk");
    assert_eq!(r["memory"][0]["value"], "17");
    assert_eq!(r["memory"][0]["source"], format!("{prefix}rollout-2"));
    assert_eq!(r["memory_after_revoke"][0]["value"], "8");
    assert_eq!(
        r["memory_after_revoke"][0]["source"],
        format!("{prefix}rollout-1")
    );
    // Running it again on the same database works (its names are unique per run).
    agentctl(&db)
        .args(["demo", "memory", "--json"])
        .assert()
        .success();
    // The demo's data is inspectable with the other commands.
    let project = r["project"].as_str().unwrap();
    let out = stdout_ok(agentctl(&db).args([
        "memory",
        "recall",
        "--project",
        project,
        "--now",
        "50",
        "--max-age",
        "30",
        "--json",
    ]));
    assert_eq!(json_lines(&out)[0]["value"], "8");
    let out = stdout_ok(agentctl(&db).args([
        "history",
        "search",
        "--thread",
        r["thread"].as_str().unwrap(),
        "e42",
        "--json",
    ]));
    assert_eq!(json_lines(&out).len(), 1);
}

#[test]
fn demo_memory_human_output_without_db_is_in_memory() {
    let out = Command::cargo_bin("agentctl")
        .unwrap()
        .env_remove("AGENTCTL_DB")
        .args(["demo", "memory"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("jdk = 17 (from rollout-2"), "{text}");
    assert!(text.contains("jdk = 8 (from rollout-1"), "{text}");
    assert!(text.contains("E42"), "{text}");
}

#[test]
fn history_and_memory_commands_correct_memory() {
    let (_dir, db) = temp_db("c.db");
    agentctl(&db)
        .args([
            "history",
            "append",
            "--thread",
            "t",
            "--unit",
            "u1",
            r#"[{"type":"message","text":"hello Login"}]"#,
        ])
        .assert()
        .success();
    // Unpaired call: one error line naming the id, a hint, non-zero exit.
    let err = agentctl(&db)
        .args([
            "history",
            "append",
            "--thread",
            "t",
            "--unit",
            "u2",
            r#"[{"type":"function_call","call_id":"zz9"}]"#,
        ])
        .assert()
        .failure()
        .get_output()
        .stderr
        .clone();
    let err = String::from_utf8(err).unwrap();
    assert!(err.contains("zz9") && err.contains("hint:"), "{err}");
    let out = stdout_ok(agentctl(&db).args([
        "history", "window", "--thread", "t", "--goal", "g", "--json",
    ]));
    assert_eq!(
        json_lines(&out)[0]["recent_units"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Empty search term is refused.
    agentctl(&db)
        .args(["history", "search", "--thread", "t", ""])
        .assert()
        .failure();

    for (src, value, at) in [("r1", "8", "1"), ("r2", "17", "10")] {
        agentctl(&db)
            .args([
                "memory",
                "add",
                "--source",
                src,
                "--project",
                "p",
                "--key",
                "jdk",
                "--value",
                value,
                "--observed",
                at,
            ])
            .assert()
            .success();
    }
    // Duplicate source is an error.
    agentctl(&db)
        .args([
            "memory",
            "add",
            "--source",
            "r1",
            "--project",
            "p",
            "--key",
            "jdk",
            "--value",
            "x",
        ])
        .assert()
        .failure();
    let out = stdout_ok(agentctl(&db).args(["memory", "revoke", "r2", "--json"]));
    assert_eq!(json_lines(&out)[0]["now"]["value"], "8");
    agentctl(&db)
        .args(["memory", "revoke", "nope"])
        .assert()
        .failure();
    let out = stdout_ok(agentctl(&db).args(["memory", "evidence", "--project", "p", "--json"]));
    assert_eq!(json_lines(&out).len(), 2);
    let out = stdout_ok(agentctl(&db).args(["memory", "recall", "--project", "p"]));
    assert!(String::from_utf8(out).unwrap().contains("jdk = 8 (from r1"));
}

/// A refused connection is reported as such (the pool used to retry it for 30 s and then
/// say only that it timed out).
#[test]
fn an_unreachable_postgres_server_is_reported_as_refused() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://u:s3cretpw@127.0.0.1:{port}/x");
    for command in [
        &["memory", "recall", "--project", "P"][..],
        &["history", "threads"],
    ] {
        let out = agentctl(&url).args(command).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("Connection refused"), "{stderr}");
        assert!(!stderr.contains("s3cretpw"), "{stderr}");
    }
}

/// The newest observation wins for good: a time far in the future (or before 1970) is
/// refused instead of pinning a value.
#[test]
fn memory_add_refuses_an_observed_time_far_in_the_future_or_negative() {
    let (_dir, db) = temp_db("future.db");
    for observed in ["9223372036854775807", "-5", "99999999999"] {
        let out = agentctl(&db)
            .args(["memory", "add", "--source", "s", "--project", "p"])
            .args(["--key", "k", "--value", "v", "--observed", observed])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{observed}: {stderr}");
        assert!(stderr.contains("--observed"), "{stderr}");
    }
    let out = agentctl(&db)
        .args(["--json", "memory", "evidence", "--project", "p"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "nothing was recorded");
}

/// Bad input says what is wrong with it: text that is not JSON is not called "not an
/// array", and a negative `--max-age` is refused by name.
#[test]
fn history_items_and_memory_ages_say_what_is_wrong() {
    let (_dir, db) = temp_db("bad.db");
    for (items, want) in [
        (r#"[{"text":"\u12"}]"#, "items are not valid JSON"),
        (r#"{"type":"message"}"#, "items are not a JSON array"),
    ] {
        let out = agentctl(&db)
            .args(["history", "append", "--thread", "t", "--unit", "u", items])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(want),
            "{items}: {stderr}"
        );
    }
    let out = agentctl(&db)
        .args(["memory", "recall", "--project", "p", "--max-age=-1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--max-age"), "{stderr}");
}

/// On a file system it cannot write (here the sandbox's read-only mode, which holds for
/// root too), the commands that only read still read the file: `history` and `memory`
/// open their store read-only (a search scans what the index does not hold yet), `runs`
/// reads the journal (`runs search` deriving what it lacks in memory); a write fails with a
/// hint that says why, and a file with no history tables says what to do.
#[test]
fn an_unwritable_database_is_still_read() {
    let (dir, db) = temp_db("ro.db");
    // A journal (what `runs` reads), history units and memory in one file.
    stdout_ok(agentctl(&db).args(["journal", "threads"]));
    for (unit, text) in [("u1", "hello"), ("u2", "hello again")] {
        let items = format!(r#"[{{"type":"message","role":"user","content":"{text}"}}]"#);
        stdout_ok(
            agentctl(&db).args(["history", "append", "--thread", "t", "--unit", unit, &items]),
        );
    }
    stdout_ok(agentctl(&db).args([
        "memory",
        "add",
        "--source",
        "s1",
        "--project",
        "p",
        "--key",
        "jdk",
        "--value",
        "17",
    ]));
    stdout_ok(agentctl(&db).args([
        "memory",
        "add",
        "--source",
        "s2",
        "--project",
        "p",
        "--key",
        "os",
        "--value",
        "linux",
        "--no-consolidate",
    ]));
    let in_sandbox = |db: &str, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .env("HOME", dir.path())
            .args(["sandbox", "--mode", "read-only", "--workspace"])
            .arg(dir.path())
            .args(["--", env!("CARGO_BIN_EXE_agentctl"), "--db", db])
            .args(args)
            .output()
            .unwrap()
    };
    let read = |args: &[&str]| {
        let out = in_sandbox(&db, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        String::from_utf8(out.stdout).unwrap()
    };
    let hits = read(&["history", "search", "--thread", "t", "hello"]);
    assert!(hits.contains("#1 u1") && hits.contains("#2 u2"), "{hits}");
    assert!(read(&["history", "window", "--thread", "t", "--keep", "1"]).contains("#2 u2"));
    assert!(read(&["history", "threads"]).contains("t\t2 units"));
    let recalled = read(&["memory", "recall", "--project", "p"]);
    assert!(
        recalled.contains("jdk = 17")
            && recalled.contains(
                "1 changed key(s) await `agentctl memory consolidate`, which needs the file writable"
            ),
        "{recalled}"
    );
    assert!(read(&["memory", "evidence", "--project", "p"]).contains("s1"));
    read(&["runs", "list"]);

    let file = dir.path().join("ro.db");
    for write in [
        &[
            "history",
            "append",
            "--thread",
            "t",
            "--unit",
            "u3",
            r#"[{"type":"message","text":"x"}]"#,
        ][..],
        &["memory", "revoke", "s1"],
    ] {
        let out = in_sandbox(&db, write);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{write:?}: {stderr}");
        assert!(
            stderr.contains(&format!("hint: {} cannot be written", file.display()))
                && stderr.contains("the commands that only read still read it"),
            "{write:?}: {stderr}"
        );
    }
    // Nothing was written: outside the sandbox the store holds what it held.
    stdout_ok(agentctl(&db).args(["history", "threads"]));
    let out = agentctl(&db)
        .args(["history", "search", "--thread", "t", "x"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no unit"),
        "{out:?}"
    );

    // `runs search` builds the history index it cannot write in memory instead.
    let out = in_sandbox(&db, &["runs", "search", "--all", "hello"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("note: {} cannot be written", file.display()))
            && stderr.contains("derived in memory for this search"),
        "{stderr}"
    );

    // A file with a journal and no history tables: read-only, they cannot be made.
    let bare = format!("sqlite://{}", dir.path().join("bare.db").display());
    let bare = bare.as_str();
    stdout_ok(agentctl(bare).args(["journal", "threads"]));
    let out = in_sandbox(bare, &["history", "threads"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("context schema is missing")
            && stderr.contains("must be made or upgraded first"),
        "{stderr}"
    );
}

/// What `history` and `memory` refuse to store or look up (an empty name, an empty or
/// oversized term, a unit with no items, an unknown source) is bad input: exit 2 with the
/// usage hint, as for every other command, not 1 with "RUST_LOG=debug shows details".
#[test]
fn history_and_memory_refuse_bad_input_as_usage_errors() {
    let (_dir, db) = temp_db("usage.db");
    let long = "a".repeat(2000);
    let cases: [&[&str]; 7] = [
        &["memory", "recall", "--project", ""],
        &[
            "memory",
            "add",
            "--source",
            "",
            "--project",
            "p",
            "--key",
            "k",
            "--value",
            "v",
        ],
        &["memory", "revoke", "never-added"],
        &["memory", "evidence", "--project", "p", "--key", ""],
        &["history", "search", "--thread", "t", ""],
        &["history", "search", "--thread", "t", &long],
        &["history", "append", "--thread", "t", "--unit", "u", "[]"],
    ];
    for args in cases {
        let out = agentctl(&db).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && !stderr.contains("RUST_LOG=debug shows details"),
            "{args:?}: {stderr}"
        );
    }
}

/// A count out of range is refused naming the flag it came from (the store's own message
/// said `keep_units`, which the user never typed).
#[test]
fn history_counts_out_of_range_name_their_flag() {
    let (_dir, db) = temp_db("counts.db");
    for (args, flag) in [
        (
            &["history", "window", "--thread", "t", "--keep", "0"][..],
            "--keep",
        ),
        (
            &["history", "window", "--thread", "t", "--keep", "10001"],
            "--keep",
        ),
        (
            &["history", "search", "--thread", "t", "abc", "--limit", "0"],
            "--limit",
        ),
        (
            &[
                "history", "search", "--thread", "t", "abc", "--limit", "1001",
            ],
            "--limit",
        ),
    ] {
        let out = agentctl(&db).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
    // The limits themselves are taken.
    for args in [
        &["history", "window", "--thread", "t", "--keep", "10000"][..],
        &[
            "history", "search", "--thread", "t", "abc", "--limit", "1000",
        ],
    ] {
        agentctl(&db).args(args).assert().success();
    }
}

/// A value that reads as a negative number belongs to the flag before it: `memory add
/// --value -5` records `-5` (it was "unexpected argument '-5' found"), and a flag that takes
/// no negative number refuses it naming itself, exit 2.
#[test]
fn negative_numbers_are_the_values_of_their_flags() {
    let (_dir, db) = temp_db("neg.db");
    let args = [
        "memory",
        "add",
        "--source",
        "s",
        "--project",
        "p",
        "--key",
        "k",
    ];
    stdout_ok(agentctl(&db).args(args).args(["--value", "-5"]));
    let out = stdout_ok(agentctl(&db).args(["--json", "memory", "recall", "--project", "p"]));
    assert_eq!(json_lines(&out)[0]["value"], "-5");
    for (args, flag) in [
        (
            &["memory", "recall", "--project", "p", "--max-age", "-1"][..],
            "--max-age",
        ),
        (
            &["history", "window", "--thread", "t", "--budget", "-1"],
            "--budget",
        ),
        (&["run", "--mock", "--max-steps", "-1", "hi"], "--max-steps"),
        (
            &["mock", "serve", "--first-token-ms", "-1"],
            "--first-token-ms",
        ),
    ] {
        let out = agentctl(&db)
            .args(args)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("for '{flag}")),
            "{args:?}: {stderr}"
        );
    }
}

/// Values (and keys and sources) with newlines or tabs stay one field of one line in the
/// human listings: a value `a<newline>b<tab>c` printed raw made `memory evidence` two lines
/// and a field too many.
#[test]
fn memory_listings_keep_a_value_on_its_line() {
    let (_dir, db) = temp_db("lines.db");
    stdout_ok(agentctl(&db).args([
        "memory",
        "add",
        "--source",
        "s\t1",
        "--project",
        "p",
        "--key",
        "k",
        "--value",
        "a\nb\tc\\n",
    ]));
    let listed = String::from_utf8(stdout_ok(agentctl(&db).args([
        "memory",
        "evidence",
        "--project",
        "p",
    ])))
    .unwrap();
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert_eq!(listed.trim_end().split('\t').count(), 4, "{listed}");
    assert!(
        listed.starts_with("s\\t1\tk = a\\nb\\tc\\\\n\t"),
        "{listed}"
    );
    let recalled = String::from_utf8(stdout_ok(agentctl(&db).args([
        "memory",
        "recall",
        "--project",
        "p",
    ])))
    .unwrap();
    assert_eq!(recalled.lines().count(), 1, "{recalled}");
    assert!(
        recalled.contains("k = a\\nb\\tc\\\\n (from s\\t1,"),
        "{recalled}"
    );
    // The JSON lines carry the value as it was given.
    let json = stdout_ok(agentctl(&db).args(["--json", "memory", "evidence", "--project", "p"]));
    assert_eq!(json_lines(&json)[0]["value"], "a\nb\tc\\n");
}

/// `memory add` says what memory holds for the key afterwards: newer evidence wins, older
/// or unconfirmed evidence leaves the key as it was (it used to print "memory updated"
/// after every add, also when nothing changed).
#[test]
fn memory_add_says_what_the_key_holds_afterwards() {
    let (_dir, db) = temp_db("add.db");
    let add = |source: &str, value: &str, at: &str, extra: &[&str]| {
        let out = stdout_ok(
            agentctl(&db)
                .args(["memory", "add", "--source", source, "--project", "p"])
                .args(["--key", "jdk", "--value", value, "--observed", at])
                .args(extra),
        );
        String::from_utf8(out).unwrap()
    };
    let unconfirmed = add("u", "21", "20", &["--unconfirmed"]);
    assert!(
        unconfirmed.starts_with("added u (p/jdk = 21)\n"),
        "{unconfirmed}"
    );
    assert!(
        unconfirmed.contains("p/jdk is not remembered"),
        "{unconfirmed}"
    );
    let newer = add("r2", "17", "10", &[]);
    assert!(newer.contains("p/jdk is now 17 (from r2)"), "{newer}");
    let older = add("r1", "8", "1", &[]);
    assert!(older.contains("p/jdk is now 17 (from r2)"), "{older}");
    let quiet = add("r3", "11", "5", &["--no-consolidate"]);
    assert_eq!(quiet, "added r3 (p/jdk = 11)\n");
    let out = stdout_ok(agentctl(&db).args(["memory", "revoke", "r2"]));
    let revoked = String::from_utf8(out).unwrap();
    assert!(revoked.contains("p/jdk is now 11 (from r3)"), "{revoked}");
}

/// One `--db` is one file for the journal and the context store: a plain path keeps its
/// `%` (the context store decoded `x%41.db` to `xA.db`, the journal did not, so `runs
/// search` made a second database beside the run's), and a URL's escapes are decoded by
/// both.
#[test]
fn a_database_path_with_a_percent_sign_is_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let plain = dir.path().join("x%41.db").display().to_string();
    let url = format!("sqlite://{}", dir.path().join("y%42.db").display());
    for db in [plain.as_str(), url.as_str()] {
        agentctl(db)
            .current_dir(work.path())
            .args(["run", "--mock", "look around"])
            .env("HOME", work.path())
            .assert()
            .success();
        agentctl(db)
            .args(["runs", "search", "--all", "README"])
            .assert()
            .success();
        agentctl(db).args(["history", "threads"]).assert().success();
    }
    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".db"))
        .collect();
    files.sort();
    assert_eq!(files, ["x%41.db", "yB.db"]);
}

/// `history append -` reads stdin no further than a unit can hold (1 MiB): more is refused
/// as the store refuses a unit over its limit, also from a pipe that never ends (it used
/// to read until memory ran out), and what fits is appended.
#[test]
fn history_items_on_stdin_are_read_up_to_the_unit_limit() {
    use std::io::Write as _;
    use std::process::Stdio;
    const MAX: usize = 1 << 20;
    let (_dir, db) = temp_db("stdin.db");
    let append = |unit: &str, input: Box<dyn FnOnce(std::process::ChildStdin) + Send>| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_agentctl"))
            .env_remove("AGENTCTL_DB")
            .args([
                "--db", &db, "history", "append", "--thread", "t", "--unit", unit, "-",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || input(stdin));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        out
    };
    // A pipe that does not end (64 MiB, so that a reader without a bound ends too).
    let endless = append(
        "u1",
        Box::new(|mut stdin| {
            let chunk = vec![b'y'; 64 << 10];
            for _ in 0..1024 {
                if stdin.write_all(&chunk).is_err() {
                    break;
                }
            }
        }),
    );
    let stderr = String::from_utf8_lossy(&endless.stderr);
    assert_eq!(endless.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "unit is over {MAX} bytes on stdin, the limit is {MAX}"
        )),
        "{stderr}"
    );
    // Valid JSON one byte over the bound, its items small: the bound counts what is read.
    let over = format!(
        "{}[{{\"type\":\"message\",\"text\":\"x\"}}]",
        " ".repeat(MAX)
    );
    let padded = append(
        "u2",
        Box::new(move |mut stdin| {
            let _ = stdin.write_all(over.as_bytes());
        }),
    );
    let stderr = String::from_utf8_lossy(&padded.stderr);
    assert_eq!(padded.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("over {MAX} bytes")), "{stderr}");
    // A unit of exactly the limit is taken.
    let frame = r#"[{"type":"message","text":""}]"#;
    let fits = format!(
        r#"[{{"type":"message","text":"{}"}}]"#,
        "z".repeat(MAX - frame.len())
    );
    assert_eq!(fits.len(), MAX);
    let taken = append(
        "u3",
        Box::new(move |mut stdin| {
            stdin.write_all(fits.as_bytes()).unwrap();
        }),
    );
    assert!(
        taken.status.success(),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
    let threads = stdout_ok(agentctl(&db).args(["history", "threads"]));
    assert_eq!(String::from_utf8_lossy(&threads), "t\t1 units\n");
}

/// Items are stored as written: an object whose key is one of `serde_json`'s private
/// tokens is kept as that object (it used to be replaced by the JSON in its string).
async fn history_items_are_stored_as_written(db: FreshDb) {
    let db = db.url();
    let token = "$serde_json::private::RawValue";
    let inner = r#"{"type":"message","text":"smuggled"}"#;
    let items = serde_json::json!([{ token: inner }]);
    stdout_ok(agentctl(db).args([
        "history",
        "append",
        "--thread",
        "a",
        "--unit",
        "u",
        &items.to_string(),
    ]));
    let out = stdout_ok(agentctl(db).args(["--json", "history", "window", "--thread", "a"]));
    // Compared as text: the test's own `serde_json::from_str` would read the token too.
    let window = String::from_utf8(out).unwrap();
    assert!(window.contains(&format!(r#""items":{items}"#)), "{window}");
    // Searched as written too: the term is in the string, not a message of its own.
    let out = stdout_ok(agentctl(db).args([
        "--json",
        "history",
        "search",
        "--thread",
        "a",
        "private::rawvalue",
    ]));
    assert_eq!(json_lines(&out).len(), 1);
}

/// A run's history thread (`run:<id>`) is derived from its journal alone: `history append`
/// refuses it (two notes appended there before the run's first search made its unit count
/// match, and its units were never derived), before it opens the store.
async fn history_append_refuses_a_run_s_thread(db: FreshDb) {
    let db = db.url();
    for thread in ["run:01a2528c-2ff3-762c-8969-caff2080ee3c", "run:", "run:x"] {
        let out = agentctl(db)
            .args(["history", "append", "--thread", thread, "--unit", "note1"])
            .arg(r#"[{"type":"message","text":"n"}]"#)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{thread}: {stderr}");
        assert!(stderr.contains("is a run's history"), "{stderr}");
        assert!(stderr.contains("hint: append to a thread"), "{stderr}");
    }
    // Other names are anyone's, also ones that hold `run`.
    for thread in ["runs:x", "my run:x", "RUN:x"] {
        stdout_ok(
            agentctl(db)
                .args(["history", "append", "--thread", thread, "--unit", "u"])
                .arg(r#"[{"type":"message","text":"n"}]"#),
        );
    }
    let threads = String::from_utf8(stdout_ok(agentctl(db).args(["history", "threads"]))).unwrap();
    assert!(
        !threads.contains("\nrun:") && !threads.starts_with("run:"),
        "{threads}"
    );
}

/// Case-insensitive search compares each character's Unicode lowercase, as README's
/// Context section says, with the limits it names: `Σ` and `σ` match each other, not `ς`;
/// `İ` is `i` and a combining dot, so `istanbul` does not find `İstanbul`.
async fn search_folds_each_character_to_its_lowercase(db: FreshDb) {
    let db = db.url();
    stdout_ok(
        agentctl(db)
            .args(["history", "append", "--thread", "g", "--unit", "u"])
            .arg(r#"[{"type":"message","text":"ΟΔΟΣ to İstanbul, Straße"}]"#),
    );
    let found = |term: &str| {
        let out =
            stdout_ok(agentctl(db).args(["--json", "history", "search", "--thread", "g", term]));
        json_lines(&out).len()
    };
    for term in [
        "οδοσ",
        "ΟΔΟΣ",
        "οδο",
        "i\u{307}stanbul",
        "İSTANBUL",
        "stanbul",
        "STRASSE".get(..4).unwrap(),
        "straße",
    ] {
        assert_eq!(found(term), 1, "{term}");
    }
    for term in ["οδος", "istanbul", "strasse"] {
        assert_eq!(found(term), 0, "{term}");
    }
}

use crate::host::fresh_db::{self, FreshDb};
agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: history_items_are_stored_as_written, history_append_refuses_a_run_s_thread, search_folds_each_character_to_its_lowercase);
