//! A model that refuses (`refusal` content instead of `output_text`): the refusal is the
//! answer, marked in `--json`; under `--output-schema` the run fails at once, saying so.

use serde_json::{Value, json};

use crate::host::*;

const REFUSAL: &str = "I can't help with that";

fn refusing() -> String {
    json!({"rules": [{"when": {}, "reply": {"items": [{"type": "message", "role": "assistant",
        "content": [{"type": "refusal", "refusal": REFUSAL}]}]}}]})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let server = emulator(&refusing()).await;
    let (_g, ws) = workspace();
    let o = out(&mut run_cmd(&db, &server, &ws, &["--approval", "auto"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), REFUSAL);
    let run = only_run(&db);
    assert_eq!(show(&db, &run)["final_text"], REFUSAL);
    // As JSON lines: the message item carries the refusal, marked.
    let o = out(&mut run_cmd(
        &db,
        &server,
        &ws,
        &["--json", "--approval", "auto"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let messages: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["type"] == "item.completed" && l["item"]["type"] == "agent_message")
        .map(|l| l["item"].clone())
        .collect();
    assert_eq!(messages.len(), 1, "{}", text(&o.stdout));
    assert_eq!(messages[0]["text"], REFUSAL);
    assert_eq!(messages[0]["refusal"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_under_an_output_schema_fails_without_a_retry() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let schema = dir.path().join("s.json");
    let open =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    std::fs::write(&schema, open.to_string()).unwrap();
    let server = emulator(&refusing()).await;
    let (_g, ws) = workspace();
    let o = out(run_cmd(&db, &server, &ws, &["--approval", "auto"])
        .arg("--output-schema")
        .arg(&schema));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let stderr = text(&o.stderr);
    assert!(
        stderr.contains(&format!("the model refused: {REFUSAL}")),
        "{stderr}"
    );
    assert!(text(&o.stdout).trim().is_empty(), "{}", text(&o.stdout));
    let run = only_run(&db);
    let events = events(&db, &run).await;
    assert!(
        kinds_of(&events, "output.rejected").is_empty(),
        "not retried"
    );
    assert_eq!(kinds_of(&events, "model.requested").len(), 1);
    let failed = kinds_of(&events, "run.failed");
    assert_eq!(
        failed[0].payload["error"],
        format!("the model refused: {REFUSAL}")
    );
}
