//! `--output-schema` with answers far from the schema: what a rejection records and tells
//! the model is bounded, so the retry proceeds however many errors an answer has.

use serde_json::{Value, json};

use crate::host::*;

/// An answer with 150 000 errors (every item of `a` a string) is rejected with the first
/// errors and a count of the rest, journaled, and retried to an answer that matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_with_many_errors_is_journaled_bounded_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let schema = dir.path().join("s.json");
    let ints = json!({"type": "object",
        "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
        "required": ["a"]});
    std::fs::write(&schema, ints.to_string()).unwrap();
    let script = json!({"rules": [
        {"when": {"text_format": "json_schema"}, "times": 1,
         "reply": {"json": {"a": vec!["x"; 150_000]}}},
        {"when": {"text_format": "json_schema"}, "reply": {"json": {"a": [1, 2]}}}]});
    let server = emulator(&script.to_string()).await;
    let (_g, ws) = workspace();
    let o = out(run_cmd(&db, &server, &ws, &["--approval", "auto"])
        .arg("--output-schema")
        .arg(&schema));
    let stderr = text(&o.stderr);
    let tail = &stderr[stderr.len().saturating_sub(2_000)..];
    assert_eq!(o.status.code(), Some(0), "...{tail}");
    let printed: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!(printed, json!({"a": [1, 2]}));
    let run = only_run(&db);
    let events = events(&db, &run).await;
    let rejected = kinds_of(&events, "output.rejected");
    assert_eq!(rejected.len(), 1);
    let errors = rejected[0].payload["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 21, "{errors:?}");
    assert!(
        errors[0].as_str().unwrap().starts_with("/a/0:"),
        "{errors:?}"
    );
    assert_eq!(errors[20], "and 149980 more errors");
    // The model was told as much, in a message of a few kilobytes.
    let told = last_request(&server)["input"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(told.contains("and 149980 more errors"), "{told}");
    assert!(told.len() < 16_000, "{} bytes", told.len());
    check_invariants(&events);
}
