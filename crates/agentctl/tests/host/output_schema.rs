//! `--output-schema`: the final answer as JSON a script can trust. Real `agentctl`
//! processes and the emulator: the schema travels as `text.format`, a wrong answer is sent
//! back with its errors (journaled as `output.rejected`) and retried, retries run out into
//! exit 1, a malformed schema is a usage error, and resume (after a pause or a SIGKILL)
//! keeps the schema and neither loses nor repeats a retry.

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::host::*;

/// What a rejected answer's retry request carries (see the host's rejection message).
const REJECTED: &str = "does not match the required JSON schema";

fn weather_schema() -> Value {
    json!({"type": "object", "additionalProperties": false,
           "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
           "required": ["city", "temp"]})
}

/// The schema written as `weather.json` in a directory of its own (not the workspace).
fn schema_file(dir: &Path, schema: &Value) -> PathBuf {
    let path = dir.join("weather.json");
    std::fs::write(&path, schema.to_string()).unwrap();
    path
}

fn text_answer(text: &str) -> Value {
    json!({"items": answer(text)})
}

/// A script: the first answers in `wrong` (in order, once each), then a valid one for every
/// request after.
fn script(wrong: &[Value]) -> String {
    let mut rules: Vec<Value> = wrong
        .iter()
        .map(|reply| json!({"when": {"text_format": "json_schema"}, "times": 1, "reply": reply}))
        .collect();
    rules.push(json!({"when": {"text_format": "json_schema"},
                      "reply": {"json": {"city": "Paris", "temp": 21.5}}}));
    json!({"rules": rules}).to_string()
}

fn schema_args(path: &Path) -> Vec<String> {
    vec![
        "--output-schema".into(),
        path.display().to_string(),
        "--approval".into(),
        "auto".into(),
    ]
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_answer_is_printed_as_json_and_shown() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let schema = schema_file(dir.path(), &weather_schema());
    let server = emulator(&script(&[])).await;
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &args(&schema_args(&schema)),
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // The answer echoed on stderr ends its line: the next note starts a line of its own.
    let stderr = text(&o.stderr);
    assert!(stderr.contains("21.5}\nrun "), "{stderr}");
    // stdout is the parsed answer and nothing else: `| jq` works.
    let printed: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!(printed, json!({"city": "Paris", "temp": 21.5}));
    let format = &last_request(&server)["text"]["format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["name"], "weather");
    assert_eq!(format["strict"], true);
    assert_eq!(format["schema"], weather_schema());
    let run = only_run(&db);
    assert_eq!(show(&db, &run)["output"], printed);
    assert_eq!(
        show(&db, &run)["output_schema"],
        json!({"name": "weather", "retries": 2, "retries_used": 0})
    );
    let human = text(&out(agentctl(&db).args(["runs", "show", &run])).stdout);
    assert!(
        human.contains(r#"output    {"city":"Paris","temp":21.5}"#),
        "{human}"
    );
    assert!(
        human.contains("schema    weather (0 of 2 retries used)"),
        "{human}"
    );
    // --json: the final event carries it.
    let mut json_run = agentctl(&db);
    json_run
        .args([
            "--json",
            "run",
            "--base-url",
            &server.base_url(),
            "--workspace",
        ])
        .arg(&ws)
        .args(args(&schema_args(&schema)))
        .arg("again");
    let o = out(&mut json_run);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let last: Value = serde_json::from_str(text(&o.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "turn.completed");
    assert_eq!(last["output"], json!({"city": "Paris", "temp": 21.5}));
}

/// The answer printed and shown is the model's JSON token for token (without the space
/// between tokens): a number keeps every digit and `-0` its sign, where a parsed value
/// would print `1.2345678901234568e+22` and `-0.0`; an escaped NUL stays as written, where
/// the journal's NUL scrubbing made it U+FFFD after the schema had accepted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_is_kept_as_the_model_wrote_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("p.db").display());
    let schema = schema_file(
        dir.path(),
        &json!({"type": "object", "required": ["n", "z", "sep"], "properties": {
            "n": {"type": "integer"}, "z": {"type": "number"},
            "sep": {"type": "string", "pattern": "^a\\u0000b$"}}}),
    );
    let written = "{\n  \"n\": 12345678901234567890123,\n  \"z\": -0, \"sep\": \"a\\u0000b\" }";
    let exact = r#"{"n":12345678901234567890123,"z":-0,"sep":"a\u0000b"}"#;
    let script = json!({"rules": [{"when": {}, "reply": text_answer(written)}]});
    let server = emulator(&script.to_string()).await;
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &args(&schema_args(&schema)),
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), exact);
    let run = only_run(&db);
    let shown = out(agentctl(&db).args(["--json", "runs", "show", &run]));
    assert!(
        text(&shown.stdout).contains(&format!("\"output\":{exact}")),
        "{}",
        text(&shown.stdout)
    );
    let human = text(&out(agentctl(&db).args(["runs", "show", &run])).stdout);
    assert!(human.contains(&format!("output    {exact}")), "{human}");
}

/// A long structured answer is journaled once: its parsed form was written beside its text,
/// so an answer over half the journal's 4 MiB event limit failed the run on every resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_completes() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("l.db").display());
    let schema = schema_file(
        dir.path(),
        &json!({"type": "object", "required": ["pad"],
                "properties": {"pad": {"type": "string"}}}),
    );
    let written = format!("{{\"pad\": \"{}\"}}", "x".repeat(2_600_000));
    let mut reply = text_answer(&written);
    reply["delta_chars"] = json!(1_000_000);
    let script = json!({"rules": [{"when": {}, "reply": reply}]});
    let server = emulator(&script.to_string()).await;
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &args(&schema_args(&schema)),
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), written.replace(' ', ""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_answers_are_sent_back_with_their_errors_then_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    // Not closed: sent with strict false.
    let open = json!({"type": "object", "properties": {"city": {"type": "string"},
                      "temp": {"type": "number"}}, "required": ["city", "temp"]});
    let schema = schema_file(dir.path(), &open);
    let server = emulator(&script(&[
        json!({"json": {"city": 3, "temp": 20}}),
        text_answer("It is sunny in Paris"),
    ]))
    .await;
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &args(&schema_args(&schema)),
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let printed: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!(printed["city"], "Paris");
    assert!(text(&o.stderr).contains("retry 1"), "{}", text(&o.stderr));
    let run = only_run(&db);
    let events = events(&db, &run).await;
    let rejected = kinds_of(&events, "output.rejected");
    assert_eq!(rejected.len(), 2);
    assert_eq!(rejected[0].payload["retry"], 1);
    assert_eq!(rejected[0].payload["step"], 1);
    let first = rejected[0].payload["errors"].to_string();
    assert!(first.contains("/city"), "{first}");
    assert!(
        rejected[1].payload["errors"][0]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );
    // The model saw the errors: the third request's last message lists them.
    let bodies: Vec<Value> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/responses"))
        .map(|r| r.body)
        .collect();
    assert_eq!(bodies.len(), 3);
    assert_eq!(bodies[0]["text"]["format"]["strict"], false);
    let last_input = bodies[2]["input"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(last_input.contains(REJECTED), "{last_input}");
    assert!(last_input.contains("not JSON"), "{last_input}");
    let second_input = bodies[1]["input"].to_string();
    assert!(second_input.contains("/city"), "{second_input}");
    check_invariants(&events);
    // As JSON lines: each rejection is an `output.rejected` line, the end carries the output.
    let lines: Vec<Value> = text(&out(agentctl(&db).args(["runs", "events", &run])).stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rejected: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "output.rejected")
        .collect();
    assert_eq!(rejected.len(), 2, "{lines:?}");
    assert_eq!(rejected[1]["retry"], 2);
    assert_eq!(rejected[1]["run_id"], run.as_str());
    assert_eq!(lines.last().unwrap()["output"]["city"], "Paris");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_run_out_into_exit_1_with_the_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let schema = schema_file(dir.path(), &weather_schema());
    let wrong = json!({"rules": [{"reply": {"json": {"city": "Paris"}}}]}).to_string();
    let server = emulator(&wrong).await;
    let (_g, ws) = workspace();
    let mut a = schema_args(&schema);
    a.extend(["--output-retries".into(), "1".into()]);
    let o = out(&mut run_cmd(&db, &server, &ws, &args(&a)));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let stderr = text(&o.stderr);
    assert!(
        stderr.contains("does not match the output schema after 1 retry"),
        "{stderr}"
    );
    assert!(stderr.contains("temp"), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("run ") && l.contains(" failed: ")),
        "the failure starts a line of its own: {stderr}"
    );
    assert_eq!(
        text(&o.stdout).trim(),
        "",
        "nothing on stdout for a failed run"
    );
    let run = only_run(&db);
    let shown = show(&db, &run);
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["steps"], 2);
    assert!(shown.get("output").is_none(), "{shown}");
    assert_eq!(
        kinds_of(&events(&db, &run).await, "output.rejected").len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_schema_is_a_usage_error_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let server = emulator(&script(&[])).await;
    let (_g, ws) = workspace();
    for (schema, says) in [
        (json!({"type": "objekt"}), "not a valid JSON Schema"),
        (json!({"type": "array", "items": {}}), "root must be"),
    ] {
        let path = schema_file(dir.path(), &schema);
        let o = out(&mut run_cmd(&db, &server, &ws, &args(&schema_args(&path))));
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains(says), "{}", text(&o.stderr));
    }
    std::fs::write(dir.path().join("bad.json"), "{not json").unwrap();
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &[
            "--output-schema",
            &dir.path().join("bad.json").display().to_string(),
        ],
    ));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("not JSON"), "{}", text(&o.stderr));
    assert!(
        server.requests().is_empty(),
        "no model call for a bad schema"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emulator_refuses_a_malformed_schema_as_the_api_does() {
    let server = emulator(&script(&[])).await;
    let body = json!({"model": "gpt-5.1", "input": "hi", "text": {"format": {
        "type": "json_schema", "name": "out", "strict": true,
        "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}});
    let response = reqwest::Client::new()
        .post(format!("{}/responses", server.base_url()))
        .bearer_auth(agent_responses_mock::MOCK_API_KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["error"]["param"], "text.format.schema");
    assert_eq!(error["error"]["code"], "invalid_json_schema");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Invalid schema for response_format 'out'"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_a_pause_keeps_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let schema = schema_file(dir.path(), &weather_schema());
    let server = emulator(
        &json!({"rules": [
            {"when": {"tool_outputs": 0}, "reply": {"items": [call("c1", "list_dir", json!({}))]}},
            {"when": {"last_user_contains": REJECTED}, "reply": {"json": {"city": "Oslo", "temp": -2}}},
            {"reply": {"items": answer("cold")}}
        ]})
        .to_string(),
    )
    .await;
    let (_g, ws) = workspace();
    let mut a = schema_args(&schema);
    a.extend(["--max-steps".into(), "1".into()]);
    let o = out(&mut run_cmd(&db, &server, &ws, &args(&a)));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "",
        "progress of a structured run goes to stderr"
    );
    let run = only_run(&db);
    let o = out(&mut resume_cmd(&db, &server, &run, &["--max-steps", "5"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let printed: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!(printed, json!({"city": "Oslo", "temp": -2}));
    // Every request of the resumed drive still carried the schema, and the wrong answer of
    // the resumed drive was retried.
    let bodies: Vec<Value> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/responses"))
        .map(|r| r.body)
        .collect();
    assert_eq!(bodies.len(), 3);
    assert!(
        bodies
            .iter()
            .all(|b| b["text"]["format"]["name"] == "weather")
    );
    assert_eq!(
        kinds_of(&events(&db, &run).await, "output.rejected").len(),
        1
    );
}

/// SIGKILL after each event of a run whose first answer is rejected, then resume: the
/// rejection is journaled once, the model is asked once per step, the answer is reached.
async fn crash_at_every_boundary_of_a_retry(db: FreshDb) {
    let db = db.url();
    let dir = tempfile::tempdir().unwrap();
    let schema = schema_file(dir.path(), &weather_schema());
    let rules = json!({"rules": [
        {"when": {"last_user_contains": REJECTED}, "reply": {"json": {"city": "Rome", "temp": 30}}},
        {"reply": {"json": {"city": "Rome"}}}
    ]})
    .to_string();
    let mut known = std::collections::HashSet::new();
    let mut kills = 0;
    // run.created, model.requested, model.completed, output.rejected, model.requested,
    // model.completed, run.completed.
    for k in 1..=7 {
        let server = emulator(&rules).await;
        let (_g, ws) = workspace();
        let mut first = run_cmd(db, &server, &ws, &args(&schema_args(&schema)));
        first.env("AGENTCTL_TEST_CRASH_AFTER_EVENTS", k.to_string());
        let o = out(&mut first);
        let killed = o.status.signal() == Some(9);
        assert!(killed || o.status.code() == Some(0), "k={k}: {o:?}");
        kills += usize::from(killed);
        let listed = out(agentctl(db).args(["--json", "runs", "list"]));
        let run = text(&listed.stdout)
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["run_id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .find(|id| !known.contains(id))
            .unwrap();
        known.insert(run.clone());
        if show(db, &run)["status"] != "completed" {
            let o = out(&mut resume_cmd(db, &server, &run, &[]));
            assert_eq!(o.status.code(), Some(0), "k={k}: {}", text(&o.stderr));
            let printed: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
            assert_eq!(printed["city"], "Rome", "k={k}");
        }
        let shown = show(db, &run);
        assert_eq!(shown["status"], "completed", "k={k}");
        assert_eq!(
            shown["output"],
            json!({"city": "Rome", "temp": 30}),
            "k={k}"
        );
        let events = events(db, &run).await;
        assert_eq!(kinds_of(&events, "output.rejected").len(), 1, "k={k}");
        assert_eq!(kinds_of(&events, "model.completed").len(), 2, "k={k}");
        check_invariants(&events);
    }
    assert!(kills >= 6, "only {kills} of the drives were killed");
}

use crate::host::fresh_db::{self, FreshDb};
agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: crash_at_every_boundary_of_a_retry);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_run_keeps_its_schema_for_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let schema = schema_file(dir.path(), &weather_schema());
    let server = emulator(&script(&[json!({"json": {"city": "Paris"}})])).await;
    let (_g, ws) = workspace();
    let o = out(agentctl(&db)
        .args(["submit", "--workspace"])
        .arg(&ws)
        .args(args(&schema_args(&schema)))
        .arg("weather please"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = text(&o.stdout).trim().to_string();
    let created = events(&db, &run).await;
    assert_eq!(created[0].payload["output"]["name"], "weather");
    let mut worker = agentctl(&db)
        .args(["worker", "--poll", "0.1", "--base-url", &server.base_url()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let waited = out(agentctl(&db).args(["runs", "wait", &run]));
    worker.kill().unwrap();
    worker.wait().unwrap();
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited.stderr));
    let shown = show(&db, &run);
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["output"], json!({"city": "Paris", "temp": 21.5}));
    assert_eq!(
        kinds_of(&events(&db, &run).await, "output.rejected").len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_travels_over_the_websocket_mode_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let schema = schema_file(dir.path(), &weather_schema());
    let server = emulator(&script(&[text_answer("warm")])).await;
    let (_g, ws) = workspace();
    let mut a = schema_args(&schema);
    a.extend(["--transport".into(), "ws".into()]);
    let o = out(&mut run_cmd(&db, &server, &ws, &args(&a)));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let printed: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!(printed, json!({"city": "Paris", "temp": 21.5}));
    let run = only_run(&db);
    assert_eq!(
        kinds_of(&events(&db, &run).await, "output.rejected").len(),
        1
    );
}
